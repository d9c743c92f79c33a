"""Robust offsets over the J iterations: Cauchy quantile with MAD scale (Eqs. 22–27)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from mlx_sdm.calibration.constants import ALPHA_PRIME, Q_BINS, cauchy_kappa


def mad(values: Sequence[float]) -> float:
    """Raw median absolute deviation median_j |x_j − median(x)| (no 1.4826 factor)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return 0.0
    with np.errstate(invalid="ignore"):
        return float(np.median(np.abs(x - np.median(x))))


def cauchy_quantile(location: float, scale: float, alpha_prime: float = ALPHA_PRIME) -> float:
    """Eq. 25: F⁻¹(α′; ν, γ) = ν + γ tan(π(α′ − ½))."""
    return location + scale * cauchy_kappa(alpha_prime)


def robust_q_tilde_min(q_tilde_min_star: float, q_tilde_mins: Sequence[float], alpha_prime: float = ALPHA_PRIME) -> float:
    """Eq. 26: q̃^γ_min = q̃*_min + κ · MAD(q̃_min,1..J). A failed iteration contributes +∞; a
    non-finite MAD or result falls back to q̃*_min (reference edge handling)."""
    scale = mad(q_tilde_mins)
    if not math.isfinite(scale):
        return q_tilde_min_star
    value = cauchy_quantile(q_tilde_min_star, scale, alpha_prime)
    return value if math.isfinite(value) else q_tilde_min_star


def output_offsets(per_iteration_medians: Sequence[dict[tuple[int, int], float]], num_classes: int,
                   alpha_prime: float = ALPHA_PRIME) -> np.ndarray:
    """Eq. 27: m^ŷ_b = 0 + κ · MAD_j(median of o_ŷ in bucket (ŷ, b) of iteration j), over the
    iterations where the bucket was non-empty; 0 for a bucket never observed. Returns [C, Q_BINS]."""
    m = np.zeros((num_classes, Q_BINS))
    for c in range(num_classes):
        for b in range(Q_BINS):
            values = [it[(c, b)] for it in per_iteration_medians if (c, b) in it]
            if values:
                m[c, b] = cauchy_quantile(0.0, mad(values), alpha_prime)
    return m
