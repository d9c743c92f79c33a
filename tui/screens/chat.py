"""The chat screen: the conversation (streamed answers with verdict badges), the prompt, the monitor panel."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header, Input, Static

from mlx_sdm.monitor.online.auq_escalation import EscalationAction, UncertaintyLevel
from mlx_sdm.turn.escalation import TurnStatus
from mlx_sdm.executor.events import TurnRef
from mlx_sdm.store.schema import MessageRecord, support_words
from tui.messages import (
    AnswerVerifying,
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
from tui.screens.chat_keys import BINDINGS as KEY_BINDINGS, ChatKeys
from tui.screens.clipboard import copy_text
from tui.screens.prompts import EscalationPrompt
from tui.screens.load_status import report_load_failure, turn_started, watch_load
from tui.screens.transcript import (
    ABORTED_WITHOUT_WHY, STATUS_TEXT, answer_notes, coverage_text, show_outcome, stored_bubble,
)
from tui.widgets.message import MessageBubble
from tui.widgets.monitor import MonitorPanel

if TYPE_CHECKING:
    from mlx_sdm.turn.values import TurnOutcome
    from tui.bridge import Bridge


class ChatScreen(ChatKeys, Screen):
    @dataclass
    class CallFailed(Message):
        """An engine call's future failed without the engine reporting it in a turn's items (e.g. the model never
        loaded, or there was no paused turn to resume). ``answer`` is the bubble it was meant for (Textual's
        ``Message.bubble`` is taken)."""

        answer: MessageBubble
        error: BaseException

    BINDINGS = [
        Binding("escape", "stop", "Stop", show=True),
        Binding("ctrl+t", "toggle_monitor", "Monitor", show=True),
        Binding("ctrl+y", "copy", "Copy", show=True),
        Binding("ctrl+b,f2", "evidence", "Evidence", show=True),  # f2: inside tmux, whose prefix is ctrl+b
    ] + KEY_BINDINGS  # tab stops, moving between messages; "?" is text (f1 is help)

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

    def compose(self) -> ComposeResult:
        yield Header(icon="◆")
        with Horizontal(id="main"):
            yield VerticalScroll(id="chat-log")
            yield MonitorPanel(id="monitor")
        yield Static("", id="status-line")
        yield Input(placeholder="Ask something · enter sends · escape stops · f1 help", id="prompt",
                    select_on_focus=False)  # typing goes on where it was, even after focus left the input
        yield Footer(compact=True)

    async def on_mount(self) -> None:
        self.bridge.attach(self)
        self.query_one(MonitorPanel).display = self._show_monitor
        self.query_one("#prompt", Input).focus()
        self.refresh_status()
        watch_load(self)
        await self.open_session(self._initial_session)

    # ----- status -------------------------------------------------------------------------------
    def refresh_status(self, note: str | None = None) -> None:
        info = self.bridge.info()
        if not info.ready:
            # the screen is up before the model: say so, and that typing works
            parts = ["loading model… type away: a message is sent when it is ready" if self.bridge.loading
                     else f"model {info.model}"]
            if note:
                parts.append(note)
            self.query_one("#status-line", Static).update(" · ".join(parts))
            return
        parts = [f"model {info.model}", f"verifier {info.verifier or 'none: no verifier judges answers'}"]
        if info.head:
            parts.append(f"head {info.head}")
        if info.support_size is not None:
            parts.append(support_words(info.support_size))
        if note:
            parts.append(note)
        self.query_one("#status-line", Static).update(" · ".join(parts))

    def _set_title(self, title: str) -> None:
        self.title = title
        self.sub_title = "verified local chat"

    # ----- sessions -----------------------------------------------------------------------------
    async def open_session(self, session_id: str | None) -> None:
        """Show a stored session (or start an empty new one when ``session_id`` is None)."""
        if self.active is not None:
            self.notify("Stop the running answer first (escape).", severity="warning")
            return
        log = self.query_one("#chat-log", VerticalScroll)
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
                await self.show_coverage()
            return
        self._set_title(self.bridge.session(session_id).title)
        answers = self.bridge.answers_of(session_id)
        for record in self.bridge.messages(session_id):
            await self._mount_stored(record, answers.get(record.id))
        log.scroll_end(animate=False)
        log.anchor()
        pause = self.bridge.pending_pause(session_id)
        if pause is not None:  # a turn left waiting for guidance: ask again
            self._ask_guidance(session_id, pause.level or "high", pause.confidence, pause.reflection or "",
                              pause.irreversible, pause.message)

    async def _mount_stored(self, record: MessageRecord, answer: TurnOutcome | None) -> None:
        """One stored message as it looked when it was written; an answer (``answer``: its turn's record, read
        back from the store) is settled exactly as a live one is (:meth:`_settle`)."""
        if record.role == "user" and record.kind == "chat":
            self.turn_number += 1
        bubble = stored_bubble(record, self.turn_number, answer)
        await self._log_mount(bubble)
        if answer is not None:
            await self._settle(bubble, answer)
            if answer.monitor is not None:
                self.query_one(MonitorPanel).add_turn(self.turn_number, answer.monitor)

    def insert_prompt(self, text: str) -> None:
        prompt = self.query_one("#prompt", Input)
        prompt.value = text
        prompt.cursor_position = len(text)
        prompt.focus()

    async def show_coverage(self) -> None:
        """A system note: what the loaded verifier covers (tasks, one example prompt each)."""
        text = coverage_text(self.bridge.coverage())
        await self._log_mount(MessageBubble("system", text, title="verifier · coverage"))

    def rename_current(self, title: str) -> None:
        if self.session_id is not None:
            self.bridge.rename_session(self.session_id, title)
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
            self._set_title(self.bridge.session(self.session_id).title)
        event.input.value = ""
        self.turn_number += 1
        await self._log_mount(MessageBubble("user", text))
        self.query_one("#chat-log", VerticalScroll).anchor()  # sending jumps to the bottom and follows the answer
        session_id = self.session_id
        await self.start_turn(lambda: self.bridge.send(session_id, text))

    async def start_turn(self, call: Callable[[], Future], *, title: str | None = None) -> None:
        """Mount the answer's bubble, then hand the turn to the engine (which returns at once)."""
        bubble = MessageBubble("assistant", "", title=title or f"assistant · turn {self.turn_number}", number=self.turn_number)
        self.active = bubble  # before the mount, so nobody sees the answer's bubble without a running turn
        self.reflection_bubble = None
        await self._log_mount(bubble)
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
        turn_started(self, bubble, loading=self.bridge.loading)

    async def _log_mount(self, widget: Widget) -> None:
        log = self.query_one("#chat-log", VerticalScroll)
        await log.mount(widget)

    def action_stop(self) -> None:
        if self.focused_message() is not None:  # escape on a message: back to the input
            self.focus_prompt()
        if self.active is None:
            return
        self.bridge.cancel()
        self.refresh_status("stopping…")

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
                await self._log_mount(self.reflection_bubble)
            await self.reflection_bubble.append(piece.text)
        elif self.active is not None:
            await self.active.append(piece.text)

    async def on_answer_verifying(self, message: AnswerVerifying) -> None:
        """The last token is out: the badge says "verifying" until the verdict replaces it."""
        if self._mine(message.ref) and self.active is not None and self.active.badge is not None:
            self.active.badge.set_verifying()

    async def on_verdict_ready(self, message: VerdictReady) -> None:
        answer = message.verdict
        if self._mine(message.ref) and self.active is not None:
            await self.active.finish()
            self.active.set_verdict(answer.verdict, reason=answer.unverifiable_reason)

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
            await self._finished(message.outcome)

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
            report_load_failure(self, status.message)
            return
        self.refresh_status(status.message or status.state)
        if status.state == "ready" and self.active is not None:  # sent while loading: answered now
            turn_started(self, self.active, loading=False)
        if status.state == "ready" and self.session_id is None and self.bridge.coverage().tasks:
            await self.show_coverage()  # a new chat starts by saying what can be verified

    async def _finished(self, result: TurnOutcome | None) -> None:
        """The turn's record arrived (None: it failed before it made one; its error was shown)."""
        bubble = self.active
        self.active = None
        if self.session_id is not None:  # the store titles a new session after its first question
            self._set_title(self.bridge.session(self.session_id).title)
        if bubble is not None:
            await bubble.finish()
        streamed_reflection = self.reflection_bubble is not None
        if streamed_reflection:
            await self.reflection_bubble.finish()
        if result is None:
            if bubble is not None and bubble.badge is not None and not bubble.badge.resolved:
                bubble.set_cancelled(STATUS_TEXT[TurnStatus.ERROR.value])
        else:
            await self._settle(bubble, result, reflection_shown=streamed_reflection)
            if result.status is TurnStatus.PAUSED:
                escalation = result.escalation
                self._ask_guidance(result.session_id, escalation.level.value, escalation.confidence,
                                   result.reflection_shown or "", escalation.irreversible, escalation.message)
            elif result.status is TurnStatus.ABORTED:
                self.notify(result.explanation or ABORTED_WITHOUT_WHY, title="Turn aborted", severity="error", timeout=8)
        self.refresh_status()

    async def _settle(self, bubble: MessageBubble | None, outcome: TurnOutcome, *, reflection_shown: bool = False) -> None:
        """A finished answer as the chat shows it, live or reopened (one rule, :mod:`tui.screens.transcript`):
        its badge and monitor line, then the notes under it (the reflection, an abort's reason, the verdict's scope)."""
        if bubble is not None:
            show_outcome(bubble, outcome)
        for note in answer_notes(outcome, reflection_shown=reflection_shown):
            await self._log_mount(note)

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
            await self._log_mount(MessageBubble("user", guidance.strip(), title="you · guidance"))
            await self.start_turn(lambda: self.bridge.resume(session_id, guidance.strip()))

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

    def _message_to_copy(self) -> MessageBubble | None:
        if self.focused is not None:
            for node in self.focused.ancestors_with_self:
                if isinstance(node, MessageBubble):
                    return node
        answers = [b for b in self.query(MessageBubble) if b.role == "assistant" and b.text]
        return answers[-1] if answers else None

    def action_copy(self) -> None:
        bubble = self._message_to_copy()
        if bubble is None:
            self.notify("Nothing to copy yet.", severity="warning")
            return
        copy_text(self, bubble.text, self.bridge.data_dir)
