"""Alg. 1: train the exemplar adaptor with the sdm loss over J shuffled splits, re-estimating q and
d after every epoch and keeping the epoch with the best balanced median q on D_ca (docs/method.md § 8).

Each iteration ends with the rescaler (Alg. 2), the threshold search (Alg. 3) and the per-bucket
medians that the robust offsets (Eqs. 26–27) are computed from across iterations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, cast

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from mlx_sdm.calibration.activation import flipped, sdm_loss, sdm_numpy, sdm_rank_keys, softmax_numpy
from mlx_sdm.calibration.adaptor import ExemplarAdaptor, Normalization, forward_numpy_batches, input_normalization
from mlx_sdm.calibration.constants import ADAM_BETAS, ADAM_EPS, SOFTMAX_D, SOFTMAX_Q
from mlx_sdm.calibration.canonical import KIND_V1, KIND_V2, balanced_sdm_loss, find_threshold_v2, \
    rescaled_similarity_v2
from mlx_sdm.calibration.dkw import rescaled_output
from mlx_sdm.calibration.fit_config import effective_scaling
from mlx_sdm.calibration.knn import SupportIndex
from mlx_sdm.calibration.rescaler import quantile_vector, rescaled_similarity, train_rescaler
from mlx_sdm.calibration.similarity import class_distance_cdfs, distance_quantile
from mlx_sdm.calibration.threshold import ThresholdResult, bucket_medians, find_threshold

ProgressFn = Callable[[dict], None]


@dataclass
class Reestimate:
    """One re-estimation pass (eval mode, no gradient) over D_tr and D_ca (Alg. 1 inner loop)."""

    hp_tr: np.ndarray
    yhat_tr: np.ndarray
    q_tr: np.ndarray  # flip-adjusted, feeds the next epoch's loss
    d_tr: np.ndarray
    z_ca: np.ndarray
    yhat_ca: np.ndarray
    q_ca: np.ndarray  # flip-adjusted
    dcdf_tr: list[np.ndarray]
    dcdf_ca: list[np.ndarray]
    outcdf: list[np.ndarray]
    v_ca: np.ndarray
    q_tilde_ca: np.ndarray
    metric: float  # the selection metric (larger is better): balanced median q (v1), −balanced sdm loss (v2)
    train_accuracy: float
    calibration_accuracy: float
    q_ca_raw: np.ndarray | None = None  # q of D_ca before the flip rule (v2 has none)
    d_ca: np.ndarray | None = None
    balanced_median_q: float = 0.0


def balanced_median_q(q: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    """Alg. 1 selection metric: mean over classes of median{q of D_ca points with y = c} (0 if empty)."""
    return float(np.mean([np.median(q[labels == c]) if np.any(labels == c) else 0.0 for c in range(num_classes)]))


def reestimate(adaptor: ExemplarAdaptor, h_tr: np.ndarray, y_tr: np.ndarray, h_ca: np.ndarray, y_ca: np.ndarray,
               num_classes: int, knn_backend: str, kind: str = KIND_V1) -> Reestimate:
    z_tr, hp_tr = forward_numpy_batches(adaptor, h_tr)
    z_ca, hp_ca = forward_numpy_batches(adaptor, h_ca)
    yhat_tr = np.argmax(z_tr, axis=1)
    yhat_ca = np.argmax(z_ca, axis=1)
    index = SupportIndex(hp_tr, y_tr, yhat_tr, num_classes, backend=knn_backend)
    # Eq. 5 with self-match exclusion (by index) for D_tr; no exclusion for D_ca
    tr = index.q_and_nearest(hp_tr, yhat_tr, exclude=np.arange(len(hp_tr)))
    ca = index.q_and_nearest(hp_ca, yhat_ca)
    dcdf_tr = class_distance_cdfs(tr.d_nearest, y_tr, tr.q, num_classes)
    dcdf_ca = class_distance_cdfs(ca.d_nearest, y_ca, ca.q, num_classes)
    d_tr = distance_quantile(tr.d_nearest, dcdf_tr)  # Eq. 6 with the training dCDFs
    d_ca = distance_quantile(ca.d_nearest, dcdf_ca)  # Eq. 6 with the calibration dCDFs
    # § 6.3 flips → q := 0 (v1 only: the canonical estimator has no flip rule)
    q_tr = np.where(flipped(sdm_numpy(z_tr, tr.q, d_tr), yhat_tr) & (kind == KIND_V1), 0, tr.q)
    s_ca = sdm_numpy(z_ca, ca.q, d_ca)  # Eq. 7
    q_ca = np.where(flipped(s_ca, yhat_ca), 0, ca.q)
    # Eq. 9 eCDFs (all D_ca points) over the log-odds of sdm: the same ranks as over sdm, without the
    # ties at 1.0 that rounding creates (activation.sdm_rank_keys)
    keys_ca = sdm_rank_keys(z_ca, ca.q, d_ca)
    outcdf = [np.sort(keys_ca[y_ca == c, c]) for c in range(num_classes)]
    v_ca = quantile_vector(keys_ca, outcdf)  # Eq. 9
    q_tilde_ca = rescaled_similarity(v_ca, yhat_ca, q_ca)  # Eq. 10
    median_q = balanced_median_q(q_ca, y_ca, num_classes)
    # v1 selects by the balanced median q (Alg. 1); v2 by the minimum balanced calibration sdm loss
    # (q without flip adjustment, d from D_ca's own dCDFs)
    metric = median_q if kind == KIND_V1 else -balanced_sdm_loss(z_ca, y_ca, ca.q, d_ca, num_classes)
    return Reestimate(hp_tr, yhat_tr, q_tr, d_tr, z_ca, yhat_ca, q_ca, dcdf_tr, dcdf_ca, outcdf, v_ca, q_tilde_ca,
                      metric, float(np.mean(yhat_tr == y_tr)), float(np.mean(yhat_ca == y_ca)),
                      ca.q, d_ca, median_q)


@dataclass
class IterationResult:
    """The selected snapshot M_j* of one iteration, with its rescaler, Alg. 3 result and stats."""

    iteration: int
    epoch: int
    params: dict[str, np.ndarray]
    normalization: Normalization
    train_index: np.ndarray  # positions in the pool
    calibration_index: np.ndarray
    state: Reestimate
    rescaler_weight: np.ndarray
    rescaler_epochs: int
    threshold: ThresholdResult
    medians: dict[tuple[int, int], float]
    calibration_q_tilde: list[np.ndarray]  # per class, sorted (Eq. 12)
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def stats(self) -> dict:
        return {
            "iteration": self.iteration,
            "epoch_chosen": self.epoch,
            "balanced_median_q": self.state.balanced_median_q,
            "selection_metric": self.state.metric,
            "train_accuracy": self.state.train_accuracy,
            "calibration_accuracy": self.state.calibration_accuracy,
            "q_tilde_min": self.threshold.q_tilde_min if self.threshold.succeeded else None,
            "psi": [float(x) for x in self.threshold.psi],
            "rescaler": np.asarray(self.rescaler_weight, dtype=np.float64).round(6).tolist(),
            "rescaler_epochs": self.rescaler_epochs,
            "final_loss": self.losses[-1] if self.losses else None,
            "seconds": round(self.seconds, 3),
        }


def stratified_halves(labels: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Alg. 1 split of the pool in half, done per class so that every class lands in both halves."""
    tr, ca = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.nonzero(labels == c)[0])
        half = len(idx) // 2
        tr.append(idx[:half])
        ca.append(idx[half:])
    return rng.permutation(np.concatenate(tr)), rng.permutation(np.concatenate(ca))


