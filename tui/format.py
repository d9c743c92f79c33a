"""Pure presentation helpers: how verdicts, escalation levels and monitor numbers read on screen.

Kept free of Textual so the wording is tested on its own and shared by the chat, evidence and review views.
"""

from __future__ import annotations


from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.verdict import VerdictStatus
from mlx_sdm.network.verdict_words import VerdictWords
from mlx_sdm.store.records import Decision

#: A verdict's reason code -> the words the user reads (mlx_sdm.network.verdict reasons).
REASON_LABELS: dict[str, str] = {
    "out_of_distribution": "outside what it was built on",
    "below_threshold": "not confident enough",
    "index_flipped": "its evidence reverses its prediction",
    "predicted_unacceptable": "likely wrong",
    "not_a_task": "not one of its tasks",
    "empty_answer": "empty answer",
    "admits_nothing": "vouches for no answer on this model",
}

#: Review-queue reasons that are not verdicts but escalations by the session monitor.
ESCALATION_REASON_LABELS: dict[str, str] = {
    "escalated_high": "escalated HIGH",
    "escalated_critical": "aborted CRITICAL",
    "escalated_irreversible": "irreversible tool",
}

#: AUQ levels in order of severity (docs/monitoring.md, AUQ levels and actions).
LEVELS: tuple[str, ...] = ("low", "medium", "high", "critical")

#: The badge's state while the answer is still streaming (not a verdict state).
PENDING = "pending"


def reason_label(reason: str | None) -> str:
    """The on-screen wording of a rejection or escalation reason (unknown reasons pass through readably);
    the store joins several reasons with commas."""
    if not reason:
        return ""
    if "," in reason:
        return ", ".join(reason_label(r) for r in reason.split(",") if r)
    if reason in REASON_LABELS:
        return REASON_LABELS[reason]
    if reason in ESCALATION_REASON_LABELS:
        return ESCALATION_REASON_LABELS[reason]
    return reason.replace("_", " ")


def format_p(value: float | None) -> str:
    """A probability to three decimals; ``—`` when absent (p_lower is None outside the index-conditional region)."""
    return "—" if value is None else f"{float(value):.3f}"


def badge_text(words: VerdictWords, *, expanded: bool = False) -> str:
    """The one-line badge under an answer (``▸ ✔ verified · p_lower 0.973``): the badge of
    :func:`mlx_sdm.network.verdict_words.verdict_words`, with an arrow when there is evidence to expand."""
    arrow = "▾" if expanded else "▸"
    return words.badge if words.status is VerdictStatus.NO_VERIFIER else f"{arrow} {words.badge}"


def monitor_summary(reading: MonitorReading) -> str:
    """A monitor reading in one line: ``AUQ LOW · P 0.812 · TRACER 0.10``."""
    return (f"AUQ {level_label(reading.level.value)} · P {format_p(reading.cumulative_confidence)}"
            f" · TRACER {format_risk(reading.tracer_risk)}")


def level_label(level: str | None) -> str:
    """``LOW`` … ``CRITICAL``; ``—`` when the monitor has not scored the turn."""
    return "—" if not level else str(level).upper()


def format_risk(value: float | None) -> str:
    """TRACER risk is unbounded and ≥ 0: two decimals, ``—`` when absent."""
    return "—" if value is None else f"{float(value):.2f}"


def shorten(text: str | None, width: int) -> str:
    """One line of at most ``width`` characters (newlines folded), with an ellipsis when cut."""
    if not text:
        return ""
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: max(0, width - 1)] + "…"


def decision_label(decision: Decision | None) -> str:
    """A review decision in a word: acceptable / unacceptable / edited, ``+note``."""
    if decision is None:
        return "·"
    word = "edited" if decision.completion else ("acceptable" if decision.label == 1 else "unacceptable")
    return word + (" +note" if decision.note else "")
