"""The chat screen follows the engine's load to its end: the status line never stays on "loading…",
and a model or verifier that cannot be loaded is reported in words with what to do next. The screen is
up and takes messages while the model loads: one sent then waits, says so, and is answered once loaded."""

from __future__ import annotations

from typing import Any, Protocol

from tui.bridge import Bridge
from tui.widgets.message import MessageBubble
from tui.widgets.verdict_badge import ANSWERING, WAITING


class LoadingScreen(Protocol):
    """What the load watcher needs of a screen (the chat screen is one): its app, its bridge to the engine,
    a way to redraw its status line and to notify."""

    @property
    def app(self) -> Any: ...

    @property
    def bridge(self) -> Bridge: ...

    def refresh_status(self, note: str | None = None) -> None: ...

    def notify(self, message: str, *, title: str = "", severity: str = "information", timeout: float | None = None) -> None: ...


def watch_load(screen: LoadingScreen) -> None:
    """Refresh the status line when loading ends; report a load that failed before the screen existed."""

    def loaded() -> None:  # runs on the engine's thread
        try:
            screen.app.call_from_thread(screen.refresh_status)
        except RuntimeError:
            pass  # the app has already closed

    if not screen.bridge.when_loaded(loaded):
        report_load_failure(screen)


def report_load_failure(screen: LoadingScreen, error: str | None = None) -> None:
    """Notify why loading failed: ``error`` as the engine said it, or as its future holds it."""
    error = error or screen.bridge.load_error()
    if error:
        screen.notify(f"{error}\nFix it and start the chat again (mlx-sdm chat --help).",
                      title="The model or verifier could not be loaded", severity="error", timeout=30)


def turn_started(screen: LoadingScreen, answer: MessageBubble, *, loading: bool) -> None:
    """A turn handed to the engine: it is being answered, or (``loading``) it waits for the model, which
    the engine answers it with as soon as it has loaded (then this is called again with ``loading=False``)."""
    if answer.badge is not None:
        answer.badge.set_pending(WAITING if loading else ANSWERING)
    screen.refresh_status("yours is waiting for it" if loading else "generating… (escape stops)")