def _parameters(adaptor: ExemplarAdaptor) -> dict[str, np.ndarray]:
    """The adaptor's parameters as numpy arrays, by their flat names."""
    flat = cast(list[tuple[str, Any]], tree_flatten(adaptor.parameters()))  # a list: no destination given
    return {k: np.array(v) for k, v in flat}


def run_iteration(iteration: int, pool_h: np.ndarray, pool_y: np.ndarray, num_classes: int, config,
                  rng: np.random.Generator, progress: ProgressFn | None = None) -> IterationResult:
    """One iteration j of Alg. 1 (``config`` is a :class:`~mlx_sdm.calibration.fit_config.FitConfig`)."""
    start = time.time()
    tr_idx, ca_idx = stratified_halves(pool_y, rng)
    h_tr, y_tr, h_ca, y_ca = pool_h[tr_idx], pool_y[tr_idx], pool_h[ca_idx], pool_y[ca_idx]
    mu, sigma = input_normalization(h_tr, effective_scaling(config))
    mx.random.seed(int(rng.integers(0, 2**31 - 1)))
    adaptor = ExemplarAdaptor(pool_h.shape[1], config.exemplar_dim, num_classes)
    adaptor.set_normalization(mu, sigma)
    mx.eval(adaptor.parameters())
    opt = optim.Adam(learning_rate=config.learning_rate, betas=list(ADAM_BETAS), eps=ADAM_EPS)

    def loss_fn(model, x, y, q, d):
        return sdm_loss(model(x)[0], y, q, d)  # Eq. 8

    loss_and_grad = nn.value_and_grad(adaptor, loss_fn)
    mx_h_tr, mx_y_tr = mx.array(h_tr), mx.array(y_tr.astype(np.int32))
    q_tr = np.full(len(y_tr), SOFTMAX_Q)  # epoch 1 = standard softmax
    d_tr = np.full(len(y_tr), SOFTMAX_D)
    best_metric = -1.0
    best: tuple[int, dict[str, np.ndarray], Reestimate] | None = None
    losses: list[float] = []
    for epoch in range(1, config.epochs + 1):
        order = rng.permutation(len(y_tr))
        mx_q, mx_d = mx.array(q_tr.astype(np.float32)), mx.array(d_tr.astype(np.float32))
        total, batches = 0.0, 0
        for s in range(0, len(order), config.batch_size):
            b = mx.array(order[s:s + config.batch_size])
            loss, grads = loss_and_grad(adaptor, mx_h_tr[b], mx_y_tr[b], mx_q[b], mx_d[b])
            opt.update(adaptor, grads)
            mx.eval(adaptor.parameters(), opt.state, loss)
            total += loss.item()
            batches += 1
        losses.append(total / max(batches, 1))
        # re-estimation pass: ŷ_tr, q, d for both sets, eCDFs, v and q̃ (Alg. 1)
        est = reestimate(adaptor, h_tr, y_tr, h_ca, y_ca, num_classes, config.knn_backend, config.estimator)
        q_tr, d_tr = est.q_tr.astype(np.float64), est.d_tr
        if best is None or est.metric >= best_metric:  # ties → later epoch; a metric that is not a number (the
            best_metric = est.metric                     # canonical one on a class with no q' > 0) keeps epoch 1
            best = (epoch, _parameters(adaptor), est)
        if progress is not None:
            progress({"iteration": iteration, "iterations": config.iterations, "epoch": epoch,
                      "epochs": config.epochs, "loss": losses[-1], "balanced_q": est.metric})
    assert best is not None  # the first epoch is always kept
    epoch, params, est = best
    if config.estimator == KIND_V2:
        return _finish_v2(iteration, epoch, params, (mu, sigma), tr_idx, ca_idx, est, y_ca, num_classes, config,
                          losses, start)
    # Alg. 2 on the cached (v, q̃, y) of D_ca at the selected epoch
    resc = train_rescaler(est.v_ca, est.q_tilde_ca, y_ca, num_classes, seed=int(rng.integers(0, 2**31 - 1)),
                          learning_rate=config.rescaler_learning_rate, batch_size=config.rescaler_batch_size,
                          max_epochs=config.rescaler_max_epochs)
    centroid = rescaled_output(est.v_ca, est.q_tilde_ca, resc.weight)  # Eq. 11
    q_tilde = np.where(np.argmax(centroid, axis=1) != est.yhat_ca, 0.0, est.q_tilde_ca)  # § 9.2 flip → q̃ := 0
    thr = find_threshold(q_tilde, centroid, y_ca, est.yhat_ca, num_classes, config.alpha)  # Alg. 3
    medians = bucket_medians(q_tilde, centroid, est.yhat_ca, num_classes)  # § 11 → Eq. 27
    cal_q_tilde = [np.sort(est.q_tilde_ca[y_ca == c]) for c in range(num_classes)]  # Eq. 12 pools
    return IterationResult(iteration, epoch, params, (mu, sigma), tr_idx, ca_idx, est, resc.weight, resc.epochs_run,
                           thr, medians, cal_q_tilde, losses, time.time() - start)


