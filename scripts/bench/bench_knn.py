#!/usr/bin/env python
"""Benchmark q (Eq. 5) and d (Eq. 6) for 1,000 queries against support sets of 1k, 10k and 50k
exemplars of dimension 1000 (not a test).

Paths compared, all in one run, all computing the same q and d:
  * project (auto): SupportIndex() with the default backend for this device (mlx on a GPU, numpy
    on a CPU) and the device's block size; the baseline of every ratio;
  * project (mlx) and project (numpy): each backend forced, with the fast float32 pass plus the
    exact float64 re-check near each decision boundary (no sort, no top-k), then Eq. 6;
  * project (mlx), GPU only: the CPU block size 2^24 against the GPU default 2^28;
  * torch (when installed): the same masked-count algorithm without the exact re-check;
  * faiss IndexFlatL2 with k = the largest class count (as the reference does) and with a small k,
    then the reference's prefix scan over the returned neighbours;
  * plain NumPy: matmul distances + full argsort + prefix scan.
Ratios are time(other) / time(project auto): > 1 means the default is faster. Needs neither
faiss nor torch; reports each when present. q is compared
with the project's (the small-k faiss path with the project's q capped at that k).

    .venv/bin/python scripts/bench/bench_knn.py [--sizes 1000 10000 50000] [--queries 1000] [--dim 1000]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import mlx_sdm  # noqa: F401  (BLAS preload before mlx)

import importlib.util

import mlx.core as mx

from mlx_sdm.calibration.knn import (CPU_BLOCK_ELEMENTS, SupportIndex, default_block_elements,
                                     faiss_available, on_gpu, resolve_backend)
from mlx_sdm.calibration.similarity import distance_quantile

CLASSES = 2
SMALL_K = 100


def make_data(n: int, queries: int, dim: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 1, (CLASSES * 4, dim)).astype(np.float32)
    cluster = rng.integers(0, len(centers), n)
    support = centers[cluster] + rng.normal(0, 1, (n, dim)).astype(np.float32)
    labels = cluster % CLASSES
    preds = np.where(rng.uniform(size=n) < 0.9, labels, 1 - labels)
    qc = rng.integers(0, len(centers), queries)
    q = centers[qc] + rng.normal(0, 1, (queries, dim)).astype(np.float32)
    qpred = qc % CLASSES
    cdfs = [np.sort(rng.uniform(30, 50, 500)) for _ in range(CLASSES)]
    return support, labels, preds, q, qpred, cdfs


def run_project(index: SupportIndex, q, qpred, cdfs):
    res = index.q_and_nearest(q, qpred)
    return res.q, distance_quantile(res.d_nearest, cdfs)


def run_faiss(faiss_index, k, good, q, qpred, cdfs):
    d2, nbr = faiss_index.search(q, k)
    g = good[qpred[:, None], nbr]
    qv = np.count_nonzero(g & (np.cumsum(~g, axis=1) == 0), axis=1)
    return qv, distance_quantile(np.sqrt(np.maximum(d2[:, 0], 0)), cdfs)


def run_numpy_sort(support, sq, good, k, q, qpred, cdfs, chunk=100):
    qs, ds = [], []
    for s in range(0, len(q), chunk):
        qb = q[s:s + chunk]
        d2 = np.einsum("ij,ij->i", qb, qb)[:, None] + sq[None, :] - 2.0 * (qb @ support.T)
        order = np.argsort(d2, axis=1)[:, :k]
        g = good[qpred[s:s + chunk, None], order]
        qs.append(np.count_nonzero(g & (np.cumsum(~g, axis=1) == 0), axis=1))
        ds.append(np.sqrt(np.maximum(np.take_along_axis(d2, order[:, :1], axis=1)[:, 0], 0)))
    return np.concatenate(qs), distance_quantile(np.concatenate(ds), cdfs)


def run_torch(support, good, q, qpred, block_elements):
    """The masked-count algorithm in torch (float32, no exact re-check), on CUDA when present."""
    import torch

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    s = torch.from_numpy(support).to(dev)
    sq = (s * s).sum(1)
    g_all = torch.from_numpy(good).to(dev)
    step = max(1, block_elements // len(support))
    qs, ds = [], []
    for i in range(0, len(q), step):
        a = torch.from_numpy(q[i:i + step]).to(dev)
        d2 = sq[None, :] - 2.0 * (a @ s.T)
        g = g_all[torch.from_numpy(qpred[i:i + step]).to(dev)]
        fb = torch.where(g, torch.inf, d2).min(1, keepdim=True).values
        qs.append((g & (d2 < fb)).sum(1))
        ds.append(torch.sqrt(torch.clamp(d2.min(1).values + (a * a).sum(1), min=0)))
    if dev == "cuda":
        torch.cuda.synchronize()
    return torch.cat(qs).cpu().numpy(), torch.cat(ds).cpu().numpy()


def timed(fn, repeats: int):
    fn()  # warm-up
    best = float("inf")
    out = None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 50000])
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--dim", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    from mlx_sdm import blas

    auto = resolve_backend("auto")
    print(f"device: {mx.default_device()}; BLAS: {blas.state().loaded_path or 'bundled reference BLAS'}; "
          f"default backend: {auto} (block {default_block_elements(auto)} elements); faiss: "
          f"{'yes' if faiss_available() else 'not installed'}; torch: "
          f"{'yes' if importlib.util.find_spec('torch') else 'not installed'}")
    print(f"{args.queries} queries, dim {args.dim}, {CLASSES} classes; best of {args.repeats}")
    header = f"{'support':>8} {'path':<40} {'seconds':>9} {'vs default':>10}"
    print(header)
    print("-" * len(header))
    for n in args.sizes:
        support, labels, preds, q, qpred, cdfs = make_data(n, args.queries, args.dim)
        index = SupportIndex(support, labels, preds, CLASSES)
        k_max = index.k
        rows = []
        t_ref, ref = timed(lambda: run_project(index, q, qpred, cdfs), args.repeats)
        rows.append((f"project (auto = {auto})", t_ref, ref))
        for backend in ("mlx", "numpy"):
            other = SupportIndex(support, labels, preds, CLASSES, backend=backend)
            rows.append((f"project ({backend})",) + timed(lambda: run_project(other, q, qpred, cdfs), args.repeats))
        if on_gpu():
            small = SupportIndex(support, labels, preds, CLASSES, backend="mlx", block_elements=CPU_BLOCK_ELEMENTS)
            rows.append(("project (mlx, CPU block 2^24)",) + timed(lambda: run_project(small, q, qpred, cdfs),
                                                                   args.repeats))
        good = index._good_np
        if faiss_available():
            import faiss

            fi = faiss.IndexFlatL2(args.dim)
            fi.add(support)
            rows.append((f"faiss IndexFlatL2 k={k_max} (max class)",)
                        + timed(lambda: run_faiss(fi, k_max, good, q, qpred, cdfs), max(1, args.repeats - 2)))
            rows.append((f"faiss IndexFlatL2 k={SMALL_K}",) + timed(lambda: run_faiss(fi, SMALL_K, good, q, qpred, cdfs),
                                                                    args.repeats))
        if importlib.util.find_spec("torch"):
            rows.append(("torch masked count (float32, not exact)",)
                        + timed(lambda: run_torch(support, good, q, qpred, default_block_elements(auto)), args.repeats))
        if n <= 20000 or not on_gpu():
            sq = np.einsum("ij,ij->i", support, support)
            rows.append(("numpy matmul + argsort + scan",)
                        + timed(lambda: run_numpy_sort(support, sq, good, k_max, q, qpred, cdfs), max(1, args.repeats - 2)))
        for name, secs, out in rows:
            expected = np.minimum(ref[0], SMALL_K) if name.endswith(f"k={SMALL_K}") else ref[0]
            differ = int(np.sum(np.asarray(out[0]) != expected))
            note = "" if differ == 0 else f"  (q differs on {differ}/{len(expected)} queries: float32 near-ties)"
            print(f"{n:>8} {name:<40} {secs:>9.3f} {secs / t_ref:>9.2f}x{note}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
