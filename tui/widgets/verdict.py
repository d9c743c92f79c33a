"""The verdict badge under each answer: verified (with p_lower), not verified (why), out of scope (neutral),
or no verifier."""

from __future__ import annotations

from typing import Any, Mapping

from textual.binding import Binding
from textual.message import Message
from textual.widgets import Static

from tui.format import PENDING, badge_text, verdict_status
from tui.messages import OpenEvidence


class VerdictBadge(Static, can_focus=True):
    """One line; click it or press enter on it to expand the evidence behind the verdict."""

    BINDINGS = [
        Binding("enter,space", "toggle", "Evidence", show=True),
        Binding("v", "full", "Full evidence", show=True),
    ]

    class Toggled(Message):
        """The user asked to show or hide the evidence."""

        def __init__(self, badge: "VerdictBadge", expanded: bool) -> None:
            super().__init__()
            self.badge = badge
            self.expanded = expanded

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("… verifying", id=id, classes=f"badge {PENDING}")
        self.verdict: Mapping[str, Any] | None = None
        self.status: str | None = None
        self.reason: str | None = None
        self.resolved = False
        self.expanded = False

    def set_verdict(
        self, verdict: Mapping[str, Any] | None, *, status: str | None = None, reason: str | None = None
    ) -> None:
        """Show the final verdict (None = no verifier judged it)."""
        self.verdict = verdict
        self.status = verdict_status(verdict, status)
        self.reason = reason
        self.resolved = True
        self.remove_class(PENDING, "cancelled")
        self.add_class(self.status)
        self._refresh_text()

    def set_cancelled(self, text: str) -> None:
        """The turn ended without a verdict (stopped or aborted)."""
        self.resolved = False
        self.remove_class(PENDING)
        self.add_class("cancelled")
        self.update(text)

    def _refresh_text(self) -> None:
        self.update(badge_text(self.verdict, status=self.status, reason=self.reason, expanded=self.expanded))

    @property
    def expandable(self) -> bool:
        return self.resolved and self.verdict is not None

    def action_toggle(self) -> None:
        if not self.expandable:
            return
        self.expanded = not self.expanded
        self._refresh_text()
        self.post_message(self.Toggled(self, self.expanded))

    def action_full(self) -> None:
        if not self.expandable:
            return
        self.post_message(OpenEvidence(self.verdict))  # the app opens the evidence screen

    def on_click(self) -> None:
        self.action_toggle()
