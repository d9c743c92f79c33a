"""The Phi-3.5 path: a randomly initialised mlx-lm ``phi3`` model with Phi-3.5-mini's width and
vocabulary (hidden 3072, vocabulary 32064) but one layer (the layers only supply the final-norm states the
head reads; each one is 113 M random parameters to build), and one fine-tuning step of the full
32064 × 3072 positive head (no low-rank adaptor, docs/method.md § 16). The 4-bit frozen base is measured in
``scripts/bench/phi3_memory.py`` (MLX's 4-bit matmul on CPU is too slow for the test budget)."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models import phi3

from mlx_sdm.network.heads import VocabularyHeads
from mlx_sdm.network.finetune_steps import build_train_step, make_optimizer

PHI35_HIDDEN, PHI35_VOCAB = 3072, 32064


def build_phi3(num_layers: int = 1, seed: int = 0) -> nn.Module:
    """Phi-3.5-mini-instruct's shape (config.json of microsoft/Phi-3.5-mini-instruct) with fewer layers."""
    mx.random.seed(seed)
    args = phi3.ModelArgs(
        model_type="phi3",
        hidden_size=PHI35_HIDDEN,
        num_hidden_layers=num_layers,
        intermediate_size=8192,
        num_attention_heads=32,
        num_key_value_heads=32,
        rms_norm_eps=1e-5,
        vocab_size=PHI35_VOCAB,
        rope_theta=10000.0,
        max_position_embeddings=131072,
        original_max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    model = phi3.Model(args)
    model.eval()
    return model


def test_phi3_shaped_fine_tuning_step():
    model = build_phi3()
    heads = VocabularyHeads.from_model(model)  # cloned from the float lm_head, as the reference does
    model.freeze()
    assert heads.positive.shape == (PHI35_VOCAB, PHI35_HIDDEN) and heads.positive.dtype == mx.float32
    assert [k for k, _ in tree_flatten(heads.trainable_parameters())] == ["positive"]

    rng = np.random.default_rng(0)
    ids = mx.array(rng.integers(0, PHI35_VOCAB, size=(1, 12)), dtype=mx.int32)
    hidden = model.model(ids)[0].astype(mx.float32)  # final-norm states that predict 12 targets
    targets = mx.array(rng.integers(0, PHI35_VOCAB, size=12) + PHI35_VOCAB)
    q = mx.array(rng.integers(0, 10, size=12).astype(np.float32))
    d = mx.array(rng.uniform(0.1, 1.0, size=12).astype(np.float32))
    before = np.array(heads.positive[:64])
    negative_before = np.array(heads.negative[:64])
    step = build_train_step(heads, make_optimizer(1e-3), compile=True)
    loss, nll = step(hidden, targets, q, d, mx.array(0.05), mx.array(12.0))
    mx.eval(loss, heads.positive)
    assert np.isfinite(loss.item()) and loss.item() >= nll.item() > 0
    assert not np.allclose(np.array(heads.positive[:64]), before)
    np.testing.assert_array_equal(np.array(heads.negative[:64]), negative_before)
