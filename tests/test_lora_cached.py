"""The LoRA stage's frozen blocks run once per row (usecases/lora_cached.py): two epochs from the cached hidden
states give mlx-lm's ``train`` losses step by step and its adapters, in memory and spilled to a file; a model the
split does not reproduce trains on the whole forward, and says so."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from tests.tiny_lm import build_tiny_lm


def _rows():
    from mlx_sdm.usecases.lora_training import LoraRow

    return [LoraRow(str(i), "t", f"Classify text number {i} please" + " and more" * (i % 7),
                    '{"a": "%s"}' % ("x" * (i % 5)), "sys") for i in range(18)]


class _Steps:
    """A ``_Reports`` that keeps every report (one per step here)."""

    losses: list[float] = []

    def __init__(self) -> None:
        self.loss, self.tokens_per_second, self.trained_tokens, self.peak_gb = float("nan"), 0.0, 0, 0.0

    def on_train_loss_report(self, info) -> None:
        _Steps.losses.append(float(info["train_loss"]))
        self.loss, self.trained_tokens = float(info["train_loss"]), int(info["trained_tokens"])

    def on_val_loss_report(self, info) -> None:
        pass


def _two_epochs(tmp_path, monkeypatch, *, cached: bool, budget: int = 1 << 30, layers: int = 4, adapted: int = 2):
    import mlx.optimizers as optim

    from mlx_sdm.lm.adapters import LoraSettings, add_lora_layers, adapter_weights
    from mlx_sdm.usecases import lora_training
    from mlx_sdm.usecases.lora_cached import FrozenCache

    model, tokenizer = build_tiny_lm(seed=0, num_layers=layers)
    dataset = lora_training.chat_dataset(_rows(), tokenizer, 2048, {})
    model.freeze()
    mx.random.seed(7)
    add_lora_layers(model, LoraSettings(4, adapted))
    optimizer = optim.Adam(learning_rate=1e-3)
    lines: list[str] = []
    cache = FrozenCache(model, dataset, adapted, tmp_path / "cache", lines.append, budget) if cached else None
    plan = lora_training.LoraPlan(batch_size=4, num_layers=adapted)
    monkeypatch.setattr(lora_training, "_Reports", _Steps)
    _Steps.losses = []
    for epoch in (1, 2):
        model.train()
        lora_training.train_one_epoch(model, optimizer, dataset, plan, 100 + epoch, tmp_path / "scratch", show=False,
                                      cache=cache, steps_per_report=1)
    spilled = cache is not None and cache.get() is not None and cache.get()[1].path is not None
    if cache is not None:
        cache.close()
    return list(_Steps.losses), {k: np.array(v) for k, v in adapter_weights(model).items()}, lines, spilled


@pytest.mark.parametrize("budget", [1 << 30, 1024], ids=["in-memory", "spilled-to-a-file"])
def test_two_epochs_from_the_cache_equal_mlx_lms_train(tmp_path, monkeypatch, budget):
    old_losses, old_weights, _, _ = _two_epochs(tmp_path / "old", monkeypatch, cached=False)
    new_losses, new_weights, lines, spilled = _two_epochs(tmp_path / "new", monkeypatch, cached=True, budget=budget)
    assert len(old_losses) == len(new_losses) == 2 * (18 // 4)
    np.testing.assert_allclose(new_losses, old_losses, rtol=1e-5, atol=1e-5)
    assert old_weights.keys() == new_weights.keys() and old_weights
    for key in old_weights:
        np.testing.assert_allclose(new_weights[key], old_weights[key], rtol=1e-5, atol=1e-5)
    assert spilled == (budget < 1 << 20)
    assert any("blocks 0-1 run once per row (18 rows" in line for line in lines), lines
    assert not list((tmp_path / "new" / "cache").glob("*.bin"))  # the file went with the cache


def test_every_block_adapted_caches_the_embedding(tmp_path, monkeypatch):
    old_losses, old_weights, _, _ = _two_epochs(tmp_path / "old", monkeypatch, cached=False, layers=2)
    new_losses, new_weights, lines, _ = _two_epochs(tmp_path / "new", monkeypatch, cached=True, layers=2)
    np.testing.assert_allclose(new_losses, old_losses, rtol=1e-5, atol=1e-5)
    assert any("the embedding run once per row" in line for line in lines), lines


def test_a_forward_the_split_does_not_reproduce_trains_the_whole_model(tmp_path, monkeypatch):
    """A model whose forward does more than embed, blocks, norm (here: a scaled embedding) is not split."""
    from mlx_sdm.usecases import lora_cached
    from mlx_sdm.usecases.lora_training import chat_dataset

    model, tokenizer = build_tiny_lm(seed=0, num_layers=4)
    dataset = chat_dataset(_rows(), tokenizer, 2048, {})
    model.freeze()
    assert isinstance(lora_cached.frozen_split(model, 2, dataset[0][0]), lora_cached.FrozenSplit)
    inner_call = type(model.model).__call__
    monkeypatch.setattr(type(model.model), "__call__", lambda self, inputs, *a, **k: inner_call(self, inputs) * 2)
    lines: list[str] = []
    assert lora_cached.FrozenCache(model, dataset, 2, tmp_path, lines.append).get() is None
    assert lines == ["LoRA: every step runs the whole model (its forward is not embed_tokens, the blocks, norm)"]
    model.model.layers[0].unfreeze()
    assert lora_cached.frozen_split(model, 2, dataset[0][0]) == "a weight below the adapted blocks is trained"
