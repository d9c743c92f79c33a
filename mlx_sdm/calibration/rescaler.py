"""Alg. 2: the bias-free linear rescaler W'' (Eq. 11) trained on D_ca with the loss of Eq. 21.

With v' = W''ᵀ v and o = softmax(ln(2 + q̃) v'), the per-point loss −log_{2+q̃} o_y has gradient
(o − e_y) w.r.t. v', hence vᵀ(o − e_y) w.r.t. W''. W'' has C² parameters, so the steps run in NumPy
(Adam written out) rather than through an autograd graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mlx_sdm.calibration import ecdf
from mlx_sdm.calibration.constants import (
    ADAM_BETAS,
    ADAM_EPS,
    Q_RESCALE_OFFSET,
    RESCALER_BATCH_SIZE,
    RESCALER_LEARNING_RATE,
    RESCALER_MAX_EPOCHS,
    RESCALER_PATIENCE,
)


def quantile_vector(probs: np.ndarray, outcdfs: list[np.ndarray]) -> np.ndarray:
    """Eq. 9: v_c = saturating eCDF over {sdm(z'_i)_c : i ∈ D_ca, y_i = c} at sdm(z')_c. [B, C]."""
    probs = np.asarray(probs, dtype=np.float64)
    return np.stack([ecdf.forward_saturating(outcdfs[c], probs[:, c]) for c in range(probs.shape[1])], axis=1)


def rescaled_similarity(v: np.ndarray, predictions: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Eq. 10: q̃ = v_ŷ · ln(2 + q), with q already 0 for sdm flips."""
    return np.asarray(v)[np.arange(len(predictions)), predictions] * np.log(Q_RESCALE_OFFSET + np.asarray(q, dtype=np.float64))


@dataclass
class RescalerResult:
    weight: np.ndarray  # W'' [C, C]
    epochs_run: int
    best_epoch: int
    losses: list[float] = field(default_factory=list)


def train_rescaler(v: np.ndarray, q_tilde: np.ndarray, labels: np.ndarray, num_classes: int, seed: int = 0,
                   learning_rate: float = RESCALER_LEARNING_RATE, max_epochs: int = RESCALER_MAX_EPOCHS,
                   patience: int = RESCALER_PATIENCE, batch_size: int = RESCALER_BATCH_SIZE) -> RescalerResult:
    """Alg. 2: W'' ~ U(±1/√C); Adam; shuffle D_ca each epoch; L = running mean of the step losses
    of the epoch; keep the W'' of the lowest L; stop when L has exceeded the best for more than
    ``patience`` consecutive epochs (the first epoch is never counted)."""
    rng = np.random.default_rng(seed)
    v = np.asarray(v, dtype=np.float64)
    q_tilde = np.asarray(q_tilde, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    n, c = len(labels), num_classes
    bound = 1.0 / np.sqrt(c)
    w = rng.uniform(-bound, bound, size=(c, c))
    m1 = np.zeros_like(w)
    m2 = np.zeros_like(w)
    b1, b2 = ADAM_BETAS
    tau_all = np.log(Q_RESCALE_OFFSET + q_tilde)
    onehot_all = np.eye(c)[labels]
    best, best_w, best_epoch, counter, step = np.inf, w.copy(), 0, 0, 0
    w = w.copy()
    losses: list[float] = []
    epoch = 0
    if n == 0:
        return RescalerResult(w, 0, 0, losses)
    for epoch in range(max_epochs):
        order = rng.permutation(n)
        total = 0.0
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            vb, tau, yb = v[idx], tau_all[idx, None], labels[idx]
            s = tau * (vb @ w)
            s -= s.max(axis=1, keepdims=True)
            e = np.exp(s)
            z = e.sum(axis=1, keepdims=True)
            # Eq. 21 step loss: −log_{2+q̃} o_y = (log Σ exp(s) − s_y) / ln(2+q̃)
            total += float(np.sum((np.log(z[:, 0]) - s[np.arange(len(idx)), yb]) / tau[:, 0]))
            e /= z
            e -= onehot_all[idx]
            grad = vb.T @ e
            grad /= len(idx)
            step += 1
            m1 *= b1
            m1 += (1 - b1) * grad
            m2 *= b2
            m2 += (1 - b2) * grad * grad
            w -= (learning_rate / (1 - b1 ** step)) * m1 / (np.sqrt(m2 / (1 - b2 ** step)) + ADAM_EPS)
        loss = total / n
        losses.append(loss)
        if loss < best:
            best, best_w, best_epoch = loss, w.copy(), epoch
        if epoch > 0:
            if loss > best:
                counter += 1
                if counter > patience:
                    break
            else:
                counter = 0
    return RescalerResult(best_w, epoch + 1, best_epoch, losses)
