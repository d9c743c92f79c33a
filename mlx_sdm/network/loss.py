"""The next-token SDM loss of the SDM network (Eq. 32) with its regulariser (Eqs. 29–31).

Per token n with document-level Similarity q_n and Distance quantile d_n (constants):

    log_{2+q} sdm(z)        = log_softmax(d ln(2+q) z) / ln(2+q)                       (Eq. 7)
    NLL                     = −mean_n log_{2+q_n} sdm([z_neg; z_pos])_{t_n + |V|}        (Eq. 32)
    r                       = mean_n ‖ i ⊙ log sdm([z_ref; z_ref]) − i ⊙ log sdm([z_neg; z_pos]) + 1e-6 ‖₂   (Eq. 29)
    s                       = ln(NLL + ε) / (ln(r + ε) + ε)          (no gradient)       (Eq. 31)
    r'                      = sqrt(max(r, 1) ^ clip(s, 0, 1))                          (Eq. 30)
    loss                    = NLL + β r'

The mask i is 1 except at argmax z_ref, argmax z_ref + |V|, argmax z_neg, argmax z_pos + |V| and
the shifted target (docs/method.md § 15.2). The reference computes r with PyTorch ``PairwiseDistance`` (which adds
1e-6 to the difference) and takes its batch mean; the reference term has no gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from mlx_sdm.calibration.constants import FLOAT32_EPS, Q_RESCALE_OFFSET

#: β_min, β_max of the β schedule (§ 15.4; paper A.3, replication scripts).
BETA_MIN: float = 0.0
BETA_MAX: float = 0.1
#: PyTorch PairwiseDistance's default eps, added to the difference before the norm (Eq. 29, reference).
PAIRWISE_DISTANCE_EPS: float = 1e-6


def beta_for_batch(batch_index: int, batches_per_epoch: int, beta_min: float = BETA_MIN, beta_max: float = BETA_MAX) -> float:
    """β of mini-batch ``batch_index`` (0-based) within an epoch: it restarts at β_min each epoch and
    grows by (β_max − β_min)/n_batches after every mini-batch, reaching β_max at the epoch end (§ 15.4)."""
    if batches_per_epoch <= 0:
        return beta_min
    return beta_min + batch_index * (beta_max - beta_min) / batches_per_epoch


def log_sdm(logits: mx.array, q: mx.array, d: mx.array) -> mx.array:
    """log_{2+q} sdm(z) row-wise (Eq. 7): log_softmax(d ln(2+q) z) / ln(2+q); q, d have shape [N]."""
    log_base = mx.log(Q_RESCALE_OFFSET + q.astype(mx.float32))[:, None]
    scaled = (d.astype(mx.float32)[:, None] * log_base) * logits
    return (scaled - mx.logsumexp(scaled, axis=-1, keepdims=True)) / log_base


@dataclass
class LossParts:
    nll: mx.array
    r: mx.array
    r_prime: mx.array
    s: mx.array


def regulariser_mask(log_ref: mx.array, log_joint: mx.array, targets: mx.array, vocab_size: int) -> mx.array:
    """The mask i of Eq. 29 ([N, 2|V|]): 0 at the reference's argmaxes (in both halves), at the
    joint vector's argmax in each half, and at the shifted target; 1 elsewhere."""
    ref_arg = mx.argmax(log_ref[:, :vocab_size], axis=-1)
    neg_arg = mx.argmax(log_joint[:, :vocab_size], axis=-1)
    pos_arg = mx.argmax(log_joint[:, vocab_size:], axis=-1) + vocab_size
    zeros_at = mx.stack([ref_arg, ref_arg + vocab_size, neg_arg, pos_arg, targets.astype(ref_arg.dtype)], axis=1)
    ones = mx.ones(log_joint.shape, dtype=mx.float32)
    return mx.put_along_axis(ones, zeros_at, mx.zeros(zeros_at.shape, dtype=mx.float32), axis=-1)


