"""The chat screen follows the engine's load to its end: the status line never stays on "loading…",
and a model or verifier that cannot be loaded is reported in words with what to do next."""

from __future__ import annotations

from typing import Any, Protocol

from tui.bridge import Bridge


class LoadingScreen(Protocol):
    """What the load watcher needs of a screen (the chat screen is one): its app, its bridge to the engine,
    a way to redraw its status line and to notify."""

    @property
    def app(self) -> Any: ...

    @property
    def bridge(self) -> Bridge: ...

    def refresh_status(self) -> None: ...

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


def report_load_failure(screen: LoadingScreen) -> None:
    error = screen.bridge.load_error()
    if error:
        screen.notify(f"{error}\nFix it and start the chat again (mlx-sdm chat --help).",
                      title="The model or verifier could not be loaded", severity="error", timeout=30)
