"""Exact support index over exemplar vectors h' (§ 3): kNN in MLX by chunked matmul.

Distances are plain L2 everywhere (never squared), in the stored eCDFs and at query time.

q without a sort. Eq. 5's q is the length of the longest prefix of the distance-sorted neighbour
list in which every neighbour is "good" for the query (correctly predicted and predicted as the
query's ŷ). That prefix ends at the nearest "bad" neighbour, so

    q = #{ j good : dist_j < min_{j' bad} dist_j' }        (capped at k)

which is the early exit of the sorted scan computed as one masked min and one masked count per
chunk of queries: O(N) per query instead of O(N log N) or a top-k heap. Ties at exactly the first
bad distance are not counted (the sorted order among equal distances is backend-defined anyway).
The cap k = the largest class count of the support set, as in the reference
(``--use_training_set_max_label_size_as_max_q``).

Self-match exclusion (training points querying their own support set) is by index, not by
dropping rank 0, so duplicate exemplars are handled correctly.

Backends: "mlx" (default), "numpy" (same algorithm, for comparison) and "faiss" (``IndexFlatL2``
search with k neighbours then a prefix scan, like the reference; needs ``faiss-cpu``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from mlx_sdm.errors import MissingDependencyError

BACKENDS = ("mlx", "numpy", "faiss")
#: Elements of one [queries, support] distance block (float32: 64 MiB).
DEFAULT_BLOCK_ELEMENTS = 1 << 24


def faiss_available() -> bool:
    return importlib.util.find_spec("faiss") is not None


@dataclass
class QDResult:
    q: np.ndarray  # int64 [B], Eq. 5
    d_nearest: np.ndarray  # float64 [B], L2 to the nearest support point (self excluded when asked)


class SupportIndex:
    """Support exemplars h'(D_tr) with their labels y and current predictions ŷ."""

    def __init__(self, exemplars: np.ndarray, labels: np.ndarray, predictions: np.ndarray, num_classes: int,
                 backend: str = "mlx", block_elements: int = DEFAULT_BLOCK_ELEMENTS):
        if backend not in BACKENDS:
            raise ValueError(f"knn backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "faiss" and not faiss_available():
            raise MissingDependencyError("the faiss kNN backend needs faiss-cpu: pip install faiss-cpu")
        self.backend = backend
        self.num_classes = int(num_classes)
        self.block_elements = int(block_elements)
        self.exemplars = np.ascontiguousarray(exemplars, dtype=np.float32)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.predictions = np.asarray(predictions, dtype=np.int64)
        self._rebuild()

    # ------------------------------------------------------------------------------------------
    def _rebuild(self) -> None:
        correct = self.predictions == self.labels
        # good[c, j]: support point j can extend the q prefix of a query predicted as class c.
        self._good_np = np.stack([correct & (self.predictions == c) for c in range(self.num_classes)])
        self._sq_np = np.einsum("ij,ij->i", self.exemplars, self.exemplars)
        self._mx = None
        self._faiss = None
        if self.backend == "mlx":
            self._mx = (mx.array(self.exemplars), mx.array(self._sq_np), mx.array(self._good_np))
        elif self.backend == "faiss":
            import faiss

            self._faiss = faiss.IndexFlatL2(self.exemplars.shape[1])
            if len(self.exemplars):
                self._faiss.add(self.exemplars)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def k(self) -> int:
        """The q cap: the largest class count of the support set (the reference's k)."""
        if len(self.labels) == 0:
            return 0
        return int(np.bincount(self.labels, minlength=self.num_classes).max())

    def add(self, exemplars: np.ndarray, labels: np.ndarray, predictions: np.ndarray) -> None:
        self.exemplars = np.concatenate([self.exemplars, np.asarray(exemplars, dtype=np.float32)])
        self.labels = np.concatenate([self.labels, np.asarray(labels, dtype=np.int64)])
        self.predictions = np.concatenate([self.predictions, np.asarray(predictions, dtype=np.int64)])
        self._rebuild()

    def _chunk(self, n_queries: int) -> int:
        return max(1, min(n_queries, self.block_elements // max(1, len(self.labels))))

    # ------------------------------------------------------------------------------------------
    def q_and_nearest(self, queries: np.ndarray, query_predictions: np.ndarray,
                      exclude: np.ndarray | None = None) -> QDResult:
        """q (Eq. 5) and d_nearest for each query; ``exclude[i]`` = support index to drop for query
        i (self-match exclusion), or −1 for none."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        query_predictions = np.asarray(query_predictions, dtype=np.int64)
        n = len(queries)
        if exclude is None:
            exclude = np.full(n, -1, dtype=np.int64)
        if len(self.labels) == 0:
            return QDResult(np.zeros(n, np.int64), np.full(n, np.inf))
        if self.backend == "faiss":
            return self._qd_faiss(queries, query_predictions, exclude)
        q_out = np.zeros(n, dtype=np.int64)
        d_out = np.zeros(n, dtype=np.float64)
        step = self._chunk(n)
        fn = self._qd_block_mlx if self.backend == "mlx" else self._qd_block_numpy
        for s in range(0, n, step):
            e = min(n, s + step)
            q_out[s:e], d_out[s:e] = fn(queries[s:e], query_predictions[s:e], exclude[s:e])
        return QDResult(np.minimum(q_out, self.k), d_out)

    def _qd_block_mlx(self, qb, pb, xb):
        support, sq, good_all = self._mx
        a = mx.array(qb)
        # ||b||² − 2a·b: the per-query ||a||² does not change any comparison within a row, so it is
        # added back only to the nearest distance (two fewer passes over the [B, N] block)
        d2 = sq[None, :] - 2.0 * (a @ support.T)
        if (xb >= 0).any():
            cols = mx.arange(support.shape[0])
            d2 = mx.where(cols[None, :] == mx.array(xb)[:, None], mx.inf, d2)
        good = good_all[mx.array(pb)]
        first_bad = mx.min(mx.where(good, mx.inf, d2), axis=1, keepdims=True)
        q = mx.sum(good & (d2 < first_bad), axis=1)
        nearest = mx.sqrt(mx.maximum(mx.min(d2, axis=1) + mx.sum(a * a, axis=1), 0.0))
        mx.eval(q, nearest)
        return np.array(q).astype(np.int64), np.array(nearest).astype(np.float64)

    def _qd_block_numpy(self, qb, pb, xb):
        d2 = self._sq_np[None, :] - 2.0 * (qb @ self.exemplars.T)  # as in _qd_block_mlx
        rows = np.nonzero(xb >= 0)[0]
        d2[rows, xb[rows]] = np.inf
        good = self._good_np[pb]
        first_bad = np.where(good, np.inf, d2).min(axis=1, keepdims=True)
        q = np.count_nonzero(good & (d2 < first_bad), axis=1)
        nearest = np.sqrt(np.maximum(d2.min(axis=1) + np.einsum("ij,ij->i", qb, qb), 0.0))
        return q.astype(np.int64), nearest.astype(np.float64)

    def _qd_faiss(self, queries, query_predictions, exclude):
        k = self.k
        kk = min(len(self.labels), k + 1)
        d2, nbr = self._faiss.search(queries, kk)
        valid = (nbr >= 0) & (nbr != exclude[:, None])
        good = self._good_np[query_predictions[:, None], np.maximum(nbr, 0)] & valid
        bad = valid & ~good
        before_bad = np.cumsum(bad, axis=1) == 0
        q = np.minimum(np.count_nonzero(good & before_bad, axis=1), k)
        first_valid = np.argmax(valid, axis=1)
        nearest = np.sqrt(np.maximum(d2[np.arange(len(queries)), first_valid], 0.0)).astype(np.float64)
        nearest[~valid.any(axis=1)] = np.inf
        return QDResult(q.astype(np.int64), nearest)

    # ------------------------------------------------------------------------------------------
    def nearest(self, queries: np.ndarray, k: int, exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest support points (indices [B, k], L2 distances [B, k]), nearest first."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        n = len(queries)
        k = int(min(k, len(self.labels)))
        if k <= 0:
            return np.zeros((n, 0), np.int64), np.zeros((n, 0), np.float64)
        if exclude is None:
            exclude = np.full(n, -1, dtype=np.int64)
        idx_out = np.zeros((n, k), np.int64)
        dist_out = np.zeros((n, k), np.float64)
        step = self._chunk(n)
        for s in range(0, n, step):
            e = min(n, s + step)
            qb, xb = queries[s:e], exclude[s:e]
            d2 = np.einsum("ij,ij->i", qb, qb)[:, None] + self._sq_np[None, :] - 2.0 * (qb @ self.exemplars.T)
            np.maximum(d2, 0.0, out=d2)
            rows = np.nonzero(xb >= 0)[0]
            d2[rows, xb[rows]] = np.inf
            part = np.argpartition(d2, k - 1, axis=1)[:, :k] if k < d2.shape[1] else np.tile(np.arange(d2.shape[1]), (e - s, 1))
            pd = np.take_along_axis(d2, part, axis=1)
            order = np.argsort(pd, axis=1, kind="stable")
            idx_out[s:e] = np.take_along_axis(part, order, axis=1)
            dist_out[s:e] = np.sqrt(np.take_along_axis(pd, order, axis=1))
        return idx_out, dist_out
