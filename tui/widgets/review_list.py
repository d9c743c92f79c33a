"""The review queue as a table: one row per unverified or escalated answer, j/k to move."""

from __future__ import annotations

from typing import Sequence

from textual.binding import Binding
from textual.widgets import DataTable

from mlx_sdm.store.records import ReviewItem
from tui.format import decision_label, format_p, reason_label, shorten

ANSWER_WIDTH = 48


class ReviewList(DataTable):
    """Rows are the store's ``ReviewItem`` objects (``id, session_title, created_at, reason, verdict, decision, answer``)."""

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.items: list[ReviewItem] = []

    def on_mount(self) -> None:
        self.add_columns("when", "session", "reason", "p_lower", "decision", "answer")

    def show_items(self, items: Sequence[ReviewItem]) -> None:
        """Replace the rows, keeping the cursor on the same item when it is still listed."""
        keep = self.current_item.id if self.current_item is not None else None
        self.items = list(items)
        self.clear()
        for item in self.items:
            judged = item.verdict.verdict if item.verdict is not None else None
            self.add_row(
                str(item.created_at)[:16].replace("T", " "),
                shorten(item.session_title, 18),
                reason_label(item.reason),
                format_p(judged.p_lower if judged is not None else None),
                decision_label(item.decision),
                shorten(item.answer, ANSWER_WIDTH),
                key=str(item.id),
            )
        if keep is not None:
            for index, item in enumerate(self.items):
                if item.id == keep:
                    self.move_cursor(row=index)
                    break

    @property
    def current_item(self) -> ReviewItem | None:
        if not self.items or self.cursor_row < 0 or self.cursor_row >= len(self.items):
            return None
        return self.items[self.cursor_row]
