"""``eval-monitor --plot``: reliability of the held-out forecasts, the forecast over turns and the
risk–coverage curve (PNG)."""

from __future__ import annotations

import io

import numpy as np

from mlx_sdm.monitor.forecast.fusion import MONITOR_LABELS
from mlx_sdm.monitor.evaluation.heldout import HeldOutReport

PLOTTED = ("base_rate", "auq_raw", "tracer", "verifier", "fused")
COLOURS = {"base_rate": "tab:gray", "auq_raw": "tab:orange", "tracer": "tab:purple", "verifier": "tab:blue",
           "fused": "tab:green"}
RELIABILITY_BINS = 8
MAX_TURNS = 6


def reliability_points(report: HeldOutReport, monitor: str, bins: int = RELIABILITY_BINS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean forecast, observed success rate, steps) per equal-count bin of the pooled agent-step forecasts."""
    p = np.concatenate([f[monitor] for f in report.forecasts])
    y = np.concatenate([np.full(s.n_agent, s.success) for s in report.signals]).astype(np.float64)
    order = np.argsort(p, kind="stable")
    groups = [g for g in np.array_split(order, min(bins, p.size)) if g.size]
    return (np.array([p[g].mean() for g in groups]), np.array([y[g].mean() for g in groups]),
            np.array([g.size for g in groups]))


def forecast_by_turn(report: HeldOutReport, monitor: str, success: int, max_turns: int = MAX_TURNS) -> tuple[np.ndarray, np.ndarray]:
    """(turn 1..T, mean forecast p_t at that agent step) over sessions with the given outcome."""
    sums, counts = np.zeros(max_turns), np.zeros(max_turns)
    for f, s in zip(report.forecasts, report.signals):
        if s.success != success:
            continue
        p = f[monitor][:max_turns]
        sums[: p.size] += p
        counts[: p.size] += 1
    keep = counts > 0
    return np.arange(1, max_turns + 1)[keep], sums[keep] / counts[keep]


def risk_coverage(report: HeldOutReport, monitor: str, weights: str = "linear-front") -> tuple[np.ndarray, np.ndarray]:
    """(coverage, risk): sessions kept most-confident first by the held-out weighted-mean forecast (the
    ranking of AUROC / AUARC); risk = the failure rate of the kept sessions, at each count kept (sessions
    with tied forecasts count at their mean failure rate, so a constant forecast draws a flat line)."""
    from mlx_sdm.monitor.forecast.scoring import weighted_mean_forecast

    summary = np.array([weighted_mean_forecast(f[monitor], weights) for f in report.forecasts])
    failed = np.array([1 - s.success for s in report.signals], dtype=np.float64)
    order = np.argsort(-summary, kind="stable")
    ranked, outcome = summary[order], failed[order]
    for value in np.unique(ranked):  # tied forecasts: their expected failure rate in any order
        tied = ranked == value
        outcome[tied] = outcome[tied].mean()
    kept = np.arange(1, summary.size + 1)
    return kept / summary.size, np.cumsum(outcome) / kept


def plot_heldout(report: HeldOutReport, path: str) -> None:
    """Left: reliability (held-out p_t vs observed success, equal-count bins). Right: mean p_t over
    agent steps for successful (solid) and failed (dashed) sessions."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mlx_sdm.atomic import atomic_write_bytes

    fig, (ax_rel, ax_turn, ax_rc) = plt.subplots(1, 3, figsize=(16, 4.8))
    for m in PLOTTED:
        x, obs, n = reliability_points(report, m)
        ax_rel.plot(x, obs, marker="o", color=COLOURS[m], label=MONITOR_LABELS[m], lw=1.2, ms=4)
    top = max(0.05, max(float(np.max(reliability_points(report, m)[0])) for m in PLOTTED))
    ax_rel.plot([0, top], [0, top], color="black", lw=0.6, ls=":", label="perfect calibration")
    ax_rel.set_xlabel("held-out forecast p_t (bin mean)")
    ax_rel.set_ylabel("observed session success rate")
    ax_rel.set_title("Reliability (out-of-fold, agent steps pooled)")
    ax_rel.legend(fontsize=7, loc="upper left")
    for m in ("fused", "verifier", "tracer", "base_rate"):
        for success, style in ((1, "-"), (0, "--")):
            t, p = forecast_by_turn(report, m, success)
            ax_turn.plot(t, p, ls=style, marker="o", ms=3, color=COLOURS[m],
                         label=f"{MONITOR_LABELS[m]} ({'success' if success else 'failure'})")
    ax_turn.set_xlabel("agent step t")
    ax_turn.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax_turn.set_ylabel("mean forecast p_t of session success")
    ax_turn.set_title("Forecast over turns (solid: sessions that succeeded)")
    ax_turn.legend(fontsize=6, loc="upper right")
    for m in PLOTTED:
        coverage, risk = risk_coverage(report, m, report.weights)
        ax_rc.plot(coverage, risk, color=COLOURS[m], label=MONITOR_LABELS[m], lw=1.2)
    ax_rc.set_xlabel("coverage (share of sessions kept, most confident first)")
    ax_rc.set_ylabel("failure rate of the kept sessions")
    ax_rc.set_title("Risk–coverage (out-of-fold)")
    ax_rc.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{report.n_sessions} held-out sessions, success rate {report.success_rate:.2f}, "
                 f"{report.folds}-fold cross-fitting", fontsize=10)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
