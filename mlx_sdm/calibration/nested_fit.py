"""Fitting the nested kind: the canonical (v2) fit chooses the adaptor, its support set and its
calibration split (same Alg. 1, same selection by the balanced calibration sdm loss); then the
calibration rows of that split give the squared-L2 distance eCDFs, the class-wise q′ pools and the
nested regions (nested.fit_regions)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from mlx_sdm.calibration.adaptor import ExemplarAdaptor, forward_numpy_batches
from mlx_sdm.calibration.canonical import KIND_V2
from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.fitting import Progress, fit_state
from mlx_sdm.calibration.knn import SupportIndex
from mlx_sdm.calibration.canonical import KIND_NESTED
from mlx_sdm.calibration.nested import NestedSettings, distance_quantile32, fit_regions, q_prime32, sdm32, squared32
from mlx_sdm.calibration.state import EstimatorState
from mlx_sdm.calibration.training import load_params


def calibration_rows(state: EstimatorState, train: LabelledSet, calibration: LabelledSet) -> LabelledSet:
    """The calibration half of the chosen split: the pooled rows that are not in the support set."""
    pool = LabelledSet.concat(train, calibration)
    support = set(state.support_ids)
    return pool.subset(np.array([i for i, rid in enumerate(pool.ids) if rid not in support], dtype=np.int64))


def calibrate_nested(state: EstimatorState, cal: LabelledSet, num_classes: int, exemplar_dim: int,
                     settings: NestedSettings, knn_backend: str = "auto") -> NestedSettings:
    """Replace the state's distance eCDFs (squared L2) and q′ pools with the calibration rows' own,
    and return ``settings`` with the regions those rows give."""
    adaptor = ExemplarAdaptor(cal.dim, exemplar_dim, num_classes)
    load_params(adaptor, state.params)
    adaptor.set_normalization(*state.normalization)
    z, hp = forward_numpy_batches(adaptor, cal.embeddings)
    yhat = np.argmax(z, axis=1)
    index = SupportIndex(state.support_exemplars, state.support_labels, state.support_predictions, num_classes,
                         backend=knn_backend)
    qd = index.q_and_nearest(hp, yhat)
    q = qd.q if settings.max_neighbors is None else np.minimum(qd.q, settings.max_neighbors)
    d0 = squared32(qd.d_nearest)
    keep = q > settings.ood_limit
    state.dcdf_ca = [np.sort(d0[keep & (cal.labels == c)]) for c in range(num_classes)]
    state.dcdf_tr = [squared32(c) for c in state.dcdf_tr]
    d = distance_quantile32(d0, state.dcdf_ca)
    probs = sdm32(z, q, d, settings.q_offset)
    qp = q_prime32(q, probs[np.arange(len(yhat)), yhat], settings.q_offset)
    state.calibration_q_tilde = [np.sort(qp[cal.labels == c]) for c in range(num_classes)]
    regions = fit_regions(probs, qp, cal.labels, yhat, num_classes, settings.resolution, settings.ood_limit)
    return replace(settings, regions=regions)


def fit_nested(train: LabelledSet, calibration: LabelledSet, config: FitConfig, source: dict | None = None,
               progress: Progress = None) -> tuple[EstimatorState, dict]:
    """(state, manifest) of a nested-kind fit."""
    state, manifest = fit_state(train, calibration, replace(config, estimator=KIND_V2), source, progress)
    num_classes = int(manifest["num_classes"])
    cal = calibration_rows(state, train, calibration)
    settings = calibrate_nested(state, cal, num_classes, config.exemplar_dim, NestedSettings(()),
                                config.knn_backend)
    manifest["estimator"] = KIND_NESTED
    manifest["config"]["estimator"] = KIND_NESTED
    manifest["nested"] = settings.to_manifest()
    return state, manifest
