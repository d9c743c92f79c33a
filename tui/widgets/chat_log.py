"""The chat's log of messages (:class:`ChatLog`): what each message shows, live or read back from the store, and the
keyboard's way through the log: which message has focus, moving between messages, where tab stops in it, and the
evidence of the focused or the last answer. The chat screen (``tui/screens/chat.py``) is the turn's controller; it
mounts what the engine's items make into the log and maps keys to the log's moves.

How a message reads in the log: a stored message becomes a bubble (:func:`stored_bubble`); a finished answer shows
its turn's record the same way whether it just streamed or was read back from the store (:func:`show_outcome` for
its badge and monitor line, :func:`answer_notes` for the notes under it; :meth:`ChatLog.settle` does both).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from textual.actions import SkipAction
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.dom import DOMNode
from textual.widget import Widget

from mlx_sdm.store.records import MessageRecord
from mlx_sdm.turn.escalation import TurnStatus
from tui.widgets.message import MessageBubble
from tui.widgets.verdict_badge import VerdictBadge

if TYPE_CHECKING:
    from mlx_sdm.turn.values import TurnOutcome

#: How a stored answer without a verdict ended (a TurnStatus value, or a state of a row still being written).
STATUS_TEXT = {
    TurnStatus.CANCELLED.value: "■ stopped",
    TurnStatus.PAUSED.value: "‖ paused for guidance",
    TurnStatus.ABORTED.value: "✘ aborted by the session monitor",
    TurnStatus.ERROR.value: "✘ failed",
    "interrupted": "✘ interrupted: the app stopped before this answer was finished",
    "in_progress": "… still being written (by another process)",
    TurnStatus.DONE.value: "no verdict",
}

#: Said under an aborted answer whose escalation gave no reason of its own.
ABORTED_WITHOUT_WHY = "The session monitor aborted this turn (CRITICAL)."


def unverified_note(judged: str) -> str:
    """Said under an answer whose verdict covers only its first part (the unit the verifier judges)."""
    return f"The verdict covers only {judged.strip()!r}; the text after it was not checked (unverified)."


def stored_bubble(record: MessageRecord, turn_number: int, answer: TurnOutcome | None) -> MessageBubble:
    """The bubble one stored message shows as; ``answer``: the message's turn record when it is an answer
    (read back from the store as the type the pipeline yielded), whose badge and notes
    :func:`show_outcome` and :func:`answer_notes` add, as for a live answer."""
    if record.role == "user":
        title = None if record.kind == "chat" else f"you · {record.kind}"
        return MessageBubble("user", record.text, title=title, turn_id=record.id)
    if answer is None:
        return MessageBubble("system", record.text, title=f"monitor · {record.kind}", turn_id=record.id)
    title = f"assistant · turn {turn_number}"
    if answer.resampled is not None:  # a regenerated answer (the seed is its attempt number)
        title += f" · answer {answer.resampled.seed + 1} (sampled)"
    return MessageBubble("assistant", record.text, title=title, turn_id=record.id, number=turn_number)


def show_outcome(answer: MessageBubble, outcome: TurnOutcome) -> None:
    """An answer bubble shows its turn's verdict (or how the turn ended) and monitor line, unless the live
    stream already set its badge."""
    if answer.badge is None or not answer.badge.resolved:
        if outcome.verdict is not None:
            answer.set_verdict(outcome.verdict)
        else:
            answer.set_cancelled(STATUS_TEXT.get(outcome.status.value, outcome.status.value))
    if outcome.monitor is not None:
        answer.set_monitor(outcome.monitor)


def answer_notes(outcome: TurnOutcome, *, reflection_shown: bool = False) -> Iterator[MessageBubble]:
    """The notes a finished answer leaves under it, in order, live and reopened alike: the model's
    reflection on a HIGH pause (unless it was streamed: ``reflection_shown``), why the monitor aborted the
    turn, and which part of the answer the verdict covers when text follows it; first, when the conversation
    was longer than the model's context, what the model did not read of it (live turns: the store keeps no cut)."""
    if outcome.prompt_note:
        yield MessageBubble("system", outcome.prompt_note, title="context · cut to fit")
    if outcome.reflection_shown and not reflection_shown:
        yield MessageBubble("system", outcome.reflection_shown, title="monitor · reflection")
    if outcome.status is TurnStatus.ABORTED or outcome.explanation:
        yield MessageBubble("system", outcome.explanation or ABORTED_WITHOUT_WHY, title="monitor · CRITICAL")
    if outcome.verdict_status is not None and outcome.unverified_tail.strip():
        yield MessageBubble("system", unverified_note(outcome.judged_text), title="verifier · scope")


