"""The turns of a session, and the picker the chat screen's branch and edit-and-resend open on them:
it lists the session's questions; enter picks, escape closes."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from mlx_sdm.store.records import MessageRecord
from tui.format import shorten


@dataclass(frozen=True)
class Turn:
    """One question of a session: its number, its message and the id of the next question (None: the last)."""

    number: int
    question: MessageRecord
    next_question_id: int | None


def turns_of(records: list[MessageRecord]) -> list[Turn]:
    """The session's questions (its user messages of kind "chat"), numbered from 1."""
    questions = [m for m in records if m.role == "user" and m.kind == "chat"]
    return [Turn(i + 1, q, questions[i + 1].id if i + 1 < len(questions) else None) for i, q in enumerate(questions)]


class TurnPicker(ModalScreen[Turn | None]):
    """Pick one question of the session (the last is highlighted). Dismisses with the :class:`Turn` or None."""

    BINDINGS = [Binding("escape", "close", "Close"), Binding("j", "move(1)", show=False),
                Binding("k", "move(-1)", show=False)]

    def __init__(self, title: str, hint: str, turns: list[Turn]) -> None:
        super().__init__(classes="modal")
        self._title, self._hint, self.turns = title, hint, turns

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label(self._title, classes="dialog-title")
            yield OptionList(*(Option(f"turn {t.number} · {shorten(t.question.text, 70)}", id=str(t.number))
                               for t in self.turns), id="turn-list")
            yield Static(self._hint, classes="hint")

    def on_mount(self) -> None:
        options = self.query_one("#turn-list", OptionList)
        options.highlighted = len(self.turns) - 1
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(self.turns[int(event.option.id) - 1])

    def action_move(self, delta: int) -> None:
        options = self.query_one("#turn-list", OptionList)
        options.action_cursor_down() if delta > 0 else options.action_cursor_up()

    def action_close(self) -> None:
        self.dismiss(None)


def picker_for(turns: list[Turn], *, edit: bool) -> TurnPicker:
    """The picker of the chat's branch (ctrl+f) or, ``edit``, of its edit and resend (ctrl+up)."""
    if edit:
        return TurnPicker("Edit and resend which question?",
                          "enter: edit it in a new branch (the original stays) · escape closes", turns)
    return TurnPicker("Branch: continue from which turn?",
                      "enter: a new session with the turns up to this one · escape closes", turns)
