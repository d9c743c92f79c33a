"""Offline evaluation of logged sessions per monitor (what ``mlx-sdm eval-monitor`` prints).

Monitors and their per-agent-step success forecasts ``p_t`` (docs/monitoring.md, TPS forecasts):

- ``auq``: the AUQ cumulative confidence ``P_t`` (``auq.propagated_confidence``);
- ``tracer``: the TRACER prefix risk ``R_t`` inverted to a probability, ``p_t = exp(-R_t)``
  (stored ``tracer`` fields when every step has them, otherwise recomputed offline);
- ``verifier``: the verifier's ``p_lower`` on steps that have one.

Metrics: TPS (log and Brier, ``linear-front`` by default; censored sessions get the exact censored
score when the session carries ``pi``, otherwise the simple approximation; ``abandoned`` and
``error`` sessions are excluded from TPS and counted), AUROC (failure positive) and AUARC (docs/monitoring.md,
TRACER evaluation) over sessions with a known outcome. The ranking scalar is the schedule-weighted mean of
``p_t`` (docs/monitoring.md, ranking diagnostics) for AUQ and the verifier, and the episode TRACER score for TRACER.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from mlx_sdm.monitor.forecast import scoring
from mlx_sdm.monitor.online.embedders import Embedder
from mlx_sdm.monitor.online.tracer import (
    MonitorWarning,
    TracerConfig,
    TracerSessionResult,
    risk_to_probability,
    score_session,
)
from mlx_sdm.monitor.session_file.records import Session

MONITORS = ("auq", "tracer", "verifier")
MONITOR_LABELS = {"auq": "AUQ confidence", "tracer": "TRACER exp(-risk)", "verifier": "verifier p_lower"}


@dataclass
class MonitorRow:
    monitor: str
    sessions: int = 0  # sessions with at least one forecast from this monitor
    tps_sessions: int = 0
    tps_log: float = float("nan")
    tps_brier: float = float("nan")
    auroc: float = float("nan")
    auarc: float = float("nan")
    notes: list[str] = field(default_factory=list)


@dataclass
class EvaluationReport:
    rows: list[MonitorRow]
    n_sessions: int
    n_labelled: int
    excluded_from_tps: dict[str, int]
    censored: int
    tracer_embedder: str | None
    tracer_missing_logprobs: int
    weights: str
    series: dict[str, dict[str, list[float]]]  # session_id -> {"risk": R_t (all steps), "auq": P_t, ...}
    tracer_early_warning: scoring.EarlyWarning | None = None  # on failed sessions, Youden threshold (docs/monitoring.md, TRACER evaluation)
    tracer_threshold: float | None = None


def _stored_tracer(session: Session) -> TracerSessionResult | None:
    if not session.steps or any(s.tracer is None or s.tracer.prefix_risk is None for s in session.steps):
        return None
    outs = [s.tracer for s in session.steps]
    return TracerSessionResult(steps=outs, score=outs[-1].prefix_risk, prefix=[o.prefix_risk for o in outs],
                               embedder=outs[-1].embedder,
                               missing_logprobs=sum(o.surprisal_source == "missing" and s.actor == "agent"
                                                    for o, s in zip(outs, session.steps)))


def session_forecasts(session: Session, tracer: TracerSessionResult) -> dict[str, list[float]]:
    """Per-agent-step forecasts p_t of each monitor (a monitor without values gets an empty list)."""
    out: dict[str, list[float]] = {m: [] for m in MONITORS}
    for step, tout in zip(session.steps, tracer.steps):
        if step.actor != "agent":
            continue
        if step.auq is not None and step.auq.propagated_confidence is not None:
            out["auq"].append(step.auq.propagated_confidence)
        out["tracer"].append(float(risk_to_probability(tout.prefix_risk)))
        if step.verifier is not None and step.verifier.p_lower is not None:
            out["verifier"].append(step.verifier.p_lower)
    return out


def _tps(session: Session, p: Sequence[float], score: str, weights: str) -> float | None:
    if session.termination == "censored":
        horizon = max(session.horizon or len(p), len(p))
        return scoring.censored_trajectory_score(p, horizon, complete=False, pi=session.pi, score=score, weights=weights)
    if session.success is None:
        return None
    return scoring.trajectory_proper_score(p, session.success, score, weights)


def evaluate_sessions(
    sessions: Sequence[Session],
    *,
    tracer_config: TracerConfig | None = None,
    embedder: Embedder | None = None,
    weights: str = "linear-front",
    recompute_tracer: bool = False,
) -> EvaluationReport:
    tracer_config = tracer_config or TracerConfig()
    rows = {m: MonitorRow(m) for m in MONITORS}
    excluded = {"abandoned": 0, "error": 0, "unlabelled": 0}
    tps_values: dict[str, dict[str, list[float]]] = {m: {"log": [], "brier": []} for m in MONITORS}
    ranking: dict[str, list[tuple[float, int]]] = {m: [] for m in MONITORS}  # (risk, failure)
    series: dict[str, dict[str, list[float]]] = {}
    embedders_used: set[str | None] = set()
    missing = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MonitorWarning)  # summarised once in the report instead
        for session in sessions:
            tracer = None if recompute_tracer else _stored_tracer(session)
            if tracer is None:
                tracer = score_session(session, tracer_config, embedder)
            embedders_used.add(tracer.embedder)
            missing += tracer.missing_logprobs
            forecasts = session_forecasts(session, tracer)
            series[session.session_id] = _session_series(session, tracer, forecasts)
            if session.termination in ("abandoned", "error"):
                excluded[session.termination] += 1
            elif session.termination != "censored" and session.success is None:
                excluded["unlabelled"] += 1
            for m in MONITORS:
                _add_session_scores(rows[m], session, tracer, forecasts[m], tps_values[m], ranking[m], weights)
    for m, row in rows.items():
        _summarise_row(row, tps_values[m], ranking[m])
    early, threshold = _tracer_early_warning(sessions, series)
    embedder_names = sorted(e or "none (Jaccard only)" for e in embedders_used)
    return EvaluationReport(
        rows=[rows[m] for m in MONITORS],
        n_sessions=len(sessions),
        n_labelled=sum(s.success is not None for s in sessions),
        excluded_from_tps=excluded,
        censored=sum(s.termination == "censored" for s in sessions),
        tracer_embedder=", ".join(embedder_names) if embedder_names else None,
        tracer_missing_logprobs=missing,
        weights=weights,
        series=series,
        tracer_early_warning=early,
        tracer_threshold=threshold,
    )


def _session_series(session: Session, tracer, forecasts: dict[str, list[float]]) -> dict[str, list]:
    """The per-step series of one session: TRACER's prefix risk, each monitor's forecasts, and the
    step indices that carry an AUQ or a verifier value."""
    return {
        "risk": list(tracer.prefix), **forecasts,
        "auq_index": [i for i, s in enumerate(session.steps)
                      if s.actor == "agent" and s.auq is not None and s.auq.propagated_confidence is not None],
        "verifier_index": [i for i, s in enumerate(session.steps)
                           if s.actor == "agent" and s.verifier is not None and s.verifier.p_lower is not None],
    }


def _add_session_scores(row: MonitorRow, session: Session, tracer, p: list[float], tps_values: dict[str, list[float]],
                        ranking: list[tuple[float, int]], weights: str) -> None:
    """One monitor's TPS values (abandoned/error sessions excluded) and (risk, failure) of a session."""
    if not p:
        return
    row.sessions += 1
    if session.termination not in ("abandoned", "error"):
        for score in ("log", "brier"):
            value = _tps(session, p, score, weights)
            if value is not None:
                tps_values[score].append(value)
    if session.success is not None:
        risk = tracer.score if row.monitor == "tracer" else 1.0 - scoring.weighted_mean_forecast(p, weights)
        ranking.append((risk, 1 - session.success))


