"""The fixed logistic probe (calibration.fitting.scalar_probe) that comparisons measure adaptors against."""

import mlx_sdm  # noqa: F401
import numpy as np

from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.fitting import scalar_probe


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
