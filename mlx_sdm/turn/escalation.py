"""The escalation ladder (docs/monitoring.md, AUQ levels and actions) applied to one answer: what the turn does with
its monitor reading. ONE vocabulary: the monitor's :class:`EscalationAction` (proceed /
proceed_with_log / pause_for_human / abort); the stored answer's status follows from it
(:meth:`TurnStatus.after`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from mlx_sdm.monitor.online.auq_escalation import EscalationAction, UncertaintyLevel
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
REASON_ESCALATED_FORECAST = "escalated_forecast"  # the fused forecast fell below the measured threshold


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


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def verdict_review_reasons(verdict: DocumentVerdict | None) -> list[str]:
    """An answer the verifier did not vouch for goes to the review queue under its reason code."""
    if verdict is None or verdict.status is VerdictStatus.VERIFIED:
        return []
    if verdict.admits_nothing and verdict.status is VerdictStatus.NOT_VERIFIED:
        return [REASON_ADMITS_NOTHING]
    return [verdict.reason or VerdictStatus.NOT_VERIFIED.value]


def _why(reading: MonitorReading) -> str:
    """What the measured policy adds to the AUQ ladder, in words ("" when nothing)."""
    parts = [reading.degenerate.reason] if reading.degenerate is not None else []
    if reading.forecast_pause is not None:
        parts.append(reading.forecast_pause.reason)
    return "; ".join(parts)


def _policy_reasons(reading: MonitorReading) -> list[str]:
    return ([REASON_DEGENERATE] if reading.degenerate is not None else []) + \
        ([REASON_ESCALATED_FORECAST] if reading.forecast_pause is not None else [])


def plan_escalation(reading: MonitorReading | None, tool_names: list[str],
                    verdict: DocumentVerdict | None) -> Escalation:
    """The escalation ladder for one answer: MEDIUM logs, HIGH pauses (with a reflection), CRITICAL
    aborts, an irreversible tool call pauses already at MEDIUM; the measured policy
    (:func:`mlx_sdm.monitor.forecast.policy.apply_policy`) has already raised a degenerate answer to at least
    MEDIUM and paused a turn whose fused forecast is below its threshold: the message says why."""
    reasons = verdict_review_reasons(verdict)
    if reading is None:
        return Escalation(review_reasons=reasons, tool_names=tool_names)
    common = dict(level=reading.level, irreversible=reading.irreversible, tool_names=tool_names,
                  confidence=reading.cumulative_confidence)
    confidence = _fmt(reading.cumulative_confidence)
    why, policy = _why(reading), _policy_reasons(reading)
    if reading.action is EscalationAction.ABORT:
        explanation = (
            f"Aborted: the session's cumulative confidence {confidence} fell below the CRITICAL floor "
            f"({_fmt(reading.critical_below)}); the answer is kept for review but not used. "
            + (f"Also: {why}. " if why else "") + "Rephrase the question or start a new chat."
        )
        return Escalation(EscalationAction.ABORT, message=explanation, explanation=explanation,
                          review_reasons=reasons + [REASON_ESCALATED_CRITICAL] + policy, **common)
    if reading.action is EscalationAction.PAUSE_FOR_HUMAN:
        return _pause(reading, tool_names, reasons, policy, why, common)
    if reading.action is EscalationAction.PROCEED_WITH_LOG:
        message = (f"Logged: {why} (cumulative confidence {confidence})" if why
                   else f"MEDIUM uncertainty logged (cumulative confidence {confidence})")
        return Escalation(EscalationAction.PROCEED_WITH_LOG, message=message, review_reasons=reasons + policy, **common)
    return Escalation(review_reasons=reasons, **common)


def _pause(reading: MonitorReading, tool_names: list[str], reasons: list[str], policy: list[str], why: str,
           common: dict) -> Escalation:
    by_auq = reading.level in (UncertaintyLevel.HIGH, UncertaintyLevel.CRITICAL) or reading.irreversible
    by_tool = reading.irreversible and reading.level is not UncertaintyLevel.HIGH
    confidence = _fmt(reading.cumulative_confidence)
    if by_auq:
        message = (f"Paused at {reading.level.value.upper()} uncertainty (cumulative confidence {confidence})"
                   + (f" before the irreversible tool call(s) {', '.join(tool_names)}" if reading.irreversible else "")
                   + (f"; {why}" if why else "") + ". Give guidance to resume.")
        auq_reason = [REASON_ESCALATED_IRREVERSIBLE if by_tool else REASON_ESCALATED_HIGH]
    else:
        message = f"Paused: {why}. Give guidance to resume."
        auq_reason = []
    reflect = reading.level is UncertaintyLevel.HIGH and reading.inject_reflection  # § 2.6: HIGH only
    return Escalation(EscalationAction.PAUSE_FOR_HUMAN, message=message, reflect=reflect,
                      review_reasons=reasons + auq_reason + policy, **common)
