"""Effective sample size, DKW band and the lower/centroid/upper vectors (Eqs. 12–20)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mlx_sdm.calibration import ecdf
from mlx_sdm.calibration.constants import ALPHA_PRIME, Q_RESCALE_OFFSET


def effective_sample_sizes(q_tilde: np.ndarray, calibration_q_tilde: Sequence[np.ndarray]) -> np.ndarray:
    """Eq. 12, reference form: n̂_c = #{class-c calibration q̃ strictly below q̃}, capped at N_c − 1.

    Returns int64 [B, C]."""
    q_tilde = np.atleast_1d(np.asarray(q_tilde, dtype=np.float64))
    return np.stack([ecdf.count_below_capped(s, q_tilde) for s in calibration_q_tilde], axis=1)


def dkw_epsilon(n_hat: np.ndarray | int, alpha_prime: float = ALPHA_PRIME) -> np.ndarray:
    """Eq. 13 (Massart's constant): ε = sqrt(ln(2/(1−α′)) / (2 n̂)); ε = 1 when n̂ = 0."""
    n = np.asarray(n_hat, dtype=np.float64)
    with np.errstate(divide="ignore"):
        eps = np.sqrt(np.log(2.0 / (1.0 - alpha_prime)) / (2.0 * n))
    return np.where(n > 0, eps, 1.0)


def shifted_vectors(v: np.ndarray, predictions: np.ndarray, epsilon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eqs. 14–15: v_lower moves the predicted coordinate down by ε and the others up; v_upper the
    reverse; both clipped to [0, 1]. Shapes [B, C]."""
    v = np.asarray(v, dtype=np.float64)
    sign = np.ones_like(v)
    sign[np.arange(len(v)), predictions] = -1.0
    lower = np.clip(v + sign * epsilon, 0.0, 1.0)
    upper = np.clip(v - sign * epsilon, 0.0, 1.0)
    return lower, upper


def rescaled_output(v: np.ndarray, q_tilde: np.ndarray, rescaler_weight: np.ndarray) -> np.ndarray:
    """Eqs. 11 / 18–20: softmax(ln(2 + q̃) · W''ᵀ v), row-wise. ``rescaler_weight`` is W'' [C, C]."""
    v_prime = np.asarray(v, dtype=np.float64) @ np.asarray(rescaler_weight, dtype=np.float64)
    scaled = np.log(Q_RESCALE_OFFSET + np.asarray(q_tilde, dtype=np.float64))[:, None] * v_prime
    scaled -= scaled.max(axis=1, keepdims=True)
    e = np.exp(scaled)
    return e / e.sum(axis=1, keepdims=True)
