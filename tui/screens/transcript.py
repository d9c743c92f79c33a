"""How stored messages and verifier notes read in the chat log: the widgets a stored message becomes,
the note under an answer whose verdict covers only part of it, and what the verifier covers."""

from __future__ import annotations

from typing import Iterator

from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.coverage import VerifierCoverage
from mlx_sdm.network.verdict import OPEN_QUESTIONS
from mlx_sdm.turn.escalation import TurnStatus
from mlx_sdm.store.schema import MessageRecord
from tui.widgets.message import MessageBubble

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


def unverified_note(judged: str) -> str:
    """Said under an answer whose verdict covers only its first part (the unit the verifier judges)."""
    return f"The verdict covers only {judged.strip()!r}; the text after it was not checked (unverified)."


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


def stored_widgets(record: MessageRecord, turn_number: int) -> Iterator[tuple[MessageBubble, MonitorReading | None]]:
    """The bubbles one stored message shows as, in order, each with the monitor reading to put in the
    panel (the answer's own; None for the others)."""
    if record.role == "user":
        title = None if record.kind == "chat" else f"you · {record.kind}"
        yield MessageBubble("user", record.text, title=title, turn_id=record.id), None
        return
    if record.role != "assistant":
        yield MessageBubble("system", record.text, title=f"monitor · {record.kind}", turn_id=record.id), None
        return
    title = f"assistant · turn {turn_number}"
    if record.metadata.replaces is not None:  # a regenerated answer (the seed is its attempt number)
        title += f" · answer {(record.metadata.seed or 1) + 1} (sampled)"
    yield MessageBubble("assistant", record.text, title=title, turn_id=record.id,
                        number=turn_number), record.monitor
    meta = record.metadata
    if meta.reflection or meta.reflection_prompt:
        yield MessageBubble("system", meta.reflection or meta.reflection_prompt, title="monitor · reflection"), None
    if meta.explanation:
        yield MessageBubble("system", meta.explanation, title="monitor · CRITICAL"), None
    if meta.judged_text is not None:
        yield MessageBubble("system", unverified_note(meta.judged_text), title="verifier · scope"), None


def apply_stored_verdict(answer: MessageBubble, record: MessageRecord) -> None:
    """A mounted answer bubble shows the stored verdict (or how the turn ended) and monitor line."""
    if record.verdict_status is not None:
        answer.set_verdict(record.verdict, reason=record.metadata.verdict_reason)
    else:
        answer.set_cancelled(STATUS_TEXT.get(record.status, record.status))
    if record.monitor is not None:
        answer.set_monitor(record.monitor)
