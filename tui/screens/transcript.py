"""How messages and verifier notes read in the chat log: the bubble a stored message becomes, how a
finished answer shows its turn's record (badge, monitor line, the notes under it: one rule for a live
answer and a reopened one), and what the verifier covers."""

from __future__ import annotations

from typing import Iterator

from mlx_sdm.network.coverage import VerifierCoverage
from mlx_sdm.network.verdict import OPEN_QUESTIONS
from mlx_sdm.turn.escalation import TurnStatus
from mlx_sdm.store.schema import MessageRecord
from mlx_sdm.turn.values import TurnOutcome
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


#: Said under an aborted answer whose escalation gave no reason of its own.
ABORTED_WITHOUT_WHY = "The session monitor aborted this turn (CRITICAL)."


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


def stored_bubble(record: MessageRecord, turn_number: int, answer: TurnOutcome | None) -> MessageBubble:
    """The bubble one stored message shows as; ``answer``: the message's turn record when it is an answer
    (read back from the store as the type the pipeline yielded), whose badge and notes
    :func:`show_outcome` and :func:`answer_notes` add, as for a live answer."""
    if record.role == "user":
        title = None if record.kind == "chat" else f"you · {record.kind}"
        return MessageBubble("user", record.text, title=title, turn_id=record.id)
    if answer is None:
        return MessageBubble("system", record.text, title=f"monitor · {record.kind}", turn_id=record.id)
    title = f"assistant · turn {turn_number}"
    if answer.resampled is not None:  # a regenerated answer (the seed is its attempt number)
        title += f" · answer {answer.resampled.seed + 1} (sampled)"
    return MessageBubble("assistant", record.text, title=title, turn_id=record.id, number=turn_number)


def show_outcome(answer: MessageBubble, outcome: TurnOutcome) -> None:
    """An answer bubble shows its turn's verdict (or how the turn ended) and monitor line, unless the live
    stream already set its badge."""
    if answer.badge is None or not answer.badge.resolved:
        if outcome.verdict_status is not None:
            answer.set_verdict(outcome.verdict, reason=outcome.unverifiable_reason)
        else:
            answer.set_cancelled(STATUS_TEXT.get(outcome.status.value, outcome.status.value))
    if outcome.monitor is not None:
        answer.set_monitor(outcome.monitor)


def answer_notes(outcome: TurnOutcome, *, reflection_shown: bool = False) -> Iterator[MessageBubble]:
    """The notes a finished answer leaves under it, in order, live and reopened alike: the model's
    reflection on a HIGH pause (unless it was streamed: ``reflection_shown``), why the monitor aborted the
    turn, and which part of the answer the verdict covers when text follows it; first, when the conversation
    was longer than the model's context, what the model did not read of it (live turns: the store keeps no cut)."""
    if outcome.prompt_note:
        yield MessageBubble("system", outcome.prompt_note, title="context · cut to fit")
    if outcome.reflection_shown and not reflection_shown:
        yield MessageBubble("system", outcome.reflection_shown, title="monitor · reflection")
    if outcome.status is TurnStatus.ABORTED or outcome.explanation:
        yield MessageBubble("system", outcome.explanation or ABORTED_WITHOUT_WHY, title="monitor · CRITICAL")
    if outcome.verdict_status is not None and outcome.unverified_tail.strip():
        yield MessageBubble("system", unverified_note(outcome.judged_text), title="verifier · scope")
