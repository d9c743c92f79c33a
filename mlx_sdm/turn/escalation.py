"""The escalation ladder (docs/monitoring.md, "When a turn pauses") applied to one answer: what the turn does with
its monitor reading, and the ladder's words (:data:`LADDER_LINES`), said the same way everywhere. One vocabulary: the monitor's :class:`EscalationAction` (proceed /
proceed_with_log / pause_for_human / abort); the stored answer's status follows from it
(:meth:`TurnStatus.after`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from mlx_sdm.monitor.online.auq_escalation import (
    EscalationAction,
    UncertaintyLevel,
    UncertaintyPolicy,
    departs_from_usual,
)
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.verdict import REASON_ADMITS_NOTHING, DocumentVerdict, VerdictStatus

#: docs/monitoring.md, AUQ reflection: the reflection injected on HIGH (keeps the phrase "NOT confident").
REFLECTION_PROMPT = (
    "Stop and state your uncertainty explicitly before going on. List each point in your current reasoning "
    "that you are NOT confident about. For every point give (1) what you already know, (2) what you do not "
    "know, (3) what information would resolve it."
)
#: Review-queue reasons added by escalation (beside the verdict's reason codes).
REASON_ESCALATED_HIGH = "escalated_high"
REASON_ESCALATED_CRITICAL = "escalated_critical"
REASON_ESCALATED_IRREVERSIBLE = "escalated_irreversible"
REASON_DEGENERATE = "degenerate_answer"  # a loop, runs of quotes and braces (mlx_sdm.monitor.online.degenerate)


class TurnStatus(str, Enum):
    """How a turn ended (the stored answer's status)."""

    DONE = "done"
    PAUSED = "paused"
    RESUMED = "resumed"  # a paused answer the user has since given guidance for
    ABORTED = "aborted"
    CANCELLED = "cancelled"
    ERROR = "error"
    INTERRUPTED = "interrupted"  # the app stopped before the answer was finished (its partial text kept)
    IN_PROGRESS = "in_progress"  # still being written (by this or another process)

    @classmethod
    def after(cls, action: EscalationAction) -> "TurnStatus":
        if action is EscalationAction.ABORT:
            return cls.ABORTED
        if action is EscalationAction.PAUSE_FOR_HUMAN:
            return cls.PAUSED
        return cls.DONE


@dataclass
class Escalation:
    """What a turn does with its monitor reading: the action, one line for the user, why the answer
    goes to review, and whether to ask the model for a reflection (HIGH only, docs/monitoring.md, AUQ reflection)."""

    action: EscalationAction = EscalationAction.PROCEED
    level: UncertaintyLevel = UncertaintyLevel.LOW
    message: str = ""
    review_reasons: list[str] = field(default_factory=list)
    reflect: bool = False
    irreversible: bool = False
    tool_names: list[str] = field(default_factory=list)
    confidence: float | None = None
    explanation: str | None = None  # on an abort: why

    @property
    def status(self) -> TurnStatus:
        return TurnStatus.after(self.action)

    @property
    def escalated(self) -> bool:
        """Something to tell the user (logged, paused or aborted)."""
        return self.action is not EscalationAction.PROCEED

    @property
    def unusual(self) -> bool:
        """The turn departs from what is usual, so its monitor reading, its log line and its place in the review
        queue are news worth a line under the answer (the rule: :func:`departs_from_usual`)."""
        return departs_from_usual(self.action, self.level)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def verdict_review_reasons(verdict: DocumentVerdict) -> list[str]:
    """An answer a verifier judged and did not vouch for goes to the review queue under its reason code."""
    if verdict.status in (VerdictStatus.VERIFIED, VerdictStatus.NO_VERIFIER):
        return []
    if verdict.admits_nothing and verdict.status is VerdictStatus.NOT_VERIFIED:
        return [REASON_ADMITS_NOTHING]
    return [verdict.reason or VerdictStatus.NOT_VERIFIED.value]


#: The ladder in words (docs/monitoring.md, "When a turn pauses"): F1 help, ``chat --help``, the pause prompt and
#: ``chat --plain`` all read these lines, so every place names the same levels and causes.
_DEFAULTS = UncertaintyPolicy()
LADDER_LINES = (
    f"AUQ level (the session's cumulative confidence P): LOW (P >= {_DEFAULTS.low_threshold:.2f}) shows the answer; "
    f"MEDIUM (P >= {_DEFAULTS.medium_threshold:.2f}) shows it and logs the turn (the usual for everyday turns, so "
    f"it is stored, not said under the answer); HIGH (P >= {_DEFAULTS.high_threshold:.2f}) "
    "pauses the turn for your guidance, after the model says what it is not sure of; CRITICAL (below "
    f"{_DEFAULTS.high_threshold:.2f}) withholds the answer and keeps it for review.",
    "A turn also pauses when its answer derailed (a loop, runs of quotes and braces), when the verifier is confident "
    "it is wrong, or before an irreversible tool call. An answer the verifier vouches for is never paused by the AUQ "
    "level alone, and a long session never pauses a turn by itself: the forecast of the whole session's success is "
    "stored with each reading and pauses nothing. A line under an answer says only what departs from the usual.",
)


def ladder_words() -> str:
    """The ladder as one paragraph (:data:`LADDER_LINES`)."""
    return " ".join(LADDER_LINES)


def _risks(reading: MonitorReading, tool_names: list[str]) -> list[str]:
    """Why this turn is at risk, in words, strongest first (empty when only AUQ's level moved)."""
    out = [reading.degenerate.reason] if reading.degenerate is not None else []
    if reading.judged_wrong is not None:
        out.append(f"the verifier is confident this answer is wrong (calibrated lower probability "
                   f"{reading.judged_wrong:.3f} that it is wrong)")
    if reading.irreversible:
        out.append(f"it proposes the irreversible tool call(s) {', '.join(tool_names) or 'named in its policy'}")
    return out


def _policy_reasons(reading: MonitorReading) -> list[str]:
    return [REASON_DEGENERATE] if reading.degenerate is not None else []


def plan_escalation(reading: MonitorReading | None, tool_names: list[str],
                    verdict: DocumentVerdict) -> Escalation:
    """What the turn does with its reading (:data:`LADDER_LINES`; the rules are
    :func:`mlx_sdm.monitor.forecast.policy.apply_policy`, already applied to ``reading.action``): the message
    says why, in words true of the reading's numbers."""
    reasons = verdict_review_reasons(verdict)
    if reading is None:
        return Escalation(review_reasons=reasons, tool_names=tool_names)
    common = Escalation(level=reading.level, irreversible=reading.irreversible, tool_names=tool_names,
                        confidence=reading.cumulative_confidence)
    confidence = _fmt(reading.cumulative_confidence)
    risks, policy = _risks(reading, tool_names), _policy_reasons(reading)
    if reading.action is EscalationAction.ABORT:
        explanation = (
            f"Aborted: the session's cumulative confidence {confidence} fell below the CRITICAL floor "
            f"({_fmt(reading.critical_below)}); the answer is kept for review but not used. "
            + (f"Also: {'; '.join(risks)}. " if risks else "") + "Rephrase the question or start a new chat."
        )
        return replace(common, action=EscalationAction.ABORT, message=explanation, explanation=explanation,
                       review_reasons=reasons + [REASON_ESCALATED_CRITICAL] + policy)
    if reading.action is EscalationAction.PAUSE_FOR_HUMAN:
        return _pause(reading, risks, reasons, policy, common)
    if reading.action is EscalationAction.PROCEED_WITH_LOG:
        if reading.auq_pause_lifted:
            message = (f"Logged: the session's cumulative confidence {confidence} is "
                       f"{reading.level.value.upper()} uncertainty, but the verifier vouches for this answer, "
                       "so the turn goes on")
        else:
            message = f"{reading.level.value.upper()} uncertainty logged (cumulative confidence {confidence})"
        return replace(common, action=EscalationAction.PROCEED_WITH_LOG, message=message, review_reasons=reasons + policy)
    return replace(common, review_reasons=reasons)


def _pause(reading: MonitorReading, risks: list[str], reasons: list[str], policy: list[str],
           common: Escalation) -> Escalation:
    high = reading.level is UncertaintyLevel.HIGH and not reading.auq_pause_lifted
    why = list(risks)
    if high:
        why.insert(0, f"the session's cumulative confidence {_fmt(reading.cumulative_confidence)} is HIGH uncertainty")
    message = f"Paused: {'; '.join(why)}. Give guidance to resume, or move on with a new message."
    auq_reason = ([REASON_ESCALATED_HIGH] if high else []) + \
        ([REASON_ESCALATED_IRREVERSIBLE] if reading.irreversible and not high else [])
    reflect = high and reading.inject_reflection  # § 2.6: HIGH only
    return replace(common, action=EscalationAction.PAUSE_FOR_HUMAN, message=message, reflect=reflect,
                   review_reasons=reasons + auq_reason + policy)


def monitor_payload(reading: MonitorReading | None, escalation: Escalation | None = None) -> dict | None:
    """The turn's monitor reading as JSON (``generate --json``'s and the server's ``"monitor"``): the AUQ level and
    the turn's action, P, R, the fused forecast and its sentence, this turn's own risks and the escalation's words."""
    if reading is None:
        return None
    return {"level": reading.level.value, "action": reading.action.value,
            "cumulative_confidence": reading.cumulative_confidence, "tracer_risk": reading.tracer_risk,
            "fused_p": reading.fused_p, "fused_message": reading.fused.message if reading.fused is not None else None,
            "degenerate": reading.degenerate.reason if reading.degenerate is not None else None,
            "judged_wrong": reading.judged_wrong,
            "escalation": escalation.message if escalation is not None and escalation.escalated else None}
