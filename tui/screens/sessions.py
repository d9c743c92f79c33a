"""Stored sessions: open one, rename (r), delete (d), start a new one (n)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

from mlx_sdm.store.records import SessionInfo
from tui.format import shorten
from tui.screens.prompts import Confirm, TextPrompt

if TYPE_CHECKING:
    from tui.bridge import Bridge


def branch_origin(session: SessionInfo) -> str:
    """Where a branch came from, short ("turn 2 of “Capitals”"); empty for a session that is not a branch."""
    origin = session.branch
    if origin is None:
        return ""
    return (f"turn {origin.turn}" if origin.turn else "before turn 1") + f" of “{shorten(origin.title, 14)}”"


class SessionsScreen(ModalScreen[str | None]):
    """Dismisses with the id of the session to open, ``""`` for a new one, or None (nothing changes)."""

    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("enter", "open", "Open", show=True, priority=True),
        Binding("n", "new", "New"),
        Binding("r", "rename", "Rename"),
        Binding("d,delete", "delete", "Delete"),
        Binding("j", "move(1)", "Down", show=False),
        Binding("k", "move(-1)", "Up", show=False),
    ]

    @property
    def bridge(self) -> "Bridge":
        return self.app.bridge  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide sessions"):
            yield Label("Sessions", classes="dialog-title")
            yield DataTable(id="session-table", cursor_type="row", zebra_stripes=True)
            yield Static("enter open · n new · r rename · d delete · escape close", classes="hint")

    def on_mount(self) -> None:
        table = self.query_one("#session-table", DataTable)
        table.add_columns("title", "messages", "updated", "model", "branched from")
        self.reload()
        table.focus()

    def reload(self) -> None:
        table = self.query_one("#session-table", DataTable)
        table.clear()
        self.sessions = self.bridge.store.list_sessions()
        for s in self.sessions:
            table.add_row(
                shorten(s.title, 36), str(s.message_count), s.updated_at[:16].replace("T", " "), s.model or "",
                branch_origin(s), key=s.id
            )

    def _current(self):
        table = self.query_one("#session-table", DataTable)
        if not self.sessions or table.cursor_row < 0 or table.cursor_row >= len(self.sessions):
            return None
        return self.sessions[table.cursor_row]

    def action_move(self, delta: int) -> None:
        table = self.query_one("#session-table", DataTable)
        table.action_cursor_down() if delta > 0 else table.action_cursor_up()

    def action_open(self) -> None:
        current = self._current()
        if current is not None:
            self.dismiss(current.id)

    def action_new(self) -> None:
        self.dismiss("")

    def action_close(self) -> None:
        self.dismiss(None)

    def action_rename(self) -> None:
        current = self._current()
        if current is None:
            return

        def done(title: str | None) -> None:
            if title is None or not title.strip():
                return
            self.bridge.store.rename_session(current.id, title)
            self.app.session_renamed(current.id, title.strip())  # type: ignore[attr-defined]
            self.reload()

        self.app.push_screen(TextPrompt("Rename session", value=current.title), done)

    def action_delete(self) -> None:
        current = self._current()
        if current is None:
            return

        def done(yes: bool | None) -> None:
            if not yes:
                return
            try:
                self.bridge.delete_session(current.id)
            except Exception as exc:
                self.notify(f"Could not delete: {exc}", severity="error")
                return
            self.app.session_deleted(current.id)  # type: ignore[attr-defined]
            self.reload()
            self.notify(f"Deleted “{current.title}”.")

        self.app.push_screen(Confirm(f"Delete “{current.title}” and its messages?"), done)
