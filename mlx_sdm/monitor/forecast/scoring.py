"""Trajectory proper scores and ranking diagnostics (docs/monitoring.md, TPS; TRACER evaluation).

Orientation: TPS scores *success* probabilities ``p_t = P(Y = 1 | H_t)`` and is reward-oriented
(larger is better, <= 0). AUROC treats *failure* as the positive class. AUARC follows the TRACER
reference algorithm (coverage grid ``linspace(1.0, 0.05, 20)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import optimize, special

EPS = 1e-6  # clip for log / logit (docs/monitoring.md, Platt recalibration)
STD_FLOOR = 1e-6  # Platt feature std floor (docs/monitoring.md, Platt recalibration)
PLATT_L2 = 1.0  # lambda of the 0.5*lambda*b^2 slope penalty (docs/monitoring.md, Platt recalibration)
AUARC_COVERAGES = np.linspace(1.0, 0.05, 20)  # docs/monitoring.md, TRACER evaluation
AUARC_MIN_EPISODES = 10
ECE_BINS = 10

SCORES = ("log", "brier", "beta")
SCHEDULES = ("linear-front", "uniform", "exp-front", "linear-back")


# ----------------------------------------------------------------------------------------------
# binary scores (docs/monitoring.md, TPS binary scores)


def binary_score(p, y, score: str = "log", *, a: float = 2.0, b: float = 4.0, eps: float = EPS) -> np.ndarray:
    """S(p, y), reward orientation. ``y`` may be fractional (expected score under P(Y=1)=y)."""
    p = np.asarray(p, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if score == "log":
        pc = np.clip(p, eps, 1.0 - eps)
        return y * np.log(pc) + (1.0 - y) * np.log1p(-pc)
    if score == "brier":
        # Brier as reported in the TPS tables: -(y - p)^2, linear in y only for y in {0,1}
        return -(y * (1.0 - p) ** 2 + (1.0 - y) * p**2)
    if score == "beta":
        if a <= 0 or b <= 0:
            raise ValueError(f"beta score needs a, b > 0 (got a={a}, b={b}); a = b = 0 is the log score")
        pc = np.clip(p, 0.0, 1.0)
        s1 = -special.beta(a, b + 1.0) * (1.0 - special.betainc(a, b + 1.0, pc))  # S(p,1) = -∫_p^1 c^(a-1)(1-c)^b dc
        s0 = -special.beta(a + 1.0, b) * special.betainc(a + 1.0, b, pc)  # S(p,0) = -∫_0^p c^a (1-c)^(b-1) dc
        return y * s1 + (1.0 - y) * s0
    raise ValueError(f"score must be one of {SCORES}, got {score!r}")


def beta24_closed_form(p, y) -> np.ndarray:
    """Beta(2,4) closed forms of docs/monitoring.md, TPS binary scores (used to cross-check the betainc form)."""
    p = np.asarray(p, dtype=np.float64)
    s1 = -((1 - p) ** 5 / 5 - (1 - p) ** 6 / 6)
    s0 = -(p**3 / 3 - 3 * p**4 / 4 + 3 * p**5 / 5 - p**6 / 6)
    return np.where(np.asarray(y) == 1, s1, s0)


# ----------------------------------------------------------------------------------------------
# weight schedules (docs/monitoring.md, TPS weight schedules)


def step_weights(horizon: int, schedule: str = "linear-front") -> np.ndarray:
    """Strictly positive weights over t = 1..T, normalised to sum 1 over the horizon T."""
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    t = np.arange(1, horizon + 1, dtype=np.float64)
    if schedule == "linear-front":
        raw = horizon - t + 1.0
    elif schedule == "uniform":
        raw = np.ones_like(t)
    elif schedule == "exp-front":
        raw = 2.0 ** -(t - 1.0)
    elif schedule == "linear-back":
        raw = t.copy()
    else:
        raise ValueError(f"weights must be one of {SCHEDULES}, got {schedule!r}")
    return raw / raw.sum()


# ----------------------------------------------------------------------------------------------
# TPS (docs/monitoring.md, TPS) and censored TPS (docs/monitoring.md, censored TPS)


def _check_probs(p: Sequence[float], name: str = "p") -> np.ndarray:
    arr = np.asarray(p, dtype=np.float64).reshape(-1)
    if arr.size == 0:
        raise ValueError(f"{name} is empty: a trajectory needs at least one forecast")
    if np.any(~np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > 1):
        raise ValueError(f"{name} must hold probabilities in [0, 1], got {arr.tolist()}")
    return arr


def trajectory_proper_score(
    p: Sequence[float],
    y: int,
    score: str = "log",
    weights: str = "linear-front",
    a: float = 2.0,
    b: float = 4.0,
    *,
    eps: float = EPS,
) -> float:
    """TPS_S(p_1..T, Y) = sum_t w_t S(p_t, Y) (docs/monitoring.md, TPS); T = len(p); larger is better."""
    arr = _check_probs(p)
    if y not in (0, 1):
        raise ValueError(f"y must be 0 (failure) or 1 (success), got {y!r}")
    w = step_weights(arr.size, weights)
    return float(np.sum(w * binary_score(arr, y, score, a=a, b=b, eps=eps)))


def censored_trajectory_score(
    p: Sequence[float],
    horizon: int,
    *,
    complete: bool,
    y: int | None = None,
    pi: float | None = None,
    score: str = "log",
    weights: str = "linear-front",
    a: float = 2.0,
    b: float = 4.0,
    eps: float = EPS,
) -> float:
    """Censored TPS (docs/monitoring.md, censored TPS). Weights come from the full-horizon schedule, not renormalised.

    ``complete=True``: the ordinary TPS of the observed prefix with horizon weights (needs ``y``).
    ``complete=False``: exact reduced score with ``pi = P(Y=1 | stopped prefix)`` when ``pi`` is
    given; otherwise the simple (pessimistic) approximation, i.e. ``pi = 0``.
    """
    arr = _check_probs(p)
    if arr.size > horizon:
        raise ValueError(f"{arr.size} forecasts exceed the horizon T={horizon}")
    w = step_weights(horizon, weights)[: arr.size]
    if complete:
        if y not in (0, 1):
            raise ValueError("a complete trajectory needs y in {0, 1}")
        target = float(y)
    else:
        if pi is not None and not 0.0 <= pi <= 1.0:
            raise ValueError(f"pi must be in [0, 1], got {pi}")
        target = 0.0 if pi is None else float(pi)
    # pi*S(p,1) + (1-pi)*S(p,0): the score is affine in the outcome for every family here
    s = target * binary_score(arr, 1, score, a=a, b=b, eps=eps) + (1 - target) * binary_score(arr, 0, score, a=a, b=b, eps=eps)
    return float(np.sum(w * s))


# ----------------------------------------------------------------------------------------------
# ranking diagnostics


def auroc(risk: Sequence[float], failure: Sequence[int]) -> float:
    """Area under ROC with failure (label 1) as the positive class; ties count one half."""
    risk = np.asarray(risk, dtype=np.float64)
    failure = np.asarray(failure, dtype=np.int64)
    pos, neg = risk[failure == 1], risk[failure == 0]
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    ranks = _average_ranks(np.concatenate([pos, neg]))
    # Mann-Whitney U / (n_pos * n_neg)
    return float((ranks[: pos.size].sum() - pos.size * (pos.size + 1) / 2) / (pos.size * neg.size))


def _average_ranks(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x, method="average")


def auarc(risk: Sequence[float], success: Sequence[int]) -> float:
    """Area under the accuracy-rejection curve, TRACER reference algorithm (docs/monitoring.md, TRACER evaluation).

    Episodes are sorted most uncertain first; at each coverage c the ``ceil(c*N)`` lowest-risk
    episodes are kept and their success rate recorded; trapezoid over coverage 0.05..1.0.
    """
    risk = np.asarray(risk, dtype=np.float64)
    success = np.asarray(success, dtype=np.float64)
    n = risk.size
    if n < AUARC_MIN_EPISODES:
        raise ValueError(f"AUARC needs at least {AUARC_MIN_EPISODES} episodes, got {n}")
    order = np.argsort(-risk, kind="stable")  # most uncertain first
    sorted_success = success[order]
    rates = []
    for c in AUARC_COVERAGES:
        n_keep = min(max(math.ceil(c * n), 1), n)
        rates.append(sorted_success[n - n_keep :].mean())  # the n_keep lowest-risk episodes
    cov = AUARC_COVERAGES[::-1]
    acc = np.asarray(rates)[::-1]
    return float(np.sum((cov[1:] - cov[:-1]) * (acc[1:] + acc[:-1]) / 2.0))


def youden_threshold(risk: Sequence[float], failure: Sequence[int]) -> float:
    """ROC threshold maximising J = TPR - FPR; a risk >= threshold predicts failure."""
    risk = np.asarray(risk, dtype=np.float64)
    failure = np.asarray(failure, dtype=np.int64)
    best_j, best_t = -np.inf, np.inf
    n_pos, n_neg = max((failure == 1).sum(), 1), max((failure == 0).sum(), 1)
    for t in np.unique(risk)[::-1]:
        pred = risk >= t
        j = (pred & (failure == 1)).sum() / n_pos - (pred & (failure == 0)).sum() / n_neg
        if j > best_j:
            best_j, best_t = j, t
    return float(best_t)


EARLY_WARNING_MIN_FAILED = 5
EARLY_WARNING_CUTS = tuple(range(10, 100, 10))


@dataclass(frozen=True)
class EarlyWarning:
    """Detection times (percent of the trajectory) on failed episodes (docs/monitoring.md, TRACER evaluation)."""

    times: tuple[float, ...]
    mean: float
    median: float
    share_before: dict[int, float]  # cut (10..90) -> share of failed episodes detected before cut %


def early_warning(prefix_series: Sequence[Sequence[float]], threshold: float) -> EarlyWarning:
    """First 0-based i with R_i > threshold gives 100*i/(n-1) (0 if n = 1; 100 if never crossed).

    ``prefix_series``: the prefix scores R_t of each *failed* episode (at least 5);
    ``threshold``: the episode-level Youden threshold (:func:`youden_threshold`).
    """
    if len(prefix_series) < EARLY_WARNING_MIN_FAILED:
        raise ValueError(f"early warning needs at least {EARLY_WARNING_MIN_FAILED} failed episodes, got {len(prefix_series)}")
    times = []
    for series in prefix_series:
        n = len(series)
        hit = next((i for i, r in enumerate(series) if r > threshold), None)
        if hit is None:
            times.append(100.0)
        else:
            times.append(0.0 if n == 1 else 100.0 * hit / (n - 1))
    arr = np.asarray(times)
    return EarlyWarning(tuple(times), float(arr.mean()), float(np.median(arr)),
                        {c: float(np.mean(arr < c)) for c in EARLY_WARNING_CUTS})


def trajectory_ece(scores: Sequence[float], y: Sequence[int], bins: int = ECE_BINS) -> float:
    """Tie-aware quantile-binned ECE (docs/monitoring.md, ranking diagnostics): equal-count bins from quantiles, ties never split.

    ``ECE = sum_b (n_b/N) * |mean(Y_b) - mean(s_b)|``.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if s.size == 0:
        raise ValueError("trajectory_ece needs at least one trajectory")
    edges = np.unique(np.quantile(s, np.linspace(0, 1, bins + 1))[1:-1])
    idx = np.searchsorted(edges, s, side="left")  # value-based: equal values share a bin
    total = 0.0
    for b in np.unique(idx):
        m = idx == b
        total += m.sum() / s.size * abs(y[m].mean() - s[m].mean())
    return float(total)


