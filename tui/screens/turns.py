"""Regenerate, edit and resend, and branch: what the chat can do with an earlier turn.

- **Regenerate** (ctrl+g): the last question answered again, sampled
  (:mod:`mlx_sdm.executor.regeneration`); the new answer streams in below the first with its own verdict,
  and both stay in the history.
- **Branch** (ctrl+f): pick a turn; a new session continues from it (the turns up to and including it are
  copied), remembering the session and turn it came from. The original is unchanged.
- **Edit and resend** (ctrl+up): pick a question; a new branch holds the turns before it and the prompt is
  filled with the question to edit and send. The original turn and everything after it stay where they were.

The picker lists the session's questions; enter picks, escape closes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, Static
from textual.widgets.option_list import Option

from mlx_sdm.errors import DataError
from mlx_sdm.executor.regeneration import regeneration
from mlx_sdm.store.schema import MessageRecord
from tui.format import shorten

#: The chat screen (``tui.screens.chat.ChatScreen``; not imported: it would import this module back).
ChatScreen = Any


@dataclass(frozen=True)
class Turn:
    """One question of a session: its number, its message and the id of the next question (None: the last)."""

    number: int
    question: MessageRecord
    next_question_id: int | None


def turns_of(records: list[MessageRecord]) -> list[Turn]:
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


def _ready(chat: ChatScreen, what: str) -> list[Turn] | None:
    """The session's turns, or None (said why) when there is nothing to act on."""
    if chat.active is not None:
        chat.notify(f"An answer is still streaming; escape stops it before you {what}.", severity="warning")
        return None
    turns = turns_of(chat.bridge.messages(chat.session_id)) if chat.session_id is not None else []
    if not turns:
        chat.notify(f"Nothing to {what} yet: ask something first.", severity="warning")
        return None
    return turns


async def regenerate(chat: ChatScreen) -> None:
    """Answer the last question again (sampled); the new answer gets its own bubble and verdict."""
    if _ready(chat, "regenerate") is None:
        return
    session_id = chat.session_id
    try:
        again = regeneration(chat.bridge.messages(session_id))
    except DataError as exc:
        chat.notify(str(exc), severity="warning")
        return
    await chat.start_turn(lambda: chat.bridge.regenerate(session_id),
                      title=f"assistant · turn {chat.turn_number} · answer {again.attempt + 1} (sampled)")


def branch(chat: ChatScreen) -> None:
    """Pick a turn; continue from it in a new session."""
    turns = _ready(chat, "branch")
    if turns is None:
        return
    parent = chat.session_id

    async def picked(turn: Turn | None) -> None:
        if turn is None:
            return
        made = chat.bridge.branch_session(parent, before_message_id=turn.next_question_id)
        await chat.open_session(made.id)
        chat.notify(f"A new session, {made.branch.words()}: the original is unchanged.", title="Branched")

    chat.app.push_screen(TurnPicker("Branch: continue from which turn?",
                                    "enter: a new session with the turns up to this one · escape closes", turns), picked)


def edit(chat: ChatScreen) -> None:
    """Pick a question; a new branch holds the turns before it, and the prompt the question to edit and send."""
    turns = _ready(chat, "edit")
    if turns is None:
        return
    parent = chat.session_id

    async def picked(turn: Turn | None) -> None:
        if turn is None:
            return
        made = chat.bridge.branch_session(parent, before_message_id=turn.question.id,
                                          title=f"edit of turn {turn.number} · {chat.bridge.session(parent).title}")
        await chat.open_session(made.id)
        chat.insert_prompt(turn.question.text)
        chat.notify(f"Edit turn {turn.number} and press enter: it is sent in a new session, {made.branch.words()}; "
                    "the original is unchanged.", title="Edit and resend")

    chat.app.push_screen(TurnPicker("Edit and resend which question?",
                                    "enter: edit it in a new branch (the original stays) · escape closes", turns), picked)
