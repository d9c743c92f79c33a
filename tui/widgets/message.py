"""One chat message: who said it, the (streaming) text, and for answers the verdict badge and evidence."""

from __future__ import annotations

from typing import Any, Mapping

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Markdown, Static
from textual.widgets._markdown import MarkdownStream

from tui.format import format_p, format_risk, level_label
from tui.widgets.evidence import EvidencePanel
from tui.widgets.verdict import VerdictBadge


EMPTY_ANSWER = "*(the model answered with whitespace only)*"


class MessageBubble(Vertical, can_focus=True):
    """A user message, an assistant answer (streamed), or a system note (reflection, abort)."""

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

    def set_verdict(
        self, verdict: Mapping[str, Any] | None, *, status: str | None = None, reason: str | None = None
    ) -> None:
        if self.badge is None:
            return
        self.badge.set_verdict(verdict, status=status, reason=reason)
        if verdict is not None and self.evidence is not None:
            self.evidence.show_verdict(verdict)

    def set_cancelled(self, text: str) -> None:
        if self.badge is not None:
            self.badge.set_cancelled(text)

    def set_monitor(self, monitor: Mapping[str, Any]) -> None:
        """The session monitor's reading for this turn, in one line under the badge."""
        level = monitor.get("level")
        line = (
            f"AUQ {level_label(level)} · P {format_p(monitor.get('cumulative_confidence'))}"
            f" · TRACER {format_risk(monitor.get('tracer_risk'))}"
        )
        action = monitor.get("action")
        if action:
            line += f" · {str(action).lower().replace('_', ' ')}"
        for why in ((monitor.get("degenerate") or {}).get("reason"), _pause_reason(monitor.get("forecast_pause"))):
            if why:  # what the measured policy saw (mlx_sdm.monitor.policy)
                line += f" · {why}"
        for widget in self.query(".monitor-line"):
            widget.update(line)
            for lvl in ("low", "medium", "high", "critical"):
                widget.set_class(str(level).lower() == lvl, f"level-{lvl}")

    def toggle_evidence(self, expanded: bool) -> None:
        if self.evidence is not None:
            self.evidence.display = expanded


def _pause_reason(pause: Mapping[str, Any] | None) -> str | None:
    from mlx_sdm.monitor.online.reading import ForecastPause

    found = ForecastPause.from_dict(pause)
    return None if found is None else found.reason