def weighted_mean_forecast(p: Sequence[float], weights: str = "linear-front") -> float:
    """Scalar trajectory summary used by the TPS tables: schedule-weighted mean of p_t."""
    arr = _check_probs(p)
    return float(np.sum(step_weights(arr.size, weights) * arr))


# ----------------------------------------------------------------------------------------------
# recalibration (docs/monitoring.md, Platt recalibration): cross-fitted weighted Platt


@dataclass(frozen=True)
class PlattMap:
    a: float
    b: float
    mean: float
    std: float
    eps: float = EPS
    fallback: bool = False  # True when the slope was <= 0 and the map is the weighted base rate

    def apply(self, p) -> np.ndarray:
        z = special.logit(np.clip(np.asarray(p, dtype=np.float64), self.eps, 1 - self.eps))
        out = special.expit(self.a + self.b * (z - self.mean) / self.std)
        return np.clip(out, self.eps, 1 - self.eps)


def fit_weighted_platt(
    p: Sequence[float], y: Sequence[int], weights: Sequence[float], *, lam: float = PLATT_L2,
    eps: float = EPS, std_floor: float = STD_FLOOR,
) -> PlattMap:
    """P(Y=1) = sigma(a + b*z_std), weighted ML with 0.5*lam*b^2 on the slope (docs/monitoring.md, Platt recalibration steps 2-4)."""
    p = np.asarray(p, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if not (p.size == y.size == w.size) or p.size == 0:
        raise ValueError("p, y and weights must be non-empty and of equal length")
    wn = w / w.sum()
    z = special.logit(np.clip(p, eps, 1 - eps))
    mean = float(np.sum(wn * z))
    std = max(float(np.sqrt(np.sum(wn * (z - mean) ** 2))), std_floor)
    zs = (z - mean) / std

    def objective(theta):
        a, b = theta
        eta = a + b * zs
        # weight-normalised NLL: log(1+e^eta) - y*eta
        nll = np.sum(wn * (np.logaddexp(0.0, eta) - y * eta)) + 0.5 * lam * b * b
        r = special.expit(eta) - y
        return nll, np.array([np.sum(wn * r), np.sum(wn * r * zs) + lam * b])

    res = optimize.minimize(objective, x0=np.zeros(2), jac=True, method="L-BFGS-B")
    a, b = (float(v) for v in res.x)
    base = float(np.clip(np.sum(wn * y), eps, 1 - eps))
    if b <= 0:  # monotone fallback (step 4)
        return PlattMap(a=float(special.logit(base)), b=0.0, mean=mean, std=std, eps=eps, fallback=True)
    return PlattMap(a=a, b=b, mean=mean, std=std, eps=eps)


def crossfit_halves(ids: Sequence[str], y: Sequence[int]) -> np.ndarray:
    """Half (0/1) of each trajectory: within each label, sort by id and alternate (step 1)."""
    half = np.zeros(len(ids), dtype=np.int64)
    for label in (0, 1):
        members = sorted((i for i in range(len(ids)) if y[i] == label), key=lambda i: str(ids[i]))
        for k, i in enumerate(members):
            half[i] = k % 2
    return half


def crossfit_platt(
    ids: Sequence[str], forecasts: Sequence[Sequence[float]], y: Sequence[int], *,
    weights: str = "linear-front", lam: float = PLATT_L2, eps: float = EPS, std_floor: float = STD_FLOOR,
) -> tuple[list[np.ndarray], tuple[PlattMap, PlattMap]]:
    """Cross-fitted weighted Platt recalibration of per-step forecasts (docs/monitoring.md, Platt recalibration steps 1-5).

    Returns the recalibrated forecasts (same shapes) and the maps fitted on half 0 and half 1.
    The half-0 map is applied to half 1 and vice versa. Refit whenever the schedule changes.
    """
    if not (len(ids) == len(forecasts) == len(y)):
        raise ValueError("ids, forecasts and y must have equal length")
    half = crossfit_halves(ids, y)
    maps = []
    for h in (0, 1):
        ps, ys, ws = [], [], []
        for i in np.flatnonzero(half == h):
            arr = _check_probs(forecasts[i], f"forecasts[{i}]")
            ps.append(arr)
            ys.append(np.full(arr.size, y[i], dtype=np.float64))
            ws.append(step_weights(arr.size, weights))
        if not ps:
            raise ValueError("cross-fitting needs trajectories in both halves (at least 2 per outcome is safest)")
        maps.append(fit_weighted_platt(np.concatenate(ps), np.concatenate(ys), np.concatenate(ws), lam=lam, eps=eps, std_floor=std_floor))
    out = [maps[1 - half[i]].apply(forecasts[i]) for i in range(len(ids))]
    return out, (maps[0], maps[1])
