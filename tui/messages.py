"""Textual messages: one dataclass per item the engine hands its listeners, each holding the item's
:class:`~mlx_sdm.executor.events.TurnRef` and the item itself, the very object the pipeline (or the
engine) made. A value crosses from the engine's thread to the screen only inside one of these.

The engine calls the bridge's listener on the engine's own thread; the bridge makes the item's message
(:func:`message_for`) and posts it with ``post_message`` (thread-safe and non-blocking), so the engine
never waits for the UI and the UI never waits for MLX. A screen handles each with the handler Textual
names after the class (``on_verdict_ready`` for :class:`VerdictReady`). Messages a widget posts itself
live beside it (``VerdictBadge.Toggled``, ``VerdictBadge.OpenEvidence``).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from mlx_sdm.executor.events import EngineItem, EngineState, PrefillProgress, SupportChange, TurnFailed, TurnRef
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.turn.escalation import Escalation
from mlx_sdm.store.turn_writer import TurnReceipt
from mlx_sdm.turn.values import AnswerComplete, CheckingAnswers


@dataclass
class TokenArrived(Message):
    """One streamed token: the pipeline's ``TokenPiece`` itself."""

    ref: TurnRef
    piece: TokenPiece


@dataclass
class AnswerVerifying(Message):
    """The answer is complete and the verifier is judging it (its verdict comes next)."""

    ref: TurnRef
    complete: AnswerComplete


@dataclass
class SecondLookStarted(Message):
    """The verifier is taking a second look: the model draws ``checking.k`` more answers (its verdict comes next)."""

    ref: TurnRef
    checking: CheckingAnswers


@dataclass
class VerdictReady(Message):
    ref: TurnRef
    verdict: DocumentVerdict


@dataclass
class MonitorRead(Message):
    ref: TurnRef
    reading: MonitorReading


@dataclass
class Escalated(Message):
    ref: TurnRef
    escalation: Escalation


@dataclass
class TurnFinished(Message):
    """The turn's last item: its receipt (its one typed record and where it is kept), the object the engine's
    future resolves to."""

    ref: TurnRef
    receipt: TurnReceipt


@dataclass
class EngineFailed(Message):
    """A turn failed: its last item, in place of its record."""

    ref: TurnRef
    failure: TurnFailed


@dataclass
class SupportChanged(Message):
    ref: TurnRef
    change: SupportChange


@dataclass
class EngineStatus(Message):
    ref: TurnRef
    status: EngineState


@dataclass
class PrefillProgressed(Message):
    """The engine is reading a long prompt (``progress.done`` of ``progress.total`` tokens)."""

    ref: TurnRef
    progress: PrefillProgress


#: The message class of each item type the engine hands its listeners.
MESSAGE_FOR_ITEM: dict[type, type[Message]] = {
    TokenPiece: TokenArrived, AnswerComplete: AnswerVerifying, CheckingAnswers: SecondLookStarted,
    DocumentVerdict: VerdictReady, MonitorReading: MonitorRead,
    Escalation: Escalated, TurnReceipt: TurnFinished, TurnFailed: EngineFailed, SupportChange: SupportChanged,
    EngineState: EngineStatus, PrefillProgress: PrefillProgressed,
}


def message_for(ref: TurnRef, item: EngineItem) -> Message:
    """The Textual message that carries ``item`` (the object itself) and where it belongs."""
    return MESSAGE_FOR_ITEM[type(item)](ref, item)
