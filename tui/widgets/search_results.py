"""The hits of a session search as a list: per hit its session, who wrote it, when and the verdict of the
answer, then the text around the matches with the matches marked. Enter (or a click) on a hit posts
:class:`SearchResults.Opened`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import OptionList

from mlx_sdm.network.verdict import VerdictStatus
from mlx_sdm.store.search import SearchHit
from tui.format import shorten

#: A hit's verdict state in the colours of the badges (green vouched, red could not, muted not judged).
STATUS_STYLE = {VerdictStatus.VERIFIED: "bold green", VerdictStatus.NOT_VERIFIED: "bold red",
                VerdictStatus.OUT_OF_SCOPE: "dim", VerdictStatus.NO_VERIFIER: "yellow"}
MATCH_STYLE = "bold reverse"
TITLE_WIDTH = 40


def hit_text(hit: SearchHit) -> Text:
    """Two lines: 'title · role · day time · verdict (task)', then the snippet with its matches styled."""
    head = Text.assemble((shorten(hit.session_title, TITLE_WIDTH), "bold"), f"  {hit.role} · ",
                         hit.created_at[:16].replace("T", " "))
    if hit.status is not None:
        head.append(" · ")
        head.append(hit.status.words, STATUS_STYLE.get(hit.status, ""))
    if hit.task:
        head.append(f" ({hit.task})", "dim")
    body = Text(hit.snippet.replace("\n", " "))
    for start, end in hit.marks:
        body.stylize(MATCH_STYLE, start, end)
    return Text("\n").join([head, body])


class SearchResults(OptionList):
    """One option per :class:`SearchHit` (``hits``), best first; j/k move."""

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    @dataclass
    class Opened(Message):
        """The user chose a hit: open its session."""

        hit: SearchHit

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hits: list[SearchHit] = []

    def show_hits(self, hits: Sequence[SearchHit]) -> None:
        self.hits = list(hits)
        self.clear_options()
        self.add_options([hit_text(hit) for hit in self.hits])
        if self.hits:
            self.highlighted = 0

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if 0 <= event.option_index < len(self.hits):
            self.post_message(self.Opened(self.hits[event.option_index]))
