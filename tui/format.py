"""Pure presentation helpers: how verdicts, escalation levels and monitor numbers read on screen.

Kept free of Textual so the wording is tested on its own and shared by the chat, evidence and review views.
"""

from __future__ import annotations

from typing import Any, Mapping

from mlx_sdm.network.verdict import status_from_dict

#: A verdict's reason code -> the words the user reads (mlx_sdm.network.verdict reasons).
REASON_LABELS: dict[str, str] = {
    "out_of_distribution": "unlike anything it was built on",
    "below_threshold": "not confident enough",
    "index_flipped": "similar answers were judged differently",
    "predicted_unacceptable": "likely wrong",
}

#: Review-queue reasons that are not verdicts but escalations by the session monitor.
ESCALATION_REASON_LABELS: dict[str, str] = {
    "escalated_high": "escalated HIGH",
    "escalated_critical": "aborted CRITICAL",
    "escalated_irreversible": "irreversible tool",
}

#: AUQ levels in order of severity (monitoring spec § 2.5).
LEVELS: tuple[str, ...] = ("low", "medium", "high", "critical")

VERIFIED, NOT_VERIFIED, OUT_OF_SCOPE = "verified", "not_verified", "out_of_scope"
UNVERIFIABLE, PENDING = "unverifiable", "pending"
STATES = (VERIFIED, NOT_VERIFIED, OUT_OF_SCOPE, UNVERIFIABLE)


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
    """``verified`` / ``not_verified`` / ``out_of_scope`` / ``unverifiable``: the engine's status when
    given, else read off a stored verdict dict by the one rule (None = no verifier judged it)."""
    if status in STATES:
        return status
    state = status_from_dict(verdict)
    return UNVERIFIABLE if state is None else state.value


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
    """The one-line badge under an answer: ``✔ verified · p_lower 0.973`` and so on."""
    arrow = "▾" if expanded else "▸"
    status = verdict_status(verdict, status)
    if status == VERIFIED:
        p_lower = None if verdict is None else verdict.get("p_lower")
        return f"{arrow} ✔ verified · p_lower {format_p(p_lower)}"
    if status == NOT_VERIFIED:
        why = reason or (None if verdict is None else verdict.get("reason"))
        return f"{arrow} ✘ not verified · {reason_label(why) or 'not confident enough'}"
    if status == OUT_OF_SCOPE:
        return f"{arrow} ○ out of scope · unlike what this verifier covers"
    why = f" · {reason_label(reason)}" if reason else " · no verifier fits this model"
    return f"? unverifiable{why}"


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
