"""The LoRA stage's epochs with the frozen blocks crossed once: a prompt's hidden states below the first adapted block
are computed once per training row and every epoch trains from them.

LoRA adapts the last ``num_layers`` blocks (mlx-lm's ``linear_to_lora_layers`` on ``model.layers[-num_layers:]``);
the embedding and the blocks below are frozen, so their output for a row is the same in every epoch and for every
rank. :class:`FrozenSplit` runs the model's own modules in the model's own order (``embed_tokens``, the blocks with
mlx-lm's causal mask from ``create_attention_mask``, the final ``norm``), cut at the first adapted block;
:class:`HiddenStore` keeps each row's hidden states there (the model's dtype; in memory up to
:data:`HIDDEN_BUDGET_BYTES`, past it in a ``numpy.memmap`` file under the run's work folder, written a group of
rows at a time); :func:`train_cached_epoch` is mlx-lm's ``train`` loop (its compiled step over the model's and
Adam's state, its loss reports) on batches made by mlx-lm's own ``iterate_batches`` (the same rows per batch, the
same seeded order, the same padded width), each step running only the adapted blocks, the norm and the vocabulary
head at the answer positions. Positions past a row's end are zeros here and padding tokens in mlx-lm's batch; with
the causal mask neither reaches a row's own positions, so the loss is the same (tests/test_lora_cached.py: losses
and adapters of the two paths equal after two epochs).

A model whose structure is not this (no ``model.model.embed_tokens/layers/norm``, sliding-window blocks, a trainable
weight below the cut, or a forward that the split does not reproduce on the longest row) trains on the full
forward as before (:func:`frozen_split` says why, and the LoRA stage logs it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Sequence

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

#: Hidden states kept in memory up to this; a larger cache is a file under the run's work folder.
HIDDEN_BUDGET_BYTES = 1 << 30
#: Rows per forward when the cache is built (length-sorted, so little padding).
BUILD_GROUP = 8
HIDDEN_FILE = "frozen-hidden.bin"
#: numpy has no bfloat16: those are stored as their 16 bits.
_STORED = {mx.float32: np.float32, mx.float16: np.float16, mx.bfloat16: np.uint16}


@dataclass(frozen=True)
class FrozenSplit:
    """``model.model``'s forward cut before block ``cut``: :meth:`prefix` then :meth:`suffix` is ``model.model``."""

    inner: nn.Module = field(repr=False)
    cut: int = 0

    def _blocks(self, h: mx.array, layers: Sequence[nn.Module]) -> mx.array:
        from mlx_lm.models.base import create_attention_mask

        mask = create_attention_mask(h, None)  # what the model's forward passes each block without a cache
        for layer in layers:
            h = layer(h, mask, cache=None)
        return h

    def prefix(self, inputs: mx.array) -> mx.array:
        """Token ids [B, L] -> the hidden states entering block ``cut`` [B, L, D]."""
        return self._blocks(self.inner.embed_tokens(inputs), self.inner.layers[:self.cut])

    def suffix(self, hidden: mx.array) -> mx.array:
        """Hidden states entering block ``cut`` -> the normed last hidden states (what ``model.model`` returns)."""
        return self.inner.norm(self._blocks(hidden, self.inner.layers[self.cut:]))


def frozen_split(model: nn.Module, num_layers: int, probe: Sequence[int]) -> FrozenSplit | str:
    """The split before the first of the last ``num_layers`` blocks, or why this model trains on the full forward.
    ``probe``: one row's tokens; the split must give what ``model.model`` gives on them."""
    inner = getattr(model, "model", None)
    if inner is None or not all(hasattr(inner, name) for name in ("embed_tokens", "layers", "norm")):
        return f"{type(model).__module__} has no model.embed_tokens/layers/norm"
    layers = inner.layers
    if any(getattr(layer, flag, False) for layer in layers for flag in ("use_sliding", "is_sliding")):
        return "its blocks use sliding-window attention"
    cut = max(len(layers) - num_layers, 0)
    if tree_flatten(inner.embed_tokens.trainable_parameters()) or any(
            tree_flatten(layer.trainable_parameters()) for layer in layers[:cut]):
        return "a weight below the adapted blocks is trained"
    split = FrozenSplit(inner, cut)
    inputs = mx.array([list(probe[:-1])])
    try:
        want, got = inner(inputs), split.suffix(split.prefix(inputs))
        same = want.shape == got.shape and mx.allclose(want.astype(mx.float32), got.astype(mx.float32),
                                                       rtol=1e-3, atol=1e-3).item()
    except Exception as exc:  # noqa: BLE001 (any model whose blocks take other arguments)
        return f"its blocks do not run alone ({type(exc).__name__}: {exc})"
    return split if same else "its forward is not embed_tokens, the blocks, norm"


