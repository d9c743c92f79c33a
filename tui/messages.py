"""Textual messages: ONE dataclass per engine event (as posting and harlequin do), each holding the
typed event from ``mlx_sdm.executor.events``.

The engine calls the bridge's callback on ITS thread; the bridge turns the event into its message
(:func:`engine_message`) and posts it with ``post_message`` (thread-safe and non-blocking), so the
engine never waits for the UI and the UI never waits for MLX. A screen handles each with the
handler Textual names after the class (``on_verdict_ready`` for :class:`VerdictReady`). Messages a
widget posts itself live beside it (``VerdictBadge.Toggled``, ``VerdictBadge.OpenEvidence``).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from mlx_sdm.executor.events import (
    EngineEvent,
    ErrorEvent,
    EscalationEvent,
    MonitorEvent,
    PrefillEvent,
    StatusEvent,
    SupportEvent,
    TokenEvent,
    TurnFinishedEvent,
    VerdictEvent,
    VerifyingEvent,
)
from mlx_sdm.lm.pieces import TokenPiece


@dataclass
class TokenArrived(Message):
    """One streamed token (``piece``: the pipeline's ``TokenPiece`` itself)."""

    event: TokenEvent

    @property
    def piece(self) -> TokenPiece:
        return self.event.piece


@dataclass
class AnswerVerifying(Message):
    """The answer is complete and the verifier is judging it (its verdict comes next)."""

    event: VerifyingEvent


@dataclass
class VerdictReady(Message):
    event: VerdictEvent


@dataclass
class MonitorRead(Message):
    event: MonitorEvent


@dataclass
class Escalated(Message):
    event: EscalationEvent


@dataclass
class TurnFinished(Message):
    """The turn's last event; ``event.result`` is its typed record (None: it failed before one was made)."""

    event: TurnFinishedEvent


@dataclass
class EngineFailed(Message):
    event: ErrorEvent


@dataclass
class SupportChanged(Message):
    event: SupportEvent


@dataclass
class EngineStatus(Message):
    event: StatusEvent


@dataclass
class PrefillProgressed(Message):
    """The engine is reading a long prompt (``event.done`` of ``event.total`` tokens)."""

    event: PrefillEvent


MESSAGE_FOR_EVENT: dict[type[EngineEvent], type[Message]] = {
    PrefillEvent: PrefillProgressed, TokenEvent: TokenArrived, VerdictEvent: VerdictReady, MonitorEvent: MonitorRead,
    EscalationEvent: Escalated, TurnFinishedEvent: TurnFinished, ErrorEvent: EngineFailed, SupportEvent: SupportChanged,
    StatusEvent: EngineStatus, VerifyingEvent: AnswerVerifying,
}


def engine_message(event: EngineEvent) -> Message:
    """The Textual message that carries ``event``."""
    return MESSAGE_FOR_EVENT[type(event)](event)
