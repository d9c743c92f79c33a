"""Table-1 style evaluation (the paper's Table 1; docs/method.md § 19): class- and prediction-conditional accuracy of the
admitted set with the admitted proportion per stratum, for no-reject, the plain softmax ≥ α′
baseline and the estimator's p̂_lower; the adaptor against its logistic-regression reference on the
same rows (exact McNemar test, § 19); plus the reliability plot of ``mlx-sdm report --plot``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.paired_test import PairedComparison, paired_comparison

#: The verdict where the estimator holds no logistic reference (a .sdmkitmodel package).
NO_REFERENCE = "no logistic reference stored with this estimator"


@dataclass
class Stratum:
    accuracy: float | None  # None = nothing admitted (printed N/A)
    admitted: int
    total: int  # |D_te|; the printed proportion is admitted / total

    @property
    def fraction(self) -> float:
        return self.admitted / self.total if self.total else 0.0

    def cell(self) -> str:
        acc = "N/A" if self.accuracy is None else f"{self.accuracy:.3f}"
        return f"{acc}/{self.fraction:.2f}"

    def markdown(self) -> str:
        """``accuracy / admitted fraction`` as the markdown reports print a cell (N/A: nothing admitted)."""
        acc = "N/A" if self.accuracy is None else f"{self.accuracy:.3f}"
        return f"{acc} / {self.fraction:.3f}"


@dataclass
class Row:
    name: str
    by_class: list[Stratum]
    by_prediction: list[Stratum]
    marginal: Stratum
    wrong: int = 0  # admitted rows whose prediction is wrong

    def strata(self) -> list[Stratum]:
        return self.by_class + self.by_prediction + [self.marginal]

    def calibrated(self, alpha: float) -> bool:
        """Index-conditional calibration on this sample: every admitted stratum has accuracy ≥ α′."""
        return all(s.accuracy is None or s.accuracy >= alpha for s in self.strata())


def table_row(name: str, labels: np.ndarray, predictions: np.ndarray, admitted: np.ndarray, num_classes: int) -> Row:
    labels, predictions, admitted = np.asarray(labels), np.asarray(predictions), np.asarray(admitted, dtype=bool)
    n = len(labels)
    correct = labels == predictions

    def stratum(mask: np.ndarray) -> Stratum:
        sel = mask & admitted
        return Stratum(float(correct[sel].mean()) if sel.any() else None, int(sel.sum()), n)

    return Row(name, [stratum(labels == c) for c in range(num_classes)],
               [stratum(predictions == c) for c in range(num_classes)], stratum(np.ones(n, dtype=bool)),
               int(np.sum(admitted & ~correct)))


def markdown_rows(name: str, labels: np.ndarray, predictions: np.ndarray, admitted: np.ndarray,
                  num_classes: int = 2) -> list[str]:
    """One data set's two report rows, ``| name | no-reject | y=0 | y=1 | ŷ=0 | ŷ=1 | marginal |`` and the
    same for ``p̂ lower`` (the ``admitted`` rows)."""
    rows = []
    for estimator, keep in (("no-reject", np.ones(len(labels), dtype=bool)), ("p̂ lower", admitted)):
        row = table_row(estimator, labels, predictions, keep, num_classes)
        rows.append(f"| {name} | {estimator} | " + " | ".join(s.markdown() for s in row.strata()) + " |")
    return rows


@dataclass
class AgainstProbe:
    """One estimator row's adaptor against its logistic-regression reference on the evaluated rows."""

    name: str
    adaptor_accuracy: float
    comparison: PairedComparison | None  # None: the estimator holds no logistic reference


@dataclass
class Evaluation:
    name: str
    alpha: float
    num_classes: int
    rows: list[Row]
    adaptor_accuracy: float
    logistic_regression_accuracy: float
    labels: np.ndarray
    predictions: np.ndarray
    admitted: np.ndarray
    p_lower: np.ndarray
    softmax_max: np.ndarray
    q_bin: np.ndarray
    logistic_predictions: np.ndarray | None = None  # None: the estimator holds no logistic reference
    against_probe: list[AgainstProbe] = field(default_factory=list)  # one per estimator row

    def row(self, name: str) -> Row:
        return next(r for r in self.rows if r.name == name)


