"""A fine-tuned folder of one LoRA adapter set per task (format 2) that grows a task at a time: each task's
adapters load in mlx-lm as they are, a turn of a task switches that task's set in (every other turn is the base
model's, token for token), adding or retraining a task leaves every other task's files byte for byte, and --out
at a folder that is not ours or was made on another base is refused before anything is written."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from tests.tiny_family import WORD_INSTRUCTION, save_tiny_family, write_word_task

#: Other tasks of the same rows, asked with other instructions (and the same JSON, which a tiny model learns in an
#: epoch): tasks to route and to switch adapters for.
SWEET_INSTRUCTION = 'Is the following word something sweet to eat? Respond using the following JSON: {"fruit": bool}.'
RED_INSTRUCTION = 'Is the following word usually a red thing? Respond using the following JSON: {"fruit": bool}.'


def other_task(path: Path, instruction: str, rows: int = 120) -> Path:
    """The word task asked with another instruction (the same labels: a second task to route)."""
    source = write_word_task(path.with_suffix(".src"), rows=rows)
    lines = [json.loads(line) for line in source.read_text().splitlines()]
    for row in lines:
        row["prompt"] = row["prompt"].replace(WORD_INSTRUCTION, instruction)
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    source.unlink()
    return path


def quick_args(tasks, out, base, **extra):
    """A short run: one LoRA epoch, no head, no baselines (what is tested here is the folder, not the training)."""
    from mlx_sdm.usecases.finetune_plan import TaskFinetuneArgs
    from mlx_sdm.usecases.lora_training import LoraPlan

    lora = LoraPlan(ranks=(8,), num_layers=2, max_epochs=1, learning_rate=1e-3)
    return TaskFinetuneArgs(tasks=tuple(str(t) for t in tasks), out=Path(out), model=str(base), lora=lora,
                            eval_rows=20, verifier_rows=64, head=False, baselines=False, progress=False, **extra)


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """A tiny llama fine-tuned on two tasks, each with its own adapters (module-wide: tests copy it to change it)."""
    from mlx_sdm.usecases.model_growth import run_growth

    root = tmp_path_factory.mktemp("grown")
    base = save_tiny_family(root / "base", "llama")
    words = write_word_task(root / "words.jsonl", rows=120, shifted=10)
    sweet = other_task(root / "sweet.jsonl", SWEET_INSTRUCTION)
    run_growth(quick_args([words, sweet], root / "tuned", base), log=lambda line: None)
    return root


def files_of(folder: Path, *parts: str) -> dict[str, str]:
    """sha256 of every file under the given parts of a folder."""
    out = {}
    for part in parts:
        for path in sorted((folder / part).rglob("*")):
            if path.is_file():
                out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def task_files(folder: Path, name: str) -> dict[str, str]:
    return files_of(folder, f"adapters/{name}", f"verifier/members/{name}", f"reports/{name}", f"heads/{name}")


def test_each_task_has_its_own_adapters_and_the_manifest_lists_them(grown):
    from mlx_sdm.lm.adapters import file_sha256
    from mlx_sdm.usecases.model_folder import read_model_folder

    folder = read_model_folder(grown / "tuned")
    assert folder.format_version == 2 and [e.name for e in folder.entries] == ["words", "sweet"]
    for entry in folder.entries:
        assert entry.adapters == f"adapters/{entry.name}"
        assert file_sha256(folder.path(entry.adapters) / "adapters.safetensors") == entry.adapters_sha256
        assert entry.verifier == f"verifier/members/{entry.name}"
        member = json.loads((folder.path(entry.verifier) / "verifier.json").read_text())
        assert member["info"]["adapters"]["sha256"] == entry.adapters_sha256  # bound to its own task's adapters
        assert 0 <= entry.held_out_accuracy <= 1 and entry.verified_share is not None
    assert folder.entries[0].adapters_sha256 != folder.entries[1].adapters_sha256
    assert folder.entries[1].instruction.instruction.startswith(SWEET_INSTRUCTION)


def test_mlx_lm_loads_each_tasks_adapters_as_they_are(grown):
    """``mlx_lm.utils.load(base, adapter_path=DIR/adapters/<task>)``, the loading path of ``mlx_lm.generate
    --adapter-path``, takes each task's folder as it is, with that task's weights."""
    from mlx.utils import tree_flatten
    from mlx_lm.utils import load

    for name in ("words", "sweet"):
        model, _ = load(str(grown / "base"), adapter_path=str(grown / "tuned" / "adapters" / name))
        saved = mx.load(str(grown / "tuned" / "adapters" / name / "adapters.safetensors"))
        params = dict(tree_flatten(model.parameters()))
        assert saved and all(np.array_equal(np.asarray(params[k]), np.asarray(v)) for k, v in saved.items())


def test_a_turn_of_a_task_uses_its_own_adapters_and_a_plain_turn_is_the_base_models(grown):
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnOptions, TurnRequest
    from mlx_sdm.usecases.loading import load_components

    components = load_components(str(grown / "tuned"))
    adapters = components.lm.adapters
    assert set(adapters.sets) == {"words", "sweet"}
    switched: list = []
    real = adapters.switch
    adapters.switch = lambda which: (switched.append(which), real(which))[1]
    pipeline = TurnPipeline(components)
    options = TurnOptions(max_tokens=6, enable_p_true=False)
    for instruction, name in ((WORD_INSTRUCTION, "words"), (SWEET_INSTRUCTION, "sweet")):
        question = [{"role": "user", "content": f"{instruction} WORD: pear 7"}]
        assert pipeline.plan(question).adapted == name
        switched.clear()
        pipeline.run(TurnRequest(question, options))
        assert switched and switched[0] == name and set(switched) <= {name, None} and not adapters.active
    plain = TurnRequest([{"role": "user", "content": "The quick brown fox"}], TurnOptions(max_tokens=12,
                                                                                       enable_p_true=False))
    assert pipeline.plan(plain.messages).adapted is None
    tuned = pipeline.run(plain)
    base = TurnPipeline(load_components(str(grown / "base"), verifier="none")).run(plain)
    assert tuned.answer.token_ids == base.answer.token_ids


def test_the_verifier_judges_each_task_with_its_own_member(grown):
    from mlx_sdm.network.verifier import DocumentVerifier

    verifier = DocumentVerifier.load(grown / "tuned" / "verifier")
    assert verifier.route(f"{SWEET_INSTRUCTION} WORD: pear 7").task == "sweet"
    assert verifier.member_for("sweet") is verifier.members["sweet"]
    assert [t.name for t in verifier.coverage.tasks][:2] == ["words", "sweet"]


def test_a_verifier_member_on_other_adapters_is_refused(grown, tmp_path):
    from mlx_sdm.errors import ModelMismatchError
    from mlx_sdm.usecases.loading import load_components

    folder = tmp_path / "tuned"
    shutil.copytree(grown / "tuned", folder)
    member = folder / "verifier" / "members" / "sweet" / "verifier.json"
    data = json.loads(member.read_text())
    data["info"]["adapters"]["sha256"] = "0" * 64
    member.write_text(json.dumps(data))
    with pytest.raises(ModelMismatchError, match="its verifier of task sweet reads the states of the model with "
                                                 "adapters 000000000000, but the loaded model answers it with"):
        load_components(str(folder))


def test_a_folder_grows_a_task_and_leaves_the_others_byte_for_byte(grown, tmp_path):
    from mlx_sdm.usecases.loading import load_components
    from mlx_sdm.usecases.model_folder import read_model_folder
    from mlx_sdm.usecases.model_growth import run_growth

    folder = tmp_path / "tuned"
    shutil.copytree(grown / "tuned", folder)
    before = {name: task_files(folder, name) for name in ("words", "sweet")}
    red = other_task(tmp_path / "red.jsonl", RED_INSTRUCTION)
    run_growth(quick_args([red], folder, grown / "base"), log=lambda line: None)
    manifest = read_model_folder(folder)
    assert [e.name for e in manifest.entries] == ["words", "sweet", "red"]
    assert {name: task_files(folder, name) for name in ("words", "sweet")} == before
    assert (folder / "adapters" / "red" / "adapters.safetensors").is_file()
    components = load_components(str(folder))
    assert set(components.lm.adapters.sets) == {"words", "sweet", "red"}
    assert components.verifier.route(f"{RED_INSTRUCTION} WORD: cherry 1").task == "red"


def test_naming_a_task_the_folder_has_retrains_it_alone(grown, tmp_path):
    from mlx_sdm.usecases.model_folder import read_model_folder
    from mlx_sdm.usecases.model_growth import run_growth

    folder = tmp_path / "tuned"
    shutil.copytree(grown / "tuned", folder)
    old = read_model_folder(folder)
    sweet = task_files(folder, "sweet")
    lines: list[str] = []
    run_growth(replace(quick_args([grown / "words.jsonl"], folder, grown / "base"), seed=1), log=lines.append)
    new = read_model_folder(folder)
    assert [e.name for e in new.entries] == ["words", "sweet"]  # in its place; no task dropped
    assert new.entry("words").adapters_sha256 != old.entry("words").adapters_sha256
    assert new.entry("sweet") == old.entry("sweet") and task_files(folder, "sweet") == sweet
    assert any("task words: retrained" in line for line in lines)


def test_the_same_command_again_trains_nothing_and_changes_no_tasks_files(grown, tmp_path):
    """Each task's run is its own: the command run again (after a stop, or after it finished) keeps every finished
    task's run as it is and trains none again."""
    from mlx_sdm.usecases.model_growth import run_growth

    folder = tmp_path / "tuned"
    shutil.copytree(grown / "tuned", folder)
    before = {name: task_files(folder, name) for name in ("words", "sweet")}
    lines: list[str] = []
    outcome = run_growth(quick_args([grown / "words.jsonl", grown / "sweet.jsonl"], folder, grown / "base"),
                         log=lines.append)
    assert outcome.runs == {} and [e.name for e in outcome.manifest.entries] == ["words", "sweet"]
    assert sum("is finished" in line for line in lines) == 2
    assert {name: task_files(folder, name) for name in ("words", "sweet")} == before


