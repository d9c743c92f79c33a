"""Empirical CDFs with the boundary conventions of docs/method.md § 7 (Listing 4, A.5).

Every eCDF is a class-keyed, ascending ``float`` array S_c of length n_c, and every lookup starts
from ``idx = searchsorted(S_c, x, side="left")`` (the number of stored values strictly below x).
These functions are bit-exact with the reference; every downstream estimate depends on them.
"""

from __future__ import annotations

import numpy as np


def _idx(sorted_values: np.ndarray, x: np.ndarray | float) -> np.ndarray:
    return np.searchsorted(sorted_values, x, side="left")


def reverse(sorted_values: np.ndarray, x: np.ndarray | float) -> np.ndarray:
    """Distance quantile (Eq. 6): 1 − idx/n, the fraction of stored values ≥ x; 0.0 when n = 0."""
    n = len(sorted_values)
    x = np.asarray(x, dtype=np.float64)
    if n == 0:
        return np.zeros_like(x)
    return 1.0 - _idx(sorted_values, x) / n


def forward_saturating(sorted_values: np.ndarray, x: np.ndarray | float) -> np.ndarray:
    """sdm-output quantile v (Eq. 9): 1.0 when x ≥ max S, else idx/n; 0.0 when n = 0 (A.5 item 2)."""
    n = len(sorted_values)
    x = np.asarray(x, dtype=np.float64)
    if n == 0:
        return np.zeros_like(x)
    out = _idx(sorted_values, x) / n
    return np.where(x >= sorted_values[-1], 1.0, out)


def forward(sorted_values: np.ndarray, x: np.ndarray | float) -> np.ndarray:
    """Plain forward eCDF (Eq. 12): idx/n; 0.0 when n = 0."""
    n = len(sorted_values)
    x = np.asarray(x, dtype=np.float64)
    if n == 0:
        return np.zeros_like(x)
    return _idx(sorted_values, x) / n


def count_below_capped(sorted_values: np.ndarray, x: np.ndarray | float) -> np.ndarray:
    """Effective sample size n̂ of Eq. 12 as the reference computes it: the count of stored values
    strictly below x, capped at n − 1 (0 when n = 0)."""
    n = len(sorted_values)
    x = np.asarray(x, dtype=np.float64)
    if n == 0:
        return np.zeros(x.shape, dtype=np.int64)
    return np.minimum(_idx(sorted_values, x), n - 1).astype(np.int64)


def quantile(sorted_values: np.ndarray, p: float) -> float:
    """Threshold quantile (Alg. 3): S[min(⌊p·n⌋, n − 1)], clipped below at 0; 0.0 when n = 0."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    return max(float(sorted_values[min(int(np.floor(p * n)), n - 1)]), 0.0)
