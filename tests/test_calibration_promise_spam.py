"""The calibration promise on real data with a real shift, for both estimator kinds: SpamAssassin,
all-MiniLM-L6-v2 (mlx_sdm/datasets/spam_minilm.npz, built by scripts/embed_spam.py; attribution in
mlx_sdm/datasets/README.md). Trained on the first collection (easy-ham-1, spam-1); tested on held-out
rows of it and on the later collection (easy-ham-2, spam-2).

Every admitted class- and prediction-conditional stratum must be >= 0.95 (small ones included) or
nothing admitted; in distribution a real share of both classes must be admitted.
"""

import mlx_sdm  # noqa: F401
import numpy as np
import pytest

from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.evaluation import evaluate, sdm_row_name
from mlx_sdm.datasets.spam import spam_splits


@pytest.fixture(scope="module")
def spam():
    return spam_splits(seed=0)


def test_spam_file_is_what_the_tests_expect(spam):
    assert len(spam["train"]) == len(spam["calibration"]) == 400 and len(spam["test"]) == 200
    assert len(spam["shift"]) == 500
    for part in spam.values():
        assert np.bincount(part.labels).tolist()[0] == np.bincount(part.labels).tolist()[1]  # balanced
    assert np.allclose(np.linalg.norm(spam["test"].embeddings, axis=1), 1.0, atol=1e-2)


@pytest.mark.parametrize("kind", ["v1", "v2"])
def test_promise_in_distribution_and_on_the_later_collection(spam, kind):
    est = SDMEstimator.fit(spam["train"], spam["calibration"], FitConfig(iterations=2, epochs=15, seed=0, estimator=kind))
    for view in ("test", "shift"):
        ev = evaluate(est, spam[view], view)
        row = ev.row(sdm_row_name(est))
        assert row.calibrated(0.95), (kind, view, [s.cell() for s in row.strata()])
        if view == "test":
            assert row.marginal.fraction >= 0.2, (kind, row.marginal)
            assert all(s.admitted > 0 for s in row.by_class), (kind, [s.cell() for s in row.by_class])
