"""Exact support index over exemplar vectors h' (docs/method.md § 3): q (Eq. 5) and d_nearest.

Distances are plain L2 everywhere (never squared), in the stored eCDFs and at query time.

q without a sort. Eq. 5's q is the length of the longest prefix of the distance-sorted neighbour
list in which every neighbour is "good" for the query (correctly predicted and predicted as the
query's ŷ). That prefix ends at the nearest "bad" neighbour, so

    q = #{ j good : dist_j < min_{j' bad} dist_j' }        (capped at k)

Ties at exactly the first bad distance are not counted. The cap k = the largest class count of the
support set, as in the reference (``--use_training_set_max_label_size_as_max_q``).

Exact, whatever BLAS or device. A fast float32 pass computes ‖b‖² − 2a·b on mean-centred vectors
(the row constant ‖a‖² changes no comparison). Its error is bounded by
``tol = REL·(‖a‖² + max‖b‖²)`` with ``REL = (D + 4)·2⁻²²`` — four times the worst-case float32 dot-product
bound γ_D = D·u (u = 2⁻²⁴), for any summation order. Only the support points whose fast value lies
within 2·tol of a decision boundary (the first bad distance, the nearest distance, the k-th
distance) are re-checked in float64 by direct difference Σ(a − b)² — the same formula, the same
summation, for every backend — so a point's distance to itself is exactly 0 and q, d_nearest and
the neighbour ranks equal a float64 computation. On a GPU, MLX runs float32 matmuls as TF32 unless
``MLX_ENABLE_TF32=0``; the cross term is then computed as three TF32 products of split operands
(split_tf32), which keeps the error near float32's and the band narrow.
Points outside the band are on the same side of
the boundary in both computations, so they need no re-check.

Self-match exclusion (training points querying their own support set) is by index, not by
dropping rank 0, so duplicate exemplars are handled correctly.

Backends: "auto" (default: "mlx" on a GPU, "numpy" on a CPU, chosen by ``scripts/bench/bench_knn.py``:
on our 2-core CPU the NumPy pass is 2.6× faster than MLX's CPU matmul), "mlx", "numpy" and
"faiss" (``IndexFlatL2`` over k neighbours then the prefix scan, like the reference; rows whose
boundary band leaves the returned list fall back to the exhaustive pass). All give identical results.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np

from mlx_sdm.errors import MissingDependencyError

BACKENDS = ("auto", "mlx", "numpy", "faiss")
#: Elements of one [queries, support] distance block: 2^24 (64 MiB float32) fits CPU caches and
#: memory; a GPU wants big blocks (2^24 costs 3.7× against 2^28 at 1k × 1M × 1000-d on an H100).
CPU_BLOCK_ELEMENTS = 1 << 24
GPU_BLOCK_ELEMENTS = 1 << 28
DEFAULT_BLOCK_ELEMENTS = CPU_BLOCK_ELEMENTS
#: Elements of one float64 block of the exact re-check (1 MiB): small enough to stay in cache.
EXACT_BLOCK_ELEMENTS = 1 << 17
#: Unit roundoff of float32 (round to nearest).
FLOAT32_UNIT_ROUNDOFF = 2.0 ** -24
#: Bound (with margin) on the 3×TF32 relative error in 2a·b, see fast_pass_relative_error.
TF32_SPLIT_BOUND = 2.0 ** -18


def faiss_available() -> bool:
    return importlib.util.find_spec("faiss") is not None


def on_gpu() -> bool:
    return mx.default_device().type == mx.DeviceType.gpu


def resolve_backend(backend: str) -> str:
    """"auto" → the fastest exhaustive backend for the default device (see module docstring)."""
    if backend == "auto":
        return "mlx" if on_gpu() else "numpy"
    return backend


def default_block_elements(backend: str) -> int:
    return GPU_BLOCK_ELEMENTS if backend == "mlx" and on_gpu() else CPU_BLOCK_ELEMENTS


def tf32_enabled() -> bool:
    """MLX runs float32 matmuls as TF32 on supported GPUs unless ``MLX_ENABLE_TF32=0``."""
    return os.environ.get("MLX_ENABLE_TF32", "1") != "0"


def split_tf32(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x = hi + lo with hi exactly representable in TF32 (10 mantissa bits, round to nearest) and lo
    the float32 remainder (|lo| ≤ 2⁻¹¹|x|, exact)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    hi = ((x.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return hi, x - hi


def use_split_tf32(backend: str) -> bool:
    return backend == "mlx" and on_gpu() and tf32_enabled()


def fast_pass_relative_error(backend: str, dim: int) -> float:
    """REL of the module docstring. On a GPU with TF32 the cross term is computed as
    a_hi·b_hi + a_hi·b_lo + a_lo·b_hi ("3×TF32", split_tf32): a_hi·b_hi is exact per product, the
    two corrections lose ≤ 2⁻²¹ each (TF32 rounding of lo, truncating hardware included) and the
    dropped a_lo·b_lo ≤ 2⁻²², so |err(2a·b)| ≤ 2.5·2⁻²¹(‖a‖² + ‖b‖²); we allow 2⁻¹⁸ plus three
    float32 accumulation bounds."""
    rel = (dim + 4) * 4.0 * FLOAT32_UNIT_ROUNDOFF
    if use_split_tf32(backend):
        rel = 3 * rel + TF32_SPLIT_BOUND
    return rel


def exact_sq_distances(queries: np.ndarray, support: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Σ (a − b)² in float64 for the pairs (queries[rows], support[cols]) by direct difference.

    Differences and squares of float32 inputs are exact in float64; the row sum is NumPy's
    pairwise summation over the contiguous last axis, the same for every caller and backend."""
    out = np.empty(len(rows), dtype=np.float64)
    step = max(1, EXACT_BLOCK_ELEMENTS // max(1, support.shape[1]))
    for s in range(0, len(rows), step):
        diff = queries[rows[s:s + step]].astype(np.float64)
        diff -= support[cols[s:s + step]]  # in place: one float64 buffer per block, no temporaries
        np.square(diff, out=diff)
        out[s:s + step] = diff.sum(axis=1)
    return out


@dataclass
class QDResult:
    q: np.ndarray  # int64 [B], Eq. 5
    d_nearest: np.ndarray  # float64 [B], L2 to the nearest support point (self excluded when asked)


@dataclass
class _Band:
    """One block's fast pass: per row the approximate first-bad and nearest values, the count of
    good points surely below the first bad one, and the candidate (row, col) pairs to re-check."""

    first_bad: np.ndarray
    sure_count: np.ndarray
    rows: np.ndarray
    cols: np.ndarray


class SupportIndex:
    """Support exemplars h'(D_tr) with their labels y and current predictions ŷ."""

    def __init__(self, exemplars: np.ndarray, labels: np.ndarray, predictions: np.ndarray, num_classes: int,
                 backend: str = "auto", block_elements: int | None = None):
        if backend not in BACKENDS:
            raise ValueError(f"knn backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "faiss" and not faiss_available():
            raise MissingDependencyError("the faiss kNN backend needs faiss-cpu: pip install faiss-cpu")
        self.backend = resolve_backend(backend)
        self.num_classes = int(num_classes)
        self.block_elements = int(block_elements or default_block_elements(self.backend))
        self.exemplars = np.ascontiguousarray(exemplars, dtype=np.float32)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.predictions = np.asarray(predictions, dtype=np.int64)
        self._rebuild()

    # ------------------------------------------------------------------------------------------
    def _rebuild(self) -> None:
        correct = self.predictions == self.labels
        # good[c, j]: support point j can extend the q prefix of a query predicted as class c.
        self._good_np = np.stack([correct & (self.predictions == c) for c in range(self.num_classes)])
        dim = self.exemplars.shape[1] if self.exemplars.ndim == 2 else 0
        self._rel = fast_pass_relative_error(self.backend, dim)
        # centring shrinks the norms, hence the float32 error bound; it changes no distance
        self._centre = self.exemplars.mean(axis=0, dtype=np.float64).astype(np.float32) if len(self.exemplars) \
            else np.zeros(dim, np.float32)
        self._centred = self.exemplars - self._centre
        self._sq_np = np.einsum("ij,ij->i", self._centred, self._centred)
        self._max_sq = float(self._sq_np.max()) if len(self._sq_np) else 0.0
        #: the MLX copies of the support set: ((centred, its tf32 low part or None), |x|², good per class)
        self._mx: tuple[tuple[mx.array, mx.array | None], mx.array, mx.array] | None = None
        self._faiss: Any = None  # a faiss IndexFlatL2 (faiss ships no type stubs)
        if self.backend == "mlx":
            if use_split_tf32(self.backend):
                hi, lo = split_tf32(self._centred)
                self._mx = ((mx.array(hi), mx.array(lo)), mx.array(self._sq_np), mx.array(self._good_np))
            else:
                self._mx = ((mx.array(self._centred), None), mx.array(self._sq_np), mx.array(self._good_np))
        elif self.backend == "faiss":
            import faiss

            self._faiss = faiss.IndexFlatL2(dim)
            if len(self.exemplars):
                self._faiss.add(self._centred)

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

    def _tolerance(self, centred_queries: np.ndarray) -> np.ndarray:
        """Bound on |fast − exact| squared distance for each query (module docstring)."""
        return self._rel * (np.einsum("ij,ij->i", centred_queries, centred_queries).astype(np.float64) + self._max_sq)

    # ------------------------------------------------------------------------------------------
    def q_and_nearest(self, queries: np.ndarray, query_predictions: np.ndarray,
                      exclude: np.ndarray | None = None) -> QDResult:
        """q (Eq. 5) and d_nearest for each query; ``exclude[i]`` = support index to drop for query
        i (self-match exclusion), or −1 for none."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        query_predictions = np.asarray(query_predictions, dtype=np.int64)
        n = len(queries)
        exclude = np.full(n, -1, dtype=np.int64) if exclude is None else np.asarray(exclude, dtype=np.int64)
        if len(self.labels) == 0:
            return QDResult(np.zeros(n, np.int64), np.full(n, np.inf))
        centred = queries - self._centre
        tol = self._tolerance(centred)
        q_out = np.zeros(n, dtype=np.int64)
        d_out = np.zeros(n, dtype=np.float64)
        rows = None  # every row, taken in slices (views, no copies)
        if self.backend == "faiss":
            rows = self._qd_faiss(queries, centred, tol, query_predictions, exclude, q_out, d_out)
        count = n if rows is None else len(rows)
        step = self._chunk(max(1, count))
        for s in range(0, count, step):
            r = slice(s, s + step) if rows is None else rows[s:s + step]
            q_out[r], d_out[r] = self._qd_exhaustive(queries[r], centred[r], tol[r], query_predictions[r], exclude[r])
        return QDResult(np.minimum(q_out, self.k), d_out)

    def _qd_exhaustive(self, qb, cb, tol, pb, xb):
        if self.backend == "mlx":
            band_q, band_n = self._bands_mlx(cb, tol, pb, xb)
        else:
            band_q, band_n = self._bands_numpy(cb, tol, pb, xb)
        return self._resolve(qb, pb, band_q, band_n)

    def _fast_d2_numpy(self, cb, xb):
        d2 = self._sq_np[None, :] - 2.0 * (cb @ self._centred.T)  # ‖b‖² − 2a·b (row constant ‖a‖² dropped)
        rows = np.nonzero(xb >= 0)[0]
        d2[rows, xb[rows]] = np.inf
        return d2

    def _bands_numpy(self, cb, tol, pb, xb):
        d2 = self._fast_d2_numpy(cb, xb)
        good = self._good_np[pb]
        t2 = (2.0 * tol)[:, None]
        first_bad = np.where(good, np.inf, d2).min(axis=1, keepdims=True)
        nearest = d2.min(axis=1, keepdims=True)
        sure = np.count_nonzero(good & (d2 < first_bad - t2), axis=1)
        finite = np.isfinite(d2)
        # bad points that may be the exact first bad; good points that may sit on either side of it
        cand_q = finite & (d2 <= first_bad + t2) & (~good | (d2 >= first_bad - t2))
        cand_n = finite & (d2 <= nearest + t2)
        r_q, c_q = np.nonzero(cand_q)
        r_n, c_n = np.nonzero(cand_n)
        return _Band(first_bad[:, 0], sure, r_q, c_q), (r_n, c_n)

    def _bands_mlx(self, cb, tol, pb, xb):
        (support, support_lo), sq, good_all = self._mx
        if support_lo is None:
            cross = mx.array(cb) @ support.T
        else:  # 3×TF32: float32 accuracy from TF32 tensor cores (fast_pass_relative_error)
            a_hi, a_lo = split_tf32(cb)
            a_hi, a_lo = mx.array(a_hi), mx.array(a_lo)
            cross = a_hi @ support.T + (a_hi @ support_lo.T + a_lo @ support.T)
        d2 = sq[None, :] - 2.0 * cross
        if (xb >= 0).any():
            cols = mx.arange(support.shape[0])
            d2 = mx.where(cols[None, :] == mx.array(xb)[:, None], mx.inf, d2)
        good = good_all[mx.array(pb)]
        t2 = mx.array((2.0 * tol).astype(np.float32))[:, None]
        first_bad = mx.min(mx.where(good, mx.inf, d2), axis=1, keepdims=True)
        nearest = mx.min(d2, axis=1, keepdims=True)
        sure = mx.sum(good & (d2 < first_bad - t2), axis=1)
        finite = d2 < mx.inf
        cand_q = finite & (d2 <= first_bad + t2) & (mx.logical_not(good) | (d2 >= first_bad - t2))
        cand_n = finite & (d2 <= nearest + t2)
        r_q, c_q = _mask_pairs_mlx(cand_q)
        r_n, c_n = _mask_pairs_mlx(cand_n)
        mx.eval(first_bad, sure)
        fb = np.array(first_bad[:, 0]).astype(np.float64)
        return _Band(fb, np.array(sure).astype(np.int64), r_q, c_q), (r_n, c_n)

    def _resolve(self, qb, pb, band: _Band, near_pairs):
        """Exact q and d_nearest from the candidate pairs of one block (float64, direct difference)."""
        n = len(qb)
        r_q, c_q = band.rows, band.cols
        e_q = exact_sq_distances(qb, self.exemplars, r_q, c_q)
        good = self._good_np[pb[r_q], c_q]
        first_bad = np.full(n, np.inf)
        np.minimum.at(first_bad, r_q[~good], e_q[~good])
        q = band.sure_count.copy()
        np.add.at(q, r_q[good], (e_q[good] < first_bad[r_q[good]]).astype(np.int64))
        r_n, c_n = near_pairs
        e_n = exact_sq_distances(qb, self.exemplars, r_n, c_n)
        nearest = np.full(n, np.inf)
        np.minimum.at(nearest, r_n, e_n)
        return q, np.sqrt(nearest)

    def _qd_faiss(self, queries, centred, tol, query_predictions, exclude, q_out, d_out) -> np.ndarray:
        """Fills rows whose boundary band lies inside faiss's k+1 list; returns the other rows (for
        the exhaustive pass)."""
        k = self.k
        kk = min(len(self.labels), k + 1)
        d2, nbr = self._faiss.search(centred, kk)
        d2 = d2.astype(np.float64) - np.einsum("ij,ij->i", centred, centred)[:, None]  # same frame as the others
        valid = (nbr >= 0) & (nbr != exclude[:, None])
        d2 = np.where(valid, d2, np.inf)
        good = self._good_np[query_predictions[:, None], np.maximum(nbr, 0)] & valid
        t2 = (2.0 * tol)[:, None]
        first_bad = np.where(good, np.inf, d2).min(axis=1)
        nearest = d2.min(axis=1)
        last = np.where(valid, d2, -np.inf).max(axis=1)
        complete = kk == len(self.labels)
        # a row is decided inside the list when every point beyond it is surely farther than the band
        surely_k = np.count_nonzero(good & (d2 < (last - 2 * tol)[:, None]), axis=1) >= k  # q = k whatever lies beyond
        inside = complete | ((nearest + 2 * tol < last) & ((first_bad + 2 * tol < last) | (~np.isfinite(first_bad) & surely_k)))
        rows = np.nonzero(inside)[0]
        if len(rows):
            sub = d2[rows]
            fb = first_bad[rows][:, None]
            g = good[rows]
            sure = np.count_nonzero(g & (sub < fb - t2[rows]), axis=1)
            fin = np.isfinite(sub)
            r_q, j_q = np.nonzero(fin & (sub <= fb + t2[rows]) & (~g | (sub >= fb - t2[rows])))
            r_n, j_n = np.nonzero(fin & (sub <= nearest[rows][:, None] + t2[rows]))
            band = _Band(fb[:, 0], sure, r_q, nbr[rows][r_q, j_q])
            q_out[rows], d_out[rows] = self._resolve(queries[rows], query_predictions[rows], band,
                                                     (r_n, nbr[rows][r_n, j_n]))
        return np.nonzero(~inside)[0]

    # ------------------------------------------------------------------------------------------
    def nearest(self, queries: np.ndarray, k: int, exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k nearest support points (indices [B, k], exact L2 distances [B, k]), nearest first
        (equal distances: lower index first)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        n = len(queries)
        k = int(min(k, len(self.labels)))
        if k <= 0:
            return np.zeros((n, 0), np.int64), np.zeros((n, 0), np.float64)
        exclude = np.full(n, -1, dtype=np.int64) if exclude is None else np.asarray(exclude, dtype=np.int64)
        centred = queries - self._centre
        tol = self._tolerance(centred)
        idx_out = np.zeros((n, k), np.int64)
        dist_out = np.zeros((n, k), np.float64)
        step = self._chunk(n)
        for s in range(0, n, step):
            e = min(n, s + step)
            d2 = self._fast_d2_numpy(centred[s:e], exclude[s:e])
            kth = np.partition(d2, k - 1, axis=1)[:, k - 1:k]
            rows, cols = np.nonzero(np.isfinite(d2) & (d2 <= kth + 2.0 * tol[s:e, None]))
            exact = exact_sq_distances(queries[s:e], self.exemplars, rows, cols)
            order = np.lexsort((cols, exact, rows))  # by row, then exact distance, then index
            rows, cols, exact = rows[order], cols[order], exact[order]
            starts = np.searchsorted(rows, np.arange(e - s))
            take = (starts[:, None] + np.arange(k)[None, :])
            idx_out[s:e] = cols[take]
            dist_out[s:e] = np.sqrt(exact[take])
        return idx_out, dist_out


def _mask_pairs_mlx(mask: mx.array) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of the True entries of a sparse [B, N] MLX mask without copying the block back:
    per row the largest count m, then an argpartition that brings the True entries to the front."""
    counts = mx.sum(mask, axis=1)
    m = int(mx.max(counts).item())  # type: ignore[arg-type]  # .item() of an integer sum is an int
    if m == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if m >= mask.shape[1]:
        cols = mx.broadcast_to(mx.arange(mask.shape[1])[None, :], mask.shape)
    else:
        cols = mx.argpartition(mx.logical_not(mask).astype(mx.uint8), m - 1, axis=1)[:, :m]
    keep = mx.take_along_axis(mask, cols, axis=1)
    mx.eval(cols, keep)
    cols_np, keep_np = np.array(cols).astype(np.int64), np.array(keep)
    rows, pos = np.nonzero(keep_np)
    return rows.astype(np.int64), cols_np[rows, pos]
