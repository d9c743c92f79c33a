"""`mlx-sdm train` / `mlx-sdm verify` on text rows, with a tiny mlx-lm model saved as a local folder."""

from __future__ import annotations

import json

import pytest

from mlx_sdm.cli import main as cli
from tests.tiny_verifier import tiny_documents
from mlx_sdm.network.verdict_words import verdict_report, verdict_words


def save_tiny_folder(path, seed):
    from mlx_lm.utils import save_config, save_model

    from tests.tiny_lm import build_tiny_lm

    model, tokenizer = build_tiny_lm(seed=seed)
    save_model(path, model, donate_model=False)
    save_config(dict(vars(model.args)), config_path=path / "config.json")
    tokenizer.save_pretrained(path)
    return path


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    model_dir = save_tiny_folder(root / "tiny-model", seed=0)
    docs = tiny_documents()
    rows = [{"id": f"d{i}", "prompt": p, "completion": c, "label": y, "system": None} for i, (p, c, y) in enumerate(docs)]
    train = write_rows(root / "train.jsonl", rows[0::2])
    cal = write_rows(root / "cal.jsonl", rows[1::2])
    out = root / "verifier"
    rc = cli(["train", "--train", str(train), "--calibration", str(cal), "--out", str(out), "--model", str(model_dir),
                         "--iterations", "1", "--epochs", "3", "--batch-size", "8", "--exemplar-dim", "16", "--quiet"])
    assert rc == 0
    return root, model_dir, out, rows


def test_train_on_text_rows_builds_a_document_verifier(trained):
    root, model_dir, out, _ = trained
    manifest = json.loads((out / "verifier.json").read_text())
    assert manifest["feature"]["dim"] == 64 and manifest["feature"]["delimiter"] == "json_close"
    assert manifest["model_fingerprint"]["name"] == "tiny-model"


def test_verify_text_rows_writes_one_verdict_per_row(trained, capsys):
    root, _, out, rows = trained
    inp = write_rows(root / "new.jsonl", [{"prompt": r["prompt"], "completion": r["completion"]} for r in rows[:5]])
    dest = root / "verdicts.jsonl"
    assert cli(["verify", "--estimator", str(out), str(inp), "--out", str(dest), "--explain", "2"]) == 0
    verdicts = [json.loads(line) for line in dest.read_text().splitlines()]
    assert len(verdicts) == 5
    assert all(set(v) >= {"prediction", "p_lower", "admitted", "q", "d", "reason", "verified", "exemplars"} for v in verdicts)
    assert all(len(v["exemplars"]) == 2 for v in verdicts)


def test_verify_with_another_model_is_refused(trained, capsys):
    root, _, out, rows = trained
    other = save_tiny_folder(root / "other-model", seed=1)
    inp = write_rows(root / "one.jsonl", [{"prompt": "Q", "completion": '{"correctness": true}'}])
    dest = root / "never.jsonl"
    assert cli(["verify", "--estimator", str(out), str(inp), "--out", str(dest), "--model", str(other)]) == 1
    assert "built on model" in capsys.readouterr().err and not dest.exists()


