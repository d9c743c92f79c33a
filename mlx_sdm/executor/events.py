"""What the chat engine tells its callers: the items of a turn as the pipeline yielded them, the few
items the engine itself originates, and the results a future resolves to. Dataclasses holding typed
values (no MLX), so the UI can import them freely.

The engine calls each listener with a :class:`TurnRef` (where the item belongs) and the item itself
(:data:`EngineItem`), on the ENGINE's thread, in this order for one turn::

    PrefillProgress*               a long prompt is being read (done of total tokens), before the first token
    TokenPiece*  (phase "answer")
    AnswerComplete?                the answer is complete and the verifier is reading it (a judged turn only)
    CheckingAnswers?               the second look: the model draws k more answers the verdict reads
    DocumentVerdict                the verdict: verified / not_verified / out_of_scope / no_verifier (with why)
    MonitorReading                 AUQ level + cumulative confidence, TRACER prefix risk, the fused forecast
    Escalation?                    proceed_with_log (MEDIUM), pause_for_human (HIGH / irreversible tool)
                                   or abort (CRITICAL)
    TokenPiece*  (phase "reflection", only on a HIGH pause with reflection generation on)
    TurnReceipt                    the turn's one record (its TurnOutcome: status done / paused / aborted /
                                   cancelled, the verdict, the reading) and where the store keeps it (the
                                   session, the answer, its review entry, its question): what the future
                                   resolves to

A turn that fails ends with :class:`TurnFailed` instead of its ``TurnReceipt``. Outside a turn (``turn``
0): :class:`SupportChange` follows a review decision or undo; :class:`EngineState` reports loading /
ready / failed / stopped. A UI re-posts them to its own thread (Textual: ``post_message``); a listener
must not block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Union

from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.coverage import TaskInstruction, VerifierCoverage
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.store.turn_writer import TurnReceipt
from mlx_sdm.turn.escalation import Escalation
from mlx_sdm.turn.values import AnswerComplete, CheckingAnswers


@dataclass(frozen=True)
class TurnRef:
    """Where an item belongs: the session and the engine's turn counter (0 for items outside a turn;
    ``session_id`` None for the engine's own state)."""

    session_id: str | None
    turn: int


#: The ref of an item that belongs to no session and no turn (the engine's state).
ENGINE_REF = TurnRef(None, 0)

#: A prompt with at least this many new tokens is a long prefill worth showing (seconds on a laptop);
#: shorter ones send no PrefillProgress and draw no bar.
LONG_PREFILL_TOKENS = 1024


@dataclass(frozen=True)
class PrefillProgress:
    """``done`` of the prompt's ``total`` new tokens are prefilled (before the answer's first token)."""

    done: int
    total: int


def prefill_progress(done: int, total: int) -> PrefillProgress | None:
    """The item of a prefill step, or None when the prompt is too short to show one
    (``total < LONG_PREFILL_TOKENS``)."""
    return PrefillProgress(int(done), int(total)) if total >= LONG_PREFILL_TOKENS else None


@dataclass(frozen=True)
class TurnFailed:
    """A failed turn's last item, in place of its record: what went wrong, in words, and the error's type."""

    message: str
    error_type: str


@dataclass(frozen=True)
class SupportChange:
    """The verifier's support set after a review decision (``added`` / ``skipped``) or an undo (``removed``)."""

    action: str  # "added" | "removed" | "rebuilt" | "skipped"
    support_size: int | None
    decision_id: int | None
    message: str = ""


@dataclass(frozen=True)
class EngineState:
    """The engine's own state: ``loading``, ``ready``, ``failed`` (loading failed; ``message`` says why)
    or ``stopped``."""

    state: str
    message: str = ""


#: A kept turn's items (``TurnService.stream_turn``): the pipeline's as it yielded them, the receipt in place of
#: the record.
KeptTurnItem = Union[TokenPiece, AnswerComplete, CheckingAnswers, DocumentVerdict, MonitorReading, Escalation, TurnReceipt]
#: Everything a listener receives: a kept turn's items, and the engine's own.
EngineItem = Union[KeptTurnItem, PrefillProgress, TurnFailed, SupportChange, EngineState]
#: A listener: called on the engine's thread with where the item belongs and the item itself.
Listener = Callable[[TurnRef, EngineItem], None]


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
    #: a fine-tuned model folder (``--model DIR``): where it is and the tasks its adapters were trained on
    model_folder: str | None = None
    model_tasks: tuple[TaskInstruction, ...] = ()


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
