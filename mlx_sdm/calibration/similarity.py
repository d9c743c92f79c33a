"""The Distance quantile d (Eq. 6) and the per-class distance eCDFs it reads. The Similarity q (Eq. 5) is
computed by the support index (:meth:`mlx_sdm.calibration.knn.SupportIndex.q_and_nearest`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mlx_sdm.calibration import ecdf


def class_distance_cdfs(d_nearest: np.ndarray, labels: np.ndarray, q: np.ndarray, num_classes: int) -> list[np.ndarray]:
    """Per true class c: the ascending d_nearest of points with y = c and q > 0 (docs/method.md § 4)."""
    keep = np.asarray(q) > 0
    return [np.sort(np.asarray(d_nearest, dtype=np.float64)[keep & (np.asarray(labels) == c)]) for c in range(num_classes)]


def distance_quantile(d_nearest: np.ndarray, cdfs: Sequence[np.ndarray]) -> np.ndarray:
    """Eq. 6: d = min_c [1 − eCDF_c(d_nearest)] over ALL classes, via the "reverse" eCDF (§ 7).

    A class without stored distances gives 0, hence d = 0 (maximally uncertain), as in the code."""
    d_nearest = np.asarray(d_nearest, dtype=np.float64)
    if len(cdfs) == 0:
        return np.zeros_like(d_nearest)
    return np.min(np.stack([ecdf.reverse(c, d_nearest) for c in cdfs]), axis=0)
