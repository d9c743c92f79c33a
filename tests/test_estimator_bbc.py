"""The calibration promise on real data: BBC News topics embedded with all-MiniLM-L6-v2
(mlx_sdm/datasets/bbc_minilm.npz, built by scripts/embed_bbc.py; attribution in mlx_sdm/datasets/README.md).

Trained on whole-article embeddings. In distribution (held-out articles) the estimator must admit a
non-trivial fraction at ≥ α′ in every stratum. Shifted (the titles of the same held-out articles),
the plain softmax ≥ 0.95 baseline admits wrong answers below α′ while the estimator stays ≥ α′
(or admits nothing).
"""

from pathlib import Path

import mlx_sdm  # noqa: F401
import numpy as np
import pytest

from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.evaluation import evaluate
from mlx_sdm.commands.demo import bbc_splits, load_bbc

DATA = Path(__file__).resolve().parents[1] / "mlx_sdm" / "datasets" / "bbc_minilm.npz"


@pytest.fixture(scope="module")
def bbc():
    raw = load_bbc(DATA)
    train, cal, test, shifted = bbc_splits(raw, seed=0)
    est = SDMEstimator.fit(train, cal, FitConfig(iterations=3, epochs=15, seed=0))
    return est, test, shifted


def test_bbc_file_is_what_the_tests_expect():
    raw = load_bbc(DATA)
    assert raw["full"].shape == raw["title"].shape == (2225, 384)
    assert np.bincount(raw["labels"]).tolist() == [510, 386, 417, 511, 401]
    norms = np.linalg.norm(raw["full"].astype(np.float32), axis=1)
    assert np.allclose(norms, 1.0, atol=1e-2)  # MiniLM embeddings are unit-norm


def test_bbc_in_distribution_admits_at_alpha(bbc):
    est, test, _ = bbc
    ev = evaluate(est, test, "bbc held-out")
    row = ev.row("sdm p_lower")
    assert ev.adaptor_accuracy > 0.9  # the representation carries signal
    assert row.calibrated(0.95)
    assert row.marginal.fraction >= 0.3, row.marginal


def test_bbc_titles_shift_breaks_softmax_not_the_estimator(bbc):
    est, _, shifted = bbc
    ev = evaluate(est, shifted, "bbc titles")
    softmax = ev.row("softmax>=0.95")
    wrong = int(np.sum((ev.softmax_max >= 0.95) & (ev.labels != ev.predictions)))
    assert softmax.marginal.fraction > 0.7 and wrong >= 30 and not softmax.calibrated(0.95), softmax
    assert ev.row("sdm p_lower").calibrated(0.95)
