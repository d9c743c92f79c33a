"""The canonical (v2) estimator: its formulas, and fit/predict/save/load behind the same interface."""

import mlx_sdm  # noqa: F401
import numpy as np
import pytest

from mlx_sdm.calibration.canonical import find_threshold_v2, predict_v2, rescaled_similarity_v2
from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.row_verdict import Verdict


def test_rescaled_similarity_is_min_of_q_and_power():
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])
    q = np.array([10, 0, 3])
    out = rescaled_similarity_v2(probs, np.array([0, 1, 0]), q)
    assert out[0] == pytest.approx(min(10, 12 ** 0.9)) and out[1] == 0.0 and out[2] == pytest.approx(min(3, 5 ** 0.5))


def test_threshold_search_takes_the_smallest_passing_q_prime():
    rng = np.random.default_rng(0)
    n = 400
    labels = rng.integers(0, 2, n)
    q_prime = rng.uniform(0.5, 6, n)
    # confident and right above q′ = 3, noisy below
    p_true = np.where(q_prime >= 3, 0.99, rng.uniform(0.3, 1.0, n))
    probs = np.zeros((n, 2))
    probs[np.arange(n), labels] = p_true
    probs[np.arange(n), 1 - labels] = 1 - p_true
    res = find_threshold_v2(q_prime, probs, labels, 2, 0.95)
    assert res.succeeded and 2.0 < res.q_tilde_min <= 3.0 + 1e-12
    assert (res.psi >= 0.95).all()
    assert not find_threshold_v2(q_prime, np.full((n, 2), 0.5), labels, 2, 0.95).succeeded


def test_dkw_lowers_the_distance_quantile_and_can_reject():
    logits = np.array([[4.0, 0.0], [4.0, 0.0]])
    q, d = np.array([20, 20]), np.array([1.0, 1.0])
    small = [np.sort(np.arange(3.0)), np.sort(np.arange(3.0))]  # n̂ ≤ 2: ε large
    large = [np.linspace(0, 3, 5000), np.linspace(0, 3, 5000)]
    psi = np.array([0.95, 0.95])
    a = predict_v2(logits, q, d, small, psi, 1.0, True, 0.95)
    b = predict_v2(logits, q, d, large, psi, 1.0, True, 0.95)
    assert (a["d_lower"] < b["d_lower"]).all() and (b["d_lower"] <= 1.0).all()
    assert not a["admitted"].any() and b["admitted"].all()
    assert (a["p_lower"] < b["p_lower"]).all()


def _blobs(rng, n, dim=8, classes=3):
    means = np.random.default_rng(123).normal(0, 2.5, (classes, dim))
    y = rng.integers(0, classes, n)
    return LabelledSet([f"p{i}-{rng.integers(1 << 30)}" for i in range(n)], means[y] + rng.normal(0, 1, (n, dim)), y)


def test_v2_fit_predict_save_load(tmp_path):
    rng = np.random.default_rng(0)
    train, cal, test = _blobs(rng, 240), _blobs(rng, 240), _blobs(rng, 80)
    est = SDMEstimator.fit(train, cal, FitConfig(iterations=2, epochs=12, exemplar_dim=32, seed=1, estimator="v2"))
    assert est.kind == "v2" and est.manifest["estimator"] == "v2"
    assert est.manifest["q_tilde_min_robust"] == est.manifest["q_tilde_min_star"]  # no MAD offsets in v2
    verdicts = est.predict(test.embeddings)
    assert all(isinstance(v, Verdict) for v in verdicts)
    a = est.predict_arrays(test.embeddings)
    assert a["admitted"].any()  # separable blobs: something is admitted
    assert (a["prediction"][a["admitted"]] == test.labels[a["admitted"]]).mean() >= 0.95
    est.save(tmp_path / "v2")
    loaded = SDMEstimator.load(tmp_path / "v2")
    assert loaded.kind == "v2"
    b = loaded.predict_arrays(test.embeddings)
    # one process, one machine, the same float32 weights (the save is exact) through the same ops: bit for bit
    for key in ("prediction", "q", "d", "p_lower", "admitted"):
        assert np.array_equal(a[key], b[key]), key


def test_unknown_kind_is_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="estimator must be one of"):
        SDMEstimator.fit(_blobs(rng, 60), _blobs(rng, 60), FitConfig(iterations=1, epochs=1, estimator="v3"))
