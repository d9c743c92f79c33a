"""Shipping an SDM-network head: the compact low-rank form (compress_head, mlx-sdm compress-head) and
the default head that generate / chat / serve load for the embedded model (``--head none`` turns it off)."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest

from mlx_sdm.cli import main as cli
from mlx_sdm.errors import ArtifactError, DataError, ModelMismatchError, OutputError
from mlx_sdm.lm.generation import GenerationConfig, generate_with_features
from mlx_sdm.lm.prompt import render_prompt
from mlx_sdm.network.heads import (
    HEAD_FORMAT_LOW_RANK,
    LOW_RANK_WEIGHTS_FILE,
    HeadManifest,
    LowRankChange,
    VocabularyHeads,
    compress_head,
    load_head,
    read_head_manifest,
    save_head,
)
from tests.tiny_verifier import tiny_loaded_model

DEFAULT_NAME = "tiny-default-head"


#: The one task the tiny default head names: it decodes only questions that start this instruction.
TASKS = [{"name": "greeting", "instruction": "hello", "system": None}]


def _save(path, lm, positive, model_spec="tiny", tasks=()):
    heads = VocabularyHeads.from_model(lm.model)
    heads.positive = positive
    manifest = HeadManifest(base_model=dict(lm.fingerprint, name=lm.name), verifier={"path": "v"}, data_hash="d",
                            epochs=2, best_epoch=1, metrics={"config": {"model": model_spec}}, tasks=list(tasks))
    return save_head(path, heads, manifest), heads


def _dense_head(lm, scale=2.0, seed=0):
    """W_ref plus a dense random change (full rank), large enough to change greedy tokens."""
    reference = VocabularyHeads.from_model(lm.model).reference
    rng = np.random.default_rng(seed)
    return reference + mx.array(rng.normal(scale=scale, size=reference.shape).astype(np.float32))


def _tokens(lm, head, n=8):
    hook = None if head is None else head.vocab_logits
    return generate_with_features(lm, "hello world", GenerationConfig(max_tokens=n), head=hook).tokens


@pytest.fixture(scope="module")
def lm():
    return tiny_loaded_model(0)


def test_full_rank_compressed_head_decodes_as_the_full_head(tmp_path, lm):
    full_dir, _ = _save(tmp_path / "full", lm, _dense_head(lm))
    manifest = compress_head(full_dir, tmp_path / "small", lm.hidden_size, model=lm.model)
    assert manifest["head_format"] == HEAD_FORMAT_LOW_RANK and manifest["low_rank"]["rank"] == lm.hidden_size
    assert manifest == read_head_manifest(tmp_path / "small")
    assert manifest["data_hash"] == "d" and manifest["best_epoch"] == 1  # the source manifest is kept
    assert manifest["low_rank"]["truncation_error"] < 1e-5  # nothing discarded: only float16 rounding is left
    assert 0 < manifest["low_rank"]["relative_error"] < 2e-3
    full, small = load_head(full_dir, lm.model, lm.fingerprint), load_head(tmp_path / "small", lm.model, lm.fingerprint)
    assert small.positive.dtype == mx.float32 and small.manifest["low_rank"]["rank"] == lm.hidden_size
    tokens = _tokens(lm, full)
    assert tokens != _tokens(lm, None)  # the head decides the tokens
    assert _tokens(lm, small) == tokens


def test_a_shipped_head_decodes_through_its_factors_until_it_is_trained(tmp_path, lm):
    """Decoding a low-rank head computes z_pos = z_neg + (h Vᵀ) Uᵀ (no second |V|×D product); the logits equal
    those of the materialised W_pos to float32 rounding, and a head whose W_pos is replaced (training from it)
    stops using the factors."""
    from tests.tolerance import reordered_forward_atol

    full_dir, _ = _save(tmp_path / "full", lm, _dense_head(lm, seed=2))
    compress_head(full_dir, tmp_path / "small", 7, model=lm.model)
    small = load_head(tmp_path / "small", lm.model, lm.fingerprint)
    assert small.low_rank_change is not None and small.low_rank_change.u.shape[1] == 7
    hidden = mx.array(np.random.default_rng(3).normal(size=(4, lm.hidden_size)).astype(np.float32))
    materialised = VocabularyHeads(small.reference, small.positive)  # the same W_pos, full products
    fast, slow = np.asarray(small.vocab_logits(hidden)), np.asarray(materialised.vocab_logits(hidden))
    # the same sums in another order (W_ref h + U(V h) vs (W_ref + U V) h): rounding of a few reductions only
    scale = float(np.abs(np.asarray(hidden @ small.reference.T)).max() + np.abs(slow).max())
    assert np.abs(fast - slow).max() <= reordered_forward_atol(scale, width=lm.hidden_size, layers=1)
    assert (fast.argmax(-1) == slow.argmax(-1)).all()
    change = small.low_rank_change  # decoding reads the factors, not W_pos: zeroing U leaves z_neg alone
    # (exactly: the same product of the same arrays in this process, plus an exact zero)
    object.__setattr__(small, "low_rank_change", LowRankChange(change.u * 0, change.v, small.positive))
    assert np.array_equal(np.asarray(small.vocab_logits(hidden)), np.asarray(hidden @ small.reference.T))
    object.__setattr__(small, "low_rank_change", change)
    small.positive = small.positive * 0.5  # what an optimizer step does: a new W_pos array (then the same ops
    # as a fresh VocabularyHeads of the same arrays in this process: exactly)
    assert np.array_equal(np.asarray(small.vocab_logits(hidden)),
                          np.asarray(VocabularyHeads(small.reference, small.positive).vocab_logits(hidden)))


def test_reported_error_matches_a_recomputation(tmp_path, lm):
    full_dir, heads = _save(tmp_path / "full", lm, _dense_head(lm, seed=1))
    rank = 5
    manifest = compress_head(full_dir, tmp_path / "small", rank, model=lm.model)
    loaded = np.asarray(load_head(tmp_path / "small", lm.model, lm.fingerprint).positive)
    positive, reference = np.asarray(heads.positive, dtype=np.float64), np.asarray(heads.reference, dtype=np.float64)
    info = manifest["low_rank"]
    error = np.linalg.norm(loaded - positive)
    assert info["relative_error"] == pytest.approx(error / np.linalg.norm(positive - reference), rel=1e-4)
    assert info["relative_error_of_head"] == pytest.approx(error / np.linalg.norm(positive), rel=1e-4)
    s = np.linalg.svd(positive - reference, compute_uv=False)
    assert info["truncation_error"] == pytest.approx(np.sqrt(np.sum(s[rank:] ** 2) / np.sum(s ** 2)), rel=1e-4)
    # Eckart-Young: no rank-5 change is closer than the truncated SVD; the stored error is computed in float32
    # (within ~1e-7 relative of its float64 value), so it may sit that much under the float64 optimum
    assert info["truncation_error"] <= info["relative_error"] * (1 + 1e-6) and info["relative_error"] < 1
    u_v = mx.load(str(tmp_path / "small" / LOW_RANK_WEIGHTS_FILE))
    assert u_v["u"].shape == (lm.vocab_size, rank) and u_v["v"].shape == (rank, lm.hidden_size)
    assert u_v["u"].dtype == u_v["v"].dtype == mx.float16
    # a rank above min(|V|, D) is capped there; an untuned head (no change) compresses with no error
    assert compress_head(full_dir, tmp_path / "capped", 10_000, model=lm.model)["low_rank"]["rank"] == lm.hidden_size
    untuned, _ = _save(tmp_path / "untuned", lm, VocabularyHeads.from_model(lm.model).reference)
    assert compress_head(untuned, tmp_path / "untuned-small", 3, model=lm.model)["low_rank"]["relative_error"] == 0.0


def test_corrupt_or_truncated_compressed_file_is_named(tmp_path, lm):
    full_dir, _ = _save(tmp_path / "full", lm, _dense_head(lm))
    compress_head(full_dir, tmp_path / "small", 4, model=lm.model)
    path = tmp_path / "small" / LOW_RANK_WEIGHTS_FILE
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtifactError, match=f"{path}.*corrupt or truncated"):
        load_head(tmp_path / "small", lm.model, lm.fingerprint)
    flipped = bytearray(data)
    flipped[-3] ^= 0xFF  # same length, one factor entry changed
    path.write_bytes(bytes(flipped))
    with pytest.raises(ArtifactError, match=f"{path}.*sha256"):
        load_head(tmp_path / "small", lm.model, lm.fingerprint)
    path.unlink()
    with pytest.raises(ArtifactError, match=f"{path}: cannot read"):
        load_head(tmp_path / "small", lm.model, lm.fingerprint)
    with pytest.raises(ArtifactError, match="already a compressed head"):
        compress_head(tmp_path / "small", tmp_path / "again", 2, model=lm.model)
    with pytest.raises(DataError, match="'rank'"):
        compress_head(full_dir, tmp_path / "zero", 0, model=lm.model)


def test_compressed_head_refuses_another_model(tmp_path, lm):
    full_dir, _ = _save(tmp_path / "full", lm, _dense_head(lm))
    compress_head(full_dir, tmp_path / "small", 4, model=lm.model)
    other = tiny_loaded_model(5)
    with pytest.raises(ModelMismatchError, match="head_sha256"):
        load_head(tmp_path / "small", other.model, other.fingerprint)
    with pytest.raises(ModelMismatchError, match="head_sha256"):
        compress_head(full_dir, tmp_path / "for-other", 4, model=other.model)
    assert not (tmp_path / "for-other").exists()


@pytest.fixture
def tiny_models(monkeypatch):
    """load_model answers with tiny llamas: the embedded names with seed 0, "tiny-folder" with the same
    weights under another name, "other" with another model."""
    seeds = {None: 0, "smollm2": 0, "tiny": 0, "tiny-folder": 0, "other": 5}
    monkeypatch.setattr("mlx_sdm.lm.loading.load_model", lambda name=None, quantized=False: tiny_loaded_model(seeds[name]))


def test_command_loads_the_model_the_manifest_names(tmp_path, lm, tiny_models, capsys):
    from mlx_sdm.commands.compress_head import DEFAULT_RANK

    full_dir, _ = _save(tmp_path / "full", lm, _dense_head(lm))
    assert cli(["compress-head", "--head", str(full_dir), "--rank", "3", "--out", str(tmp_path / "small")]) == 0
    assert "rank 3" in capsys.readouterr().out
    assert read_head_manifest(tmp_path / "small")["low_rank"]["rank"] == 3 < DEFAULT_RANK
    assert cli(["compress-head", "--head", str(full_dir), "--out", str(tmp_path / "small")]) == 1  # an existing head needs --force
    assert "--force" in capsys.readouterr().err
    assert cli(["compress-head", "--head", str(full_dir), "--out", str(tmp_path / "small"), "--force", "--rank", "2"]) == 0
    assert read_head_manifest(tmp_path / "small")["low_rank"]["rank"] == 2
    assert cli(["compress-head", "--head", str(full_dir), "--out", str(tmp_path / "o"), "--model", "other"]) == 1
    assert "head_sha256" in capsys.readouterr().err
    with pytest.raises(OutputError):
        compress_head(full_dir, full_dir / "manifest.json", 2, model=lm.model)


def _pushing_head(lm):
    """W_pos = W_neg + 50 on row `target`: for this fixed tiny model and prompt (sum(h) > 0, asserted) the
    positive half of `target` dominates every joint logit (as in test_verifier_commands)."""
    reference = VocabularyHeads.from_model(lm.model).reference
    target = lm.tokenizer.encode("x", add_special_tokens=False)[0]
    hidden = lm.model.model(mx.array(render_prompt(lm.tokenizer, "hello"))[None])[0, -1]
    assert float(hidden.sum()) > 0.5
    return reference + mx.where(mx.arange(reference.shape[0])[:, None] == target, 50.0, 0.0), target


@pytest.fixture
def default_head(tmp_path, lm, monkeypatch, tiny_models):
    """A compressed head for the tiny model installed as the shipped default under a fake weights root."""
    import mlx_sdm.resources as resources

    positive, target = _pushing_head(lm)
    full_dir, _ = _save(tmp_path / "full", lm, positive, tasks=TASKS)
    compress_head(full_dir, tmp_path / "weights" / DEFAULT_NAME, 1, model=lm.model)
    monkeypatch.setattr(resources, "weights_root", lambda: tmp_path / "weights")
    monkeypatch.setattr(resources, "DEFAULT_HEAD_NAME", DEFAULT_NAME)
    return tmp_path / "weights" / DEFAULT_NAME, target


def _generate(capsys, *args, prompt="hello"):

    assert cli(["generate", prompt, "--verifier", "none", "--max-tokens", "3", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_generate_uses_the_default_head_for_the_embedded_model(default_head, capsys):
    folder, target = default_head
    payload = _generate(capsys)  # --model smollm2, generate's default
    assert payload["head"] == str(folder) and payload["generation"]["tokens"] == [target] * 3
    # a question that starts none of the head's tasks is decoded with the model's own head
    assert _generate(capsys, prompt="goodbye")["head"] is None
    off = _generate(capsys, "--head", "none")
    assert off["head"] is None and off["generation"]["tokens"] != [target] * 3
    assert _generate(capsys, "--head", "OFF")["head"] is None
    # the same weights under another model name: not the embedded default, so no default head
    other = _generate(capsys, "--model", "tiny-folder")
    assert other["head"] is None and other["generation"]["tokens"] == off["generation"]["tokens"]
    # ... but a head named explicitly is used on it
    assert _generate(capsys, "--model", "tiny-folder", "--head", str(folder))["generation"]["tokens"] == [target] * 3


def test_chat_and_serve_resolve_the_default_through_one_rule(default_head, monkeypatch):
    import mlx_sdm.resources as resources
    from mlx_sdm.usecases.loading import chat_components, load_components, resolve_head
    from mlx_sdm.executor.engine import EngineConfig

    folder, _ = default_head
    assert chat_components(EngineConfig(embedder="none")).head_path == str(folder)  # chat: model None
    assert chat_components(EngineConfig(embedder="none", head="none")).head is None
    assert load_components("other").head is None
    assert resolve_head(None, "smollm2") == (str(folder), True) and resolve_head("none", None) == (None, False)
    assert resolve_head("my-head", "other") == ("my-head", False) and resolve_head("", None) == (None, False)
    # the default that does not fit the embedded model is left out (as the default verifier is); one named is refused
    monkeypatch.setattr("mlx_sdm.lm.loading.load_model", lambda name=None, quantized=False: tiny_loaded_model(5))
    assert load_components(None).head is None
    with pytest.raises(ModelMismatchError):
        load_components(None, head=str(folder))
    monkeypatch.setattr(resources, "DEFAULT_HEAD_NAME", None)
    assert resolve_head(None, None) == (None, False)
    monkeypatch.setattr(resources, "DEFAULT_HEAD_NAME", "not-installed")
    assert resolve_head(None, None) == (None, False)


def test_the_shipped_default_head_fits_the_embedded_model(request):
    """Guards the integrator's one-constant change: the head DEFAULT_HEAD_NAME names is installed and loads."""
    from mlx_sdm.usecases.loading import load_head as app_load_head
    from mlx_sdm.resources import DEFAULT_HEAD_NAME, default_head_dir

    if DEFAULT_HEAD_NAME is None:
        pytest.skip("no default head is shipped (resources.DEFAULT_HEAD_NAME is None)")
    smollm2 = request.getfixturevalue("smollm2")
    heads = load_head(default_head_dir(), smollm2.model, smollm2.fingerprint)
    assert heads.positive.shape == (smollm2.vocab_size, smollm2.hidden_size)
    assert app_load_head(None, smollm2).path == str(default_head_dir())