class ChatLog(VerticalScroll):
    """The scrolling log of a chat's messages (see the module docstring). On a focused message, up / down move to the
    previous / next message, home / end to the first / last, enter expands or collapses an answer's evidence: priority
    bindings, checked before the focused message's own, so the keys move between messages rather than scroll; with
    the log itself focused they scroll it, as a log's keys do, and anywhere else they go on as usual."""

    BINDINGS = [
        Binding("up", "message_step(-1)", "Previous message", show=False, priority=True),
        Binding("down", "message_step(1)", "Next message", show=False, priority=True),
        Binding("home", "message_end(0)", "First message", show=False, priority=True),
        Binding("end", "message_end(-1)", "Last message", show=False, priority=True),
        Binding("enter", "message_evidence", "Evidence", show=False, priority=True),
        # v on a focused message or its badge: the full evidence screen (Tab focuses the message, not the badge, and
        # a character typed on a message goes to the input, so without this v would be typed there)
        Binding("v", "message_full_evidence", "Full evidence", show=False, priority=True),
    ]

    async def add(self, widget: Widget) -> None:
        await self.mount(widget)

    async def settle(self, bubble: MessageBubble | None, outcome: TurnOutcome, *, reflection_shown: bool = False) -> None:
        """A finished answer as the chat shows it, live or reopened alike (:func:`show_outcome`, :func:`answer_notes`):
        its badge and monitor line, then the notes under it (the reflection, an abort's reason, the verdict's scope)."""
        if bubble is not None:
            show_outcome(bubble, outcome)
        for note in answer_notes(outcome, reflection_shown=reflection_shown):
            await self.add(note)

    # ----- the messages and the one that has focus --------------------------------------------------
    def bubbles(self) -> list[MessageBubble]:
        """The log's messages, first to last."""
        return list(self.query(MessageBubble))

    def last_answer(self, *, with_text: bool = False) -> MessageBubble | None:
        """The last answer (``with_text``: the last one that has text), or None."""
        answers = [b for b in self.bubbles() if b.role == "assistant" and (b.text or not with_text)]
        return answers[-1] if answers else None

    @staticmethod
    def message_of(node: DOMNode | None) -> MessageBubble | None:
        """The message ``node`` is, or is inside (a badge), or None."""
        for step in node.ancestors_with_self if node is not None else ():
            if isinstance(step, MessageBubble):
                return step
        return None

    def focused_message(self) -> MessageBubble | None:
        """The message that has the keyboard, or holds the widget that has it (a badge)."""
        return self.message_of(self.screen.focused)

    def action_message_step(self, step: int) -> None:
        """Focus the message ``step`` places from the focused one (stopping at the first and the last)."""
        current = self.focused_message()
        if current is None:
            self._scroll_or_skip(self.action_scroll_up if step < 0 else self.action_scroll_down)
            return
        bubbles = self.bubbles()
        bubbles[max(0, min(len(bubbles) - 1, bubbles.index(current) + step))].focus()

    def action_message_end(self, index: int) -> None:
        """Focus the first (0) or the last (-1) message."""
        if self.focused_message() is None:
            self._scroll_or_skip(self.action_scroll_home if index == 0 else self.action_scroll_end)
            return
        self.bubbles()[index].focus()

    def action_message_evidence(self) -> None:
        bubble = self.focused_message()
        if bubble is None or bubble.badge is None:
            raise SkipAction()
        bubble.badge.action_toggle()

    def action_message_full_evidence(self) -> None:
        bubble = self.focused_message()
        if bubble is None or bubble.badge is None or not bubble.badge.expandable:
            raise SkipAction()  # the input (or nothing with evidence) has the keyboard: v is text
        bubble.badge.action_full()

    def _scroll_or_skip(self, scroll: Callable[[], None]) -> None:
        """No message has the keyboard: the log scrolls when it has it itself, else the key goes on."""
        if not self.has_focus:
            raise SkipAction()
        scroll()

    # ----- the evidence behind a verdict ------------------------------------------------------------
    def evidence_answer(self, focused: MessageBubble | None) -> MessageBubble | None:
        """The answer whose evidence ctrl+b opens: the focused one, else the last with evidence to show."""
        if focused is not None and focused.badge is not None:
            return focused if focused.badge.expandable else None
        answers = [b for b in self.bubbles() if b.badge is not None and b.badge.expandable]
        return answers[-1] if answers else None

    def on_verdict_badge_toggled(self, event: VerdictBadge.Toggled) -> None:
        for bubble in self.bubbles():
            if bubble.badge is event.badge:
                bubble.toggle_evidence(event.expanded)
                if event.expanded and bubble.evidence is not None:
                    bubble.evidence.scroll_visible()
