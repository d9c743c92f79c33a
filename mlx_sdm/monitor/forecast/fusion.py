"""Fitted monitors and their fusion, cross-fitted by session (docs/monitoring.md, Platt recalibration and docs/monitoring.md, combining with the verifier, the v2 fusion).

Nothing here is ever tuned on the sessions it scores: :func:`crossfit` splits sessions into ``k``
folds (stratified by outcome; within each outcome sessions sorted by id and dealt round-robin, so
``k = 2`` is two halves, as the Platt recalibration of docs/monitoring.md asks), fits on the other ``k - 1`` folds and scores the held-out one.

What is fitted on the training folds (:func:`fit_monitors`):

1. TRACER's weights ``(alpha, gamma, k, w)`` on a grid (docs/monitoring.md, TRACER weights; ``beta`` weighs the tool
   action-observation gap, absent in chat sessions), maximising the training folds' AUROC;
2. the verdict monitor's per-status turn success rates (:mod:`mlx_sdm.monitor.forecast.verdict_monitor`);
3. a weighted Platt map (docs/monitoring.md, Platt recalibration: logit feature, weighted standardisation, L2 on the slope,
   monotone fallback) per single monitor: AUQ ``P_t``, TRACER ``exp(-R_t)``, the verdict forecast;
4. the fusion, a stacked logistic model ``p_t = sigma(b0 + sum_j b_j z_j)`` (docs/monitoring.md, combining with the verifier, the v2 fusion) over the
   standardised features logit(verdict p_t), logit(c_p), logit(P_t), -R_t, -U_t, with every
   coefficient >= 0 (confidence features raise p_t, risk features lower it), fitted by weighted log
   loss with the TPS step weights (the negated TPS_log), L2 penalty ``0.5*lambda*|b|^2`` with
   ``lambda = STACKER_L2 / n_training_sessions``; if every
   slope is 0 it falls back to the weighted base rate;
5. the base rate: the training folds' weighted success rate.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

import numpy as np
from scipy import optimize, special

from mlx_sdm.monitor.forecast import scoring
from mlx_sdm.monitor.forecast.signals import SessionSignals
from mlx_sdm.monitor.online.tracer import TracerConfig
from mlx_sdm.monitor.forecast.verdict_monitor import VerdictMonitorParams, fit_verdict_params, verdict_forecasts

EPS = scoring.EPS
DEFAULT_FOLDS = 5
#: [RESOLVED here] L2 on the slopes per training session: lambda = STACKER_L2 / n_sessions on the
#: weight-normalised NLL (= 0.5*|b|^2 against the NLL summed over sessions), so the shrinkage fades as
#: sessions accumulate. Spec 4.7's lambda = 1 on the normalised NLL shrinks even a strong slope to ~0.3
#: whatever the data size; the single-monitor Platt maps here use the same per-session penalty.
STACKER_L2 = 1.0
#: TRACER grid (docs/monitoring.md, TRACER weights optimiser grid, thinned to what runs in seconds on a laptop).
TRACER_GRID = {"alpha": (0.0, 0.5, 1.0, 2.0, 4.0, 8.0), "gamma": (0.0, 0.5, 1.0, 2.0, 5.0, 8.0),
               "k": (0.1, 0.26, 0.5, 1.0), "w": (0.0, 0.2)}
#: Fusion features: name -> what the stacker reads (orientation: larger = more likely success).
FUSION_FEATURES = ("verifier", "p_true", "auq", "tracer", "surprisal")
FEATURE_LABELS = {"verifier": "the verifier's verdict", "p_true": "the model's P(True)", "auq": "AUQ confidence",
                  "tracer": "TRACER risk", "surprisal": "token surprisal"}
#: Rows of the held-out report, in order.
MONITORS = ("base_rate", "auq_raw", "tracer_raw", "auq", "tracer", "verifier", "fused")
MONITOR_LABELS = {"base_rate": "base rate", "auq_raw": "AUQ P_t (as logged)", "tracer_raw": "TRACER exp(-R) (ref. weights)",
                  "auq": "AUQ + Platt", "tracer": "TRACER tuned + Platt", "verifier": "verdict monitor + Platt",
                  "fused": "fused (stacked Platt)"}

T = TypeVar("T")


# ----------------------------------------------------------------------------------------------
# folds and cross-fitting


def session_folds(ids: Sequence[str], y: Sequence[int], k: int = DEFAULT_FOLDS) -> np.ndarray:
    """Fold of each session: within each outcome, sort by id and deal round-robin (k = 2: docs/monitoring.md, Platt recalibration step 1)."""
    if k < 2:
        raise ValueError(f"cross-fitting needs k >= 2 folds, got {k}")
    fold = np.zeros(len(ids), dtype=np.int64)
    for label in sorted(set(int(v) for v in y)):
        members = sorted((i for i in range(len(ids)) if int(y[i]) == label), key=lambda i: str(ids[i]))
        for j, i in enumerate(members):
            fold[i] = j % k
    return fold


def crossfit(items: Sequence[T], ids: Sequence[str], y: Sequence[int], fit: Callable[[list[T]], object],
             apply: Callable[[object, T], list[float]], k: int = DEFAULT_FOLDS) -> list[list[float]]:
    """Out-of-fold forecasts: each item is scored by ``apply(fit(items of the other folds), item)``."""
    fold = session_folds(ids, y, k)
    out: list[list[float] | None] = [None] * len(items)
    for f in range(k):
        train = [items[i] for i in np.flatnonzero(fold != f)]
        if not train:
            raise ValueError("cross-fitting needs sessions outside every fold")
        model = fit(train)
        for i in np.flatnonzero(fold == f):
            out[i] = apply(model, items[i])
    return out  # type: ignore[return-value]


# ----------------------------------------------------------------------------------------------
# stacked weighted Platt (docs/monitoring.md, combining with the verifier, the v2 fusion)


@dataclass(frozen=True)
class Stacker:
    intercept: float
    coef: np.ndarray  # >= 0 on standardised, orientation-corrected features
    mean: np.ndarray
    std: np.ndarray
    names: tuple[str, ...]
    fallback: bool = False

    def standardise(self, x: np.ndarray) -> np.ndarray:
        return (np.atleast_2d(x) - self.mean) / self.std

    def apply(self, x: np.ndarray) -> np.ndarray:
        eta = self.intercept + self.standardise(x) @ self.coef
        return np.clip(special.expit(eta), EPS, 1 - EPS)

    def contributions(self, x: np.ndarray) -> np.ndarray:
        """b_j * z_j per feature (the logit terms; their sum plus the intercept is logit p_t)."""
        return self.standardise(x) * self.coef


def fit_stacker(x: np.ndarray, y: np.ndarray, weights: np.ndarray, names: Sequence[str], *,
                lam: float = STACKER_L2, std_floor: float = scoring.STD_FLOOR) -> Stacker:
    """Weighted ML logistic model with non-negative slopes and 0.5*lam*|b|^2 (monotone fallback: base rate)."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    y = np.asarray(y, dtype=np.float64)
    wn = np.asarray(weights, dtype=np.float64)
    if x.shape[0] != y.size or y.size != wn.size or y.size == 0:
        raise ValueError("features, labels and weights must be non-empty and of equal length")
    wn = wn / wn.sum()
    mean = wn @ x
    std = np.maximum(np.sqrt(wn @ (x - mean) ** 2), std_floor)
    z = (x - mean) / std
    d = z.shape[1]

    def objective(theta):
        a, b = theta[0], theta[1:]
        eta = a + z @ b
        nll = np.sum(wn * (np.logaddexp(0.0, eta) - y * eta)) + 0.5 * lam * b @ b
        r = wn * (special.expit(eta) - y)
        return nll, np.concatenate([[r.sum()], z.T @ r + lam * b])

    res = optimize.minimize(objective, np.zeros(d + 1), jac=True, method="L-BFGS-B",
                            bounds=[(None, None)] + [(0.0, None)] * d)
    a, b = float(res.x[0]), np.asarray(res.x[1:], dtype=np.float64)
    if not np.any(b > 0):
        base = float(np.clip(wn @ y, EPS, 1 - EPS))
        return Stacker(float(special.logit(base)), np.zeros(d), mean, std, tuple(names), fallback=True)
    return Stacker(a, b, mean, std, tuple(names))


