"""Search every stored session: type words, see the messages that hold them, enter opens the session.

Filters are typed with the words (``status:not_verified``, ``status:"out of scope"``, ``task:NAME``,
``since:YYYY-MM-DD``, ``until:YYYY-MM-DD``), read by ``SearchQuery.parse`` as ``mlx-sdm history search``
reads its flags. The list follows each key typed (the word being typed also matches longer words); enter or down moves to the hits, enter on a hit opens
its session, escape closes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from mlx_sdm.errors import MlxSdmError
from mlx_sdm.store.search import SearchQuery, search_sessions
from tui.widgets.search_results import SearchResults

if TYPE_CHECKING:
    from tui.bridge import Bridge

PLACEHOLDER = 'words or a "phrase"; filters: status:not_verified task:NAME since:2026-01-01 until:2026-12-31'
HINT = "enter or ↓ to the hits · enter opens the session · escape closes · status: verified, not_verified, out_of_scope"


class SearchScreen(ModalScreen[str | None]):
    """Dismisses with the id of the session to open, or None."""

    BINDINGS = [Binding("escape", "close", "Close")]

    def __init__(self, query: str = "") -> None:
        super().__init__(classes="modal")
        self._initial = query

    @property
    def bridge(self) -> "Bridge":
        return self.app.bridge  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide search"):
            yield Label("Search sessions", classes="dialog-title")
            yield Input(value=self._initial, placeholder=PLACEHOLDER, id="search-input")
            yield Static("", id="search-status", classes="hint")
            yield SearchResults(id="search-results")
            yield Static(HINT, classes="hint")

    def on_mount(self) -> None:
        self.query_one("#search-input", Input).focus()
        if self._initial:
            self.run_search(self._initial)

    def run_search(self, typed: str) -> None:
        """Search now (SQLite, no model: fine on the UI thread) and show the hits or what is wrong."""
        results, status = self.query_one(SearchResults), self.query_one("#search-status", Static)
        if not typed.strip():
            results.show_hits([])
            status.update("")
            return
        try:
            hits = search_sessions(self.bridge.store, SearchQuery.parse(typed, prefix=True))
        except MlxSdmError as exc:  # a filter not understood, no word yet, a SQLite without FTS5
            results.show_hits([])
            status.update(str(exc))
            return
        results.show_hits(hits)
        status.update(f"{len(hits)} hit{'' if len(hits) == 1 else 's'}" if hits else "no message matches")

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.run_search(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.query_one(SearchResults).focus()

    def on_key(self, event) -> None:
        if event.key == "down" and self.query_one("#search-input", Input).has_focus:
            event.stop()
            self.query_one(SearchResults).focus()

    def on_search_results_opened(self, message: SearchResults.Opened) -> None:
        message.stop()
        self.dismiss(message.hit.session_id)

    def action_close(self) -> None:
        self.dismiss(None)
