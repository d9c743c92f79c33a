"""One chat message: who said it, the (streaming) text, and for answers the verdict badge and evidence."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

from mlx_sdm.monitor.online.auq_escalation import departs_from_usual
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.verdict import DocumentVerdict
from tui.format import LEVELS, monitor_summary
from tui.widgets.evidence_panel import EvidencePanel
from tui.widgets.verdict_badge import VerdictBadge


EMPTY_ANSWER = "*(the model answered with whitespace only)*"


class MessageBubble(Vertical, can_focus=True):
    """A user message, an assistant answer (streamed), or a system note (reflection, abort). An answer's
    monitor reading is typed reactive state (:attr:`reading`); its watcher writes the line under the badge."""

    reading: reactive[MonitorReading | None] = reactive(None, init=False)

    def __init__(
        self, role: str, text: str = "", *, title: str | None = None, turn_id: Any = None, number: int = 0
    ) -> None:
        super().__init__(classes=f"message {role}")
        self.role = role
        self.number = number
        self.turn_id = turn_id
        self.text = text
        self._title = title or {"user": "you", "assistant": "assistant", "system": "monitor"}.get(role, role)
        self._stream: MarkdownStream | None = None
        self.badge: VerdictBadge | None = None
        self.evidence: EvidencePanel | None = None

    def compose(self) -> ComposeResult:
        yield Static(self._title, classes="title")
        shown = EMPTY_ANSWER if self.role == "assistant" and self.text and not self.text.strip() else self.text
        yield Markdown(shown, classes="body")
        if self.role == "assistant":
            self.badge = VerdictBadge()
            yield self.badge
            self.evidence = EvidencePanel()
            self.evidence.display = False
            yield self.evidence
            yield Static("", classes="monitor-line")

    @property
    def heading(self) -> str:
        """The line above the message ("you", "assistant · turn 2", "verifier · coverage", ...)."""
        return self._title

    @property
    def body(self) -> Markdown:
        return self.query_one(".body", Markdown)

    async def append(self, piece: str) -> None:
        """Add a streamed piece of the answer; the Markdown stream batches when pieces come faster than frames."""
        if not piece:
            return
        self.text += piece
        if self._stream is None:
            self._stream = Markdown.get_stream(self.body)
        await self._stream.write(piece)

    async def finish(self) -> None:
        """Flush the stream; the text is final. An answer of only whitespace says so instead of showing nothing."""
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        if self.role == "assistant" and self.text and not self.text.strip():
            await self.body.update(EMPTY_ANSWER)

    def set_verdict(self, verdict: DocumentVerdict) -> None:
        """The answer's verdict; its evidence, when there is a verifier's to show."""
        if self.badge is None:
            return
        self.badge.set_verdict(verdict)
        if self.badge.expandable and self.evidence is not None:
            self.evidence.show_verdict(verdict)

    def set_cancelled(self, text: str) -> None:
        if self.badge is not None:
            self.badge.set_cancelled(text)

    def set_monitor(self, reading: MonitorReading) -> None:
        """The session monitor's reading for this turn (one line under the badge, only on a turn that departs from
        the usual: :func:`~mlx_sdm.monitor.online.auq_escalation.departs_from_usual`)."""
        self.reading = reading

    def watch_reading(self, reading: MonitorReading | None) -> None:
        if reading is None:
            return
        usual = not departs_from_usual(reading.action, reading.level)
        for widget in self.query(".monitor-line"):
            widget.display = not usual  # an ordinary turn's reading is the panel's (ctrl+t), not a line here
        if usual:
            return
        line = f"{monitor_summary(reading)} · {reading.action.value.replace('_', ' ')}"
        if reading.degenerate is not None:  # this turn's own risk (mlx_sdm.monitor.forecast.policy)
            line += f" · {reading.degenerate.reason}"
        if reading.judged_wrong is not None:
            line += " · the verifier is confident it is wrong"
        for widget in self.query(".monitor-line"):
            widget.update(line)
            for level in LEVELS:
                widget.set_class(reading.level.value == level, f"level-{level}")

    def toggle_evidence(self, expanded: bool) -> None:
        if self.evidence is not None:
            self.evidence.display = expanded

