"""Held-out report of the fitted monitors: every number is measured on folds the fits never saw.

``heldout_report(sessions)`` cross-fits every monitor of :mod:`mlx_sdm.monitor.forecast.fusion` (k folds by
session) and scores the out-of-fold forecasts, per monitor and for the base rate:

- TPS_log and TPS_brier (docs/monitoring.md, TPS, linear-front weights by default; mean over sessions, larger is better);
- censored TPS_log: every session cut at an administrative budget of ``censor_budget`` agent steps
  (docs/monitoring.md, censored TPS; sessions longer than the budget are censored at it, horizon = the budget, scored with the
  simple pessimistic approximation pi = 0, a declared approximation); shorter sessions score as complete;
- AUROC (failure positive) and AUARC (docs/monitoring.md, TRACER evaluation) of the ranking scalar 1 - weighted-mean forecast (docs/monitoring.md, ranking diagnostics);
- T-ECE of the weighted-mean forecast (10 tie-aware quantile bins, a diagnostic only).

Intervals: percentile bootstrap over sessions (``n_boot`` resamples from ``numpy.random.default_rng(seed)``,
the same resamples for every monitor), 95 % by default. ``delta_log`` is each monitor's paired
TPS_log minus the base rate's, with its bootstrap interval: a monitor beats the base rate when that
interval lies above 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from mlx_sdm.monitor.forecast import scoring
from mlx_sdm.monitor.forecast.fusion import DEFAULT_FOLDS, MONITOR_LABELS, MONITORS, crossfit_monitors
from mlx_sdm.monitor.forecast.signals import SessionSignals, session_signals
from mlx_sdm.monitor.session_file.records import Session

DEFAULT_BOOTSTRAP = 1000
DEFAULT_SEED = 0
DEFAULT_CENSOR_BUDGET = 2
CONFIDENCE = 0.95
METRICS = ("tps_log", "tps_brier", "tps_censored", "auroc", "auarc", "tece", "delta_log")


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    def to_dict(self) -> dict:
        return {"value": _num(self.value), "low": _num(self.low), "high": _num(self.high)}


@dataclass
class HeldOutRow:
    monitor: str
    metrics: dict[str, Interval]

    @property
    def label(self) -> str:
        return MONITOR_LABELS[self.monitor]


@dataclass
class HeldOutReport:
    rows: list[HeldOutRow]
    n_sessions: int
    n_excluded: int
    success_rate: float
    folds: int
    n_boot: int
    seed: int
    weights: str
    censor_budget: int
    n_censored: int
    forecasts: list[dict[str, np.ndarray]] = field(repr=False, default_factory=list)  # out-of-fold, per session
    signals: list[SessionSignals] = field(repr=False, default_factory=list)

    def row(self, monitor: str) -> HeldOutRow:
        return next(r for r in self.rows if r.monitor == monitor)

    def best(self) -> HeldOutRow:
        """The monitor (not the base rate) with the best held-out TPS_log."""
        return max((r for r in self.rows if r.monitor != "base_rate"), key=lambda r: r.metrics["tps_log"].value)


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 6)


def _per_session(p: np.ndarray, y: int, weights: str, budget: int) -> tuple[float, float, float, float]:
    """(TPS_log, TPS_brier, censored TPS_log, weighted-mean forecast) of one session."""
    log = scoring.trajectory_proper_score(p, y, "log", weights)
    brier = scoring.trajectory_proper_score(p, y, "brier", weights)
    if p.size > budget:
        cens = scoring.censored_trajectory_score(p[:budget], budget, complete=False, weights=weights)
    else:
        cens = log
    return log, brier, cens, scoring.weighted_mean_forecast(p, weights)


def _ranking(summary: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    risk = 1.0 - summary
    auc = scoring.auroc(risk, 1 - y)
    arc = scoring.auarc(risk, y) if y.size >= scoring.AUARC_MIN_EPISODES else float("nan")
    return auc, arc, scoring.trajectory_ece(summary, y)


def _interval(point: float, samples: np.ndarray, confidence: float) -> Interval:
    samples = samples[~np.isnan(samples)]
    if samples.size == 0:
        return Interval(point, float("nan"), float("nan"))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return Interval(point, float(low), float(high))


def bootstrap_metrics(per_session: dict[str, np.ndarray], y: np.ndarray, *, n_boot: int, seed: int,
                      confidence: float = CONFIDENCE) -> dict[str, dict[str, Interval]]:
    """Intervals for every monitor. ``per_session[m]`` is [n, 4]: TPS_log, TPS_brier, censored, summary."""
    n = y.size
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(n_boot, n))
    base_log = per_session["base_rate"][:, 0]
    out = {}
    for m, table in per_session.items():
        point = {"tps_log": table[:, 0].mean(), "tps_brier": table[:, 1].mean(), "tps_censored": table[:, 2].mean(),
                 "delta_log": (table[:, 0] - base_log).mean()}
        point["auroc"], point["auarc"], point["tece"] = _ranking(table[:, 3], y)
        boot = {k: np.empty(n_boot) for k in METRICS}
        for b, idx in enumerate(draws):
            t, yb = table[idx], y[idx]
            boot["tps_log"][b], boot["tps_brier"][b], boot["tps_censored"][b] = t[:, 0].mean(), t[:, 1].mean(), t[:, 2].mean()
            boot["delta_log"][b] = (t[:, 0] - base_log[idx]).mean()
            if yb.min() == yb.max():
                boot["auroc"][b] = boot["auarc"][b] = boot["tece"][b] = np.nan
            else:
                boot["auroc"][b], boot["auarc"][b], boot["tece"][b] = _ranking(t[:, 3], yb)
        out[m] = {k: _interval(float(point[k]), boot[k], confidence) for k in METRICS}
    return out


def heldout_report(sessions: Sequence[Session], *, folds: int = DEFAULT_FOLDS, n_boot: int = DEFAULT_BOOTSTRAP,
                   seed: int = DEFAULT_SEED, weights: str = "linear-front",
                   censor_budget: int = DEFAULT_CENSOR_BUDGET) -> HeldOutReport:
    """Cross-fit every monitor and score it on held-out folds (module docstring)."""
    signals = [s for s in (session_signals(x) for x in sessions if x.termination in (None, "complete")) if s is not None]
    y = np.array([s.success for s in signals], dtype=np.int64)
    if y.size < 2 * folds or y.min() == y.max() or min(y.sum(), (1 - y).sum()) < folds:
        raise ValueError(f"the held-out report needs at least {folds} successful and {folds} failed complete sessions "
                         f"with monitor fields (found {int(y.sum())} and {int((1 - y).sum())}); lower --folds or log more sessions")
    forecasts = crossfit_monitors(signals, folds, weights)
    per_session = {m: np.array([_per_session(f[m], int(yi), weights, censor_budget) for f, yi in zip(forecasts, y)])
                   for m in MONITORS}
    intervals = bootstrap_metrics(per_session, y, n_boot=n_boot, seed=seed)
    return HeldOutReport(
        rows=[HeldOutRow(m, intervals[m]) for m in MONITORS], n_sessions=len(signals),
        n_excluded=len(sessions) - len(signals), success_rate=float(y.mean()), folds=folds, n_boot=n_boot, seed=seed,
        weights=weights, censor_budget=censor_budget, n_censored=int(sum(s.n_agent > censor_budget for s in signals)),
        forecasts=forecasts, signals=signals)


def format_heldout(report: HeldOutReport) -> str:
    def cell(iv: Interval, digits: int = 3) -> str:
        if iv.value is None or math.isnan(iv.value):
            return "n/a"
        if math.isnan(iv.low):
            return f"{iv.value:.{digits}f}"
        return f"{iv.value:.{digits}f} [{iv.low:.{digits}f}, {iv.high:.{digits}f}]"

    cols = (("TPS_log", "tps_log"), ("TPS_brier", "tps_brier"), ("cens. TPS_log", "tps_censored"),
            ("AUROC", "auroc"), ("AUARC", "auarc"), ("T-ECE", "tece"), ("ΔTPS_log vs base", "delta_log"))
    lines = [f"Held-out ({report.folds}-fold cross-fitting by session; nothing is fitted on the fold it scores), "
             f"{report.n_sessions} sessions, success rate {report.success_rate:.3f}; "
             f"[95% bootstrap interval, {report.n_boot} resamples of sessions, seed {report.seed}]", ""]
    lines.append("| monitor | " + " | ".join(c for c, _ in cols) + " |")
    lines.append("|---|" + "---|" * len(cols))
    for row in report.rows:
        cells = [cell(row.metrics[k]) if not (row.monitor == "base_rate" and k == "delta_log") else "0"
                 for _, k in cols]
        lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
    best = report.best()
    delta = best.metrics["delta_log"]
    verdict = "beats" if delta.low > 0 else "does not beat"
    lines += ["", f"Best monitor: {best.label}: TPS_log {best.metrics['tps_log'].value:.3f} vs base rate "
              f"{report.row('base_rate').metrics['tps_log'].value:.3f}; it {verdict} the base rate "
              f"(paired ΔTPS_log {delta.value:+.3f}, 95% interval [{delta.low:+.3f}, {delta.high:+.3f}]); "
              f"AUROC {best.metrics['auroc'].value:.3f}.",
              f"TPS weights {report.weights}; censored TPS: sessions cut at {report.censor_budget} agent steps "
              f"({report.n_censored} censored, simple approximation pi = 0); excluded sessions "
              f"(no outcome, not complete, or no monitor fields): {report.n_excluded}.",
              "Fitted on the training folds only: TRACER's weights (grid, AUROC), the verdict monitor's status rates, "
              "one weighted Platt map per monitor, the fusion's stacked Platt; raw rows are as logged."]
    return "\n".join(lines)


def heldout_to_dict(report: HeldOutReport) -> dict:
    return {"sessions": report.n_sessions, "excluded": report.n_excluded, "success_rate": report.success_rate,
            "folds": report.folds, "bootstrap": report.n_boot, "seed": report.seed, "weights": report.weights,
            "censor_budget": report.censor_budget, "censored": report.n_censored, "best": report.best().monitor,
            "monitors": [{"monitor": r.monitor, "label": r.label, **{k: v.to_dict() for k, v in r.metrics.items()}}
                         for r in report.rows]}