def test_bad_text_row_is_named_and_nothing_is_written(trained, capsys):
    root, model_dir, _, rows = trained
    bad = write_rows(root / "bad.jsonl", rows[:3] + [{"prompt": "Q", "completion": "", "label": 1}])
    out = root / "not-written"
    rc = cli(["train", "--train", str(bad), "--calibration", str(bad), "--out", str(out), "--model", str(model_dir), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1 and "bad.jsonl:4" in err and "completion" in err and not out.exists()


def test_generate_json_carries_the_state_by_name_and_formats_verdicts(trained, capsys):
    from mlx_sdm.network.verdict import DocumentVerdict
    from mlx_sdm.usecases.verifiers import model_for_verifier
    from mlx_sdm.network.verifier import DocumentVerifier

    root, model_dir, out, _ = trained
    assert cli(["generate", "Paris is the capital of France. Check the claim.", "--model", str(model_dir),
                              "--verifier", str(out), "--max-tokens", "8", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["verifier"] == str(out) and payload["model"] == "tiny-model"
    # the state by name beside the reason and one plain sentence of why
    assert payload["status"] == payload["verdict"]["status"] in {"verified", "not_verified", "out_of_scope"}
    assert payload["verdict"]["verified"] == (payload["status"] == "verified")
    assert payload["verdict"]["explanation"].startswith(payload["status"].replace("_", " ").capitalize())
    assert "reason" in payload["verdict"] and payload["unverifiable_reason"] is None
    assert payload["verdict"]["line"].startswith(("Verified:", "Not verified", "Likely wrong:", "Out of scope:"))
    assert payload["judged_text"] + payload["unverified_tail"] == payload["answer"]
    assert len(payload["generation"]["tokens"]) == 8 and payload["generation"]["finish_reason"] == "length"
    # no verifier: unverifiable, with the reason, and no verdict
    assert cli(["generate", "hello", "--model", str(model_dir), "--verifier", "none", "--max-tokens", "2", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["status"] == "no_verifier" and payload["verdict"] is None and "off" in payload["unverifiable_reason"]
    # a real answer's verdict block
    lm = model_for_verifier(out, None)
    verdict = DocumentVerifier.load(out, expect_fingerprint=lm.fingerprint).verify_text(
        lm, "Paris is the capital of France.", '{"correctness": true}', explain=2)
    judged = DocumentVerdict(verdict)
    assert verdict_report(judged) == f"verdict: {verdict_words(judged).line}"  # the line alone; --explain: the evidence
    text = verdict_report(judged, explain=True)
    assert text.startswith(f"verdict: {verdict_words(judged).line}\nevidence: {verdict_words(judged).sentence}")
    assert "p_lower:" in text and f"q: {verdict.q}" in text
    assert text.count(", id ") == 2 and "nearest exemplars" in text
    assert judged.verified == (verdict.admitted and verdict.prediction == 1)
    other = save_tiny_folder(root / "other-for-generate", seed=2)
    assert cli(["generate", "hello", "--model", str(other), "--verifier", str(out)]) == 1
    assert "built on model" in capsys.readouterr().err


def test_generate_decodes_from_a_finetuned_head(trained, capsys):
    """--head DIR: the joint negative+positive heads decide the tokens (positive half pushed to one token)."""
    import mlx.core as mx

    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.heads import HeadManifest, VocabularyHeads, save_head

    root, model_dir, out, _ = trained
    lm = load_model(model_dir)
    heads = VocabularyHeads.from_model(lm.model)
    target = lm.tokenizer.encode("x", add_special_tokens=False)[0]
    # W_pos = W_neg + 50 on every entry of row `target`: z_pos[target] = z_neg[target] + 50·sum(h), which for this
    # fixed tiny model and prompt (sum(h) > 0, asserted below) dominates every other joint logit
    heads.positive = heads.negative + mx.where(mx.arange(heads.vocab_size)[:, None] == target, 50.0, 0.0)
    from mlx_sdm.lm.prompt import render_prompt

    hidden = lm.model.model(mx.array(render_prompt(lm.tokenizer, "hello"))[None])[0, -1]
    assert float(hidden.sum()) > 0.5
    save_head(root / "head", heads, HeadManifest(base_model=dict(lm.fingerprint), verifier={}, data_hash="t", epochs=1,
                                                 best_epoch=1, metrics={}))
    assert cli(["generate", "hello", "--model", str(model_dir), "--verifier", "none", "--head", str(root / "head"),
                              "--max-tokens", "3", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["generation"]["tokens"] == [target] * 3


def test_judge_texts_counts_every_answer_once_on_its_progress(tmp_path):
    """The pipeline's batch judging reports each answer once, read or not (an empty answer has nothing to read),
    so `mlx-sdm verify`'s bar ends at its total; the empty one gets the empty-answer verdict, the others a
    judgement."""
    from mlx_sdm.network.verdict import REASON_EMPTY_ANSWER
    from mlx_sdm.network.verifier import DocumentVerifier
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnComponents, TurnRequest
    from tests.tiny_verifier import build_tiny_verifier, tiny_loaded_model

    verifier = DocumentVerifier.load(build_tiny_verifier(tmp_path / "v"))
    pipeline = TurnPipeline(TurnComponents(lm=tiny_loaded_model(), verifier=verifier))
    ask = TurnRequest([{"role": "user", "content": "Is Paris the capital of France? Check the claim."}])
    counted: list[int] = []
    outcomes = pipeline.judge_texts([(ask, '{"correctness": true}'), (ask, ""), (ask, '{"correctness": false}')],
                                    on_progress=counted.append)
    assert sum(counted) == 3 and len(outcomes) == 3
    assert outcomes[1].verdict.reason == REASON_EMPTY_ANSWER
    assert outcomes[0].verdict.verdict is not None and outcomes[2].verdict.verdict is not None
    # one answer alone (an unpadded pass) is judged as in the batch (right-padded): float32 agreement
    one, batched = pipeline.judge_text(ask, '{"correctness": true}').verdict.verdict, outcomes[0].verdict.verdict
    assert one.prediction == batched.prediction and one.q == batched.q
    assert one.d_nearest == pytest.approx(batched.d_nearest, rel=1e-4)