def _finish_v2(iteration, epoch, params, normalization, tr_idx, ca_idx, est: Reestimate, y_ca, num_classes, config,
               losses, start) -> IterationResult:
    """The canonical estimator's end of an iteration: v2 Alg. 1 on the cached calibration (q′, SDM(z′), y);
    no rescaler (W'' = I is stored only to keep one file layout), no offsets."""
    assert est.q_ca_raw is not None and est.d_ca is not None  # the v2 re-estimation keeps them
    probs = sdm_numpy(est.z_ca, est.q_ca_raw, est.d_ca)
    q_prime = rescaled_similarity_v2(probs, est.yhat_ca, est.q_ca_raw)  # v2 Eq. 8
    thr = find_threshold_v2(q_prime, probs, y_ca, num_classes, config.alpha)
    cal_q_prime = [np.sort(q_prime[y_ca == c]) for c in range(num_classes)]  # v2 Eq. 11 pools (OOD included)
    return IterationResult(iteration, epoch, params, normalization, tr_idx, ca_idx, est, np.eye(num_classes), 0, thr,
                           {}, cal_q_prime, losses, time.time() - start)


def load_params(adaptor: ExemplarAdaptor, params: dict[str, np.ndarray]) -> None:
    adaptor.update(tree_unflatten([(k, mx.array(v)) for k, v in params.items()]))
    mx.eval(adaptor.parameters())


def logistic_regression(x: np.ndarray, y: np.ndarray, num_classes: int, l2: float = 1e-4,
                        max_iter: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression (L-BFGS, small L2) as a reference for the adaptor's accuracy.
    Returns (W [D, C], b [C]); inputs should already be normalised."""
    from scipy.optimize import minimize

    x = np.asarray(x, dtype=np.float32)
    xt = np.ascontiguousarray(x.T)
    n, dim = x.shape
    onehot = np.eye(num_classes, dtype=np.float32)[y]

    def objective(theta):
        w = theta[: dim * num_classes].reshape(dim, num_classes).astype(np.float32)
        b = theta[dim * num_classes:].astype(np.float32)
        p = softmax_numpy(x @ w + b)
        loss = -np.mean(np.log(p[np.arange(n), y] + 1e-300)) + 0.5 * l2 * float(np.sum(w * w))
        g = ((p - onehot) / n).astype(np.float32)
        return loss, np.concatenate([(xt @ g + l2 * w).ravel(), g.sum(axis=0)]).astype(np.float64)

    res = minimize(objective, np.zeros(dim * num_classes + num_classes), jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter})
    return res.x[: dim * num_classes].reshape(dim, num_classes).astype(np.float32), res.x[dim * num_classes:].astype(np.float32)
