"""THE CALIBRATION PROMISE, end to end: on in-distribution held-out data and on a shifted set, the
admitted set's class- and prediction-conditional accuracies are ≥ α′ or nothing is admitted.

Synthetic Gaussian classes here; real BBC News embeddings in test_estimator_bbc.py. The shifted set
is the case that breaks naive confidence: half of it lies far out along the class directions with
random labels, where a linear classifier's softmax is near 1 and wrong two times in three.
"""

import mlx_sdm  # noqa: F401
import numpy as np
import pytest

from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.evaluation import evaluate

C, D = 3, 16
MEANS = np.random.default_rng(7).normal(0, 1, (C, D)) * 0.9


def _in_distribution(rng, n, tag):
    y = rng.integers(0, C, n)
    return LabelledSet([f"{tag}{i}" for i in range(n)], MEANS[y] + rng.normal(0, 1, (n, D)), y)


def _shifted(rng, n):
    near = _in_distribution(rng, n // 2, "near")
    m = n - n // 2
    direction = rng.integers(0, C, m)
    center = MEANS.mean(axis=0)
    far = center + 6.0 * (MEANS[direction] - center) + rng.normal(0, 1, (m, D))
    return LabelledSet.concat(near, LabelledSet([f"far{i}" for i in range(m)], far, rng.integers(0, C, m)))


@pytest.fixture(scope="module")
def synthetic():
    rng = np.random.default_rng(0)
    train, cal = _in_distribution(rng, 500, "tr"), _in_distribution(rng, 500, "ca")
    est = SDMEstimator.fit(train, cal, FitConfig(iterations=2, epochs=8, learning_rate=1e-3, exemplar_dim=64, seed=0))
    return est, _in_distribution(rng, 800, "te"), _shifted(rng, 800)


def test_promise_in_distribution(synthetic):
    est, test, _ = synthetic
    ev = evaluate(est, test, "in-distribution")
    row = ev.row("sdm p_lower")
    assert row.calibrated(0.95)
    assert row.marginal.fraction >= 0.2  # a run that admits nothing proves nothing
    assert all(s.admitted > 0 for s in row.by_class)


def test_promise_on_shift_where_softmax_over_admits(synthetic):
    est, _, shifted = synthetic
    ev = evaluate(est, shifted, "shifted")
    softmax = ev.row("softmax>=0.95")
    wrong_softmax = int(np.sum((ev.softmax_max >= 0.95) & (ev.labels != ev.predictions)))
    # naive confidence: admits most of the set, many of them wrong, below α′ in every stratum
    assert softmax.marginal.fraction > 0.8 and wrong_softmax > 200
    assert not softmax.calibrated(0.95)
    assert softmax.marginal.accuracy < 0.8
    # the estimator keeps its promise (and still admits near, in-distribution points)
    sdm_row = ev.row("sdm p_lower")
    assert sdm_row.calibrated(0.95)
    assert sdm_row.marginal.admitted > 0
    far = np.array([i.startswith("far") for i in shifted.ids])
    assert not ev.admitted[far].any()  # the far points are rejected …
    reasons = {v.reason for v, f in zip(est.predict(shifted.embeddings), far) if f}
    assert "out_of_distribution" in reasons  # … as out of distribution