def _summarise_row(row: MonitorRow, tps_values: dict[str, list[float]], ranking: list[tuple[float, int]]) -> None:
    """Mean TPS, AUROC and AUARC of one monitor, with a note where a figure cannot be computed."""
    row.tps_sessions = len(tps_values["log"])
    if row.tps_sessions:
        row.tps_log = float(np.mean(tps_values["log"]))
        row.tps_brier = float(np.mean(tps_values["brier"]))
    if ranking:
        risk, failure = (np.array(x) for x in zip(*ranking))
        row.auroc = scoring.auroc(risk, failure)
        if math.isnan(row.auroc):
            row.notes.append("AUROC needs both outcomes")
        if risk.size >= scoring.AUARC_MIN_EPISODES:
            row.auarc = scoring.auarc(risk, 1 - failure)
        else:
            row.notes.append(f"AUARC needs >= {scoring.AUARC_MIN_EPISODES} labelled sessions")
    if row.sessions == 0:
        row.notes.append("no forecasts logged")


def _tracer_early_warning(sessions: Sequence[Session], series: dict[str, dict[str, list]]):
    """TRACER's early warning on the failed sessions at the Youden threshold of the final risks;
    (None, None) without enough failed and at least one successful labelled session."""
    labelled = [s for s in sessions if s.success is not None]
    failed = [series[s.session_id]["risk"] for s in labelled if s.success == 0 and series[s.session_id]["risk"]]
    if len(failed) < scoring.EARLY_WARNING_MIN_FAILED or not any(s.success == 1 for s in labelled):
        return None, None
    final = [series[s.session_id]["risk"][-1] if series[s.session_id]["risk"] else 0.0 for s in labelled]
    threshold = scoring.youden_threshold(final, [1 - s.success for s in labelled])
    return scoring.early_warning(failed, threshold), threshold


