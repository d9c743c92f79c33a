"""Pure presentation helpers: how verdicts, escalation levels and monitor numbers read on screen.

Kept free of Textual so the wording is tested on its own and shared by the chat, evidence and review views.
"""

from __future__ import annotations

from typing import Any, Mapping

from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus, VerdictWords, status_from_dict, verdict_words

#: A verdict's reason code -> the words the user reads (mlx_sdm.network.verdict reasons).
REASON_LABELS: dict[str, str] = {
    "out_of_distribution": "outside what it was built on",
    "below_threshold": "not confident enough",
    "index_flipped": "its evidence reverses its prediction",
    "predicted_unacceptable": "likely wrong",
    "not_a_task": "not one of its tasks",
    "empty_answer": "empty answer",
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


def verdict_status(verdict: Mapping[str, Any] | None, status: str | None = None) -> str:
    """A ``VerdictStatus`` value: the engine's status when given, else read off a stored verdict dict by
    the one rule (None = no verifier judged it)."""
    state = VerdictStatus.read(status) or status_from_dict(verdict) or VerdictStatus.NO_VERIFIER
    return state.value


def stored_verdict_words(verdict: Mapping[str, Any] | None, reason: str | None = None) -> VerdictWords:
    """The one badge and sentence (network/verdict.verdict_words) of a stored verdict dict."""
    return verdict_words(DocumentVerdict.from_dict(verdict), no_verifier_reason=reason)


def format_p(value: float | None) -> str:
    """A probability to three decimals; ``—`` when absent (p_lower is None outside the index-conditional region)."""
    return "—" if value is None else f"{float(value):.3f}"


def badge_text(
    verdict: Mapping[str, Any] | None,
    *,
    status: str | None = None,
    reason: str | None = None,
    expanded: bool = False,
) -> str:
    """The one-line badge under an answer (``▸ ✔ verified · p_lower 0.973``): the one rule's badge."""
    arrow = "▾" if expanded else "▸"
    words = stored_verdict_words(verdict, reason)
    return words.badge if words.status is VerdictStatus.NO_VERIFIER else f"{arrow} {words.badge}"


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


def decision_label(decision: Any) -> str:
    """A review decision (the store's ``Decision``) in a word: acceptable / unacceptable / edited, ``+note``."""
    if decision is None:
        return "·"
    word = "edited" if getattr(decision, "completion", None) else ("acceptable" if decision.label == 1 else "unacceptable")
    return word + (" +note" if getattr(decision, "note", None) else "")
