"""The sdm activation (Eq. 7) and the sdm loss (Eq. 8), in MLX, plus NumPy twins for bookkeeping."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from mlx_sdm.calibration.constants import Q_RESCALE_OFFSET


def sdm_temperature(q, d):
    """τ = d · ln(2 + q): sdm(z') = softmax(τ z') (Eq. 7 in its stable form)."""
    if isinstance(q, mx.array) or isinstance(d, mx.array):
        return mx.array(d) * mx.log(Q_RESCALE_OFFSET + mx.array(q))
    return np.asarray(d, dtype=np.float64) * np.log(Q_RESCALE_OFFSET + np.asarray(q, dtype=np.float64))


def sdm(logits: mx.array, q: mx.array | float, d: mx.array | float) -> mx.array:
    """Eq. 7: sdm(z')_i = (2+q)^{d z'_i} / Σ_c (2+q)^{d z'_c}, computed as softmax(d ln(2+q) z').

    ``q`` and ``d`` are scalars or one value per row of ``logits`` ([B, C]).
    """
    tau = mx.log(Q_RESCALE_OFFSET + mx.array(q, dtype=mx.float32)) * mx.array(d, dtype=mx.float32)
    if tau.ndim == 1:
        tau = tau[:, None]
    return mx.softmax(tau * logits, axis=-1)


def sdm_loss(logits: mx.array, labels: mx.array, q: mx.array, d: mx.array) -> mx.array:
    """Eq. 8: mean over the batch of −log_{2+q_n} sdm(z'_n)_{y_n} = −log_softmax(τ_n z'_n)_{y_n} / ln(2+q_n).

    q and d are constants (callers pass them without gradient). The gradient w.r.t. z'_n is
    d_n (sdm(z'_n) − e_{y_n}) / N.
    """
    log_base = mx.log(Q_RESCALE_OFFSET + q.astype(mx.float32))
    tau = (d.astype(mx.float32) * log_base)[:, None]
    scaled = tau * logits
    log_probs = scaled - mx.logsumexp(scaled, axis=-1, keepdims=True)
    picked = mx.take_along_axis(log_probs, labels[:, None].astype(mx.int32), axis=-1)[:, 0]
    return -mx.mean(picked / log_base)


def sdm_numpy(logits: np.ndarray, q: np.ndarray | float, d: np.ndarray | float) -> np.ndarray:
    """Eq. 7 in float64 NumPy (for the bookkeeping of Alg. 1 and the test-time procedure)."""
    tau = np.atleast_1d(sdm_temperature(q, d)).astype(np.float64)
    z = np.asarray(logits, dtype=np.float64)
    scaled = tau[:, None] * z if z.ndim == 2 else tau * z
    scaled = scaled - scaled.max(axis=-1, keepdims=True)
    e = np.exp(scaled)
    return e / e.sum(axis=-1, keepdims=True)


def sdm_rank_keys(logits: np.ndarray, q: np.ndarray | float, d: np.ndarray | float) -> np.ndarray:
    """The log-odds ln(sdm_c / (1 − sdm_c)) of every class, in float64 without saturation. [B, C].

    A strictly increasing function of sdm(z')_c, so every eCDF over sdm outputs (Eq. 9) has the same
    ranks over these keys as over the outputs themselves, in exact arithmetic. Unlike the outputs, the
    keys do not round to 1.0 (or 0.0) once τ·(z'_ŷ − z'_c) exceeds ~37 (float64) or ~17 (float32):
    with rounded outputs, every confident calibration point ties at 1.0 and gets v = 1 (the
    saturation rule), which made a well-separated class unreachable (ψ_c → 1).
    Computed as τz'_c − logsumexp_{j≠c}(τz'_j) (no cancellation)."""
    tau = np.atleast_1d(sdm_temperature(q, d)).astype(np.float64)
    z = np.asarray(logits, dtype=np.float64)
    scaled = tau[:, None] * z
    keys = np.empty_like(scaled)
    for c in range(z.shape[1]):
        others = np.delete(scaled, c, axis=1)
        keys[:, c] = scaled[:, c] - _logsumexp(others) if others.shape[1] else np.inf
    return keys


def _logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=1)
    return m + np.log(np.exp(x - m[:, None]).sum(axis=1))


def softmax_numpy(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def flipped(probs: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """Prediction-flip rule (docs/method.md § 6.3): True where the transformed vector's argmax is not ŷ.

    Exact ties count as flips (the symmetric choice § 6.3 allows), so a uniform output (d = 0)
    is always a flip, whatever ŷ is.
    """
    probs = np.asarray(probs)
    rows = np.arange(len(probs))
    at_pred = probs[rows, predictions]
    others = probs.copy()
    others[rows, predictions] = -np.inf
    return ~(at_pred > others.max(axis=1)) if probs.shape[1] > 1 else np.zeros(len(probs), dtype=bool)