def _cli(argv, capsys) -> tuple[int, str]:
    from mlx_sdm.cli import main

    code = main(["finetune", *argv])
    return code, capsys.readouterr().err.strip()


def test_out_at_a_folder_that_is_not_ours_is_refused_before_anything_is_written(grown, tmp_path, capsys):
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"x")
    code, err = _cli(["--task", str(grown / "words.jsonl"), "--out", str(foreign), "--model", str(grown / "base")],
                     capsys)
    assert code == 1 and len(err.splitlines()) == 1 and "is a non-empty folder that is not an mlx-sdm artifact" in err
    assert [p.name for p in foreign.iterdir()] == ["cat.jpg"]


def test_out_at_a_folder_made_on_another_base_is_refused_before_anything_is_written(grown, tmp_path, capsys):
    folder = tmp_path / "tuned"
    shutil.copytree(grown / "tuned", folder)
    before = files_of(folder, ".")
    other = save_tiny_family(tmp_path / "other", "llama", seed=5)
    code, err = _cli(["--task", str(grown / "words.jsonl"), "--out", str(folder), "--model", str(other)], capsys)
    assert code == 1 and len(err.splitlines()) == 1, err
    assert f"was fine-tuned on {grown / 'base'}, not on {other}; give another --out, or --model" in err
    assert files_of(folder, ".") == before