def format_table(report: EvaluationReport) -> str:
    def f(x: float, digits: int = 3) -> str:
        return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"

    header = f"{'monitor':<20} {'sessions':>8} {'TPS_log':>9} {'TPS_brier':>9} {'AUROC':>7} {'AUARC':>7}"
    lines = [header, "-" * len(header)]
    for row in report.rows:
        lines.append(
            f"{MONITOR_LABELS[row.monitor]:<20} {row.sessions:>8} {f(row.tps_log):>9} {f(row.tps_brier):>9} "
            f"{f(row.auroc):>7} {f(row.auarc):>7}"
        )
    lines.append("")
    lines.append(
        f"{report.n_sessions} sessions, {report.n_labelled} with an outcome, {report.censored} censored; "
        f"TPS weights {report.weights}; excluded from TPS: "
        + ", ".join(f"{k} {v}" for k, v in report.excluded_from_tps.items())
    )
    lines.append(f"TRACER embedder: {report.tracer_embedder}")
    if report.tracer_missing_logprobs:
        lines.append(
            f"TRACER: {report.tracer_missing_logprobs} agent steps had no token log-probs; their surprisal U is 0 "
            "(situational signals only)"
        )
    if report.tracer_early_warning is not None:
        ew = report.tracer_early_warning
        lines.append(
            f"TRACER early warning on {len(ew.times)} failed sessions (threshold R_t > {report.tracer_threshold:.3f}): "
            f"mean {ew.mean:.1f}% / median {ew.median:.1f}% of the trajectory; detected within the first 20%: "
            f"{100 * ew.share_before[20]:.0f}%"
        )
    for row in report.rows:
        for note in row.notes:
            lines.append(f"{MONITOR_LABELS[row.monitor]}: {note}")
    return "\n".join(lines)


def plot_series(report: EvaluationReport, sessions: Sequence[Session], path: str, max_sessions: int = 30) -> None:
    """Two panels over the step index: TRACER prefix risk R_t (top) and AUQ / verifier confidence (bottom);
    one line per session, red for failures, green for successes, grey when unknown."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mlx_sdm.atomic import atomic_write_bytes

    fig, (ax_r, ax_c) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    colours = {1: "tab:green", 0: "tab:red", None: "tab:gray"}
    for session in list(sessions)[:max_sessions]:
        s = report.series[session.session_id]
        colour = colours[session.success]
        ax_r.plot(range(1, len(s["risk"]) + 1), s["risk"], color=colour, alpha=0.6, lw=1)
        if s["auq"]:
            ax_c.plot([i + 1 for i in s["auq_index"]], s["auq"], color=colour, alpha=0.6, lw=1, marker="o", ms=2)
        if s["verifier"]:
            ax_c.plot([i + 1 for i in s["verifier_index"]], s["verifier"], color=colour, alpha=0.4, lw=1, ls="--", marker="x", ms=3)
    ax_r.set_ylabel("TRACER prefix risk R_t")
    ax_c.set_ylabel("confidence (AUQ P_t solid, verifier dashed)")
    ax_c.set_xlabel("step")
    ax_c.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax_c.set_ylim(0, 1)
    for level, y in (("low", 0.8), ("medium", 0.6), ("high", 0.4)):
        ax_c.axhline(y, color="black", lw=0.5, ls=":")
        ax_c.text(0.99, y, f" {level} floor", transform=ax_c.get_yaxis_transform(), fontsize=7, va="bottom", ha="right")
    ax_r.set_title("Session monitors over turns (green = success, red = failure, grey = unknown)")
    fig.tight_layout()
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
