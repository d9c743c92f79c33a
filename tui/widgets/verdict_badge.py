"""The verdict badge under each answer: verified (with p_lower), not verified (why), out of scope (neutral),
or no verifier."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static

from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus
from mlx_sdm.network.verdict_words import VerdictWords, verdict_words
from tui.format import PENDING, badge_text

#: The badge's words before the verdict: while tokens stream, then while the verifier reads the finished answer.
ANSWERING = "… answering"
VERIFYING = "… verifying"
#: While the verifier takes a second look (``checking_text(k)``).
CHECKING = "… verifying · checking {k} more answers"
#: A message sent while the model still loads: the engine answers it once loaded.
WAITING = "… waiting for the model"


def checking_text(k: int) -> str:
    """The badge while the model draws ``k`` more answers for the verifier's second look."""
    return CHECKING.format(k=k)


class VerdictBadge(Static, can_focus=True):
    """One line; click it or press enter on it to expand the evidence behind the verdict. Its state is
    typed and reactive: :attr:`words` (the badge and sentence of ``verdict_words``; None while the answer streams)
    and :attr:`expanded`; their watchers redraw it."""

    BINDINGS = [
        Binding("enter,space", "toggle", "Evidence", show=True),
        Binding("v", "full", "Full evidence", show=True),
    ]

    @dataclass
    class Toggled(Message):
        """The user asked to show or hide the evidence."""

        badge: "VerdictBadge"
        expanded: bool

    @dataclass
    class OpenEvidence(Message):
        """The user asked for the full evidence view of this verdict (the app opens it)."""

        verdict: DocumentVerdict

    words: reactive[VerdictWords | None] = reactive(None, init=False)
    expanded: reactive[bool] = reactive(False, init=False)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(ANSWERING, id=id, classes=f"badge {PENDING}")
        self.verdict: DocumentVerdict | None = None  # the verdict behind the words (None: none shown)

    @property
    def status(self) -> VerdictStatus | None:
        return self.words.status if self.words is not None else None

    @property
    def resolved(self) -> bool:
        """A verdict is shown (False while streaming, and for a turn that ended without one)."""
        return self.words is not None

    def set_verifying(self) -> None:
        """The answer is complete and the verifier is reading it (until :meth:`set_verdict`)."""
        self.set_pending(VERIFYING)

    def set_checking(self, k: int) -> None:
        """The verifier is taking a second look: the model draws ``k`` more answers (until :meth:`set_verdict`)."""
        self.set_pending(checking_text(k))

    def set_pending(self, text: str) -> None:
        """Words before the verdict (:data:`ANSWERING`, :data:`VERIFYING`, :data:`WAITING`)."""
        if not self.resolved and not self.has_class("cancelled"):
            self.update(text)

    def set_verdict(self, verdict: DocumentVerdict) -> None:
        """Show the final verdict."""
        self.verdict = verdict
        self.words = verdict_words(verdict)

    def set_cancelled(self, text: str) -> None:
        """The turn ended without a verdict (stopped or aborted)."""
        self.verdict, self.words = None, None
        self.remove_class(PENDING, *(s.value for s in VerdictStatus))
        self.add_class("cancelled")
        self.update(text)

    def watch_words(self, words: VerdictWords | None) -> None:
        if words is None:
            return
        self.remove_class(PENDING, "cancelled", *(s.value for s in VerdictStatus))
        self.add_class(words.status.value)
        self.update(badge_text(words, expanded=self.expanded))

    def watch_expanded(self, expanded: bool) -> None:
        if self.words is not None:
            self.update(badge_text(self.words, expanded=expanded))

    @property
    def expandable(self) -> bool:
        """There is evidence behind the verdict shown (a verifier's: not when none judged the answer)."""
        return self.resolved and self.verdict is not None and self.verdict.status is not VerdictStatus.NO_VERIFIER

    def action_toggle(self) -> None:
        if not self.expandable:
            return
        self.expanded = not self.expanded
        self.post_message(self.Toggled(self, self.expanded))

    def action_full(self) -> None:
        if self.expandable and self.verdict is not None:
            self.post_message(self.OpenEvidence(self.verdict))  # the app opens the evidence screen

    def on_click(self) -> None:
        self.action_toggle()
