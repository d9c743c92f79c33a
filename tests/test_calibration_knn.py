"""The exact support index: q (Eq. 5) and d_nearest from every backend agree with a sorted scan."""

import mlx_sdm  # noqa: F401
import numpy as np
import pytest

from mlx_sdm.calibration.knn import SupportIndex, faiss_available
from tests.references import q_from_neighbours

BACKENDS = ["mlx", "numpy"] + (["faiss"] if faiss_available() else [])


def _sorted_scan(support, labels, preds, queries, qpred, exclude, k):
    qs, ds = [], []
    for i, x in enumerate(queries):
        dist = np.sqrt(((support.astype(np.float64) - x) ** 2).sum(1))
        order = np.argsort(dist, kind="stable")
        qs.append(q_from_neighbours(int(qpred[i]), labels[order], preds[order], order,
                                    None if exclude is None else int(exclude[i]), k=k))
        keep = order if exclude is None else order[order != exclude[i]]
        ds.append(dist[keep[0]])
    return np.array(qs), np.array(ds)


@pytest.mark.parametrize("backend", BACKENDS)
def test_q_and_d_match_sorted_scan(backend):
    rng = np.random.default_rng(1)
    # clustered support so that q takes many values
    centers = rng.normal(0, 4, (3, 12))
    labels = rng.integers(0, 3, 300)
    support = (centers[labels] + rng.normal(0, 1, (300, 12))).astype(np.float32)
    preds = np.where(rng.uniform(size=300) < 0.9, labels, (labels + 1) % 3)
    index = SupportIndex(support, labels, preds, 3, backend=backend, block_elements=300 * 37)  # several chunks
    queries = (centers[rng.integers(0, 3, 50)] + rng.normal(0, 1, (50, 12))).astype(np.float32)
    qpred = rng.integers(0, 3, 50)
    res = index.q_and_nearest(queries, qpred)
    q_ref, d_ref = _sorted_scan(support, labels, preds, queries, qpred, None, index.k)
    assert res.q.tolist() == q_ref.tolist()
    assert res.q.max() > 3  # the case is not trivial
    assert np.allclose(res.d_nearest, d_ref, rtol=1e-4, atol=1e-3)
    # training points against their own support set: self-match excluded by index
    res = index.q_and_nearest(support, preds, exclude=np.arange(300))
    q_ref, d_ref = _sorted_scan(support, labels, preds, support, preds, np.arange(300), index.k)
    assert res.q.tolist() == q_ref.tolist()
    assert np.allclose(res.d_nearest, d_ref, rtol=1e-4, atol=1e-3)
    assert (res.d_nearest > 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_self_exclusion_keeps_duplicates_and_caps_at_largest_class(backend):
    # points on a line; index 1 duplicates index 0; index 3 is mispredicted
    support = np.array([[0.0], [0.0], [1.0], [2.0], [3.0], [10.0]], dtype=np.float32)
    labels = np.array([1, 1, 1, 1, 0, 0])
    preds = np.array([1, 1, 1, 0, 0, 0])
    index = SupportIndex(support, labels, preds, 2, backend=backend)
    assert index.k == 4
    res = index.q_and_nearest(support[:1], np.array([1]), exclude=np.array([0]))
    assert res.q.tolist() == [2]  # the duplicate (distance 0) and the point at 1; stops at the mispredicted one
    assert res.d_nearest.tolist() == [0.0]
    res = index.q_and_nearest(np.array([[0.1]], np.float32), np.array([1]))
    assert res.q.tolist() == [3]
    res = index.q_and_nearest(np.array([[0.1]], np.float32), np.array([0]))
    assert res.q.tolist() == [0]
    index.add(np.array([[0.05]], np.float32), np.array([1]), np.array([1]))
    assert index.q_and_nearest(np.array([[0.1]], np.float32), np.array([1])).q.tolist() == [4]  # the added point extends the prefix
    idx, dist = index.nearest(np.array([[2.1]], np.float32), 2)
    assert idx.tolist() == [[3, 4]] and np.allclose(dist, [[0.1, 0.9]], atol=1e-5)


def test_cap_at_k():
    support = np.arange(10, dtype=np.float32)[:, None]
    labels = np.array([1] * 8 + [0] * 2)
    index = SupportIndex(support, labels, labels.copy(), 2)
    assert index.q_and_nearest(np.array([[0.0]], np.float32), np.array([1])).q.tolist() == [8]
    index = SupportIndex(support, np.array([1] * 5 + [0] * 5), np.ones(10, int), 2)
    # 5 correct class-1 points come first; then mispredicted ones stop the scan: q = 5 = k
    assert index.q_and_nearest(np.array([[0.0]], np.float32), np.array([1])).q.tolist() == [5]