class HiddenStore:
    """Each training row's hidden states entering the first adapted block, at its input positions (a row of L
    tokens: L - 1 positions, the last token being only a target), in one table [positions, D]."""

    def __init__(self, table: np.ndarray, starts: np.ndarray, lengths: np.ndarray, dtype, path: Path | None):
        self.table, self.starts, self.lengths, self.dtype, self.path = table, starts, lengths, dtype, path

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes)

    def rows(self, ids: Sequence[int], width: int) -> mx.array:
        """Rows ``ids`` as a [B, width, D] batch, zeros past each row's end."""
        out = np.zeros((len(ids), width, self.table.shape[1]), self.table.dtype)
        for j, row in enumerate(ids):
            n = min(int(self.lengths[row]), width)
            out[j, :n] = self.table[self.starts[row]:self.starts[row] + n]
        batch = mx.array(out)
        return batch.view(self.dtype) if self.dtype == mx.bfloat16 else batch

    def close(self) -> None:
        """Frees the table (and deletes its file)."""
        self.table = np.zeros((0, self.table.shape[1]), self.table.dtype)
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def build_store(split: FrozenSplit, dataset, folder: Path, budget: int = HIDDEN_BUDGET_BYTES) -> HiddenStore:
    """One forward through the frozen blocks per row (length-sorted groups of :data:`BUILD_GROUP`), into memory
    or, past ``budget`` bytes, a file in ``folder``."""
    tokens = [dataset[i][0] for i in range(len(dataset))]
    lengths = np.array([len(t) - 1 for t in tokens], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    order = sorted(range(len(tokens)), key=lambda i: lengths[i])
    table, path, dtype = None, None, None
    for g in range(0, len(order), BUILD_GROUP):
        ids = order[g:g + BUILD_GROUP]
        width = int(lengths[ids].max())
        padded = np.zeros((len(ids), width), np.int32)
        for j, row in enumerate(ids):
            padded[j, :lengths[row]] = tokens[row][:lengths[row]]
        hidden = split.prefix(mx.array(padded))
        mx.eval(hidden)
        if table is None:
            dtype = hidden.dtype
            stored = _STORED.get(dtype, np.float32)
            dtype = dtype if dtype in _STORED else mx.float32
            shape = (int(lengths.sum()), hidden.shape[-1])
            if shape[0] * shape[1] * np.dtype(stored).itemsize <= budget:
                table = np.empty(shape, stored)
            else:
                folder.mkdir(parents=True, exist_ok=True)
                path = folder / HIDDEN_FILE
                table = np.memmap(path, dtype=stored, mode="w+", shape=shape)
        hidden = hidden.astype(dtype)
        values = np.asarray(hidden.view(mx.uint16) if dtype == mx.bfloat16 else hidden)
        for j, row in enumerate(ids):
            table[starts[row]:starts[row] + lengths[row]] = values[j, :lengths[row]]
    if isinstance(table, np.memmap):
        table.flush()
    return HiddenStore(table, starts, lengths, dtype, path)


def answer_window(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mlx-lm's ``[offset, length]`` per row -> the positions whose next token is an answer token, as [B, W]
    indices and a mask (W: the batch's longest answer)."""
    starts, counts = lengths[:, 0] - 1, lengths[:, 1] - lengths[:, 0]  # position t predicts token t + 1
    width = max(1, int(counts.max()))
    steps = np.arange(width)[None, :]
    mask = steps < counts[:, None]
    return np.where(mask, starts[:, None] + steps, 0).astype(np.int32), mask


def _recorded(dataset):
    """The dataset as ``iterate_batches`` reads it, noting which rows it read (so a batch's rows are known). A
    ``CacheDataset`` still, so ``iterate_batches`` orders the rows as it orders ``dataset`` (by ``itemlen``)."""
    from mlx_lm.tuner.datasets import CacheDataset

    class Recorded(CacheDataset):
        def __init__(self) -> None:  # noqa: D107 (no cache of its own: ``dataset`` has it)
            self.read: list[int] = []

        def itemlen(self, idx: int) -> int:
            return dataset.itemlen(idx) if isinstance(dataset, CacheDataset) else len(dataset[idx][0])

        def __getitem__(self, idx: int):
            self.read.append(idx)
            return dataset[idx]

        def __len__(self) -> int:
            return len(dataset)

    return Recorded()


def cached_batches(dataset, store: HiddenStore, batch_size: int, seed: int):
    """mlx-lm's ``iterate_batches`` (its rows per batch, seeded order and padded width), each batch as the cached
    hidden states [B, width - 1, D], the answer window (index, mask) and the answer tokens at it."""
    from mlx_lm.tuner.trainer import iterate_batches

    recorded = _recorded(dataset)
    for batch, lengths in iterate_batches(recorded, batch_size, 1 << 20, seed=seed):
        ids, recorded.read = recorded.read[-batch_size:], []
        tokens = np.array(batch)
        index, mask = answer_window(np.array(lengths.tolist(), dtype=np.int64))
        wanted = np.take_along_axis(tokens[:, 1:], index, axis=1)
        yield store.rows(ids, tokens.shape[1] - 1), mx.array(index), mx.array(mask), mx.array(wanted)


def cached_loss(split: FrozenSplit) -> Callable:
    """``answer_loss`` (lora_training.py) from the cached hidden states: the adapted blocks, the norm, the head at
    the answer positions, the masked cross-entropy over the answer tokens."""
    from mlx_sdm.lm.generation import default_head

    def loss(model, hidden, index, mask, wanted):
        picked = mx.take_along_axis(split.suffix(hidden), index[:, :, None], axis=1)
        logits = default_head(model)(picked)
        ce = nn.losses.cross_entropy(logits, wanted) * mask
        ntoks = mask.sum()
        return ce.astype(mx.float32).sum() / ntoks, ntoks

    return loss


def train_cached_epoch(model, optimizer, dataset, store: HiddenStore, split: FrozenSplit, *, batch_size: int,
                       seed: int, reports, steps_per_report: int, show: bool = True) -> None:
    """One pass over ``dataset`` as mlx-lm's ``train`` makes it (its compiled step over the model's, Adam's and the
    random state; its loss reports to ``reports.on_train_loss_report``), from the cached hidden states."""
    from mlx_lm.cli_ui import TrainUI

    iters = len(dataset) // batch_size
    step_grad = nn.value_and_grad(model, cached_loss(split))
    state = [model.state, optimizer.state, mx.random.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(hidden, index, mask, wanted):
        (value, toks), grad = step_grad(model, hidden, index, mask, wanted)
        optimizer.update(model, grad)
        return value, toks

    window = _Window()
    ui = TrainUI(iters, rank=0 if show else 1)
    with ui:
        for it, batch in enumerate(islice(cached_batches(dataset, store, batch_size, seed), iters), start=1):
            tic = time.perf_counter()
            value, toks = step(*batch)
            window.add(value, toks)
            mx.eval(state, window.losses, window.tokens)
            window.seconds += time.perf_counter() - tic
            ui.advance()
            if it % steps_per_report == 0 or it == iters:
                info = window.report(it, optimizer)
                ui.report_train(it, info["train_loss"], info["tokens_per_second"], info["trained_tokens"])
                reports.on_train_loss_report(info)


class _Window:
    """mlx-lm's report window: the mean loss of its steps, answer tokens per second, tokens so far, peak memory."""

    def __init__(self) -> None:
        self.trained = 0
        self._reset()

    def _reset(self) -> None:
        self.losses, self.tokens, self.steps, self.seconds = mx.array(0.0), mx.array(0), 0, 0.0

    def add(self, value: mx.array, toks: mx.array) -> None:
        self.losses, self.tokens, self.steps = self.losses + value, self.tokens + toks, self.steps + 1

    def report(self, it: int, optimizer) -> dict[str, Any]:
        tokens = int(self.tokens.item())
        self.trained += tokens
        info = {"iteration": it, "train_loss": self.losses.item() / self.steps,
                "learning_rate": optimizer.learning_rate.item(),
                "iterations_per_second": self.steps / max(self.seconds, 1e-9),
                "tokens_per_second": tokens / max(self.seconds, 1e-9), "trained_tokens": self.trained,
                "peak_memory": mx.get_peak_memory() / 1e9}
        self._reset()
        return info


class FrozenCache:
    """The split and the hidden-state store, made at the first epoch that trains (a resumed run whose epochs are all
    checkpointed makes neither) and shared by every rank; ``None`` from :meth:`get` when the model trains on the
    full forward (logged once)."""

    def __init__(self, model, dataset, num_layers: int, folder: Path, log: Callable[[str], None],
                 budget: int = HIDDEN_BUDGET_BYTES) -> None:
        self.model, self.dataset, self.num_layers, self.folder, self.log = model, dataset, num_layers, folder, log
        self.budget = budget
        self._made: tuple[FrozenSplit, HiddenStore] | None | bool = False

    def get(self) -> tuple[FrozenSplit, HiddenStore] | None:
        if self._made is False:
            self._made = self._make()
        return self._made  # type: ignore[return-value]

    def _make(self) -> tuple[FrozenSplit, HiddenStore] | None:
        longest = max(range(len(self.dataset)), key=lambda i: len(self.dataset[i][0]))
        split = frozen_split(self.model, self.num_layers, self.dataset[longest][0])
        if isinstance(split, str):
            self.log(f"LoRA: every step runs the whole model ({split})")
            return None
        started = time.perf_counter()
        store = build_store(split, self.dataset, self.folder, self.budget)
        where = f"a file in {self.folder}" if store.path else "memory"
        below = f"blocks 0-{split.cut - 1}" if split.cut else "the embedding"
        self.log(f"LoRA: {below} run once per row ({len(self.dataset)} rows, "
                 f"{store.nbytes / 2**20:.0f} MiB in {where}, {time.perf_counter() - started:.0f} s); each epoch "
                 f"trains blocks {split.cut}-{len(split.inner.layers) - 1}")
        return split, store

    def close(self) -> None:
        if isinstance(self._made, tuple):
            self._made[1].close()
        self._made = False
