"""The review queue: every unverified or escalated answer from every session. Each decision is a label
that the executor adds to the support set of the verifier that judged the answer at once (no retraining).
Answers no verifier judged (out of scope with no judgement, no checkable answer, no verifier, an empty
answer) are listed apart (the "not judged" list): a label there changes no verdict, so it is not offered,
and each says why."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Select, Static

from mlx_sdm.network.coverage import match_instruction
from mlx_sdm.store.records import ReviewItem, support_words
from tui.format import decision_label, monitor_summary, reason_label
from tui.screens.prompts import EditText, TextPrompt
from tui.widgets.evidence_panel import evidence_renderable
from tui.widgets.review_list import ReviewList

if TYPE_CHECKING:
    from tui.bridge import Bridge

LABEL_ACCEPTABLE, LABEL_UNACCEPTABLE = 1, 0
STATUS_CHOICES = [("status: pending", "pending"), ("status: decided", "decided"), ("status: all", "all")]
#: The reviewable list (what a label can change) and, apart, the answers no verifier judged.
JUDGED_CHOICES = [("list: judged", "judged"), ("list: not judged", "unjudged")]


class ReviewScreen(Screen):
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("j", "move(1)", "Next", show=False),
        Binding("k", "move(-1)", "Prev", show=False),
        Binding("a", "decide(1)", "Acceptable"),
        Binding("u", "decide(0)", "Unacceptable"),
        Binding("n", "note", "Note"),
        Binding("e", "edit", "Edit answer"),
        Binding("z,ctrl+z", "undo", "Undo"),
        Binding("f", "filters", "Filters"),
    ]

    def __init__(self) -> None:
        super().__init__(id="review")
        self.notes: dict[int, str] = {}  # notes typed before the item was decided
        self.busy = False

    @property
    def bridge(self) -> "Bridge":
        return self.app.bridge  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header(icon="◆")
        with Horizontal(id="review-filters"):
            yield Select([], prompt="every session", id="filter-session", allow_blank=True)
            yield Select([], prompt="every reason", id="filter-reason", allow_blank=True)
            yield Input(placeholder="since YYYY-MM-DD", id="filter-since", max_length=10)
            yield Select(STATUS_CHOICES, value="all", id="filter-status", allow_blank=False)
            yield Select(JUDGED_CHOICES, value="judged", id="filter-judged", allow_blank=False)
        yield ReviewList(id="review-list")
        with VerticalScroll(id="review-detail"):
            yield Static("", id="review-item")
        yield Static("", id="review-status")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.title = "Review queue"
        self.sub_title = "unverified and escalated answers"
        self.reload_filters()
        self.reload()
        self.query_one(ReviewList).focus()

    # ----- data ---------------------------------------------------------------------------------
    def reload_filters(self) -> None:
        sessions = [(s.title, s.id) for s in self.bridge.store.list_sessions()]
        self.query_one("#filter-session", Select).set_options(sessions)
        reasons = [(reason_label(r), r) for r in self.bridge.store.review_queue.review_reasons()]
        self.query_one("#filter-reason", Select).set_options(reasons)

    def _filter_value(self, selector: str) -> Any:
        value = self.query_one(selector, Select).value
        return None if value is Select.NULL or value is Select.BLANK else value

    def reload(self) -> None:
        since = self.query_one("#filter-since", Input).value.strip() or None
        if since is not None and len(since) != 10:
            since = None
        items = self.bridge.store.review_queue.review_items(
            session_id=self._filter_value("#filter-session"),
            reason=self._filter_value("#filter-reason"),
            since=since,
            status=self._filter_value("#filter-status") or "all",
            judged=self._filter_value("#filter-judged") != "unjudged",
        )
        self.query_one(ReviewList).show_items(items)
        self.show_current()
        self.refresh_status()

    def refresh_status(self, note: str | None = None) -> None:
        size = self.bridge.info().support_size
        pending = len(self.bridge.store.review_queue.review_items(status="pending", judged=True))
        apart = len(self.bridge.store.review_queue.review_items(judged=False))
        parts = [f"{pending} pending", support_words(size)]
        if apart:
            parts.append(f"{apart} not judged, listed apart (a label there changes no verdict)")
        teaching = self._teaching_words()
        if teaching:
            parts.append(teaching)
        last = self.bridge.store.review_queue.last_decision()
        if last is not None:
            parts.append(f"last decision: #{last.review_id} {decision_label(last)} (z undoes it)")
        if note:
            parts.append(note)
        self.query_one("#review-status", Static).update(" · ".join(parts))

    def _teaching_words(self) -> str | None:
        """How many labelled answers of the loaded fine-tuned model's tasks are waiting to teach it, and the
        command that does (``finetune --from-reviews``); None when the model has no tasks or none is labelled."""
        info = self.bridge.info()
        if not info.model_tasks:
            return None
        instructions = [t.instruction for t in info.model_tasks]
        rows = self.bridge.store.review_queue.training_rows()
        waiting = sum(1 for row in rows if match_instruction(instructions, row["prompt"]) is not None)
        if not waiting:
            return None
        folder = f" --model {info.model_folder}" if info.model_folder else ""
        answers = "answer" if waiting == 1 else "answers"
        return (f"{waiting} reviewed {answers} of this model's tasks can teach it: `mlx-sdm finetune --from-reviews"
                f"{folder} --out NEW` trains it again on them and its task rows (the verifier too)")

    def show_current(self) -> None:
        item = self.query_one(ReviewList).current_item
        detail = self.query_one("#review-item", Static)
        if item is None:
            detail.update("The queue is empty for these filters: answers the verifier did not vouch for, and escalated ones, land here.")
            return
        head = Text()
        head.append(f"#{item.id} · {item.session_title} · {str(item.created_at)[:19].replace('T', ' ')}\n", style="bold")
        head.append(f"reason: {reason_label(item.reason)}   decision: {decision_label(item.decision)}\n")
        if not item.judged:
            head.append(f"not labelled here: {item.why_a_label_changes_nothing}.\n", style="italic")
        if item.decision is not None and item.decision.note:
            head.append(f"note: {item.decision.note}\n", style="italic")
        elif item.id in self.notes:
            head.append(f"note (saved with the next decision): {self.notes[item.id]}\n", style="italic")
        head.append("\nprompt\n", style="bold underline")
        head.append(f"{item.prompt}\n")
        head.append("\nanswer\n", style="bold underline")
        head.append(f"{item.answer}\n" if item.answer.strip() else "(whitespace only)\n")
        if item.decision is not None and item.decision.completion:
            head.append("\nedited completion (acceptable)\n", style="bold underline")
            head.append(f"{item.decision.completion}\n")
        parts: list[Any] = [head]
        if item.monitor is not None:
            parts.append(Text(f"monitor: {monitor_summary(item.monitor)}\n"))
        if item.verdict is not None:
            parts.append(Text("evidence: the exemplars that drove the verdict", style="bold underline"))
            parts.append(evidence_renderable(item.verdict))
        else:
            parts.append(Text("no verdict (no verifier judged it, or the turn was aborted before verification)", style="italic"))
        detail.update(Group(*parts))

    # ----- events -------------------------------------------------------------------------------
    @on(DataTable.RowHighlighted, "#review-list")
    def _highlighted(self) -> None:
        self.show_current()

    @on(Select.Changed)
    def _filter_changed(self) -> None:
        self.reload()

    @on(Input.Submitted, "#filter-since")
    def _since_changed(self) -> None:
        self.reload()
        self.query_one(ReviewList).focus()

    # ----- actions ------------------------------------------------------------------------------
    def action_back(self) -> None:
        self.app.pop_screen()

    def action_filters(self) -> None:
        self.query_one("#filter-session", Select).focus()

    def action_move(self, delta: int) -> None:
        table = self.query_one(ReviewList)
        if delta > 0:
            table.action_cursor_down()
        else:
            table.action_cursor_up()

    def action_decide(self, label: int, completion: str | None = None) -> None:
        item = self.query_one(ReviewList).current_item
        if item is None or self.busy:
            return
        if not item.judged:
            self.notify(f"#{item.id} not labelled: {item.why_a_label_changes_nothing}.", severity="warning")
            return
        note = self.notes.pop(item.id, None)
        if note is None and item.decision is not None:
            note = item.decision.note
        self._decide(item, label, note, completion)

    @work(thread=True, exclusive=True, group="review")
    def _decide(self, item: ReviewItem, label: int, note: str | None, completion: str | None) -> None:
        """The engine thread adds the point to the support set; this worker waits for it off the UI thread."""
        self.busy = True
        try:
            result = self.bridge.decide(item.id, label, note=note, completion=completion)
        except Exception as exc:
            self.app.call_from_thread(self.notify, f"Decision not recorded: {exc}", severity="error", timeout=8)
            return
        finally:
            self.busy = False
        word = "edited → acceptable" if completion else ("acceptable" if label == LABEL_ACCEPTABLE else "unacceptable")
        self.app.call_from_thread(self._after_change, f"#{item.id} {word}: {result.message}")

    def _after_change(self, message: str) -> None:
        self.reload()
        self.refresh_status()
        self.notify(message)

    def action_note(self) -> None:
        item = self.query_one(ReviewList).current_item
        if item is None:
            return
        current = item.decision.note if item.decision is not None and item.decision.note else self.notes.get(item.id, "")

        def done(text: str | None) -> None:
            if text is None:
                return
            if item.decision is not None:
                self._decide(item, item.decision.label, text or None, item.decision.completion)
            else:
                self.notes[item.id] = text
                self.show_current()
                self.notify("Note kept; it is saved with the decision (a / u / e).")

        self.app.push_screen(TextPrompt(f"Note on #{item.id}", value=current or ""), done)

    def action_edit(self) -> None:
        item = self.query_one(ReviewList).current_item
        if item is None:
            return
        if not item.judged:
            self.notify(f"#{item.id} not labelled: {item.why_a_label_changes_nothing}.", severity="warning")
            return
        start = item.decision.completion if item.decision is not None and item.decision.completion else item.answer

        def done(text: str | None) -> None:
            if text is None or not text.strip():
                return
            self.action_decide(LABEL_ACCEPTABLE, text)

        self.app.push_screen(EditText(f"Edit #{item.id} into an acceptable completion", start), done)

    def action_undo(self) -> None:
        if not self.busy:
            self._undo()

    @work(thread=True, exclusive=True, group="review")
    def _undo(self) -> None:
        self.busy = True
        try:
            undone = self.bridge.undo()
        except Exception as exc:
            self.app.call_from_thread(self.notify, f"Undo failed: {exc}", severity="error", timeout=8)
            return
        finally:
            self.busy = False
        if undone is None:
            self.app.call_from_thread(self.notify, "No decision to undo.", severity="warning")
            return
        self.app.call_from_thread(self._after_change, f"#{undone.review_id}: {undone.message}")