def _logit(p) -> np.ndarray:
    return special.logit(np.clip(np.asarray(p, dtype=np.float64), EPS, 1 - EPS))


# ----------------------------------------------------------------------------------------------
# TRACER weights (docs/monitoring.md, TRACER weights), fitted on training sessions only


def tune_tracer(signals: Sequence[SessionSignals], grid: dict[str, Sequence[float]] | None = None) -> TracerConfig:
    """The grid point with the best training AUROC (failure positive) of the episode score; ties -> first.

    Vectorised over sessions: per (alpha, gamma) one sort of the padded step risks; per (k, w) the
    top-K means are read from cumulative sums (same values as ``tracer.tracer_score``)."""
    grid = grid or TRACER_GRID
    failure = np.array([1 - s.success for s in signals])
    if failure.min() == failure.max():
        return TracerConfig()
    ref = TracerConfig()
    n = np.array([s.tracer_parts.shape[0] for s in signals])
    parts = np.zeros((len(signals), int(n.max()), 4))
    for i, s in enumerate(signals):
        parts[i, : n[i]] = s.tracer_parts
    valid = np.arange(parts.shape[1])[None, :] < n[:, None]
    rows = np.arange(len(signals))
    best, best_auc = ref, -math.inf
    for alpha, gamma in itertools.product(grid["alpha"], grid["gamma"]):
        r = np.maximum.reduce([parts[..., 0], alpha * parts[..., 1], ref.beta * parts[..., 2], gamma * parts[..., 3]])
        r = np.where(valid, r, -np.inf)
        top = -np.sort(-r, axis=1)  # descending, padding last
        csum = np.cumsum(np.where(np.isfinite(top), top, 0.0), axis=1)
        for k, w in itertools.product(grid["k"], grid["w"]):
            K = n if k >= 1 else np.maximum(1, np.floor(k * n + 1e-9).astype(np.int64))
            score = (1.0 - w) * csum[rows, K - 1] / K + w * top[:, 0]
            auc = scoring.auroc(score, failure)
            if auc > best_auc + 1e-12:
                best, best_auc = TracerConfig(alpha=alpha, beta=ref.beta, gamma=gamma, k=k, w=w), auc
    return best


