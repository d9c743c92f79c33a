"""AUQ escalation ladder (docs/monitoring.md, AUQ levels and actions; AUQ reflection; AUQ configuration): uncertainty levels, actions, the policy
that sets their thresholds, and the level -> action rule with the irreversible-tool override."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Sequence

from mlx_sdm.errors import MlxSdmError

LLM_STEP_TYPES = ("llm_call", "decision")  # "LLM step" for reflection injection (2.6)

REFLECTION_TEXT = (
    "Stop and state your uncertainty explicitly before going on. List each point in your current reasoning "
    "that you are NOT confident about. For every point give (1) what you already know, (2) what you do not "
    "know, (3) what information would resolve it."
)
REFLECTION_KIND = "uncertainty_reflection"
GUIDANCE_KIND = "human_guidance"


class UncertaintyLevel(str, enum.Enum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


class EscalationAction(str, enum.Enum):
    PROCEED = "proceed"
    PROCEED_WITH_LOG = "proceed_with_log"
    PAUSE_FOR_HUMAN = "pause_for_human"
    ABORT = "abort"


def departs_from_usual(action: EscalationAction, level: UncertaintyLevel) -> bool:
    """Whether a turn's monitor reading is news worth a line a person reads under the answer (the chat's monitor line,
    ``chat --plain``'s monitor, log and "queued for review" lines, ``generate``'s escalation line).

    The rule: a turn that goes on at LOW or MEDIUM is usual. MEDIUM's log is what the shipped 135M model's everyday
    turns get (16 of 16 turns of a 27-turn everyday session printed "MEDIUM uncertainty logged"), so a line
    saying it on every turn carries no information. A turn departs from the usual when it pauses (a derailed,
    looping answer; a verdict confident the answer is wrong; HIGH; an irreversible tool call), aborts (CRITICAL), or
    goes on with a log above MEDIUM (a HIGH let go because the verifier vouches for the answer). The reading is
    stored and shown in the monitor panel (ctrl+t) either way."""
    if action in (EscalationAction.PAUSE_FOR_HUMAN, EscalationAction.ABORT):
        return True
    return action is EscalationAction.PROCEED_WITH_LOG and level not in (UncertaintyLevel.LOW, UncertaintyLevel.MEDIUM)


class SessionStatus(str, enum.Enum):
    RUNNING = "running"
    WAITING_FOR_HUMAN = "waiting_for_human"
    ABORTED = "aborted"


ACTION_FOR_LEVEL = {
    UncertaintyLevel.LOW: EscalationAction.PROCEED,
    UncertaintyLevel.MEDIUM: EscalationAction.PROCEED_WITH_LOG,
    UncertaintyLevel.HIGH: EscalationAction.PAUSE_FOR_HUMAN,
    UncertaintyLevel.CRITICAL: EscalationAction.ABORT,
}


class UncertaintyError(MlxSdmError):
    """Raised on CRITICAL: the session's cumulative confidence fell below the high threshold."""

    def __init__(self, level: UncertaintyLevel, cumulative_confidence: float, step_id: str):
        self.level, self.cumulative_confidence, self.step_id = level, cumulative_confidence, step_id
        super().__init__(
            f"step {step_id}: cumulative confidence {cumulative_confidence:.3f} is {level.value.upper()}; "
            "the session was aborted (review the conversation, then start a new one or lower high_threshold)"
        )


class MonitorStateError(MlxSdmError):
    """A call that does not fit the session's state (scoring while paused, resuming a running session)."""



# ----------------------------------------------------------------------------------------------
# configuration (docs/monitoring.md, AUQ configuration)


@dataclass
class UncertaintyPolicy:
    low_threshold: float = 0.80
    medium_threshold: float = 0.60
    high_threshold: float = 0.40
    enable_p_true: bool = True
    enable_semantic_sampling: bool = False
    irreversible_tool_names: list[str] = field(default_factory=list)
    inject_reflection_on_high: bool = True
    reset_on_resume: bool = False  # resuming keeps P_t
    reflection_text: str = REFLECTION_TEXT
    reflection_step_types: tuple[str, ...] = LLM_STEP_TYPES  # reflection on HIGH "LLM steps" only
    escalate_span_on_override: bool = True  # a MEDIUM step paused by the override emits escalate
    high_uncertainty_levels: tuple[str, ...] = ("high", "critical")  # counted in high_uncertainty_steps

    def __post_init__(self) -> None:
        if not (1.0 >= self.low_threshold > self.medium_threshold > self.high_threshold >= 0.0):
            raise ValueError(
                "UncertaintyPolicy thresholds must satisfy 1 >= low > medium > high >= 0, got "
                f"low={self.low_threshold}, medium={self.medium_threshold}, high={self.high_threshold}"
            )
        if "NOT confident" not in self.reflection_text:
            raise ValueError("reflection_text must contain the phrase 'NOT confident' (tools locate the message by it)")



def level_for(confidence: float, policy: UncertaintyPolicy) -> UncertaintyLevel:
    """Thresholds are floors on P_t (the tier table of the AUQ documentation; docs/monitoring.md, AUQ levels and actions)."""
    if confidence >= policy.low_threshold:
        return UncertaintyLevel.LOW
    if confidence >= policy.medium_threshold:
        return UncertaintyLevel.MEDIUM
    if confidence >= policy.high_threshold:
        return UncertaintyLevel.HIGH
    return UncertaintyLevel.CRITICAL


def is_irreversible(tool_names: Sequence[str], policy: UncertaintyPolicy) -> bool:
    """Any tool name containing any non-empty entry of irreversible_tool_names (case-insensitive)."""
    entries = [e.lower() for e in policy.irreversible_tool_names if e]
    return any(e in name.lower() for name in tool_names for e in entries)


def decide_action(level: UncertaintyLevel, irreversible: bool) -> EscalationAction:
    """Level -> action, with the irreversible override: MEDIUM + irreversible tool -> PAUSE_FOR_HUMAN."""
    if irreversible and level is UncertaintyLevel.MEDIUM:
        return EscalationAction.PAUSE_FOR_HUMAN
    return ACTION_FOR_LEVEL[level]