def sdm_row_name(estimator) -> str:
    """"sdm p_lower" for the paper's estimator, "sdm v2 p_lower" for the canonical one, "sdm nested
    region" for the nested kind (admitted: DKW-lower region α ≥ α′)."""
    return {"v1": "sdm p_lower", "nested": "sdm nested region"}.get(getattr(estimator, "kind", "v1"), "sdm v2 p_lower")


def evaluate(estimator, data: LabelledSet, name: str = "test") -> Evaluation:
    """Run the estimator on labelled rows and build the three Table-1 rows."""
    a = estimator.predict_arrays(data.embeddings)
    c, alpha = estimator.num_classes, estimator.alpha
    yhat = a["prediction"]
    sm_max = a["softmax"].max(axis=1)
    rows = [
        table_row("no-reject", data.labels, yhat, np.ones(len(yhat), bool), c),
        table_row(f"softmax>={alpha:g}", data.labels, yhat, sm_max >= alpha, c),
        table_row(sdm_row_name(estimator), data.labels, yhat, a["admitted"], c),
    ]
    lr = estimator.logistic_regression_predict(data.embeddings) \
        if getattr(estimator, "has_logistic_reference", True) else None
    accuracy = float(np.mean(yhat == data.labels))
    paired = None if lr is None else paired_comparison(data.labels, yhat, lr)
    return Evaluation(name, alpha, c, rows, accuracy, float("nan") if paired is None else paired.accuracy_b,
                      data.labels, yhat, a["admitted"], a["p_lower"], sm_max, a["q_bin"], lr,
                      [AgainstProbe(rows[-1].name, accuracy, paired)])


def add_estimator_row(ev: Evaluation, other: Evaluation) -> Evaluation:
    """``ev`` with the estimator row of ``other`` (another estimator on the same rows) appended, so
    that one table shows both estimator kinds beside the softmax baseline."""
    ev.rows.append(other.rows[-1])
    ev.against_probe += other.against_probe
    return ev


def format_table(ev: Evaluation, class_names: list[str] | None = None) -> str:
    c = ev.num_classes
    names = class_names or [str(i) for i in range(c)]
    head = ["estimator"] + [f"y={n}" for n in names] + [f"ŷ={n}" for n in names] + ["marginal"]
    body = [[r.name] + [s.cell() for s in r.strata()] for r in ev.rows]
    widths = [max(len(line[i]) for line in [head] + body) for i in range(len(head))]
    fmt = lambda line: "  ".join(x.ljust(w) for x, w in zip(line, widths))  # noqa: E731
    lines = [f"{ev.name}: {len(ev.labels)} rows; cells are accuracy/admitted proportion (N/A = none admitted)",
             fmt(head), fmt(["-" * w for w in widths])] + [fmt(b) for b in body]
    for r in ev.rows[1:]:
        verdict = "yes" if r.calibrated(ev.alpha) else "NO"
        lines.append(f"  {r.name}: every admitted stratum >= {ev.alpha:g}? {verdict}  "
                     f"(admitted {r.marginal.admitted}, of them wrong {r.wrong})")
    return "\n".join(lines + against_probe_lines(ev))


def against_probe_lines(ev: Evaluation) -> list[str]:
    """Each estimator's adaptor against its logistic-regression reference on these rows: accuracies, the
    discordant rows b (only the adaptor right) and c (only the reference right), the exact McNemar p and
    the verdict (docs/method.md § 19)."""
    head = ["estimator", "adaptor", "logistic-regression reference", "b", "c", "McNemar p", "verdict"]
    body = []
    for row in ev.against_probe:
        cmp = row.comparison
        body.append([row.name, f"{row.adaptor_accuracy:.3f}"] + (["-"] * 4 + [NO_REFERENCE] if cmp is None else
                    [f"{cmp.accuracy_b:.3f}", str(cmp.b), str(cmp.c), f"{cmp.p_value:.3g}", cmp.verdict()]))
    widths = [max(len(line[i]) for line in [head] + body) for i in range(len(head))]
    fmt = lambda line: "  " + "  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip()  # noqa: E731
    return ["", "adaptor against its logistic-regression reference, same rows (b: rows only the adaptor gets right, "
            "c: only the reference; exact McNemar test):", fmt(head)] + [fmt(b) for b in body]


