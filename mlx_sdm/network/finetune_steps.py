"""The training step of Alg. 4 in mlx-lm's shape (docs/method.md § 15.4): token batches, the Eq. 32 batch
loss, the token targets gathered across ranks, the compiled optimizer step and the optimizer."""

from __future__ import annotations

from functools import partial
from typing import Callable, Iterator

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_map

from mlx_sdm.calibration.constants import ADAM_BETAS, ADAM_EPS
from mlx_sdm.network.data import TokenTargets, build_token_targets
from mlx_sdm.network.distributed import gather_rows, shard_indices
from mlx_sdm.network.heads import VocabularyHeads
from mlx_sdm.network.loss import sdm_loss_from_terms, sdm_token_terms


def iterate_token_batches(count: int, batch_size: int, seed: int, epoch: int) -> Iterator[np.ndarray]:
    """The default batch iterator: all target tokens shuffled once per epoch (seed + epoch, so a
    resumed run draws the same batches), cut into global mini-batches of ``batch_size`` tokens."""
    order = np.random.default_rng(seed + epoch).permutation(count)
    for start in range(0, count, batch_size):
        yield order[start : start + batch_size]


def sdm_batch_loss(heads: VocabularyHeads, hidden, targets, q, d, beta, global_count, weight=None, group=None):
    """The default loss: Eq. 32 with the regulariser over one (rank's share of a) mini-batch.
    ``weight`` (0/1 per row) lets a rank with no rows of a short last batch join with a dummy row."""
    z_neg, z_pos = heads(hidden)
    nll, norms = sdm_token_terms(z_neg, z_pos, targets, q, d)
    if weight is not None:
        nll, norms = nll * weight, norms * weight
    loss, parts = sdm_loss_from_terms(nll, norms, beta, global_count=global_count, group=group)
    return loss, parts.nll


def gather_token_targets(lm, documents, vocab_size, group, progress=None) -> TokenTargets:
    """Token targets of all documents, force-decoded in shards and gathered in document order."""
    mine = shard_indices(len(documents), group)
    local = build_token_targets(lm, [documents[i] for i in mine], vocab_size, progress)
    owners = np.array(mine, dtype=np.int64)[local.document_index] if len(local) else local.document_index
    if group is None or group.size() == 1:
        return TokenTargets(local.hidden, local.targets, owners)
    hidden = np.concatenate(gather_rows(local.hidden.astype(np.float32), group))
    meta = np.concatenate(gather_rows(np.stack([local.targets, owners], axis=1).astype(np.int64), group))
    order = np.argsort(meta[:, 1], kind="stable")  # rows of one document stay in position order
    return TokenTargets(hidden[order], meta[order, 0], meta[order, 1])


def local_rows(global_batch: np.ndarray, group) -> np.ndarray:
    """This rank's rows of a global mini-batch (interleaved; all rows with one process)."""
    return global_batch[group.rank() :: group.size()] if group is not None else global_batch


def build_train_step(heads: VocabularyHeads, optimizer, loss: Callable = sdm_batch_loss, group=None, *, compile: bool = True):
    """One optimizer step on this rank's share of a global mini-batch, in mlx-lm's shape:
    ``nn.value_and_grad`` over the module, gradients averaged across ranks, ``mx.compile`` over
    the module and optimizer state. Returns ``step(hidden, targets, q, d, beta, global_count,
    weight=None) -> (loss, nll)`` on arrays; ``global_count`` is the number of tokens in the global
    batch, ``weight`` 0/1 per local row (a rank left without rows passes one dummy row of weight 0)."""
    group = group if group is not None else mx.distributed.init()
    loss_value_and_grad = nn.value_and_grad(heads, partial(loss, group=group))
    state = [heads.state, optimizer.state]

    def step(hidden, targets, q, d, beta, global_count, weight=None):
        (lvalue, nll), grad = loss_value_and_grad(heads, hidden, targets, q, d, beta, global_count, weight)
        if group.size() > 1:
            # Each rank's gradient is its share of the global-batch gradient: sum = average × size.
            grad = tree_map(lambda g: g * group.size(), nn.average_gradients(grad, group=group))
        optimizer.update(heads, grad)
        return lvalue, nll

    if compile and group.size() == 1:
        step = mx.compile(step, inputs=state, outputs=state)
    return step


def make_optimizer(learning_rate: float) -> optim.Adam:
    """Adam as in the reference (PyTorch defaults: betas (0.9, 0.999), eps 1e-8, bias correction)."""
    return optim.Adam(learning_rate=learning_rate, betas=list(ADAM_BETAS), eps=ADAM_EPS, bias_correction=True)
