"""The chat screen's keyboard: it never traps typing.

- A click acts (a badge expands its evidence) but never keeps the keyboard: the input has it again after.
- A key typed while anything but the input has focus (a message, the monitor panel) is typed into the
  input, ``?`` included, unless the focused message binds that key itself.
- Tab / shift+tab move between the input, the last answer and the monitor panel (when shown), not
  through every message and badge.
- ctrl+b expands the evidence of the focused answer (else of the last one).
- On a focused message, up / down move to the previous / next message, home / end to the first / last,
  enter expands or collapses an answer's evidence, escape goes back to the input.

:class:`ChatKeys` is mixed into :class:`tui.screens.chat.ChatScreen`, whose ``BINDINGS`` add :data:`BINDINGS`.
"""

from __future__ import annotations

from textual import events
from textual.actions import SkipAction
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Input

from tui.widgets.message import MessageBubble
from tui.widgets.verdict_badge import VerdictBadge

#: Priority bindings: checked before the focused widget's, so up / down move between messages rather
#: than scroll the log; each action skips (the key goes on as usual) unless a message has focus.
BINDINGS = [
    Binding("tab", "focus_stop(1)", "Next", show=False),
    Binding("shift+tab", "focus_stop(-1)", "Previous", show=False),
    Binding("up", "message_step(-1)", "Previous message", show=False, priority=True),
    Binding("down", "message_step(1)", "Next message", show=False, priority=True),
    Binding("home", "message_end(0)", "First message", show=False, priority=True),
    Binding("end", "message_end(-1)", "Last message", show=False, priority=True),
    Binding("enter", "message_evidence", "Evidence", show=False, priority=True),
]


class ChatKeys:
    """Focus and key handling of the chat screen (a mixin: it needs ``query``, ``query_one`` and ``focused``)."""

    # ----- where focus may rest -------------------------------------------------------------------
    def focus_prompt(self) -> None:
        self.query_one("#prompt", Input).focus()

    def focused_message(self) -> MessageBubble | None:
        """The message that has focus, or holds the widget that has it (a badge)."""
        focused = self.focused
        if focused is None:
            return None
        for node in focused.ancestors_with_self:
            if isinstance(node, MessageBubble):
                return node
        return None

    def messages(self) -> list[MessageBubble]:
        return list(self.query(MessageBubble))

    def focus_stops(self) -> list[Widget]:
        """What tab walks: the input, the last answer, the monitor panel when it is shown."""
        stops: list[Widget] = [self.query_one("#prompt", Input)]
        answers = [b for b in self.messages() if b.role == "assistant"]
        if answers:
            stops.append(answers[-1])
        panel = self.query_one("#monitor")
        if panel.display:
            stops.append(panel)
        return stops

    def action_focus_stop(self, step: int) -> None:
        stops = self.focus_stops()
        here = self.focused_message() or self.focused
        index = stops.index(here) if here in stops else (0 if step > 0 else len(stops))
        stops[(index + step) % len(stops)].focus()

    # ----- moving between messages ----------------------------------------------------------------
    def action_message_step(self, step: int) -> None:
        current = self.focused_message()
        if current is None:
            raise SkipAction()
        bubbles = self.messages()
        index = max(0, min(len(bubbles) - 1, bubbles.index(current) + step))
        bubbles[index].focus()

    def action_message_end(self, index: int) -> None:
        if self.focused_message() is None:
            raise SkipAction()
        self.messages()[index].focus()

    # ----- the evidence of the focused answer ------------------------------------------------------
    def on_verdict_badge_toggled(self, event: VerdictBadge.Toggled) -> None:
        for bubble in self.query(MessageBubble):
            if bubble.badge is event.badge:
                bubble.toggle_evidence(event.expanded)
                if event.expanded and bubble.evidence is not None:
                    bubble.evidence.scroll_visible()

    def action_evidence(self) -> None:
        """ctrl+b: expand / collapse the evidence of the focused answer, or of the last one."""
        bubble = self.focused_message()
        if bubble is None or bubble.badge is None:
            answers = [b for b in self.query(MessageBubble) if b.badge is not None and b.badge.expandable]
            bubble = answers[-1] if answers else None
        if bubble is None or bubble.badge is None or not bubble.badge.expandable:
            self.notify("No verdict with evidence yet.", severity="warning")
            return
        bubble.badge.action_toggle()

    def action_message_evidence(self) -> None:
        bubble = self.focused_message()
        if bubble is None or bubble.badge is None:
            raise SkipAction()
        bubble.badge.action_toggle()

    # ----- the keyboard comes back to the input ---------------------------------------------------
    def on_click(self, event: events.Click) -> None:
        """After any click the input has the keyboard again (the click has done its work: a badge toggled)."""
        if not isinstance(self.focused, Input):
            self.call_after_refresh(self.focus_prompt)

    def on_key(self, event: events.Key) -> None:
        """A character typed anywhere but an input goes into the prompt, unless the focused message binds it."""
        focused = self.focused
        if not event.is_printable or event.character is None or isinstance(focused, Input):
            return
        message = self.focused_message()
        if message is not None:
            for node in focused.ancestors_with_self:
                if event.key in node._bindings.key_to_bindings:
                    return  # the message's own key (e.g. the badge's enter / v)
                if node is message:
                    break
        event.stop()
        event.prevent_default()
        prompt = self.query_one("#prompt", Input)
        prompt.focus()
        prompt.insert_text_at_cursor(event.character)
