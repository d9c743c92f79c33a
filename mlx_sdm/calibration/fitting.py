"""Fitting an estimator, step by step in the paper's order: Alg. 1 J times over D_tr ∪ D_ca (each
iteration ends with the rescaler, Alg. 2, and the threshold search, Alg. 3: training.run_iteration),
the best iteration M*, then Eqs. 26–27 across the iterations, the logistic-regression reference on
M*'s split, and the state and manifest the estimator is made from."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from mlx_sdm.calibration.adaptor import Normalization, apply_normalization, scalar_normalization
from mlx_sdm.calibration.canonical import KIND_V2
from mlx_sdm.calibration.constants import Q_BINS
from mlx_sdm.calibration.data import LabelledSet, check_fit_sets
from mlx_sdm.calibration.fit_config import FitConfig, check_fit_config
from mlx_sdm.calibration.offsets import output_offsets, robust_q_tilde_min
from mlx_sdm.calibration.persistence import finite_or_none, format_version, normalization_manifest
from mlx_sdm.calibration.state import OUTCDF_SCALE, EstimatorState
from mlx_sdm.calibration.training import IterationResult, logistic_regression, run_iteration

Progress = bool | Callable[[dict], None] | None


@dataclass
class LogisticReference:
    """The logistic-regression reference on M*'s split, with the same scalar normalisation."""

    weight: np.ndarray
    bias: np.ndarray
    train_accuracy: float
    calibration_accuracy: float


def fit_state(train: LabelledSet, calibration: LabelledSet, config: FitConfig, source: dict | None = None,
              progress: Progress = None) -> tuple[EstimatorState, dict]:
    """Alg. 1 with J iterations over train ∪ calibration, then Eqs. 26–27 across iterations:
    (the state prediction needs, the manifest that describes the fit)."""
    check_fit_config(config)
    num_classes = check_fit_sets(train, calibration)
    pool = LabelledSet.concat(train, calibration)
    started = time.time()
    results, best = run_iterations(pool, num_classes, config, progress)
    q_min_robust, offsets = robust_threshold_and_offsets(results, best, num_classes, config)
    support = pool.subset(best.train_index)
    cal = pool.subset(best.calibration_index)
    reference = logistic_reference(support, cal, best.normalization, num_classes)
    state = fitted_state(best, support, q_min_robust, offsets, reference)
    manifest = fit_manifest(train.dim, config, source, num_classes, results, best, q_min_robust, reference,
                            sizes=(len(support), len(cal)), seconds=time.time() - started)
    return state, manifest


def run_iterations(pool: LabelledSet, num_classes: int, config: FitConfig,
                   progress: Progress) -> tuple[list[IterationResult], IterationResult]:
    """Alg. 1 J times (each iteration with Alg. 2 and Alg. 3) on shuffled halves of the pool, from
    one generator seeded with ``config.seed``; M* is the iteration with the best selection metric."""
    rng = np.random.default_rng(config.seed)
    callback, bar = _progress(progress, config)
    results: list[IterationResult] = []
    best: IterationResult | None = None
    try:
        for j in range(1, config.iterations + 1):
            res = run_iteration(j, pool.embeddings, pool.labels, num_classes, config, rng, callback)
            results.append(res)
            if best is None or res.state.metric >= best.state.metric:  # ties → later j
                best = res
    finally:
        if bar is not None:
            bar.close()
    assert best is not None  # iterations >= 1
    return results, best


def robust_threshold_and_offsets(results: list[IterationResult], best: IterationResult, num_classes: int,
                                 config: FitConfig) -> tuple[float, np.ndarray]:
    """(q̃_min robust, offsets [C, Q_BINS]) across the J iterations: Eq. 26 and Eq. 27 (v1); the
    canonical estimator (v2) has neither, so q̃_min* and zero offsets."""
    q_mins = [r.threshold.q_tilde_min for r in results]  # failed iterations contribute +inf
    q_min_star = best.threshold.q_tilde_min
    if config.estimator == KIND_V2:  # no robust offsets in the canonical estimator
        return q_min_star, np.zeros((num_classes, Q_BINS))
    q_min_robust = robust_q_tilde_min(q_min_star, q_mins, config.alpha)  # Eq. 26
    offsets = output_offsets([r.medians for r in results], num_classes, config.alpha)  # Eq. 27
    return q_min_robust, offsets


