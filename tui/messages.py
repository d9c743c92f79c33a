"""Textual messages: ONE class per engine event (as posting and harlequin do), each holding the
typed event from ``mlx_sdm.session.events``.

The engine calls the bridge's callback on ITS thread; the bridge turns the event into its message
(:func:`engine_message`) and posts it with ``post_message`` (thread-safe and non-blocking), so the
engine never waits for the UI and the UI never waits for MLX. A screen handles each with the
handler Textual names after the class (``on_verdict_ready`` for :class:`VerdictReady`).
"""

from __future__ import annotations

from typing import Any

from textual.message import Message

from mlx_sdm.session.events import (
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
)


class TokenArrived(Message):
    """One streamed token: ``piece`` is the pipeline's ``TokenPiece`` itself (``event`` the engine event around it)."""

    def __init__(self, event: TokenEvent) -> None:
        super().__init__()
        self.event = event
        self.piece = event.piece


class VerdictReady(Message):
    def __init__(self, event: VerdictEvent) -> None:
        super().__init__()
        self.event = event


class MonitorRead(Message):
    def __init__(self, event: MonitorEvent) -> None:
        super().__init__()
        self.event = event


class Escalated(Message):
    def __init__(self, event: EscalationEvent) -> None:
        super().__init__()
        self.event = event


class TurnFinished(Message):
    def __init__(self, event: TurnFinishedEvent) -> None:
        super().__init__()
        self.event = event


class EngineFailed(Message):
    def __init__(self, event: ErrorEvent) -> None:
        super().__init__()
        self.event = event


class SupportChanged(Message):
    def __init__(self, event: SupportEvent) -> None:
        super().__init__()
        self.event = event


class EngineStatus(Message):
    def __init__(self, event: StatusEvent) -> None:
        super().__init__()
        self.event = event


class PrefillProgressed(Message):
    """The engine is reading a long prompt (``event.done`` of ``event.total`` tokens)."""

    def __init__(self, event: PrefillEvent) -> None:
        super().__init__()
        self.event = event


MESSAGE_FOR_EVENT: dict[type, type[Message]] = {
    PrefillEvent: PrefillProgressed, TokenEvent: TokenArrived, VerdictEvent: VerdictReady, MonitorEvent: MonitorRead, EscalationEvent: Escalated,
    TurnFinishedEvent: TurnFinished, ErrorEvent: EngineFailed, SupportEvent: SupportChanged, StatusEvent: EngineStatus,
}


def engine_message(event: EngineEvent) -> Message:
    """The Textual message that carries ``event``."""
    return MESSAGE_FOR_EVENT[type(event)](event)


class CallFailed(Message):
    """An engine call's future failed without the engine reporting it as an event (e.g. the model never
    loaded, or there was no paused turn to resume). ``bubble`` is the answer it was meant for."""

    def __init__(self, bubble: Any, error: BaseException) -> None:
        super().__init__()
        self.bubble = bubble
        self.error = error


class OpenEvidence(Message):
    """A verdict badge asks for the full evidence view of its verdict (a stored verdict dict)."""

    def __init__(self, verdict: Any) -> None:
        super().__init__()
        self.verdict = verdict