def test_a_head_decodes_the_tasks_it_improves_on_held_out_and_shifted_answers():
    from mlx_sdm.network.heads import tasks_the_head_improves

    rows = [("topic", "held_out", False, 0.267), ("topic", "held_out", True, 0.400),
            ("topic", "shifted", False, 0.200), ("topic", "shifted", True, 0.333),
            ("spam", "held_out", False, 0.033), ("spam", "held_out", True, 0.000),  # worse: not decoded
            ("fever", "held_out", False, 0.0), ("fever", "held_out", True, 0.0),  # no better: not decoded
            ("mood", "held_out", False, 0.4), ("mood", "held_out", True, 0.6),
            ("mood", "shifted", False, 0.5), ("mood", "shifted", True, 0.4),  # worse on the shift: not decoded
            ("only", "held_out", True, 0.9)]  # no untuned row to compare with: not decoded
    assert tasks_the_head_improves(rows) == ["topic"]


def test_a_manifest_naming_a_task_it_was_not_trained_on_is_refused():
    from mlx_sdm.network.coverage import TaskInstruction
    from mlx_sdm.network.heads import decoded_tasks

    tasks = (TaskInstruction("Classify the topic.", None, "topic"), TaskInstruction("Is it spam?", None, "spam"))
    assert decoded_tasks(tasks, None) == tasks
    assert decoded_tasks(tasks, ["topic"]) == tasks[:1]
    assert decoded_tasks(tasks, []) == ()
    with pytest.raises(ValueError, match=r"'decodes' names \['fever'\].*\['spam', 'topic'\]"):
        decoded_tasks(tasks, ["fever"], where="head/manifest.json")
    with pytest.raises(ValueError, match="'decodes' must be a list of task names"):
        decoded_tasks(tasks, "topic")
