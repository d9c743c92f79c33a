"""Alg. 3: the high-probability region threshold q̃_min and the class thresholds ψ, plus the
per-(ŷ, ⌊q̃⌋) medians that feed Eq. 27 (docs/method.md § 11)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlx_sdm.calibration import ecdf
from mlx_sdm.calibration.constants import ALPHA_PRIME, Q_BINS


@dataclass
class ThresholdResult:
    q_tilde_min: float  # +inf when Alg. 3 found no threshold (everything rejected)
    psi: np.ndarray  # [C]
    succeeded: bool


def find_threshold(q_tilde: np.ndarray, centroid: np.ndarray, labels: np.ndarray, predictions: np.ndarray,
                   num_classes: int, alpha_prime: float = ALPHA_PRIME) -> ThresholdResult:
    """Alg. 3 over the calibration set. ``q_tilde`` already has q̃ := 0 for rescaler flips;
    ``centroid`` is o [N, C]; the scan is over sorted unique q̃ of the kept points, ascending."""
    q_tilde = np.asarray(q_tilde, dtype=np.float64)
    labels = np.asarray(labels)
    keep = (np.floor(q_tilde) > 0) & (np.argmax(centroid, axis=1) == np.asarray(predictions))
    kq = q_tilde[keep]
    ky = labels[keep]
    k_true = np.asarray(centroid)[keep, ky] if keep.any() else np.zeros(0)
    for q_prime in np.unique(kq):
        psi = np.zeros(num_classes)
        for c in range(num_classes):
            # ψ_c = quantile over o_i[y_i] of class-c kept points with q̃_i ≥ q' (§ 7)
            values = np.sort(k_true[(ky == c) & (kq >= q_prime)])
            psi[c] = ecdf.quantile(values, 1.0 - alpha_prime)
        if np.all(psi >= alpha_prime):
            return ThresholdResult(float(q_prime), psi, True)
    return ThresholdResult(float("inf"), np.zeros(num_classes), False)


def bucket_medians(q_tilde: np.ndarray, centroid: np.ndarray, predictions: np.ndarray,
                   num_classes: int) -> dict[tuple[int, int], float]:
    """Median of o_{i,ŷ_i} per bucket (ŷ_i, ⌊q̃_i⌋) (stratified by the prediction, footnote 10);
    OOD points (⌊q̃⌋ ≤ 0 or a rescaler flip) go to bucket (ŷ, 0). Bins are 0..Q_BINS−1."""
    q_tilde = np.asarray(q_tilde, dtype=np.float64)
    predictions = np.asarray(predictions)
    flipped = np.argmax(centroid, axis=1) != predictions
    bins = np.clip(np.floor(q_tilde), 0, Q_BINS - 1).astype(np.int64)
    bins[flipped | (bins <= 0)] = 0
    at_pred = np.asarray(centroid)[np.arange(len(predictions)), predictions]
    out: dict[tuple[int, int], float] = {}
    for c in range(num_classes):
        for b in range(Q_BINS):
            sel = (predictions == c) & (bins == b)
            if sel.any():
                out[(c, b)] = float(np.median(at_pred[sel]))
    return out