# ----------------------------------------------------------------------------------------------
# all fitted monitors


@dataclass(frozen=True)
class FittedMonitors:
    base_rate: float
    tracer_config: TracerConfig
    verdict_params: VerdictMonitorParams
    platt: dict[str, scoring.PlattMap]  # "auq", "tracer", "verifier"
    stacker: Stacker
    weights: str


def single_forecasts(s: SessionSignals, tracer_config: TracerConfig, verdict_params: VerdictMonitorParams) -> dict[str, np.ndarray]:
    """Unfitted per-agent-step success forecasts of each single monitor."""
    return {"auq": s.auq, "tracer": np.exp(-s.tracer_prefix(tracer_config)),
            "verifier": np.asarray(verdict_forecasts(s.verdicts, verdict_params))}


def fusion_features(s: SessionSignals, tracer_config: TracerConfig, verdict_params: VerdictMonitorParams) -> np.ndarray:
    """[A, 5] features in FUSION_FEATURES order, oriented so that larger means success is likelier."""
    single = single_forecasts(s, tracer_config, verdict_params)
    return np.column_stack([_logit(single["verifier"]), _logit(s.p_true), _logit(s.auq),
                            -s.tracer_prefix(tracer_config), -s.surprisal])


def _stack_rows(signals, per_session: Callable[[SessionSignals], np.ndarray], weights: str):
    xs, ys, ws = [], [], []
    for s in signals:
        x = per_session(s)
        xs.append(x)
        ys.append(np.full(len(x), s.success, dtype=np.float64))
        ws.append(scoring.step_weights(len(x), weights))  # each session's weights sum to 1 (TPS)
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)


def fit_monitors(train: Sequence[SessionSignals], weights: str = "linear-front") -> FittedMonitors:
    """Fit every monitor of the report on ``train`` (module docstring, steps 1-5)."""
    tracer_config = tune_tracer(train)
    verdict_params = fit_verdict_params([(v, bool(c) if c is not None else bool(s.success))
                                         for s in train for v, c in zip(s.verdicts, s.turn_correct)])
    lam = STACKER_L2 / len(train)
    platt = {}
    for name in ("auq", "tracer", "verifier"):
        p, y, w = _stack_rows(train, lambda s: single_forecasts(s, tracer_config, verdict_params)[name], weights)
        platt[name] = scoring.fit_weighted_platt(p, y, w, lam=lam)
    x, y, w = _stack_rows(train, lambda s: fusion_features(s, tracer_config, verdict_params), weights)
    stacker = fit_stacker(x, y, w, FUSION_FEATURES, lam=lam)
    base = float(np.clip(np.mean([s.success for s in train]), EPS, 1 - EPS))
    return FittedMonitors(base, tracer_config, verdict_params, platt, stacker, weights)


def monitor_forecasts(fitted: FittedMonitors, s: SessionSignals) -> dict[str, np.ndarray]:
    """Per-agent-step forecasts p_t of every report row for one (held-out) session."""
    single = single_forecasts(s, fitted.tracer_config, fitted.verdict_params)
    return {
        "base_rate": np.full(s.n_agent, fitted.base_rate),
        "auq_raw": np.clip(s.auq, 0.0, 1.0),
        "tracer_raw": np.exp(-s.tracer_prefix(TracerConfig())),
        "auq": fitted.platt["auq"].apply(single["auq"]),
        "tracer": fitted.platt["tracer"].apply(single["tracer"]),
        "verifier": fitted.platt["verifier"].apply(single["verifier"]),
        "fused": fitted.stacker.apply(fusion_features(s, fitted.tracer_config, fitted.verdict_params)),
    }


def crossfit_monitors(signals: Sequence[SessionSignals], k: int = DEFAULT_FOLDS,
                      weights: str = "linear-front") -> list[dict[str, np.ndarray]]:
    """Out-of-fold forecasts of every monitor for every session (k folds by session)."""
    ids = [s.session_id for s in signals]
    y = [s.success for s in signals]
    return crossfit(list(signals), ids, y, lambda train: fit_monitors(train, weights), monitor_forecasts, k)  # type: ignore[return-value]


def strongest_signal(stacker: Stacker, features: np.ndarray, previous: np.ndarray | None) -> tuple[str, float]:
    """The fusion feature whose logit contribution changed most since the previous step (at the first
    step: whose contribution is largest in size, against the corpus average): (name, change in logit p_t)."""
    now = stacker.contributions(features)[0]
    delta = now - (stacker.contributions(previous)[0] if previous is not None else 0.0)
    j = int(np.argmax(np.abs(delta)))
    return FUSION_FEATURES[j], float(delta[j])
