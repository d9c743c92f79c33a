"""The full evidence of one verdict, with room for the exemplars' whole texts."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from mlx_sdm.network.verdict import DocumentVerdict
from tui.widgets.evidence_panel import evidence_renderable

FULL_TEXT_WIDTH = 400


class EvidenceScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q", "close", "Close")]

    def __init__(self, verdict: DocumentVerdict, answer: str = "") -> None:
        super().__init__(classes="modal")
        self.verdict, self.answer = verdict, answer
        self.shown = evidence_renderable(verdict, text_width=FULL_TEXT_WIDTH, raw=True)

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog wide evidence-screen"):
            yield Label("Evidence behind the verdict", classes="dialog-title")
            if self.answer:
                yield Static(self.answer, classes="answer")
            yield Static(self.shown, id="evidence-full")

    def action_close(self) -> None:
        self.dismiss(None)