def format_training(manifest: dict) -> str:
    t = manifest.get("training", {})
    lines = ["training (from the estimator's manifest):"]
    lines.append(f"  support {t.get('support_size')} / calibration {t.get('calibration_size')}; "
                 f"alpha' {manifest.get('alpha')}; J = {manifest.get('iterations')}; best iteration {t.get('best_iteration')}")
    lines.append(f"  epoch chosen per iteration: {t.get('epochs_chosen')} (of {manifest.get('config', {}).get('epochs')})")
    lines.append(f"  adaptor accuracy: train {t.get('train_accuracy', float('nan')):.3f}, "
                 f"calibration {t.get('calibration_accuracy', float('nan')):.3f}")
    lr = t.get("logistic_regression", {})
    lines.append(f"  logistic-regression reference: train {lr.get('train_accuracy', float('nan')):.3f}, "
                 f"calibration {lr.get('calibration_accuracy', float('nan')):.3f}")
    if manifest.get("estimator") == "nested":
        regions = manifest.get("nested", {}).get("regions", [])
        lines.append("  regions (alpha: q' >=): " + (", ".join(f"{r['alpha']:g}: {r['min_q_prime']:.2f}" for r in regions)
                                                   or "none (everything is rejected)"))
        return "\n".join(lines)
    qmin = manifest.get("q_tilde_min_robust")
    lines.append(f"  q~_min* {manifest.get('q_tilde_min_star')}, robust q~_min {qmin}"
                 + ("" if manifest.get("threshold_succeeded") else "  (Alg. 3 found no threshold: everything is rejected)"))
    return "\n".join(lines)


def _short(name: str, width: int = 48) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1):]


def plot(evaluations: list[Evaluation], path: str) -> None:
    """Reliability diagram (softmax max and p̂_lower of admitted points vs accuracy) and admitted
    accuracy by ⌊q̃_lower⌋ bin, one column per evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mlx_sdm.atomic import atomic_write_bytes

    fig, axes = plt.subplots(2, len(evaluations), figsize=(5 * len(evaluations), 8), squeeze=False)
    edges = np.linspace(0.0, 1.0, 11)
    for col, ev in enumerate(evaluations):
        ax = axes[0, col]
        correct = ev.labels == ev.predictions
        for values, mask, label in ((ev.softmax_max, np.ones(len(correct), bool), "softmax max (all)"),
                                    (ev.p_lower, ev.admitted, "p_lower (admitted)")):
            xs, ys = [], []
            for lo, hi in zip(edges[:-1], edges[1:]):
                sel = mask & (values >= lo) & ((values < hi) | (hi == 1.0))
                if sel.any():
                    xs.append(values[sel].mean())
                    ys.append(correct[sel].mean())
            ax.plot(xs, ys, "o-", label=label)
        ax.plot([0, 1], [0, 1], "k:", lw=1)
        ax.axhline(ev.alpha, color="r", lw=0.8, ls="--")
        ax.set(title=f"{_short(ev.name)}\nreliability", xlabel="estimated probability", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1.02))
        ax.legend(loc="lower right")
        ax = axes[1, col]
        bins = np.unique(ev.q_bin[ev.admitted]) if ev.admitted.any() else np.array([], dtype=int)
        accs = [correct[ev.admitted & (ev.q_bin == b)].mean() for b in bins]
        counts = [int(np.sum(ev.admitted & (ev.q_bin == b))) for b in bins]
        ax.bar([str(b) for b in bins], accs, color="tab:green")
        for i, n in enumerate(counts):
            ax.text(i, 0.02, f"n={n}", ha="center", fontsize=8)
        ax.axhline(ev.alpha, color="r", lw=0.8, ls="--")
        ax.set(title=f"{_short(ev.name)}\nadmitted accuracy by ⌊q̃⌋ (n = admitted)", xlabel="⌊q̃_lower⌋", ylabel="accuracy", ylim=(0, 1.02))
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
