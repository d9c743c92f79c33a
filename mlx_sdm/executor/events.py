"""What the chat engine tells its callers: events (streamed while a turn runs) and results (what a
future resolves to). Dataclasses holding typed values (no MLX), so the UI can import them freely.

Events arrive on the ENGINE's thread, in this order for one turn::

    TokenEvent*  (phase "answer")
    VerifyingEvent?                  the answer is complete and the verifier is reading it (a judged turn only)
    VerdictEvent                     a DocumentVerdict (verified / not_verified / out_of_scope) or none (no_verifier)
    MonitorEvent                     a MonitorReading: AUQ level + cumulative confidence, TRACER prefix risk
    EscalationEvent?                 an Escalation: proceed_with_log (MEDIUM), pause_for_human (HIGH /
                                     irreversible tool) or abort (CRITICAL)
    TokenEvent*  (phase "reflection", only on a HIGH pause with reflection generation on)
    TurnFinishedEvent                the turn's one record (TurnOutcome: status done / paused / aborted /
                                     cancelled, the verdict, the reading, the stored ids)

``ErrorEvent`` may come at any time (then a ``TurnFinishedEvent`` without a record, status error);
``SupportEvent`` follows a review decision or undo; ``StatusEvent`` reports loading / ready.
A UI re-posts them to its own thread (Textual: ``App.call_from_thread``); a callback must not block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar

from mlx_sdm.monitor.online.reading import HistoryPoint, MonitorReading
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus, VerdictWords, verdict_words
from mlx_sdm.network.coverage import VerifierCoverage
from mlx_sdm.turn.escalation import Escalation, TurnStatus
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.turn.values import AnswerVerdict, TurnOutcome


@dataclass
class EngineEvent:
    kind: ClassVar[str] = "event"
    session_id: str | None
    turn: int  # the engine's turn counter (0 for events outside a turn)


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
class VerifyingEvent(EngineEvent):
    """The answer's last token is out and the verifier is judging it (the pipeline's ``AnswerComplete``);
    the VerdictEvent follows."""

    kind: ClassVar[str] = "verifying"
    tokens: int = 0  # how many tokens the answer has


@dataclass
class VerdictEvent(EngineEvent):
    """The turn's :class:`~mlx_sdm.turn.values.AnswerVerdict`, carried as the pipeline yielded it."""

    kind: ClassVar[str] = "verdict"
    answer: AnswerVerdict = field(default_factory=lambda: AnswerVerdict(None))
    verifier: str | None = None  # the verifier's path / name

    @property
    def verdict(self) -> DocumentVerdict | None:
        """None: no verifier judged it (:attr:`unverifiable_reason` says why)."""
        return self.answer.verdict

    @property
    def unverifiable_reason(self) -> str | None:
        return self.answer.unverifiable_reason

    @property
    def status(self) -> VerdictStatus:
        return self.answer.status

    @property
    def words(self) -> VerdictWords:
        """The badge and sentence a person reads (the one rule, network/verdict.verdict_words)."""
        return self.answer.words

    @property
    def reason(self) -> str | None:
        """The verdict's reason code, or why there is no verdict."""
        return self.answer.reason


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
    """The turn's last event: its one record (the same :class:`TurnOutcome` the engine's future
    resolves to), or None when the turn failed before it produced one (an :class:`ErrorEvent` came first)."""

    kind: ClassVar[str] = "finished"
    result: TurnOutcome | None = None

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
class PauseInfo:
    """A turn waiting for guidance (HIGH, or MEDIUM with an irreversible tool)."""

    session_id: str
    message_id: int
    level: str | None
    confidence: float | None
    reflection: str | None
    irreversible: bool
    message: str = ""  # the escalation's sentence: what paused it (AUQ level, the fused forecast, a tool)
