"""What the chat engine tells its callers: events (streamed while a turn runs) and results (what a
future resolves to). Plain dataclasses, no MLX, so the UI can import them freely.

Events arrive on the ENGINE's thread, in this order for one turn::

    TokenEvent*  (phase "answer")
    VerdictEvent                     verified / rejected / unverifiable
    MonitorEvent                     AUQ level + cumulative confidence, TRACER prefix risk
    EscalationEvent?                 action "log" (MEDIUM), "pause" (HIGH / irreversible tool), "abort" (CRITICAL)
    TokenEvent*  (phase "reflection", only on a HIGH pause with reflection generation on)
    TurnFinishedEvent                status done / paused / aborted / cancelled / error

``ErrorEvent`` may come at any time (then ``TurnFinishedEvent(status="error")`` for a turn);
``SupportEvent`` follows a review decision or undo; ``StatusEvent`` reports loading / ready.
A UI re-posts them to its own thread (Textual: ``App.call_from_thread``); a callback must not block.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar


@dataclass
class EngineEvent:
    kind: ClassVar[str] = "event"
    session_id: str | None
    turn: int  # the engine's turn counter (0 for events outside a turn)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}


@dataclass
class TokenEvent(EngineEvent):
    kind: ClassVar[str] = "token"
    text: str = ""  # the decoded piece to append
    token_id: int | None = None
    logprob: float | None = None
    phase: str = "answer"  # "answer" | "reflection"


@dataclass
class VerdictEvent(EngineEvent):
    kind: ClassVar[str] = "verdict"
    status: str = "unverifiable"  # "verified" | "rejected" | "unverifiable"
    verdict: dict | None = None  # Verdict.to_dict() (p_lower, q, d, q_bin, reason, exemplars, ...), None if unverifiable
    reason: str | None = None  # why rejected (verdict reason or "predicted_unacceptable") or why unverifiable
    verifier: str | None = None  # the verifier's path / name


@dataclass
class MonitorEvent(EngineEvent):
    kind: ClassVar[str] = "monitor"
    monitor: dict = field(default_factory=dict)
    # keys: level ("low"|"medium"|"high"|"critical"), action ("proceed"|"proceed_with_log"|"pause_for_human"|"abort"),
    # cumulative_confidence, step_confidence, tracer_risk (prefix R_t), step_risk (r_t), irreversible,
    # history: [{"turn", "level", "cumulative_confidence", "tracer_risk"}] over the session (for a sparkline),
    # auq: AUQOutput.to_dict(), tracer: TracerOutput.to_dict()


@dataclass
class EscalationEvent(EngineEvent):
    kind: ClassVar[str] = "escalation"
    level: str = "medium"
    action: str = "log"  # "log" | "pause" | "abort"
    message: str = ""  # one line for a toast / log
    confidence: float | None = None  # cumulative confidence P_t
    irreversible: bool = False
    tool_names: list[str] = field(default_factory=list)


@dataclass
class TurnFinishedEvent(EngineEvent):
    kind: ClassVar[str] = "finished"
    status: str = "done"  # "done" | "paused" | "aborted" | "cancelled" | "error"
    message_id: int | None = None  # the stored answer
    text: str = ""
    reflection: str | None = None  # on a pause: the model's statement of its uncertainty (or the injected prompt)
    explanation: str | None = None  # on an abort: why
    review_id: int | None = None  # set when the answer landed in the review queue


@dataclass
class ErrorEvent(EngineEvent):
    kind: ClassVar[str] = "error"
    message: str = ""
    error_type: str = ""


@dataclass
class SupportEvent(EngineEvent):
    kind: ClassVar[str] = "support"
    action: str = "added"  # "added" | "removed" | "rebuilt" | "skipped"
    support_size: int | None = None
    decision_id: int | None = None
    message: str = ""


@dataclass
class StatusEvent(EngineEvent):
    kind: ClassVar[str] = "status"
    state: str = "loading"  # "loading" | "ready" | "stopped"
    message: str = ""


EventCallback = Callable[[EngineEvent], None]


@dataclass
class EngineInfo:
    """What was loaded. ``verifier_path`` is None when answers are unverifiable (``unverifiable_reason`` says why)."""

    model_name: str
    model_fingerprint: dict
    feature_model: str  # short hash of the fingerprint; stored with every feature vector
    verifier_path: str | None
    unverifiable_reason: str | None
    support_size: int | None
    reviewed_verifier_path: str | None
    head_path: str | None
    embedder: str | None
    max_tokens: int
    irreversible_tools: list[str]


@dataclass
class TurnResult:
    session_id: str
    turn: int
    status: str  # "done" | "paused" | "aborted" | "cancelled" | "error"
    text: str
    message_id: int | None
    verdict_status: str | None
    verdict: dict | None
    monitor: dict | None
    review_id: int | None = None
    verdict_reason: str | None = None  # why rejected, or why unverifiable
    reflection: str | None = None
    explanation: str | None = None
    user_message_id: int | None = None
    first_token_s: float | None = None  # seconds from the call to the first streamed token
    generation_s: float | None = None
    tokens: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens served from the previous turn's KV cache (not prefilled again)


@dataclass
class DecisionResult:
    decision_id: int
    review_id: int
    label: int
    applied: bool  # the point went into the verifier's support set
    support_size: int | None
    saved_to: str | None  # where the updated verifier was saved (atomically)
    message: str = ""


@dataclass
class PauseInfo:
    """A turn waiting for guidance (HIGH, or MEDIUM with an irreversible tool)."""

    session_id: str
    message_id: int
    level: str | None
    confidence: float | None
    reflection: str | None
    irreversible: bool
