"""Similarity q (Eq. 5) from a neighbour list and the Distance quantile d (Eq. 6)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mlx_sdm.calibration import ecdf


def q_from_neighbours(query_prediction: int, neighbour_labels: Sequence[int], neighbour_predictions: Sequence[int],
                      neighbour_indices: Sequence[int] | None = None, self_index: int | None = None,
                      k: int | None = None) -> int:
    """Eq. 5 on a distance-sorted neighbour list: the length of the longest prefix in which every
    neighbour is correctly predicted and shares the query's prediction. With ``self_index`` the
    query's own entry (matched by index) is skipped (self-match exclusion for D_tr); ``k`` caps q."""
    q = 0
    for pos, (y, yhat) in enumerate(zip(neighbour_labels, neighbour_predictions)):
        if self_index is not None and neighbour_indices is not None and neighbour_indices[pos] == self_index:
            continue
        if yhat == query_prediction and yhat == y:
            q += 1
            if k is not None and q >= k:
                break
        else:
            break
    return q


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
