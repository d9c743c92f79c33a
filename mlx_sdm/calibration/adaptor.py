"""The exemplar adaptor (docs/method.md § 2): scalar normalisation, CNN g as ``nn.Linear(D, M)``, ``nn.Linear(M, C)``."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np


class ExemplarAdaptor(nn.Module):
    """h → (h − μ)/σ → h' = G h + g_b (the 1-D CNN with one full-width window, no nonlinearity)
    → z' = W'ᵀ h' + b'. μ, σ are two scalars (set with :meth:`set_normalization`)."""

    def __init__(self, input_dim: int, exemplar_dim: int, num_classes: int):
        super().__init__()
        self.g = nn.Linear(input_dim, exemplar_dim)
        self.linear = nn.Linear(exemplar_dim, num_classes)
        self.input_dim, self.exemplar_dim, self.num_classes = input_dim, exemplar_dim, num_classes
        self._mu = 0.0
        self._sigma = 1.0

    def set_normalization(self, mu: float, sigma: float) -> None:
        self._mu, self._sigma = float(mu), float(sigma)

    @property
    def normalization(self) -> tuple[float, float]:
        return self._mu, self._sigma

    def exemplar(self, h: mx.array) -> mx.array:
        """h' (the vector used for matching): [B, D] → [B, M]."""
        return self.g((h - self._mu) / self._sigma)

    def __call__(self, h: mx.array) -> tuple[mx.array, mx.array]:
        """Returns (z' [B, C], h' [B, M])."""
        hp = self.exemplar(h)
        return self.linear(hp), hp


def scalar_normalization(train_embeddings: np.ndarray, enabled: bool = True) -> tuple[float, float]:
    """(μ, σ): mean and Bessel-corrected std of ALL entries of the D_tr matrix (§ 2); (0, 1) if off."""
    if not enabled:
        return 0.0, 1.0
    x = np.asarray(train_embeddings, dtype=np.float64)
    mu = float(x.mean())
    sigma = float(x.std(ddof=1)) if x.size > 1 else 1.0
    return mu, (sigma if sigma > 0 and np.isfinite(sigma) else 1.0)


def forward_numpy_batches(adaptor: ExemplarAdaptor, h: np.ndarray, batch: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Eval-mode forward over a NumPy matrix in batches: (z' float32 [N, C], h' float32 [N, M])."""
    zs, hs = [], []
    for start in range(0, len(h), batch):
        z, hp = adaptor(mx.array(np.asarray(h[start:start + batch], dtype=np.float32)))
        mx.eval(z, hp)
        zs.append(np.array(z))
        hs.append(np.array(hp))
    if not zs:
        return (np.zeros((0, adaptor.num_classes), np.float32), np.zeros((0, adaptor.exemplar_dim), np.float32))
    return np.concatenate(zs), np.concatenate(hs)
