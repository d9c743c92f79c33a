"""Exact distances: self-distance 0, q and neighbour ranks equal a float64 computation on adversarial
near-ties, the same bits from every backend and every BLAS."""

import json
import os
import subprocess
import sys

import mlx_sdm  # noqa: F401
import numpy as np
import pytest

from mlx_sdm.calibration.knn import SupportIndex, faiss_available, resolve_backend
from tests.references import q_from_neighbours

BACKENDS = ["mlx", "numpy"] + (["faiss"] if faiss_available() else [])


def _float64_scan(support, labels, preds, queries, qpred, k, exclude=None):
    """Eq. 5 by a full float64 sort (direct difference), the ground truth."""
    qs, ds, orders = [], [], []
    for i, x in enumerate(queries):
        dist = np.sqrt(np.square(support.astype(np.float64) - x.astype(np.float64)).sum(1))
        order = np.argsort(dist, kind="stable")
        if exclude is not None:
            order = order[order != exclude[i]]
        qs.append(q_from_neighbours(int(qpred[i]), labels[order], preds[order], k=k))
        ds.append(dist[order[0]])
        orders.append(order)
    return np.array(qs), np.array(ds), orders


def _near_ties(seed=0, n=400, dim=48, queries=40):
    """Support points on a thin shell around each query, far from the origin: float32's
    ‖a‖² + ‖b‖² − 2ab cannot order them, float64 by direct difference can."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0, 1, dim) * 300.0
    q = (base + rng.normal(0, 1, (queries, dim))).astype(np.float32)
    owner = rng.integers(0, queries, n)
    direction = rng.normal(0, 1, (n, dim))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    radius = 5.0 + rng.normal(0, 1e-4, n)  # distances equal to ~1e-5 relative
    support = (q[owner].astype(np.float64) + direction * radius[:, None]).astype(np.float32)
    labels = rng.integers(0, 2, n)
    preds = np.where(rng.uniform(size=n) < 0.7, labels, 1 - labels)
    return support, labels, preds, q, rng.integers(0, 2, queries)


def test_float32_expansion_fails_on_the_adversarial_case():
    """The case is hard: the plain float32 expansion orders these neighbours differently from float64."""
    support, labels, preds, q, _ = _near_ties()
    s32, q32 = support.astype(np.float32), q.astype(np.float32)
    d2 = (q32 * q32).sum(1)[:, None] + (s32 * s32).sum(1)[None, :] - 2 * (q32 @ s32.T)
    exact = np.square(support.astype(np.float64)[None] - q.astype(np.float64)[:, None]).sum(-1)
    assert (np.argsort(d2, axis=1, kind="stable")[:, :20] != np.argsort(exact, axis=1, kind="stable")[:, :20]).any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_q_d_and_ranks_match_float64_on_near_ties(backend):
    support, labels, preds, q, qpred = _near_ties()
    index = SupportIndex(support, labels, preds, 2, backend=backend, block_elements=400 * 7)
    res = index.q_and_nearest(q, qpred)
    q_ref, d_ref, orders = _float64_scan(support, labels, preds, q, qpred, index.k)
    assert res.q.tolist() == q_ref.tolist()
    assert np.array_equal(res.d_nearest, d_ref)
    idx, dist = index.nearest(q, 10)
    assert idx.tolist() == [o[:10].tolist() for o in orders]
    # training points against their own support set
    res = index.q_and_nearest(support, preds, exclude=np.arange(len(support)))
    q_ref, d_ref, _ = _float64_scan(support, labels, preds, support, preds, index.k, exclude=np.arange(len(support)))
    assert res.q.tolist() == q_ref.tolist() and np.array_equal(res.d_nearest, d_ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_self_distance_is_exactly_zero(backend):
    rng = np.random.default_rng(3)
    support = (rng.normal(0, 1, (300, 384)) * 40 + 100).astype(np.float32)  # large norms: float32 expansion ≠ 0
    index = SupportIndex(support, rng.integers(0, 2, 300), rng.integers(0, 2, 300), 2, backend=backend)
    res = index.q_and_nearest(support, np.zeros(300, np.int64))
    assert (res.d_nearest == 0.0).all()
    idx, dist = index.nearest(support[:5], 1)
    assert idx[:, 0].tolist() == list(range(5)) and (dist == 0).all()


def test_backends_agree_bit_for_bit():
    support, labels, preds, q, qpred = _near_ties(seed=5)
    results = [SupportIndex(support, labels, preds, 2, backend=b).q_and_nearest(q, qpred) for b in BACKENDS]
    for r in results[1:]:
        assert np.array_equal(r.q, results[0].q) and np.array_equal(r.d_nearest, results[0].d_nearest)
    assert resolve_backend("auto") in ("mlx", "numpy")


_CHILD = """
import json, sys, numpy as np
sys.path.insert(0, {root!r})
import mlx_sdm
from mlx_sdm.calibration.knn import SupportIndex
from tests.test_calibration_exact_knn import _near_ties
s, y, p, q, qp = _near_ties(seed=7)
out = {{}}
for b in ("mlx", "numpy"):
    r = SupportIndex(s, y, p, 2, backend=b).q_and_nearest(q, qp)
    out[b] = [r.q.tolist(), r.d_nearest.tolist()]