def sdm_token_terms(
    z_neg: mx.array,
    z_pos: mx.array,
    targets: mx.array,
    q: mx.array,
    d: mx.array,
    z_ref: mx.array | None = None,
) -> tuple[mx.array, mx.array]:
    """Per-token terms of Eq. 32 and Eq. 29: (−log_{2+q} sdm([z_neg; z_pos])_t, ‖i ⊙ Δ + 1e-6‖₂), each [N].

    ``z_neg``, ``z_pos``: [N, |V|] logits; ``targets``: [N] token ids already shifted by |V|;
    ``q``, ``d``: [N] document-level Similarity and Distance quantile of each token's document;
    ``z_ref`` defaults to ``z_neg`` (both are the frozen original head, § 15.1).
    """
    vocab_size = z_neg.shape[-1]
    z_ref = mx.stop_gradient(z_neg if z_ref is None else z_ref)
    q = mx.stop_gradient(q)
    d = mx.stop_gradient(d)
    log_joint = log_sdm(mx.concatenate([z_neg, z_pos], axis=-1), q, d)
    targets = targets.astype(mx.int32)
    nll = -mx.take_along_axis(log_joint, targets[:, None], axis=-1)[:, 0]  # Eq. 32, per token
    # log sdm([z_ref; z_ref]) = both halves of (log softmax(τ z_ref) − ln 2) / ln(2+q): one logsumexp over |V|.
    log_half = log_sdm(z_ref, q, d) - math.log(2.0) / mx.log(Q_RESCALE_OFFSET + q.astype(mx.float32))[:, None]
    log_ref = mx.stop_gradient(mx.concatenate([log_half, log_half], axis=-1))
    mask = mx.stop_gradient(regulariser_mask(log_ref, log_joint, targets, vocab_size))
    diff = mask * log_ref - mask * log_joint + PAIRWISE_DISTANCE_EPS
    norms = mx.sqrt(mx.sum(diff * diff, axis=-1))  # Eq. 29, PairwiseDistance per token
    return nll, norms


def _global_mean(local_sum: mx.array, global_count: float | mx.array, group=None) -> mx.array:
    """Mean over the global batch whose value is the same on every rank and whose gradient is this
    rank's share: stop_gradient(global mean) + (local sum − stop_gradient(local sum)) / N.

    Summing the ranks' gradients (``average_gradients`` × world size) then gives exactly the
    gradient of the single-process loss on the whole batch, even through the non-linear r'.
    """
    if group is None or group.size() == 1:
        return local_sum / global_count
    total = mx.distributed.all_sum(mx.stop_gradient(local_sum), group=group, stream=mx.cpu)
    return mx.stop_gradient(total / global_count) + (local_sum - mx.stop_gradient(local_sum)) / global_count


def sdm_loss_from_terms(
    nll: mx.array, norms: mx.array, beta: float | mx.array, *, global_count: float | mx.array | None = None, group=None
) -> tuple[mx.array, LossParts]:
    """Eqs. 30–32 from the per-token terms; ``global_count`` and ``group`` for data-parallel batches."""
    count = float(nll.shape[0]) if global_count is None else global_count
    nll_mean = _global_mean(mx.sum(nll), count, group)
    r = _global_mean(mx.sum(norms), count, group)  # Eq. 29, batch mean
    s = mx.stop_gradient(mx.log(nll_mean + FLOAT32_EPS) / (mx.log(r + FLOAT32_EPS) + FLOAT32_EPS))  # Eq. 31
    r_prime = mx.sqrt(mx.power(mx.maximum(r, 1.0), mx.clip(s, 0.0, 1.0)))  # Eq. 30
    loss = nll_mean + beta * r_prime  # Eq. 32
    return loss, LossParts(nll=nll_mean, r=r, r_prime=r_prime, s=s)


def cross_entropy_next_token_loss(z_pos: mx.array, targets: mx.array) -> mx.array:
    """Plain cross-entropy on the positive head alone, unshifted targets (the benchmark baseline)."""
    return mx.mean(nn.losses.cross_entropy(z_pos, targets.astype(mx.int32)))
