"""The mlx-sdm chat App: verified local chat, session monitor, escalation, sessions and the review queue.

    from tui.app import run
    run(engine=engine, store=store)            # what `mlx-sdm chat` does on a terminal

The App owns no model: every model, verifier and monitor call goes to the executor's engine
thread through :class:`tui.bridge.Bridge`, and the items of its turns come back, each in its Textual message.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from tui.bridge import Bridge
from tui.widgets.verdict_badge import VerdictBadge
from tui.screens.chat import ChatScreen
from tui.screens.clipboard import CLIPBOARD_FILE
from tui.screens.help import HelpScreen
from tui.screens.prompts import CopyFallback, TextPrompt
from tui.screens.review import ReviewScreen
from tui.screens.search import SearchScreen
from tui.screens.sessions import SessionsScreen

DEFAULT_THEME = "textual-dark"
#: Where f12 (and the palette's "Screenshot") saves SVGs; default ``<store dir>/screenshots``.
SCREENSHOT_DIR_ENV = "MLX_SDM_SCREENSHOT_DIR"


class SdmChatApp(App):
    """``SdmChatApp(engine=..., store=...)``; tests drive it with ``run_test()``."""

    CSS_PATH = "app.tcss"
    TITLE = "mlx-sdm"
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("f1", "help", "Help"),
        Binding("ctrl+n", "new_chat", "New chat", show=False),
        Binding("ctrl+o", "sessions", "Sessions"),
        Binding("ctrl+r", "review", "Review"),
        Binding("ctrl+s", "export", "Export"),
        Binding("f2", "change_theme", "Theme", show=False),
        Binding("f3", "tasks", "Tasks", show=False),  # what the verifier covers, one example each
        Binding("f12", "screenshot", "Screenshot", show=False, priority=True),  # priority: modal screens too
        Binding("ctrl+g", "regenerate", "Regenerate", show=False),  # on the chat screen (ChatScreen.regenerate)
        Binding("ctrl+f", "branch", "Branch", show=False),
        Binding("ctrl+up", "edit_turn", "Edit and resend", show=False),
    ]

    def __init__(
        self,
        *,
        engine: Any,
        store: Any,
        session_id: str | None = None,
        show_monitor: bool = True,
        theme: str | None = None,
        export_dir: str | Path | None = None,
        title: str | None = None,
    ) -> None:
        super().__init__()
        self.bridge = Bridge(engine, store)
        self.new_session_title = title  # the title of the first new session (``mlx-sdm chat --title``)
        self._initial_session = session_id
        self._show_monitor = show_monitor
        self._initial_theme = theme or DEFAULT_THEME
        self.export_dir = Path(export_dir) if export_dir is not None else self.bridge.data_dir / "exports"
        self.screenshot_dir = Path(os.environ.get(SCREENSHOT_DIR_ENV) or self.bridge.data_dir / "screenshots")

    # ----- screens ------------------------------------------------------------------------------
    def get_default_screen(self) -> Screen:
        return ChatScreen(session_id=self._initial_session, show_monitor=self._show_monitor)

    @property
    def chat(self) -> ChatScreen:
        return self.get_screen_stack_chat()

    def get_screen_stack_chat(self) -> ChatScreen:
        for screen in self.screen_stack:
            if isinstance(screen, ChatScreen):
                return screen
        raise LookupError("the chat screen is not on the stack")

    def on_mount(self) -> None:
        if self._initial_theme in self.available_themes:
            self.theme = self._initial_theme

    def on_unmount(self) -> None:
        self.bridge.close()

    # ----- actions ------------------------------------------------------------------------------
    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    async def action_new_chat(self) -> None:
        self._pop_to_chat()
        await self.chat.open_session(None)

    def action_sessions(self) -> None:
        async def chosen(session_id: str | None) -> None:
            if session_id is None:
                return
            self._pop_to_chat()
            await self.chat.open_session(session_id or None)

        self.push_screen(SessionsScreen(), chosen)

    def action_search_sessions(self) -> None:
        async def chosen(session_id: str | None) -> None:  # as for the sessions screen: the chat shows it
            if session_id:
                self._pop_to_chat()
                await self.chat.open_session(session_id)

        self.push_screen(SearchScreen(), chosen)

    async def action_regenerate(self) -> None:
        if self.screen is self.chat:
            await self.chat.regenerate()

    def action_branch(self) -> None:
        if self.screen is self.chat:
            self.chat.branch()

    def action_edit_turn(self) -> None:
        if self.screen is self.chat:
            self.chat.branch(edit=True)

    def action_review(self) -> None:
        if not isinstance(self.screen, ReviewScreen):
            self.push_screen(ReviewScreen())

    def action_toggle_monitor(self) -> None:
        self.chat.action_toggle_monitor()

    def action_export(self) -> None:
        session_id = self.chat.session_id
        if session_id is None:
            self.notify("No session to export yet.", severity="warning")
            return
        try:
            paths = self.bridge.export(session_id, self.export_dir)  # reads the store only: quick, no MLX
        except Exception as exc:
            self.notify(f"Export failed: {exc}", severity="error", timeout=10)
            return
        self.notify("Exported to " + " and ".join(str(p) for p in paths), title="Export", timeout=10)

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """An SVG of the screen in :attr:`screenshot_dir` (Textual's default is the Downloads folder)."""
        folder = Path(path) if path is not None else self.screenshot_dir
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.notify(f"Screenshot not saved: {exc}", severity="error", timeout=10)
            return None
        return super().deliver_screenshot(filename, str(folder), time_format)  # Textual's toast names the file

    def action_export_labels(self) -> None:
        """Review decisions as training rows {prompt, completion, label} for the next `mlx-sdm train` / `finetune`."""
        path = self.export_dir / "review-labels.jsonl"
        try:
            self.export_dir.mkdir(parents=True, exist_ok=True)
            rows = self.bridge.store.review_queue.export_training_rows(path)
        except Exception as exc:
            self.notify(f"Export failed: {exc}", severity="error", timeout=10)
            return
        self.notify(f"Wrote {rows} training rows to {path}", title="Review labels", timeout=10)

    def on_verdict_badge_open_evidence(self, message: VerdictBadge.OpenEvidence) -> None:
        """A verdict badge asked for the full evidence (widgets post; the app pushes screens)."""
        from tui.screens.evidence_screen import EvidenceScreen

        self.push_screen(EvidenceScreen(message.verdict))

    def action_tasks(self) -> None:
        """f3: the task list a new chat no longer opens with."""
        self.show_coverage()

    def show_coverage(self) -> None:
        """What the loaded verifier covers, with one example prompt per task, in the chat."""
        self._pop_to_chat()
        self.call_later(self.chat.show_coverage)

    def insert_example(self, prompt: str) -> None:
        """Put a task's example prompt into the chat's input, ready to send."""
        self._pop_to_chat()
        self.chat.insert_prompt(prompt)

    def action_show_copied(self) -> None:
        path = self.bridge.data_dir / CLIPBOARD_FILE
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        self.push_screen(CopyFallback(text or "(nothing copied yet: ctrl+y copies the last answer)", str(path)))

    def _pop_to_chat(self) -> None:
        while not isinstance(self.screen, ChatScreen) and len(self.screen_stack) > 1:
            self.pop_screen()

    def _switch(self, what: str) -> None:
        def done(value: str | None) -> None:
            if value is None or not value.strip():
                return
            self.notify(f"Loading {what} {value.strip()}…")
            self._run_switch(what, value.strip())

        self.push_screen(TextPrompt(f"Switch {what}", placeholder=self.bridge.switch_hint(what)), done)

    def _run_switch(self, what: str, value: str) -> None:
        def work() -> None:
            try:
                self.bridge.switch(what, value)
            except Exception as exc:
                self.call_from_thread(self.notify, f"Could not switch {what}: {exc}", severity="error", timeout=10)
                return
            self.call_from_thread(self.notify, f"Now using {what} {value}.")
            self.call_from_thread(self.chat.refresh_status)

        self.run_worker(work, thread=True, group="switch", exclusive=True)

    # ----- called by the sessions screen --------------------------------------------------------
    def session_renamed(self, session_id: str, title: str) -> None:
        chat = self.chat
        if chat.session_id == session_id:
            chat.title = title

    def session_deleted(self, session_id: str) -> None:
        chat = self.chat
        if chat.session_id == session_id:
            chat.session_id = None
            self.call_later(chat.open_session, None)

    # ----- command palette ----------------------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield SystemCommand("New chat", "Start a new session (ctrl+n)", self.action_new_chat)
        yield SystemCommand("Open review queue", "Unverified and escalated answers from every session (ctrl+r)",
                            self.action_review)
        yield SystemCommand("Sessions", "Open, rename or delete stored sessions (ctrl+o)", self.action_sessions)
        yield SystemCommand("Search sessions…", "Find messages in every session by words, verdict (status:not_verified), "
                            "task and date; enter opens the session", self.action_search_sessions)
        yield SystemCommand("Export session", "Write this session as Markdown and as session JSONL (ctrl+s)", self.action_export)
        yield SystemCommand(
            "Export review labels", "Decisions as training rows for mlx-sdm train / finetune", self.action_export_labels
        )
        yield SystemCommand("Regenerate answer", "Answer the last question again, sampled; both answers stay (ctrl+g)",
                            self.action_regenerate)
        yield SystemCommand("Branch from a turn…", "Continue from an earlier turn in a new session that remembers "
                            "where it came from (ctrl+f)", self.action_branch)
        yield SystemCommand("Edit and resend a question…", "Edit an earlier question and send it in a new branch; "
                            "the original stays (ctrl+up)", self.action_edit_turn)
        yield SystemCommand("Toggle monitor panel", "Show or hide AUQ / TRACER per turn (ctrl+t)", self.action_toggle_monitor)
        yield SystemCommand("Rename session", "Give this chat a title", self._rename_current)
        yield SystemCommand("Show copied text", "The last copied message as selectable text, and its file", self.action_show_copied)
        for what in self.bridge.switchable():
            yield SystemCommand(f"Switch {what}", f"Load another {what} (on the engine thread)", lambda w=what: self._switch(w))
        yield SystemCommand("What the verifier covers", "The tasks the loaded verifier can judge, with examples (f3)",
                            self.show_coverage)
        for task in self.bridge.coverage().tasks:
            if task.example_prompt:
                yield SystemCommand(f"Insert example: {task.name}", task.description or "an example prompt the verifier covers",
                                    lambda p=task.example_prompt: self.insert_example(p))
        yield SystemCommand("Help", "Keys and what the badges mean (f1)", self.action_help)
        yield from super().get_system_commands(screen)

    def _rename_current(self) -> None:
        chat = self.chat
        if chat.session_id is None:
            return

        def done(title: str | None) -> None:
            if title and title.strip():
                chat.rename_current(title.strip())

        self.push_screen(TextPrompt("Rename session", value=str(chat.title or "")), done)


def run(
    engine: Any,
    store: Any,
    *,
    session_id: str | None = None,
    show_monitor: bool = True,
    theme: str | None = None,
    export_dir: str | Path | None = None,
    title: str | None = None,
) -> int:
    """Run the UI until the user quits (ctrl+q). Returns the process exit code."""
    app = SdmChatApp(
        engine=engine,
        store=store,
        session_id=session_id,
        show_monitor=show_monitor,
        theme=theme,
        export_dir=export_dir,
        title=title,
    )
    app.run()
    return int(app.return_code or 0)