print(json.dumps(out))
"""


def test_same_result_with_openblas_and_the_reference_blas():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outs = []
    for env in ({}, {"MLX_SDM_BLAS": "reference"}):
        proc = subprocess.run([sys.executable, "-c", _CHILD.format(root=root)], env={**os.environ, **env},
                              capture_output=True, text=True, check=True, cwd=root)
        outs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert outs[0] == outs[1]
    assert outs[0]["mlx"] == outs[0]["numpy"]


def test_split_tf32_path_gives_the_same_bits(monkeypatch):
    """The GPU path (3×TF32 split operands) is exercised on the CPU too: same q and d as numpy."""
    from mlx_sdm.calibration import knn

    support, labels, preds, q, qpred = _near_ties(seed=9)
    ref = SupportIndex(support, labels, preds, 2, backend="numpy").q_and_nearest(q, qpred)
    monkeypatch.setattr(knn, "use_split_tf32", lambda backend: backend == "mlx")
    index = SupportIndex(support, labels, preds, 2, backend="mlx")
    assert index._mx[0][1] is not None and index._rel > knn.TF32_SPLIT_BOUND
    res = index.q_and_nearest(q, qpred)
    assert np.array_equal(res.q, ref.q) and np.array_equal(res.d_nearest, ref.d_nearest)
    hi, lo = knn.split_tf32(support)
    assert np.array_equal(hi + lo, support) and ((hi.view(np.uint32) & 0x1FFF) == 0).all()


def test_exact_sq_distances_by_hand_and_across_blocks(monkeypatch):
    """Σ(a − b)² per (row, col) pair: a hand-computed case, then the same bits whatever the block size
    (each pair's sum is NumPy's pairwise sum of its own row, so blocking cannot change it)."""
    from mlx_sdm.calibration import knn

    queries = np.array([[0.0, 0.0], [1.0, 2.0]], np.float32)
    support = np.array([[3.0, 4.0], [1.0, 1.0]], np.float32)
    got = knn.exact_sq_distances(queries, support, np.array([0, 1, 1]), np.array([0, 1, 0]))
    assert got.dtype == np.float64 and got.tolist() == [25.0, 1.0, 8.0]  # 9 + 16, 0 + 1, 4 + 4
    rng = np.random.default_rng(3)
    q, s = rng.normal(0, 50, (30, 300)).astype(np.float32), rng.normal(0, 50, (40, 300)).astype(np.float32)
    rows, cols = rng.integers(0, 30, 500), rng.integers(0, 40, 500)
    direct = np.array([np.square(q[r].astype(np.float64) - s[c].astype(np.float64)).sum() for r, c in zip(rows, cols)])
    one_block = knn.exact_sq_distances(q, s, rows, cols)
    monkeypatch.setattr(knn, "EXACT_BLOCK_ELEMENTS", 7 * 300)  # 7 pairs a block, the last one short
    assert np.array_equal(one_block, direct) and np.array_equal(knn.exact_sq_distances(q, s, rows, cols), direct)
