"""The one Textual message that carries the engine's events to the UI.

The engine calls the bridge's callback on ITS thread; the bridge wraps the event (a dataclass from
``mlx_sdm.session.events``) in :class:`EngineUpdate` and posts it with ``post_message`` (thread-safe and
non-blocking), so the engine never waits for the UI and the UI never waits for MLX.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message


class EngineUpdate(Message):
    """``event.kind`` says what happened: token, verdict, monitor, escalation, finished, error, support, status."""

    def __init__(self, event: Any) -> None:
        super().__init__()
        self.event = event


class CallFailed(Message):
    """An engine call's future failed without the engine reporting it as an event (e.g. the model never
    loaded, or there was no paused turn to resume). ``bubble`` is the answer it was meant for."""

    def __init__(self, bubble: Any, error: BaseException) -> None:
        super().__init__()
        self.bubble = bubble
        self.error = error
