"""``mlx-sdm finetune`` end to end on the tiny LM with the tiny document verifier, and its bad input."""

from __future__ import annotations

import json

import pytest

from mlx_sdm.cli import main as cli_main  # the command's one error handler is cli.main's
from mlx_sdm.usecases.head_training import build_config, read_config_file
from mlx_sdm.errors import DataError
from tests.tiny_verifier import build_tiny_verifier, tiny_documents, tiny_loaded_model


def write_data(folder, *, only_negative: bool = False):
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (prompt, completion, label) in enumerate(tiny_documents()[:24]):
        answer = "true" in completion
        truth = answer if label == 1 else not answer
        rows.append({"id": f"d{i}", "prompt": prompt, "completion": completion, "label": label, "task_label": truth})
    train = [r for r in rows[:16] if r["label"] == 0] if only_negative else rows[:16]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (folder / "valid.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[16:]))
    return folder


@pytest.fixture
def tiny_model(monkeypatch):
    seeds = {"tiny": 0, "other": 5}
    monkeypatch.setattr("mlx_sdm.lm.loading.load_model", lambda name=None, quantized=False: tiny_loaded_model(seeds[name]))


def test_unknown_key_and_bad_values_name_the_field(tmp_path, capsys):
    config = tmp_path / "finetune.yaml"
    config.write_text("model: tiny\nlearning_rate: 1e-3\nepoch: 3\n")
    assert cli_main(["finetune", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "field 'epoch'" in err and "did you mean 'epochs'" in err and str(config) in err
    config.write_text("batch_size: many\n")
    with pytest.raises(DataError, match="field 'batch_size': must be an integer"):
        build_config(read_config_file(config), {}, source=str(config))
    config.write_text("learning_rate: 1e-3\nepochs: 2\n")
    built = build_config(read_config_file(config), {"epochs": 4, "seed": None})
    assert built.args.learning_rate == 1e-3 and built.args.epochs == 4  # the flag overrides the file
    assert built.args.seed == 235 and built.args.checkpoint_path == str(built.checkpoint_path)  # one set of defaults


def test_finetune_writes_a_head_that_generate_can_load(tmp_path, tiny_model, capsys):
    from mlx_sdm.network.heads import load_head

    verifier = build_tiny_verifier(tmp_path / "verifier")
    data = write_data(tmp_path / "data")
    config = tmp_path / "finetune.yaml"
    config.write_text(
        f"model: tiny\nverifier: {verifier}\ndata: {data}\nepochs: 1\nbatch_size: 8\nlearning_rate: 0.01\n"
        f"adapter_path: {tmp_path / 'head'}\n"
    )
    assert cli_main(["finetune", "--config", str(config), "--epochs", "2", "--quiet"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "untuned" in out and "saved" in out
    manifest = json.loads((tmp_path / "head" / "manifest.json").read_text())
    assert manifest["epochs"] == 2 and len(manifest["data_hash"]) == 64
    assert manifest["verifier"]["path"] == str(verifier)
    best, untuned = manifest["metrics"]["calibration_admitted_best"], manifest["metrics"]["calibration_admitted_untuned"]
    assert best >= untuned
    lm = tiny_loaded_model(0)
    heads = load_head(tmp_path / "head", lm.model, lm.fingerprint)
    assert heads.vocab_logits(lm.model.model.embed_tokens.weight[:2]).shape == (2, lm.vocab_size)
    assert (tmp_path / "head.checkpoint" / "state.json").is_file()


def test_verifier_for_another_model_and_no_verified_rows(tmp_path, tiny_model, capsys):
    verifier = build_tiny_verifier(tmp_path / "verifier")
    data = write_data(tmp_path / "data")
    base = ["--verifier", str(verifier), "--data", str(data), "--adapter-path", str(tmp_path / "h"), "--quiet"]
    assert cli_main(["finetune", "--model", "other", *base]) == 1
    assert "built on model" in capsys.readouterr().err
    negative = write_data(tmp_path / "neg", only_negative=True)
    assert cli_main(["finetune", "--model", "tiny", "--verifier", str(verifier), "--data", str(negative), "--quiet"]) == 1
    assert "no documents with label 1" in capsys.readouterr().err


def test_the_example_config_loads_and_its_data_resolves_from_any_folder(tmp_path, monkeypatch):
    """examples/finetune.yaml names data shipped inside the package, so the fine-tune command of docs/finetuning.md
    needs no checkout beside it (a wheel carries mlx_sdm/network/tasks/data/*.jsonl.gz)."""
    from pathlib import Path

    from mlx_sdm.usecases.head_training import load_documents, task_documents

    example = Path(__file__).resolve().parents[1] / "examples" / "finetune.yaml"
    monkeypatch.chdir(tmp_path)  # nothing of the checkout around
    config = build_config(read_config_file(example), {}, source=str(example))
    assert config.data == "package:fever"
    train, calibration = load_documents(config, None, {"pool_size": 1000, "test_size": 500, "seed": 0})
    assert (len(train), len(calibration)) == (config.train_size, config.calibration_size) == (400, 200)
    assert all(d.prompt and d.label in (0, 1) for d in train + calibration)
    with pytest.raises(DataError, match="no shipped BIG-bench task 'nope'"):
        load_documents(build_config({"data": "package:nope"}, {}), None, {})

    bigbench = example.parents[2] / "shared" / "data" / "bigbench" / "fact_checker_fever" / "task.json"
    if bigbench.is_file():  # where BIG-bench's own file is at hand: the shipped copy gives the same documents
        info = {"pool_size": 1000, "test_size": 500, "seed": 0}
        shipped = task_documents(config, info)
        original = task_documents(build_config({"data": str(bigbench), "train_size": 400, "calibration_size": 200}, {}), info)
        assert shipped == original and len(shipped[0]) == 400