def logistic_reference(support: LabelledSet, cal: LabelledSet, normalization: Normalization,
                       num_classes: int) -> LogisticReference:
    """Logistic regression on M*'s D_tr under the adaptor's input scaling, with its accuracy on D_tr
    and D_ca (a reference the adaptor is measured against, not used to predict)."""
    x_tr, x_ca = apply_normalization(support.embeddings, normalization), apply_normalization(cal.embeddings, normalization)
    lr_w, lr_b = logistic_regression(x_tr, support.labels, num_classes)
    lr_train = float(np.mean(np.argmax(x_tr @ lr_w + lr_b, 1) == support.labels))
    lr_cal = float(np.mean(np.argmax(x_ca @ lr_w + lr_b, 1) == cal.labels))
    return LogisticReference(lr_w, lr_b, lr_train, lr_cal)


def scalar_probe(rows: LabelledSet, num_classes: int) -> Callable[[np.ndarray], np.ndarray]:
    """Logistic regression fitted on ``rows`` under the paper's scalar normalisation (the mean and
    std of all their entries), as a predictor x → ŷ: a fixed probe an adaptor trained on the same
    rows is measured against, whatever that adaptor's own input scaling."""
    normalization = scalar_normalization(rows.embeddings)
    ref = logistic_reference(rows, rows, normalization, num_classes)
    return lambda x: np.argmax(apply_normalization(x, normalization) @ ref.weight + ref.bias, axis=1)


def fitted_state(best: IterationResult, support: LabelledSet, q_min_robust: float, offsets: np.ndarray,
                 reference: LogisticReference) -> EstimatorState:
    """M* with its support set D_tr (exemplars h', labels, ŷ), eCDFs, rescaler, Alg. 3 thresholds and offsets."""
    est = best.state
    return EstimatorState(
        params=best.params, normalization=best.normalization,
        support_ids=list(support.ids),
        support_texts=list(support.texts) if support.texts is not None else [None] * len(support),
        support_exemplars=est.hp_tr.astype(np.float32), support_labels=support.labels.copy(),
        support_predictions=est.yhat_tr.astype(np.int64),
        dcdf_ca=est.dcdf_ca, dcdf_tr=est.dcdf_tr, outcdf=est.outcdf,
        calibration_q_tilde=best.calibration_q_tilde, rescaler=best.rescaler_weight,
        psi=best.threshold.psi, offsets=offsets, q_tilde_min_star=best.threshold.q_tilde_min,
        q_tilde_min_robust=q_min_robust, threshold_succeeded=best.threshold.succeeded,
        lr_weight=reference.weight, lr_bias=reference.bias)


def fit_manifest(input_dim: int, config: FitConfig, source: dict | None, num_classes: int,
                 results: list[IterationResult], best: IterationResult, q_min_robust: float,
                 reference: LogisticReference, sizes: tuple[int, int], seconds: float) -> dict:
    """The manifest of a fit: dimensions, α′, the config, Alg. 3's thresholds and the training record
    (``sizes`` = support and calibration set sizes of M*)."""
    est = best.state
    return {
        "format_version": format_version(best.normalization),
        "estimator": config.estimator,
        "outcdf_scale": OUTCDF_SCALE,
        "input_dim": int(input_dim),
        "exemplar_dim": int(config.exemplar_dim),
        "num_classes": num_classes,
        "alpha": float(config.alpha),
        "iterations": int(config.iterations),
        "source": dict(source or {}),
        "config": asdict(config),
        "normalization": normalization_manifest(best.normalization),
        "q_tilde_min_star": finite_or_none(best.threshold.q_tilde_min),
        "q_tilde_min_robust": finite_or_none(q_min_robust),
        "threshold_succeeded": bool(best.threshold.succeeded),
        "psi": [float(x) for x in best.threshold.psi],
        "training": {
            "best_iteration": best.iteration,
            "iterations": [r.stats() for r in results],
            "epochs_chosen": [r.epoch for r in results],
            "train_accuracy": est.train_accuracy,
            "calibration_accuracy": est.calibration_accuracy,
            "logistic_regression": {"train_accuracy": reference.train_accuracy,
                                    "calibration_accuracy": reference.calibration_accuracy},
            "support_size": sizes[0],
            "calibration_size": sizes[1],
            "seconds": round(seconds, 2),
        },
    }


def _progress(progress: Progress, config: FitConfig):
    """(callback, progress bar or None): iteration j of J, epoch, loss, balanced q, time left."""
    if progress is None or progress is False:
        return None, None
    if callable(progress):
        return progress, None
    from mlx_sdm.progress import progress_bar

    bar = progress_bar(total=config.iterations * config.epochs, desc="Alg. 1", unit="epoch")

    def callback(info: dict) -> None:
        bar.set_description(f"iteration {info['iteration']}/{info['iterations']}")
        bar.set_postfix(epoch=info["epoch"], loss=f"{info['loss']:.4f}", balanced_q=f"{info['balanced_q']:.1f}")
        bar.update(1)

    return callback, bar
