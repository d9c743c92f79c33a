"""Negative/positive heads: cloning, freezing, joint greedy decoding, save/load with fingerprint."""

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from mlx_sdm.errors import ArtifactError, ModelMismatchError
from mlx_sdm.network.heads import (
    HeadManifest,
    VocabularyHeads,
    head_sha256,
    joint_greedy_token,
    load_head,
    output_head_weight,
    save_head,
)
from tests.tiny_lm import build_tiny_model


def _fingerprint(model):
    w = output_head_weight(model)
    return {"architecture": "llama", "hidden_size": w.shape[1], "vocab_size": w.shape[0], "num_layers": 2, "head_sha256": head_sha256(w)}


def test_tied_and_untied_heads_are_cloned():
    tied = build_tiny_model(40, seed=0, hidden_size=16)
    np.testing.assert_array_equal(np.array(output_head_weight(tied)), np.array(tied.model.embed_tokens.weight))
    untied = build_tiny_model(40, seed=1, hidden_size=16, tie=False)
    np.testing.assert_array_equal(np.array(output_head_weight(untied)), np.array(untied.lm_head.weight))
    heads = VocabularyHeads.from_model(untied)
    assert heads.positive.dtype == mx.float32
    np.testing.assert_array_equal(np.array(heads.positive), np.array(heads.negative))
    # Only the positive head trains.
    trainable = dict(nn.utils.tree_flatten(heads.trainable_parameters()))
    assert list(trainable) == ["positive"]


def test_quantized_head_is_dequantized():
    model = build_tiny_model(64, seed=0, hidden_size=64)
    original = np.array(output_head_weight(model))
    nn.quantize(model, group_size=32, bits=8)
    assert hasattr(model.model.embed_tokens, "scales")
    recovered = np.array(output_head_weight(model))
    assert recovered.dtype == np.float32
    np.testing.assert_allclose(recovered, original, atol=0.05)


def test_joint_greedy_maps_back_to_vocabulary():
    rng = np.random.default_rng(0)
    w = mx.array(rng.normal(size=(7, 4)).astype(np.float32))
    heads = VocabularyHeads(w, mx.array(rng.normal(size=(7, 4)).astype(np.float32) * 3))
    hidden = mx.array(rng.normal(size=(50, 4)).astype(np.float32))
    joint = heads.joint_logits(hidden)
    assert joint.shape == (50, 14)
    expected = np.argmax(np.array(joint), axis=-1) % 7
    np.testing.assert_array_equal(np.array(joint_greedy_token(joint, 7)), expected)
    np.testing.assert_array_equal(np.argmax(np.array(heads.vocab_logits(hidden)), axis=-1), expected)
    # Hand case: the positive half wins at token 2 (index 7 + 2 = 9).
    manual = mx.array([[0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0]])
    assert joint_greedy_token(manual, 7).item() == 2


def test_save_load_roundtrip_and_refusals(tmp_path):
    model = build_tiny_model(40, seed=0, hidden_size=16)
    fp = _fingerprint(model)
    heads = VocabularyHeads.from_model(model)
    heads.positive = heads.positive + 1.0
    manifest = HeadManifest(base_model=fp, verifier={"path": "v"}, data_hash="abc", epochs=2, best_epoch=1, metrics={})
    save_head(tmp_path / "head", heads, manifest)
    loaded = load_head(tmp_path / "head", model, fp)
    np.testing.assert_array_equal(np.array(loaded.positive), np.array(heads.positive))
    assert loaded.manifest["data_hash"] == "abc" and loaded.manifest["epochs"] == 2
    other = build_tiny_model(40, seed=3, hidden_size=16)
    with pytest.raises(ModelMismatchError, match="head_sha256"):
        load_head(tmp_path / "head", other, _fingerprint(other))
    with pytest.raises(ArtifactError, match="no head manifest"):
        load_head(tmp_path / "missing", model, fp)
