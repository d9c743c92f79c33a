"""Small modal screens: a one-line prompt, a multi-line editor, a yes/no question, the HIGH-escalation
pause, and the copy fallback (a selectable text area for terminals where OSC 52 does not reach the clipboard)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Markdown, Static, TextArea


class TextPrompt(ModalScreen[str | None]):
    """Ask for one line (rename a session, add a note, a model name). Escape cancels (None)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, *, value: str = "", placeholder: str = "") -> None:
        super().__init__(classes="modal")
        self._title, self._value, self._placeholder = title, value, placeholder

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self._title, classes="dialog-title")
            yield Input(value=self._value, placeholder=self._placeholder, id="prompt-input")
            yield Static("enter to confirm · escape to cancel", classes="hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class EditText(ModalScreen[str | None]):
    """Edit a longer text (an answer into an acceptable completion). ctrl+s saves, escape cancels."""

    BINDINGS = [Binding("ctrl+s", "save", "Save"), Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__(classes="modal")
        self._title, self._text = title, text

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label(self._title, classes="dialog-title")
            yield TextArea(self._text, id="edit-area", soft_wrap=True)
            yield Static("ctrl+s to save · escape to cancel", classes="hint")

    def action_save(self) -> None:
        self.dismiss(self.query_one("#edit-area", TextArea).text)

    def action_cancel(self) -> None:
        self.dismiss(None)


class Confirm(ModalScreen[bool]):
    """A yes/no question (delete a session)."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str) -> None:
        super().__init__(classes="modal")
        self._question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self._question, classes="dialog-title")
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class EscalationPrompt(ModalScreen[str | None]):
    """A paused turn (mlx_sdm.turn.escalation.LADDER_LINES): says why, shows the reflection when the model gave one, asks for
    guidance; enter resumes with it; escape (None) leaves the turn paused: a new message moves on, and
    reopening the session asks again."""

    BINDINGS = [Binding("escape", "leave", "Leave paused")]

    def __init__(self, level: str, confidence: float | None, reflection: str, *, irreversible: bool = False,
                 message: str = "") -> None:
        super().__init__(classes="modal")
        self._level, self._confidence = level, confidence
        self._reflection, self._irreversible = reflection, irreversible
        self._message = message  # the escalation's own sentence: what paused it

    def heading(self) -> str:
        if self._message:
            return self._message
        p = "—" if self._confidence is None else f"{self._confidence:.3f}"
        why = "an irreversible tool was proposed" if self._irreversible else "the session's confidence dropped"
        return f"Paused: {self._level.upper()} — {why} (P = {p})"

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide escalation"):
            yield Label(self.heading(), classes="dialog-title")
            if self._reflection:  # the model's own statement of what it is unsure of (a HIGH pause only)
                with VerticalScroll(classes="reflection"):
                    yield Markdown(self._reflection)
            yield Label("Your guidance for the model:")
            yield Input(placeholder="e.g. say you are unsure and cite the source", id="guidance")
            yield Static(
                "enter resumes the turn with your guidance · escape leaves it paused (a new message moves on)",
                classes="hint",
            )

    def on_mount(self) -> None:
        self.query_one("#guidance", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_leave(self) -> None:
        self.dismiss(None)


class CopyFallback(ModalScreen[None]):
    """The text in a read-only, selectable area, and where it was written on disk."""

    BINDINGS = [Binding("escape,q", "close", "Close")]

    def __init__(self, text: str, path: str) -> None:
        super().__init__(classes="modal")
        self._text, self._path = text, path

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label("Copy this message", classes="dialog-title")
            yield Static(
                f"Sent to the clipboard with OSC 52; if your terminal ignores that (e.g. macOS Terminal), "
                f"select the text below with the mouse, or take it from {self._path}",
                classes="hint",
            )
            yield TextArea(self._text, read_only=True, id="copy-area", soft_wrap=True)

    def action_close(self) -> None:
        self.dismiss(None)
