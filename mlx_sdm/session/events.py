"""What the chat engine tells its callers: events (streamed while a turn runs) and results (what a
future resolves to). Dataclasses holding typed values (no MLX), so the UI can import them freely.

Events arrive on the ENGINE's thread, in this order for one turn::

    TokenEvent*  (phase "answer")
    VerdictEvent                     a DocumentVerdict (verified / not_verified / out_of_scope) or none (no_verifier)
    MonitorEvent                     a MonitorReading: AUQ level + cumulative confidence, TRACER prefix risk
    EscalationEvent?                 an Escalation: proceed_with_log (MEDIUM), pause_for_human (HIGH /
                                     irreversible tool) or abort (CRITICAL)
    TokenEvent*  (phase "reflection", only on a HIGH pause with reflection generation on)
    TurnFinishedEvent                the turn's typed record (TurnResult: status done / paused / aborted /
                                     cancelled, the verdict, the reading, the stored ids)

``ErrorEvent`` may come at any time (then a ``TurnFinishedEvent`` without a record, status error);
``SupportEvent`` follows a review decision or undo; ``StatusEvent`` reports loading / ready.
A UI re-posts them to its own thread (Textual: ``App.call_from_thread``); a callback must not block.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar

from mlx_sdm.monitor.online.reading import HistoryPoint, MonitorReading
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus, VerdictWords, verdict_words
from mlx_sdm.network.coverage import VerifierCoverage
from mlx_sdm.session.escalation import Escalation, TurnStatus
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.session.turn import TurnOutcome


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


def prefill_event(session_id: str | None, turn: int, done: int, total: int) -> PrefillEvent | None:
    """The event of a prefill step, or None when the prompt is too short to show one."""
    return PrefillEvent(session_id=session_id, turn=turn, done=int(done), total=int(total)) \
        if total >= LONG_PREFILL_TOKENS else None


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
    """The turn's last event: its typed record (the same :class:`TurnResult` the engine's future
    resolves to), or None when the turn failed before it produced one (an :class:`ErrorEvent` came first)."""

    kind: ClassVar[str] = "finished"
    result: "TurnResult | None" = None

    @property
    def status(self) -> TurnStatus:
        return self.result.status if self.result is not None else TurnStatus.ERROR


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
    """One turn as every front end reads it: what was answered, its verdict and monitor reading, how
    the turn ended and what the store keeps of it. Built once per turn (``TurnResult.of``); the engine's
    future resolves to it and :class:`TurnFinishedEvent` carries it."""

    session_id: str
    turn: int
    status: TurnStatus
    text: str
    message_id: int | None
    verdict_status: VerdictStatus | None  # None if cancelled
    verdict: DocumentVerdict | None
    monitor: MonitorReading | None
    review_id: int | None = None
    verdict_reason: str | None = None  # why rejected, or why unverifiable
    reflection: str | None = None  # on a pause: the model's statement of its uncertainty (or the injected prompt)
    escalation: Escalation = field(default_factory=Escalation)  # what the monitor's reading made the turn do
    user_message_id: int | None = None
    first_token_s: float | None = None  # seconds from the call to the first streamed token
    generation_s: float | None = None
    tokens: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens served from the previous turn's KV cache (not prefilled again)
    judged_text: str = ""  # the span the verdict covers
    unverified_tail: str = ""  # text after it (empty when the answer stopped at the judged unit)

    @property
    def explanation(self) -> str | None:
        """On an abort: why."""
        return self.escalation.explanation

    @property
    def words(self) -> VerdictWords | None:
        """The badge and sentence a person reads (None: the turn made no verdict, e.g. stopped)."""
        if self.verdict_status is None:
            return None
        return verdict_words(self.verdict, no_verifier_reason=self.verdict_reason)

    @classmethod
    def of(cls, session_id: str, turn: int, outcome: TurnOutcome, *, message_id: int | None,
           review_id: int | None, user_message_id: int | None = None, queued_s: float = 0.0) -> "TurnResult":
        """The record of a turn the pipeline ran (``queued_s``: how long it waited for the engine)."""
        cancelled = outcome.status is TurnStatus.CANCELLED
        return cls(
            session_id=session_id, turn=turn, status=outcome.status, text=outcome.text, message_id=message_id,
            verdict_status=None if cancelled else verdict_words(outcome.verdict).status,
            verdict=outcome.verdict, monitor=outcome.monitor, review_id=review_id,
            verdict_reason=None if cancelled else outcome.verdict_reason, reflection=outcome.reflection_shown,
            escalation=outcome.escalation, user_message_id=user_message_id,
            first_token_s=None if outcome.first_token_s is None else queued_s + outcome.first_token_s,
            generation_s=outcome.generation_s, tokens=len(outcome.tokens),
            prompt_tokens=outcome.prompt_tokens, reused_tokens=outcome.reused_tokens,
            judged_text=outcome.judged_text, unverified_tail=outcome.unverified_tail,
        )


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
