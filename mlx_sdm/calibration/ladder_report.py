"""``mlx-sdm report`` for the nested kind: admission at every α of the ladder (a row is admitted at α
when its region α is at least α), by the DKW-lower region α (what the estimator admits) and by the
centroid region α, as a table of class- and prediction-conditional strata and as a plot."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.evaluation import Row, table_row
from mlx_sdm.calibration.nested import admitted_at, ladder


@dataclass
class LadderRung:
    alpha: float
    lower: Row  # admitted: DKW-lower region α ≥ α
    centroid: Row  # admitted: centroid region α ≥ α


@dataclass
class LadderReport:
    name: str
    num_classes: int
    rungs: list[LadderRung]


def ladder_report(estimator, data: LabelledSet, name: str = "test") -> LadderReport:
    """One rung per α of the estimator's ladder (nested kind only)."""
    if getattr(estimator, "nested", None) is None:
        raise ValueError("admission by region needs an estimator of the nested kind")
    a = estimator.predict_arrays(data.embeddings)
    c, yhat = estimator.num_classes, a["prediction"]
    rungs = [LadderRung(alpha, table_row(f"lower>={alpha:g}", data.labels, yhat, admitted_at(a["region_alpha_lower"], alpha), c),
                        table_row(f"centroid>={alpha:g}", data.labels, yhat, admitted_at(a["region_alpha"], alpha), c))
             for alpha in ladder(estimator.nested.resolution)]
    return LadderReport(name, c, rungs)


def _cell(row: Row) -> str:
    acc = "N/A" if row.marginal.accuracy is None else f"{row.marginal.accuracy:.3f}"
    return f"{row.marginal.admitted} ({row.marginal.fraction:.1%}) acc {acc} wrong {row.wrong}"


def format_ladder(report: LadderReport) -> str:
    """α | lower: admitted (share) accuracy wrong, every stratum ≥ α? | centroid: the same, and the
    strata of the lower estimate (accuracy/admitted share, y=c then ŷ=c)."""
    c = report.num_classes
    head = ["alpha", "DKW-lower region", "strata>=alpha", "centroid region", "strata>=alpha"] + \
        [f"y={i}" for i in range(c)] + [f"ŷ={i}" for i in range(c)]
    body = [[f"{r.alpha:g}", _cell(r.lower), "yes" if r.lower.calibrated(r.alpha) else "NO", _cell(r.centroid),
             "yes" if r.centroid.calibrated(r.alpha) else "NO"] + [s.cell() for s in r.lower.by_class + r.lower.by_prediction]
            for r in report.rungs]
    widths = [max(len(line[i]) for line in [head] + body) for i in range(len(head))]
    fmt = lambda line: "  ".join(x.ljust(w) for x, w in zip(line, widths))  # noqa: E731
    return "\n".join([f"{report.name}: admission at every alpha of the ladder (a row is admitted at alpha when its "
                      "region alpha >= alpha; strata cells: accuracy/admitted share, DKW-lower)",
                      fmt(head), fmt(["-" * w for w in widths])] + [fmt(b) for b in body])


def plot_ladder(reports: list[LadderReport], path: str) -> None:
    """Admitted share and admitted accuracy against α (DKW-lower and centroid), with accuracy = α dotted."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mlx_sdm.atomic import atomic_write_bytes

    fig, axes = plt.subplots(1, len(reports), figsize=(6 * len(reports), 4.5), squeeze=False)
    for ax, rep in zip(axes[0], reports):
        alphas = [r.alpha for r in rep.rungs]
        for attr, style in (("lower", "-"), ("centroid", "--")):
            rows = [getattr(r, attr) for r in rep.rungs]
            ax.plot(alphas, [r.marginal.fraction for r in rows], "o" + style, color="tab:blue", label=f"admitted ({attr})")
            acc = [np.nan if r.marginal.accuracy is None else r.marginal.accuracy for r in rows]
            ax.plot(alphas, acc, "s" + style, color="tab:green", label=f"accuracy of admitted ({attr})")
        ax.plot(alphas, alphas, "k:", lw=1, label="accuracy = alpha")
        ax.set(title=f"{rep.name[-48:]}\nadmission by region", xlabel="alpha", ylabel="share / accuracy", ylim=(0, 1.02))
        ax.legend(loc="lower left", fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
