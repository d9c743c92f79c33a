"""The chat screen, the turn's controller: it starts a turn, hands each of the engine's items to the message it
belongs to in the log (:class:`~tui.widgets.chat_log.ChatLog`, which says how a message reads and how the keyboard
moves through the messages), keeps the status line and the monitor panel, and asks for guidance on a paused turn.

Loading: the screen is up and takes messages while the engine loads the model. A message sent then waits and
says so, and is answered once the model is loaded; the status line follows the load to its end, and a model or
verifier that cannot be loaded is reported in words with what to do next.

Earlier turns (the pickers are :class:`tui.screens.turns.TurnPicker`):

- **Regenerate** (ctrl+g): the last question answered again, sampled
  (:mod:`mlx_sdm.executor.regeneration`); the new answer streams in below the first with its own verdict,
  and both stay in the history.
- **Branch** (ctrl+f): pick a turn; a new session continues from it (the turns up to and including it are
  copied), remembering the session and turn it came from. The original is unchanged.
- **Edit and resend** (ctrl+up): pick a question; a new branch holds the turns before it and the prompt is
  filled with the question to edit and send. The original turn and everything after it stay where they were.

The keyboard never traps typing:

- A click acts (a badge expands its evidence) but never keeps the keyboard: the input has it again after.
- A key typed while anything but the input has focus (a message, the monitor panel) is typed into the
  input, ``?`` included, unless the focused message binds that key itself.
- Tab / shift+tab move between the input, the last answer and the monitor panel (when shown), not
  through every message and badge.
- ctrl+b expands the evidence of the focused answer (else of the last one).
- On a focused message, up / down move to the previous / next message, home / end to the first / last,
  enter expands or collapses an answer's evidence, escape goes back to the input.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.dom import DOMNode
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header, Input

from mlx_sdm.errors import DataError
from mlx_sdm.executor.events import TurnRef
from mlx_sdm.executor.regeneration import regeneration
from mlx_sdm.monitor.online.auq_escalation import EscalationAction, UncertaintyLevel
from mlx_sdm.network.coverage import VerifierCoverage
from mlx_sdm.network.verdict import OPEN_QUESTIONS
from mlx_sdm.store.records import MessageRecord
from mlx_sdm.turn.escalation import TurnStatus
from tui.messages import (
    AnswerVerifying,
    SecondLookStarted,
    EngineFailed,
    EngineStatus,
    Escalated,
    MonitorRead,
    PrefillProgressed,
    SupportChanged,
    TokenArrived,
    TurnFinished,
    VerdictReady,
)
from tui.screens.clipboard import copy_text
from tui.screens.prompts import EscalationPrompt
from tui.screens.turns import Turn, picker_for, turns_of
from tui.widgets.chat_log import ABORTED_WITHOUT_WHY, STATUS_TEXT, ChatLog, stored_bubble
from tui.widgets.message import MessageBubble
from tui.widgets.monitor import MonitorPanel
from tui.widgets.status_line import StatusLine
from tui.widgets.verdict_badge import ANSWERING, WAITING

if TYPE_CHECKING:
    from mlx_sdm.store.turn_writer import TurnReceipt
    from mlx_sdm.turn.values import TurnOutcome
    from tui.bridge import Bridge

def coverage_text(coverage: VerifierCoverage) -> str:
    """What the loaded verifier covers: its tasks, one example prompt each."""
    if not coverage.tasks:
        return ("What this verifier covers: " + coverage.sentence() + " Questions unlike its documents are answered "
                "'out of scope'.")
    lines = ["This verifier can judge answers to:", ""]
    for task in coverage.tasks:
        example = f" (e.g. “{task.example_prompt}”)" if task.example_prompt else ""
        lines.append(f"- {task.description or task.name}{example}")
    if any(task.name == OPEN_QUESTIONS for task in coverage.tasks):
        rest = ("A question asked in your own words goes to what it is about; a message with no checkable answer "
                "(a greeting, a poem, a how-to) is 'out of scope'.")
    else:
        rest = "Other questions are 'out of scope'."
    lines += ["", f"ctrl+p → 'Insert example' puts one in the prompt. {rest}"]
    return "\n".join(lines)


#: At most this many lines greet a new chat (the task list is behind f3 and ``mlx-sdm chat --list-tasks``).
WELCOME_LINES = 5


def welcome_text(coverage: VerifierCoverage) -> str:
    """What a new chat opens with, in at most :data:`WELCOME_LINES` short lines: what the badges mean and where the
    task list is (f3, ``--list-tasks``); the list itself is :func:`coverage_text`."""
    everyday = any(task.name == OPEN_QUESTIONS for task in coverage.tasks)
    tasks = [task for task in coverage.tasks if task.name != OPEN_QUESTIONS]
    checks = (f"{len(tasks)} task{'s' if len(tasks) != 1 else ''}" + (" and everyday questions with a short answer"
                                                                        if everyday else ""))
    return "\n".join([
        "Ask anything. Under each answer a badge says whether it was checked: ✔ verified, ✘ or ? not verified,",
        "○ out of scope (nothing to check). ctrl+b shows why, and the numbers behind it.",
        f"This verifier checks {checks}: f3 lists them with an example each.",
    ])


class ChatScreen(Screen):
    @dataclass
    class CallFailed(Message):
        """An engine call's future failed without the engine reporting it in a turn's items (e.g. the model never
        loaded, or there was no paused turn to resume). ``answer`` is the bubble it was meant for (Textual's
        ``Message.bubble`` is taken)."""

        answer: MessageBubble
        error: BaseException

    #: The keys that move between messages are the log's (:class:`~tui.widgets.chat_log.ChatLog`). "?" is text
    #: (f1 is help).
    BINDINGS = [
        Binding("escape", "stop", "Stop", show=True),
        Binding("ctrl+t", "toggle_monitor", "Monitor", show=True),
        Binding("ctrl+y", "copy", "Copy", show=True),
        # priority: the evidence wherever the focus is in the chat (the input, a message, the monitor panel)
        Binding("ctrl+b,f2", "evidence", "Evidence", show=True, priority=True),  # f2: inside tmux (prefix ctrl+b)
        Binding("tab", "focus_stop(1)", "Next", show=False),
        Binding("shift+tab", "focus_stop(-1)", "Previous", show=False),
    ]

    def __init__(self, *, session_id: str | None = None, show_monitor: bool = True) -> None:
        super().__init__(id="chat")
        self._initial_session = session_id
        self._show_monitor = show_monitor
        self.session_id: str | None = None
        self.active: MessageBubble | None = None  # the answer being generated
        self.reflection_bubble: MessageBubble | None = None
        self.paused: str | None = None  # the session whose turn waits for guidance (prompt open)
        self.turn_number = 0

    @property
    def bridge(self) -> "Bridge":
        return self.app.bridge  # type: ignore[attr-defined]

    @property
    def chat_log(self) -> ChatLog:
        return self.query_one("#chat-log", ChatLog)

    def compose(self) -> ComposeResult:
        yield Header(icon="◆")
        with Horizontal(id="main"):
            yield ChatLog(id="chat-log")
            yield MonitorPanel(id="monitor")
        yield StatusLine("", id="status-line")
        yield Input(placeholder="Ask something · enter sends · escape stops · f1 help", id="prompt",
                    select_on_focus=False)  # typing goes on where it was, even after focus left the input
        yield Footer(compact=True)

    async def on_mount(self) -> None:
        self.bridge.attach(self)
        self.query_one(MonitorPanel).display = self._show_monitor
        self.query_one("#prompt", Input).focus()
        self.refresh_status()
        self._watch_load()
        await self.open_session(self._initial_session)

    # ----- status and loading --------------------------------------------------------------------
    def refresh_status(self, note: str | None = None) -> None:
        self.query_one("#status-line", StatusLine).show(self.bridge.info(), loading=self.bridge.loading, note=note)

    def _watch_load(self) -> None:
        """Refresh the status line when loading ends; report a load that failed before the screen existed."""

        def loaded() -> None:  # runs on the engine's thread
            try:
                self.app.call_from_thread(self.refresh_status)
            except RuntimeError:
                pass  # the app has already closed

        if not self.bridge.when_loaded(loaded):
            self._report_load_failure()

    def _report_load_failure(self, error: str | None = None) -> None:
        """Notify why loading failed: ``error`` as the engine said it, or as its future holds it."""
        error = error or self.bridge.load_error()
        if error:
            self.notify(f"{error}\nFix it and start the chat again (mlx-sdm chat --help).",
                        title="The model or verifier could not be loaded", severity="error", timeout=30)

    def _show_turn_started(self, answer: MessageBubble, *, loading: bool) -> None:
        """A turn handed to the engine: it is being answered, or (``loading``) it waits for the model, which
        the engine answers it with as soon as it has loaded (then this is called again with ``loading=False``)."""
        if answer.badge is not None:
            answer.badge.set_pending(WAITING if loading else ANSWERING)
        self.refresh_status("yours is waiting for it" if loading else "generating… (escape stops)")

    def _set_title(self, title: str) -> None:
        self.title = title
        self.sub_title = "verified local chat"

    # ----- sessions -----------------------------------------------------------------------------
    async def open_session(self, session_id: str | None) -> None:
        """Show a stored session (or start an empty new one when ``session_id`` is None)."""
        if self.active is not None:
            self.notify("Stop the running answer first (escape).", severity="warning")
            return
        log = self.chat_log
        await log.remove_children()
        self.paused = None
        monitor = self.query_one(MonitorPanel)
        monitor.reset()
        self.turn_number = 0
        self.session_id = session_id
        if session_id is None:  # created in the store with the first message, so empty chats leave no trace
            self._set_title("New chat")
            log.anchor()
            if self.bridge.coverage().tasks:
                await self.show_welcome()
            return
        store = self.bridge.store
        self._set_title(store.get_session(session_id).title)
        answers = store.answers_of(session_id)
        for record in store.messages(session_id):
            await self._mount_stored(record, answers.get(record.id))
        log.scroll_end(animate=False)
        log.anchor()
        pause = self.bridge.engine.pending_pause(session_id)
        if pause is not None:  # a turn left waiting for guidance: ask again
            self._ask_guidance(session_id, pause.level or "high", pause.confidence, pause.reflection or "",
                              pause.irreversible, pause.message)

    async def _mount_stored(self, record: MessageRecord, answer: TurnOutcome | None) -> None:
        """One stored message as it looked when it was written; an answer (``answer``: its turn's record, read
        back from the store) is settled exactly as a live one is (:meth:`ChatLog.settle`)."""
        if record.role == "user" and record.kind == "chat":
            self.turn_number += 1
        bubble = stored_bubble(record, self.turn_number, answer)
        await self.chat_log.add(bubble)
        if answer is not None:
            await self.chat_log.settle(bubble, answer)
            if answer.monitor is not None:
                self.query_one(MonitorPanel).add_turn(self.turn_number, answer.monitor)

    def insert_prompt(self, text: str) -> None:
        prompt = self.query_one("#prompt", Input)
        prompt.value = text
        prompt.cursor_position = len(text)
        prompt.focus()

    async def show_coverage(self) -> None:
        """A system note: what the loaded verifier covers (tasks, one example prompt each): f3, the palette."""
        text = coverage_text(self.bridge.coverage())
        await self.chat_log.add(MessageBubble("system", text, title="verifier · coverage"))

    async def show_welcome(self) -> None:
        """A new chat's few lines (:func:`welcome_text`); the task list is behind f3."""
        await self.chat_log.add(MessageBubble("system", welcome_text(self.bridge.coverage()), title="verifier · welcome"))

    def rename_current(self, title: str) -> None:
        if self.session_id is not None:
            self.bridge.store.rename_session(self.session_id, title)
            self._set_title(title)

    # ----- sending ------------------------------------------------------------------------------
    @on(Input.Submitted, "#prompt")
    async def send(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if self.active is not None:
            self.notify("An answer is still streaming; escape stops it.", severity="warning")
            return
        if self.session_id is None:
            title, self.app.new_session_title = self.app.new_session_title, None  # type: ignore[attr-defined]
            self.session_id = self.bridge.new_session(title)
            self._set_title(self.bridge.store.get_session(self.session_id).title)
        event.input.value = ""
        self.turn_number += 1
        await self.chat_log.add(MessageBubble("user", text))
        self.chat_log.anchor()  # sending jumps to the bottom and follows the answer
        session_id = self.session_id
        await self.start_turn(lambda: self.bridge.engine.send(session_id, text))

    async def start_turn(self, call: Callable[[], Future], *, title: str | None = None) -> None:
        """Mount the answer's bubble, then hand the turn to the engine (which returns at once)."""
        bubble = MessageBubble("assistant", "", title=title or f"assistant · turn {self.turn_number}", number=self.turn_number)
        self.active = bubble  # before the mount, so nobody sees the answer's bubble without a running turn
        self.reflection_bubble = None
        await self.chat_log.add(bubble)
        try:
            future = call()
        except Exception as exc:  # the executor refused the turn: say why, keep the UI alive
            self.active = None
            bubble.set_cancelled("✘ not sent")
            self.notify(f"Could not start the turn: {exc}", severity="error", timeout=8)
            return

        def done(f: Future) -> None:  # runs on the engine's thread
            if not f.cancelled() and f.exception() is not None:
                self.post_message(self.CallFailed(bubble, f.exception()))

        future.add_done_callback(done)
        self._show_turn_started(bubble, loading=self.bridge.loading)

    def action_stop(self) -> None:
        if self.focused_message() is not None:  # escape on a message: back to the input
            self.focus_prompt()
        if self.active is None:
            return
        self.bridge.engine.cancel()
        self.refresh_status("stopping…")

    # ----- earlier turns: regenerate, branch, edit and resend ----------------------------------------
    def _turns_to_act_on(self, what: str) -> list[Turn] | None:
        """The session's turns, or None (said why) when there is nothing to act on."""
        if self.active is not None:
            self.notify(f"An answer is still streaming; escape stops it before you {what}.", severity="warning")
            return None
        turns = turns_of(self.bridge.store.messages(self.session_id)) if self.session_id is not None else []
        if not turns:
            self.notify(f"Nothing to {what} yet: ask something first.", severity="warning")
            return None
        return turns

    async def regenerate(self) -> None:
        """Answer the last question again (sampled); the new answer gets its own bubble and verdict."""
        if self._turns_to_act_on("regenerate") is None:
            return
        session_id = self.session_id
        try:
            again = regeneration(self.bridge.store.messages(session_id))
        except DataError as exc:
            self.notify(str(exc), severity="warning")
            return
        await self.start_turn(lambda: self.bridge.engine.regenerate(session_id),
                              title=f"assistant · turn {self.turn_number} · answer {again.attempt + 1} (sampled)")

    def branch(self, *, edit: bool = False) -> None:
        """Pick a turn; continue from it in a new session (``edit``: the new session holds the turns before the
        picked question, and the prompt that question to edit and send)."""
        turns = self._turns_to_act_on("edit" if edit else "branch")
        if turns is None or self.session_id is None:
            return
        parent, store = self.session_id, self.bridge.store

        async def picked(turn: Turn | None) -> None:
            if turn is None:
                return
            if not edit:
                made = store.branch_session(parent, before_message_id=turn.next_question_id)
                await self.open_session(made.id)
                self.notify(f"A new session, {made.branch.words()}: the original is unchanged.", title="Branched")
                return
            made = store.branch_session(parent, before_message_id=turn.question.id,
                                        title=f"edit of turn {turn.number} · {store.get_session(parent).title}")
            await self.open_session(made.id)
            self.insert_prompt(turn.question.text)
            self.notify(f"Edit turn {turn.number} and press enter: it is sent in a new session, {made.branch.words()}; "
                        "the original is unchanged.", title="Edit and resend")

        self.app.push_screen(picker_for(turns, edit=edit), picked)

    # ----- the engine's items (posted from the engine's thread) ----------------------------------
    def _mine(self, ref: TurnRef) -> bool:
        """False for a late item of a session the user has left."""
        return ref.session_id is None or ref.session_id == self.session_id

    async def on_token_arrived(self, message: TokenArrived) -> None:
        piece = message.piece
        if not self._mine(message.ref):
            return
        if piece.phase == "reflection":
            if self.reflection_bubble is None:
                self.reflection_bubble = MessageBubble("system", "", title="monitor · reflection")
                await self.chat_log.add(self.reflection_bubble)
            await self.reflection_bubble.append(piece.text)
        elif self.active is not None:
            await self.active.append(piece.text)

    async def on_answer_verifying(self, message: AnswerVerifying) -> None:
        """The last token is out: the badge says "verifying" until the verdict replaces it."""
        if self._mine(message.ref) and self.active is not None and self.active.badge is not None:
            self.active.badge.set_verifying()

    async def on_second_look_started(self, message: SecondLookStarted) -> None:
        """The verifier is taking a second look: the badge says how many more answers the model draws."""
        if self._mine(message.ref) and self.active is not None and self.active.badge is not None:
            self.active.badge.set_checking(message.checking.k)

    async def on_verdict_ready(self, message: VerdictReady) -> None:
        if self._mine(message.ref) and self.active is not None:
            await self.active.finish()
            self.active.set_verdict(message.verdict)

    async def on_monitor_read(self, message: MonitorRead) -> None:
        if not self._mine(message.ref):
            return
        reading = message.reading
        number = self.active.number if self.active is not None else self.turn_number
        if self.active is not None:
            self.active.set_monitor(reading)
        self.query_one(MonitorPanel).add_turn(number, reading)  # a turn answered again replaces its row

    async def on_escalated(self, message: Escalated) -> None:
        if not self._mine(message.ref):
            return
        escalation = message.escalation
        if escalation.action is EscalationAction.PROCEED_WITH_LOG:  # logged: the line under the answer says it
            level = escalation.level.value.upper()
            self.log.warning(f"AUQ {level}: {escalation.message}")
            if escalation.level is not UncertaintyLevel.MEDIUM:  # a pause lifted because the verifier vouches
                self.notify(escalation.message, title="Monitor", severity="warning")

    async def on_prefill_progressed(self, message: PrefillProgressed) -> None:
        """A long prompt is being read before the first token: say how far (it can take seconds)."""
        progress = message.progress
        if self._mine(message.ref) and self.active is not None:
            self.refresh_status(f"reading the prompt… {progress.done:,} of {progress.total:,} tokens (escape stops)")

    async def on_turn_finished(self, message: TurnFinished) -> None:
        if self._mine(message.ref):
            await self._finished(message.receipt)

    async def on_engine_failed(self, message: EngineFailed) -> None:
        """A turn failed: say why, and end its answer's bubble ("failed")."""
        if self._mine(message.ref):
            failure = message.failure
            self.notify(failure.message, title=failure.error_type or "Error", severity="error", timeout=10)
            await self._finished(None)

    async def on_support_changed(self, message: SupportChanged) -> None:
        self.refresh_status()

    async def on_engine_status(self, message: EngineStatus) -> None:
        status = message.status
        if status.state == "failed":  # the status line says why loading failed, not "loading…"
            self.refresh_status()
            self._report_load_failure(status.message)
            return
        self.refresh_status(status.message or status.state)
        if status.state == "ready" and self.active is not None:  # sent while loading: answered now
            self._show_turn_started(self.active, loading=False)
        if status.state == "ready" and self.session_id is None and self.bridge.coverage().tasks:
            await self.show_welcome()  # a new chat starts by saying, in a few lines, what can be verified

    async def _finished(self, receipt: TurnReceipt | None) -> None:
        """The turn's receipt arrived (None: it failed before it made one; its error was shown)."""
        bubble = self.active
        self.active = None
        if self.session_id is not None:  # the store titles a new session after its first question
            self._set_title(self.bridge.store.get_session(self.session_id).title)
        if bubble is not None:
            await bubble.finish()
        streamed_reflection = self.reflection_bubble is not None
        if streamed_reflection:
            await self.reflection_bubble.finish()
        if receipt is None:
            if bubble is not None and bubble.badge is not None and not bubble.badge.resolved:
                bubble.set_cancelled(STATUS_TEXT[TurnStatus.ERROR.value])
        else:
            result = receipt.outcome
            await self.chat_log.settle(bubble, result, reflection_shown=streamed_reflection)
            if result.status is TurnStatus.PAUSED:
                escalation = result.escalation
                self._ask_guidance(receipt.session_id, escalation.level.value, escalation.confidence,
                                   result.reflection_shown or "", escalation.irreversible, escalation.message)
            elif result.status is TurnStatus.ABORTED:
                self.notify(result.explanation or ABORTED_WITHOUT_WHY, title="Turn aborted", severity="error", timeout=8)
        self.refresh_status()

    def _ask_guidance(
        self, session_id: str, level: str, confidence: float | None, reflection: str, irreversible: bool,
        message: str = "",
    ) -> None:
        """A paused turn: say why, show the reflection, ask for guidance, resume with it."""
        self.paused = session_id
        self.refresh_status("paused: waiting for your guidance (the dialog says why)")

        async def answered(guidance: str | None) -> None:
            self.paused = None
            if guidance is None or not guidance.strip() or session_id != self.session_id:
                self.refresh_status("left paused: a new message moves on; reopening the session asks again")
                return
            await self.chat_log.add(MessageBubble("user", guidance.strip(), title="you · guidance"))
            await self.start_turn(lambda: self.bridge.engine.resume(session_id, guidance.strip()))

        self.app.push_screen(EscalationPrompt(level, confidence, reflection, irreversible=irreversible, message=message),
                             answered)

    async def on_chat_screen_call_failed(self, message: "ChatScreen.CallFailed") -> None:
        """A turn that failed before the engine could report it (its items never came)."""
        if self.active is not message.answer:
            return  # the engine already finished this turn with its own items
        self.active = None
        await message.answer.finish()
        if message.answer.badge is not None and not message.answer.badge.resolved:
            message.answer.set_cancelled(STATUS_TEXT["error"])
        self.notify(str(message.error), title=type(message.error).__name__, severity="error", timeout=10)
        self.refresh_status()

    def action_toggle_monitor(self) -> None:
        panel = self.query_one(MonitorPanel)
        panel.display = not panel.display

    def action_copy(self) -> None:
        """Copy the focused message, else the last answer with text."""
        bubble = self.focused_message() or self.chat_log.last_answer(with_text=True)
        if bubble is None:
            self.notify("Nothing to copy yet.", severity="warning")
            return
        copy_text(self, bubble.text, self.bridge.data_dir)

    # ----- the keyboard: where focus may rest ---------------------------------------------------
    def focus_prompt(self) -> None:
        self.query_one("#prompt", Input).focus()

    def focused_message(self) -> MessageBubble | None:
        """The message that has focus, or holds the widget that has it (a badge)."""
        return self.chat_log.focused_message()

    def focus_stops(self) -> list[Widget]:
        """What tab walks: the input, the last answer, the monitor panel when it is shown."""
        stops: list[Widget] = [self.query_one("#prompt", Input)]
        last = self.chat_log.last_answer()
        if last is not None:
            stops.append(last)
        panel = self.query_one("#monitor")
        if panel.display:
            stops.append(panel)
        return stops

    def action_focus_stop(self, step: int) -> None:
        stops = self.focus_stops()
        here = self.focused_message() or self.focused
        index = stops.index(here) if here in stops else (0 if step > 0 else len(stops))
        stops[(index + step) % len(stops)].focus()

    # ----- the evidence of the focused answer ------------------------------------------------------
    def action_evidence(self) -> None:
        """ctrl+b: expand / collapse the evidence of the focused answer, or of the last one."""
        bubble = self.chat_log.evidence_answer(self.focused_message())
        if bubble is None or bubble.badge is None:
            self.notify("No verdict with evidence yet.", severity="warning")
            return
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
            bound = self.active_bindings.get(event.key)
            if bound is not None and bound.node in _up_to(focused, message):
                return  # the message's own key (e.g. the badge's enter / v)
        event.stop()
        event.prevent_default()
        prompt = self.query_one("#prompt", Input)
        prompt.focus()
        prompt.insert_text_at_cursor(event.character)


def _up_to(node: DOMNode, ancestor: DOMNode) -> list[DOMNode]:
    """``node`` and its ancestors up to and including ``ancestor``."""
    chain = []
    for step in node.ancestors_with_self:
        chain.append(step)
        if step is ancestor:
            break
    return chain
