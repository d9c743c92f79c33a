"""The adaptor learns what a logistic probe learns when a few input dimensions are huge.

Under an LM's hidden states a few dimensions are 10–40× the typical one. The paper's scalar input
scaling leaves the informative small dimensions near zero and the adaptor (Adam, a fixed number of
epochs) stays near chance while logistic regression finds them; per-dimension scaling
(``input_scaling="per_dimension"``) fixes that. The default stays scalar (docs/estimator.md, "Input scaling of the adaptor"). Hand-made data where the cause shows: 16 small informative dimensions, 4 huge noise ones.
Also: the promise on held-out and shifted data, and folders of both kinds load and predict the same (a folder
saved and loaded in one process: bit for bit; the stored older folder: discrete outputs exactly, the others
to float32 precision).
"""

import json
from pathlib import Path

import mlx_sdm  # noqa: F401
import numpy as np
import pytest

from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.evaluation import evaluate
from mlx_sdm.errors import ArtifactError
from tests.tolerance import FLOAT32_TOLERANCE

SIGNAL, NUISANCE = 16, 4
OLD_FOLDER = Path(__file__).parent / "fixtures" / "scalar-estimator-v1"


def _problem(rng, n, tag, nuisance_mean=0.0):
    """Two classes told apart by 4 of 16 small dimensions (scale 0.05); 4 noise dimensions of scale 50."""
    y = rng.integers(0, 2, n)
    signal = rng.normal(0, 0.05, (n, SIGNAL))
    signal[:, :4] += np.where(y[:, None] == 1, 0.06, -0.06)
    noise = rng.normal(nuisance_mean, 50.0, (n, NUISANCE))
    return LabelledSet([f"{tag}{i}" for i in range(n)], np.concatenate([signal, noise], axis=1), y)


