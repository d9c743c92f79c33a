"""What the chat engine tells its callers: events (streamed while a turn runs) and results (what a
future resolves to). Dataclasses holding typed values (no MLX), so the UI can import them freely.

Events arrive on the ENGINE's thread, in this order for one turn::

    TokenEvent*  (phase "answer")
    VerdictEvent                     a DocumentVerdict (verified / not_verified / out_of_scope) or none (no_verifier)
    MonitorEvent                     a MonitorReading: AUQ level + cumulative confidence, TRACER prefix risk
    EscalationEvent?                 an Escalation: proceed_with_log (MEDIUM), pause_for_human (HIGH /
                                     irreversible tool) or abort (CRITICAL)
    TokenEvent*  (phase "reflection", only on a HIGH pause with reflection generation on)
    TurnFinishedEvent                status done / paused / aborted / cancelled / error

``ErrorEvent`` may come at any time (then ``TurnFinishedEvent(status="error")`` for a turn);
``SupportEvent`` follows a review decision or undo; ``StatusEvent`` reports loading / ready.
A UI re-posts them to its own thread (Textual: ``App.call_from_thread``); a callback must not block.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar

from mlx_sdm.monitor.online.reading import HistoryPoint, MonitorReading
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus, VerdictWords, verdict_words
from mlx_sdm.network.coverage import VerifierCoverage
from mlx_sdm.session.escalation import Escalation
from mlx_sdm.session.turn import TokenPiece


@dataclass
class EngineEvent:
    kind: ClassVar[str] = "event"
    session_id: str | None
    turn: int  # the engine's turn counter (0 for events outside a turn)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}  # typed payloads become nested dicts


@dataclass
class TokenEvent(EngineEvent):
    kind: ClassVar[str] = "token"
    piece: TokenPiece = TokenPiece("")  # the pipeline's own token value (text, id, log-prob, phase, top)


#: A prompt with at least this many new tokens is a long prefill worth showing (seconds on a laptop);
#: shorter ones send no PrefillEvent and draw no bar.
LONG_PREFILL_TOKENS = 1024


@dataclass
class PrefillEvent(EngineEvent):
    """``done`` of the prompt's ``total`` new tokens are prefilled (before the answer's first token); sent
    only for a long prompt (``total >= LONG_PREFILL_TOKENS``)."""

    kind: ClassVar[str] = "prefill"
    done: int = 0
    total: int = 0


@dataclass
class VerdictEvent(EngineEvent):
    kind: ClassVar[str] = "verdict"
    verdict: DocumentVerdict | None = None  # None: no verifier judged it (unverifiable_reason says why)
    unverifiable_reason: str | None = None
    verifier: str | None = None  # the verifier's path / name

    @property
    def status(self) -> VerdictStatus:
        return self.words.status

    @property
    def words(self) -> VerdictWords:
        """The badge and sentence a person reads (the one rule, network/verdict.verdict_words)."""
        return verdict_words(self.verdict, no_verifier_reason=self.unverifiable_reason)

    @property
    def reason(self) -> str | None:
        """The verdict's reason code, or why there is no verdict."""
        return self.verdict.reason if self.verdict is not None else self.unverifiable_reason


@dataclass
class MonitorEvent(EngineEvent):
    kind: ClassVar[str] = "monitor"
    reading: MonitorReading = field(default_factory=MonitorReading)
    history: list[HistoryPoint] = field(default_factory=list)  # the session's answered turns so far (sparklines)


@dataclass
class EscalationEvent(EngineEvent):
    kind: ClassVar[str] = "escalation"
    escalation: Escalation = field(default_factory=Escalation)


@dataclass
class TurnFinishedEvent(EngineEvent):
    kind: ClassVar[str] = "finished"
    status: str = "done"  # "done" | "paused" | "aborted" | "cancelled" | "error"
    message_id: int | None = None  # the stored answer
    text: str = ""
    reflection: str | None = None  # on a pause: the model's statement of its uncertainty (or the injected prompt)
    explanation: str | None = None  # on an abort: why
    review_id: int | None = None  # set when the answer landed in the review queue
    unverified_tail: str = ""  # text after the unit the verifier judged (not covered by the verdict)


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
    coverage: VerifierCoverage = field(default_factory=VerifierCoverage)  # what the verifier covers


@dataclass
class TurnResult:
    session_id: str
    turn: int
    status: str  # "done" | "paused" | "aborted" | "cancelled" | "error"
    text: str
    message_id: int | None
    verdict_status: str | None  # a VerdictStatus value; None if cancelled
    verdict: DocumentVerdict | None
    monitor: MonitorReading | None
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
    judged_text: str = ""  # the span the verdict covers
    unverified_tail: str = ""  # text after it (empty when the answer stopped at the judged unit)


@dataclass
class PauseInfo:
    """A turn waiting for guidance (HIGH, or MEDIUM with an irreversible tool)."""

    session_id: str
    message_id: int
    level: str | None
    confidence: float | None
    reflection: str | None
    irreversible: bool
    message: str = ""  # the escalation's sentence: what paused it (AUQ level, the fused forecast, a tool)
