"""Save, load and add_support round-trip exactly; load refuses other versions and dimensions."""

import json

import mlx_sdm  # noqa: F401
import numpy as np
import pytest

from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.row_verdict import Verdict
from mlx_sdm.errors import ArtifactError, DataError


def _blobs(rng, n, dim=8, classes=3, spread=2.5):
    means = np.random.default_rng(123).normal(0, spread, (classes, dim))
    y = rng.integers(0, classes, n)
    return LabelledSet([f"p{rng.integers(1 << 40)}-{i}" for i in range(n)], means[y] + rng.normal(0, 1, (n, dim)), y,
                       [f"text {i}" for i in range(n)])


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    train, cal, test = _blobs(rng, 240), _blobs(rng, 240), _blobs(rng, 60)
    est = SDMEstimator.fit(train, cal, FitConfig(iterations=2, epochs=4, exemplar_dim=32, seed=3),
                           source={"kind": "synthetic"})
    return est, test, rng


def _arrays_equal(a, b):
    """Exactly, floats included: both sides run in this process on this machine, the same float32 weights
    (save and load are exact) through the same ops, so any difference is a round-trip bug."""
    for key in ("prediction", "q", "d", "q_bin", "p_lower", "admitted", "softmax"):
        assert np.array_equal(a[key], b[key]), key


def test_fit_records_manifest(fitted):
    est, test, _ = fitted
    m = est.manifest
    assert m["format_version"] == 1 and m["input_dim"] == 8 and m["exemplar_dim"] == 32 and m["num_classes"] == 3
    assert m["alpha"] == 0.95 and m["iterations"] == 2 and m["source"] == {"kind": "synthetic"}
    t = m["training"]
    assert len(t["epochs_chosen"]) == 2 and all(1 <= e <= 4 for e in t["epochs_chosen"])
    assert 0.9 <= t["train_accuracy"] <= 1.0 and 0.9 <= t["logistic_regression"]["calibration_accuracy"] <= 1.0
    verdicts = est.predict(test.embeddings, explain=3)
    assert all(isinstance(v, Verdict) for v in verdicts)
    v = verdicts[0]
    assert len(v.exemplars) == 3 and v.exemplars[0].distance <= v.exemplars[2].distance
    assert v.exemplars[0].text.startswith("text ")
    assert (v.p_lower is None) == (not v.admitted) and (v.reason is None) == v.admitted
    assert abs(sum(v.softmax) - 1) < 1e-6
    d = v.to_dict()
    assert set(d) >= {"prediction", "p_lower", "admitted", "q", "d", "q_bin", "reason", "exemplars", "softmax"}
    json.dumps(d)


def test_save_load_add_round_trip(fitted, tmp_path):
    est, test, rng = fitted
    before = est.predict_arrays(test.embeddings)
    est.save(tmp_path / "est")
    loaded = SDMEstimator.load(tmp_path / "est")
    _arrays_equal(before, loaded.predict_arrays(test.embeddings))
    assert loaded.support_ids == est.support_ids
    assert [e.to_dict() for e in loaded.explain(test.embeddings[:2], 4)[0]] == \
        [e.to_dict() for e in est.explain(test.embeddings[:2], 4)[0]]

    # add labelled points without retraining: q sees them at once
    extra = _blobs(rng, 40)
    n0 = loaded.support_size
    probe = extra.embeddings[:1]
    loaded.add_support(extra.ids, extra.embeddings, extra.labels, extra.texts)
    assert loaded.support_size == n0 + 40
    assert loaded.explain(probe, 1)[0][0].id == extra.ids[0]  # the point itself is now its nearest exemplar
    assert loaded.explain(probe, 1)[0][0].distance == pytest.approx(0.0, abs=1e-3)
    after_add = loaded.predict_arrays(test.embeddings)
    loaded.save(tmp_path / "est")  # extend a saved estimator and save it again
    again = SDMEstimator.load(tmp_path / "est")
    _arrays_equal(after_add, again.predict_arrays(test.embeddings))
    assert again.support_ids == loaded.support_ids and again.support_size == n0 + 40
    assert again.manifest["support_added"] == 40
    with pytest.raises(DataError, match="already in the support set"):
        again.add_support(extra.ids[:1], extra.embeddings[:1], extra.labels[:1])
    with pytest.raises(DataError, match="labels must be in 0..2"):
        again.add_support(["new"], extra.embeddings[:1], [7])


def test_load_refuses_other_version_and_dimension(fitted, tmp_path):
    est, test, _ = fitted
    est.save(tmp_path / "e")
    with pytest.raises(ArtifactError, match="input_dim 8 but the embeddings here have dimension 16"):
        SDMEstimator.load(tmp_path / "e", expect_input_dim=16)
    manifest = json.loads((tmp_path / "e" / "manifest.json").read_text())
    manifest["format_version"] = 99
    (tmp_path / "e" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="format_version 99"):
        SDMEstimator.load(tmp_path / "e")
    with pytest.raises(ArtifactError, match="no manifest.json"):
        SDMEstimator.load(tmp_path / "missing")
    with pytest.raises(DataError, match="width 5"):
        est.predict(np.zeros((2, 5), np.float32))


def test_q_and_d_matches_predict(fitted):
    est, test, _ = fitted
    a = est.predict_arrays(test.embeddings)
    b = est.q_and_d(test.embeddings)
    # the same forward and the same kNN in one process; q a count, d an eCDF quantile: exactly
    assert np.array_equal(a["q"], b["q"]) and np.array_equal(a["d"], b["d"])
    tr = est.q_and_d(test.embeddings, distance_cdfs="training")
    assert np.array_equal(tr["q"], b["q"]) and tr["d"].shape == b["d"].shape