def _shifted(rng, n):
    """Half: the noise dimensions moved by 3σ; half: far out along the class direction with random labels."""
    moved = _problem(rng, n // 2, "moved", nuisance_mean=150.0)
    far = _problem(rng, n - n // 2, "far")
    far.embeddings[:, :4] *= 6.0
    far.labels = rng.integers(0, 2, len(far))
    return LabelledSet.concat(moved, far)


def _fit(scaling):
    rng = np.random.default_rng(0)
    train, cal = _problem(rng, 400, "tr"), _problem(rng, 400, "ca")
    est = SDMEstimator.fit(train, cal, FitConfig(iterations=1, exemplar_dim=64, seed=0, input_scaling=scaling))
    return est, _problem(rng, 600, "te"), _shifted(rng, 600)


@pytest.fixture(scope="module")
def per_dimension():
    return _fit("per_dimension")


def _accuracies(est, data):
    adaptor = float(np.mean(est.predict_arrays(data.embeddings)["prediction"] == data.labels))
    probe = float(np.mean(est.logistic_regression_predict(data.embeddings) == data.labels))
    return adaptor, probe


def test_scalar_scaling_leaves_the_adaptor_behind_the_probe():
    est, test, _ = _fit("scalar")
    adaptor, probe = _accuracies(est, test)
    assert probe > 0.8 and adaptor < 0.7  # the cause, reproduced: the probe finds the small dimensions


def test_per_dimension_scaling_learns_what_the_probe_learns(per_dimension):
    est, test, _ = per_dimension
    adaptor, probe = _accuracies(est, test)
    assert adaptor >= 0.95 and adaptor >= probe - 0.01
    assert est.manifest["training"]["calibration_accuracy"] >= 0.95


def test_promise_held_out_and_shifted(per_dimension):
    est, test, shifted = per_dimension
    held = evaluate(est, test, "held out").row("sdm p_lower")
    assert held.calibrated(0.95) and held.marginal.fraction >= 0.2  # admits, and every stratum ≥ α′
    shift = evaluate(est, shifted, "shifted")
    assert shift.row("softmax>=0.95").wrong > 50  # a shift where naive confidence admits wrong answers
    assert shift.row("sdm p_lower").calibrated(0.95)  # every admitted stratum ≥ α′, or none admitted


def test_per_dimension_folder_round_trips_and_refuses_missing_vectors(per_dimension, tmp_path):
    est, test, _ = per_dimension
    est.save(tmp_path / "est")
    manifest = json.loads((tmp_path / "est" / "manifest.json").read_text())
    assert manifest["format_version"] == 2 and manifest["normalization"]["scaling"] == "per_dimension"
    loaded = SDMEstimator.load(tmp_path / "est")
    a, b = est.predict_arrays(test.embeddings), loaded.predict_arrays(test.embeddings)
    # one process, one machine: the same float32 weights (the save is exact) through the same ops, bit for bit
    assert all(np.array_equal(a[k], b[k]) for k in ("prediction", "q", "d", "p_lower", "admitted"))
    from safetensors.numpy import load_file, save_file

    weights = tmp_path / "est" / "estimator.safetensors"
    tensors = load_file(str(weights))
    del tensors["normalization.sigma"]
    save_file(tensors, str(weights))
    with pytest.raises(ArtifactError, match="per-dimension input scaling"):
        SDMEstimator.load(tmp_path / "est")


def test_folder_saved_before_per_dimension_scaling_predicts_the_same(tmp_path):
    """A folder (and its outputs) written by mlx-sdm before per-dimension scaling; see fixtures/README.md."""
    expected = np.load(OLD_FOLDER / "expected.npz")
    est = SDMEstimator.load(OLD_FOLDER / "estimator")
    assert est.manifest["format_version"] == 1 and "scaling" not in est.manifest["normalization"]
    got = est.predict_arrays(expected["inputs"])
    # the discrete outputs exactly: classes, counts, the eCDF quantile d (a multiple of 1/n), the admission
    for key in ("prediction", "q", "d", "q_bin", "admitted"):
        assert np.array_equal(got[key], expected[key]), key
    # softmax and p_lower come from the adaptor's float32 logits, which another CPU's kernels round differently
    # (softmax differs by 2.7e-8 on an Intel Xeon, p_lower by 5.6e-17 on an AMD EPYC): float32 precision
    for key in ("p_lower", "softmax"):
        assert np.allclose(got[key], expected[key], rtol=FLOAT32_TOLERANCE, atol=FLOAT32_TOLERANCE, equal_nan=True), key
    assert np.array_equal(est.logistic_regression_predict(expected["inputs"]), expected["lr"])
    est.save(tmp_path / "again")  # a scalar folder is still written as format_version 1
    assert json.loads((tmp_path / "again" / "manifest.json").read_text())["format_version"] == 1


def test_fit_config_refuses_an_unknown_scaling():
    rng = np.random.default_rng(1)
    with pytest.raises(ValueError, match="input_scaling"):
        SDMEstimator.fit(_problem(rng, 40, "a"), _problem(rng, 40, "b"), FitConfig(input_scaling="global"))


def test_folding_the_scaling_into_g_gives_the_same_adaptor(per_dimension):
    """For formats that hold only two scalars (.sdmkitmodel): G diag(1/σ), g_b − G'μ, (μ, σ) = (0, 1)."""
    from mlx_sdm.calibration.adaptor import ExemplarAdaptor, fold_normalization, forward_numpy_batches
    from mlx_sdm.calibration.training import load_params

    est, test, _ = per_dimension
    params, norm = fold_normalization(est._state.params, est._state.normalization)
    folded = ExemplarAdaptor(est.input_dim, est.exemplar_dim, est.num_classes)
    load_params(folded, params)
    folded.set_normalization(*norm)
    (z, hp), (z0, hp0) = forward_numpy_batches(folded, test.embeddings), forward_numpy_batches(est.adaptor, test.embeddings)
    assert norm == (0.0, 1.0) and np.allclose(hp, hp0, rtol=1e-4, atol=1e-4) and np.array_equal(z.argmax(1), z0.argmax(1))