def test_list_tasks_of_a_model_folder_prints_each_tasks_numbers(grown, capsys):
    from mlx_sdm.commands.generate import main

    assert main(["--list-tasks", "--model", str(grown / "tuned")]) == 0
    out = capsys.readouterr().out
    assert "words:" in out and "sweet:" in out and "held-out accuracy" in out and "verified" in out


def test_the_default_models_ship_copies_the_new_layout_without_its_work(grown, tmp_path, capsys):
    """scripts/build_default_model.py's ship(): a finished folder as it ships (no .work) still loads, each task's
    files as the run wrote them, its verifier extending a shipped one (the suite): the tuned tasks judged by their
    members with their adapters, a task of the base's that the folder has no adapters for answered by the base
    model and judged by the base, which is kept once, by reference."""
    from mlx_sdm.network.verifier import DocumentVerifier, FeatureRecipe
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.usecases.loading import load_components
    from tests.scripts_side import load_script

    words = DocumentVerifier.load(grown / "tuned" / "verifier" / "members" / "words")
    recipe = FeatureRecipe(task_systems=((RED_INSTRUCTION, "You judge red things."),), task_names=("red",))
    DocumentVerifier(words.estimator, words.model_fingerprint, recipe, {}, [{"name": "red", "description": "red"}]
                     ).save(tmp_path / "suite")
    shipped = tmp_path / "shipped"
    load_script("build_default_model.py").ship(grown / "tuned", shipped, base=str(tmp_path / "suite"))
    assert not (shipped / ".work").exists() and not (shipped / "verifier" / "estimator").exists()
    for name in ("words", "sweet"):
        assert task_files(shipped, name) == task_files(grown / "tuned", name)
    components = load_components(str(shipped))
    assert set(components.lm.adapters.sets) == {"words", "sweet"}
    assert components.verifier.base_ref == str(tmp_path / "suite")
    pipeline = TurnPipeline(components)
    red = pipeline.plan([{"role": "user", "content": f"{RED_INSTRUCTION} WORD: cherry"}])
    assert red.adapted is None and red.judge and red.route.task == "red"
    for name, instruction in (("words", WORD_INSTRUCTION), ("sweet", SWEET_INSTRUCTION)):
        plan = pipeline.plan([{"role": "user", "content": f"{instruction} WORD: pear 7"}])
        assert plan.adapted == name and plan.judge and plan.route.task == name  # (load checked its member's sha)
        assert components.verifier.member_for(name).info["adapters"]["sha256"] == \
            components.lm.adapters.sets[name].sha256

    from mlx_sdm.commands.generate import list_folder_tasks

    capsys.readouterr()
    assert list_folder_tasks(str(shipped), "generate", named=False) == 0  # as the shipped default lists itself
    out = capsys.readouterr().out
    assert out.startswith(f"the default model, {shipped}: 2 fine-tuned task(s)") and "--model" not in out
    assert out.rstrip().endswith(f"judged by the verifier {tmp_path / 'suite'}, as without this folder:\n- red: red")


