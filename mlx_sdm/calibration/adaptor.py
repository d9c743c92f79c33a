"""The exemplar adaptor (docs/method.md § 2): input scaling, CNN g as ``nn.Linear(D, M)``, ``nn.Linear(M, C)``.

The paper (and the author's SDK) scales the input by two scalars, the mean and standard deviation of
all entries of D_tr. Under an LM's hidden states that is not enough: a few dimensions are 10–40× the
typical one, so after the global scaling most dimensions sit near 0.05 while Adam moves every weight
by about the same step, and the adaptor cannot learn what those small dimensions carry within its
epochs (``scripts/research/adaptor_vs_probe.py``). Per-dimension standardisation on D_tr
(``FitConfig.input_scaling = "per_dimension"``) removes that. It is not the default: where the large
dimensions carry the signal (the suite verifier's BBC topic documents) it admitted fewer documents
(docs/estimator.md, "Input scaling of the adaptor"), so the paper's scalar form stays the default."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np


#: FitConfig.input_scaling: μ, σ per input dimension (fitted on D_tr), the paper's two scalars, or none.
SCALING_PER_DIMENSION = "per_dimension"
SCALING_SCALAR = "scalar"
SCALING_NONE = "none"
SCALINGS = (SCALING_PER_DIMENSION, SCALING_SCALAR, SCALING_NONE)
#: A dimension whose D_tr standard deviation is below this fraction of the median one is divided by
#: that floor instead: a (near-)constant training dimension must not blow up when it varies later.
STD_FLOOR_FRACTION = 1e-3

Normalization = tuple  # (μ, σ): two floats (scalar, none) or two float32 vectors [D] (per dimension)


class ExemplarAdaptor(nn.Module):
    """h → (h − μ)/σ → h' = G h + g_b (the 1-D CNN with one full-width window, no nonlinearity)
    → z' = W'ᵀ h' + b'. μ, σ are two scalars or two vectors [D] (set with :meth:`set_normalization`)."""

    def __init__(self, input_dim: int, exemplar_dim: int, num_classes: int):
        super().__init__()
        self.g = nn.Linear(input_dim, exemplar_dim)
        self.linear = nn.Linear(exemplar_dim, num_classes)
        self.input_dim, self.exemplar_dim, self.num_classes = input_dim, exemplar_dim, num_classes
        self._mu: float | mx.array = 0.0
        self._sigma: float | mx.array = 1.0

    def set_normalization(self, mu, sigma) -> None:
        if is_per_dimension((mu, sigma)):  # held as MLX arrays outside the parameters (leading "_")
            self._mu = mx.array(np.asarray(mu, dtype=np.float32))
            self._sigma = mx.array(np.asarray(sigma, dtype=np.float32))
        else:  # Python floats: the arithmetic of folders saved before per-dimension scaling, bit for bit
            self._mu, self._sigma = float(mu), float(sigma)

    @property
    def normalization(self) -> Normalization:
        if isinstance(self._mu, mx.array):
            return np.array(self._mu), np.array(self._sigma)
        return self._mu, self._sigma

    def exemplar(self, h: mx.array) -> mx.array:
        """h' (the vector used for matching): [B, D] → [B, M]."""
        return self.g((h - self._mu) / self._sigma)

    def __call__(self, h: mx.array) -> tuple[mx.array, mx.array]:
        """Returns (z' [B, C], h' [B, M])."""
        hp = self.exemplar(h)
        return self.linear(hp), hp


def is_per_dimension(normalization: Normalization) -> bool:
    return np.ndim(normalization[0]) > 0 or np.ndim(normalization[1]) > 0


def input_normalization(train_embeddings: np.ndarray, scaling: str) -> Normalization:
    """(μ, σ) of ``scaling`` fitted on D_tr: per-dimension mean and Bessel-corrected std (float32
    vectors, σ floored at STD_FLOOR_FRACTION of the median σ), the paper's two scalars, or (0, 1)."""
    if scaling == SCALING_SCALAR:
        return scalar_normalization(train_embeddings)
    if scaling == SCALING_NONE:
        return 0.0, 1.0
    if scaling != SCALING_PER_DIMENSION:
        raise ValueError(f"input scaling must be one of {SCALINGS}, got {scaling!r}")
    x = np.asarray(train_embeddings, dtype=np.float64)
    mu = x.mean(axis=0)
    sigma = x.std(axis=0, ddof=1) if len(x) > 1 else np.ones(x.shape[1])
    sigma = np.where(np.isfinite(sigma), sigma, 0.0)
    floor = STD_FLOOR_FRACTION * float(np.median(sigma))
    return mu.astype(np.float32), np.maximum(sigma, floor if floor > 0 else 1.0).astype(np.float32)


def apply_normalization(x: np.ndarray, normalization: Normalization) -> np.ndarray:
    """(x − μ)/σ in NumPy (the logistic reference's input), float32 like the adaptor's."""
    mu, sigma = normalization
    return (np.asarray(x, dtype=np.float32) - mu) / sigma


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


def fold_normalization(params: dict[str, np.ndarray], normalization: Normalization
                       ) -> tuple[dict[str, np.ndarray], tuple[float, float]]:
    """The same adaptor with its input scaling folded into g: G' = G diag(1/σ), g_b' = g_b − G' μ,
    and (μ, σ) = (0, 1). For formats that hold only the paper's two scalars (the author's
    ``.sdmkitmodel``); equal to the unfolded adaptor up to float32 rounding, not bit for bit."""
    mu, sigma = (np.broadcast_to(np.asarray(v, dtype=np.float64), params["g.weight"].shape[1:]) for v in normalization)
    weight = params["g.weight"].astype(np.float64) / sigma[None, :]
    bias = params["g.bias"].astype(np.float64) - weight @ mu
    return {**params, "g.weight": weight.astype(np.float32), "g.bias": bias.astype(np.float32)}, (0.0, 1.0)
