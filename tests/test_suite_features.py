"""A suite task as a comparison data set (mlx_sdm.app.suite_features) and the fixed logistic probe
(calibration.fitting.scalar_probe) the comparison scripts measure adaptors against.
No LM: features come from a stand-in function or, for the refusal, an empty cache."""

import mlx_sdm  # noqa: F401
import numpy as np
import pytest

from mlx_sdm.app.suite_features import NotCached, cached_features, parse_suite_dataset, task_feature_sets
from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.fitting import scalar_probe


def _features(docs):
    """A stand-in for SmolLM2: one row per document, its label in column 0 (so rows can be checked)."""
    return np.array([[float(d.label), float(len(d.prompt))] for d in docs], dtype=np.float32)


def test_pool_is_split_three_eighths_three_eighths_a_quarter_with_labels_kept():
    sets = task_feature_sets("sentiment", 80, _features, test_size=8)
    assert {k: len(v) for k, v in sets.items()} == {"train": 30, "calibration": 30, "test": 20, "shift": 8}
    for part in sets.values():
        assert np.array_equal(part.embeddings[:, 0], part.labels)
        assert set(np.unique(part.labels)) <= {0, 1}
    ids = [rid for k in ("train", "calibration", "test") for rid in sets[k].ids]
    assert len(set(ids)) == 80 and not set(ids) & set(sets["shift"].ids)


def test_another_split_partitions_the_same_pool_differently():
    first, other = (task_feature_sets("sentiment", 80, _features, test_size=8, split=s) for s in (0, 1))
    pool = lambda sets: [rid for k in ("train", "calibration", "test") for rid in sets[k].ids]  # noqa: E731
    assert sorted(pool(first)) == sorted(pool(other)) and pool(first) != pool(other)
    assert first["shift"].ids == other["shift"].ids


def test_shift_left_out_when_its_features_are_not_cached():
    calls = []

    def pool_only(docs):  # the pool is read first, then the shifted documents
        calls.append(len(docs))
        if len(calls) > 1:
            raise NotCached("not cached")
        return _features(docs)

    assert "shift" not in task_feature_sets("sentiment", 80, pool_only, test_size=8)


def test_an_empty_cache_refuses_with_how_to_fill_it(tmp_path):
    with pytest.raises(NotCached, match="--extract"):
        task_feature_sets("sentiment", 16, cached_features(tmp_path), test_size=4)


@pytest.mark.parametrize("text, expected", [("suite:sentiment", ("sentiment", 400)), ("suite:fever:800", ("fever", 800))])
def test_parse_suite_dataset(text, expected):
    assert parse_suite_dataset(text) == expected


@pytest.mark.parametrize("text", ["sentiment", "suite:", "suite:fever:many", "suite:a:1:2"])
def test_parse_suite_dataset_refuses_with_the_form(text):
    with pytest.raises(ValueError, match="suite:TASK:POOL"):
        parse_suite_dataset(text)


def test_scalar_probe_is_logistic_regression_under_the_scalar_normalisation_of_its_rows():
    """Its predictions are the reference's (calibration.fitting.logistic_reference) fitted on the same
    rows with their two scalars, and it learns a plain linear signal beside larger noise."""
    from mlx_sdm.calibration.adaptor import scalar_normalization
    from mlx_sdm.calibration.fitting import logistic_reference

    rng = np.random.default_rng(0)

    def rows(n):
        y = rng.integers(0, 2, n)
        x = np.concatenate([rng.normal(0, 0.5, (n, 4)) + np.where(y[:, None] == 1, 1.0, -1.0),
                            rng.normal(0, 5.0, (n, 4))], axis=1)
        return LabelledSet([str(i) for i in range(n)], x.astype(np.float32), y)

    train, test = rows(300), rows(300)
    predicted = scalar_probe(train, 2)(test.embeddings)
    mu, sigma = scalar_normalization(train.embeddings)
    ref = logistic_reference(train, train, (mu, sigma), 2)
    assert np.array_equal(predicted, np.argmax(((test.embeddings - mu) / sigma) @ ref.weight + ref.bias, axis=1))
    assert float(np.mean(predicted == test.labels)) > 0.95