def test_a_task_without_a_verifier_is_answered_with_its_adapters_and_left_unjudged(grown, tmp_path):
    """A task whose run could build no verifier (the model never answered in its JSON) still answers its questions
    with its own adapters and system prompt; the folder's verifier, which does not cover it, judges none of them."""
    from mlx_sdm.network.verifier import DocumentVerifier
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.usecases.loading import load_components
    from mlx_sdm.usecases.model_growth import joined_verifier

    folder = tmp_path / "tuned"
    shutil.copytree(grown / "tuned", folder)
    words = DocumentVerifier.load(folder / "verifier" / "members" / "words")
    shutil.rmtree(folder / "verifier")
    joined_verifier({"words": words}, None).save(folder / "verifier")
    shutil.copytree(grown / "tuned" / "verifier" / "members" / "words", folder / "verifier" / "members" / "words")
    manifest = json.loads((folder / "mlx-sdm-model.json").read_text())
    manifest["tasks"][1]["verifier"] = None
    (folder / "mlx-sdm-model.json").write_text(json.dumps(manifest))
    pipeline = TurnPipeline(load_components(str(folder)))
    sweet = pipeline.plan([{"role": "user", "content": f"{SWEET_INSTRUCTION} WORD: pear 7"}])
    assert sweet.adapted == "sweet" and not sweet.judge and sweet.route.system == manifest["tasks"][1]["system"]
    words_plan = pipeline.plan([{"role": "user", "content": f"{WORD_INSTRUCTION} WORD: pear 7"}])
    assert words_plan.adapted == "words" and words_plan.judge
