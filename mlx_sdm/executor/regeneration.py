"""What regenerating an answer asks of the model: the session's last question again, with the
conversation before it, sampled at :data:`REGENERATE_TEMPERATURE` with a seed per attempt (attempt 1 is
seed 1, ...), so a regenerated answer can be reproduced. The first answer of a turn stays the model's own
greedy answer; a regenerated one is stored beside it (both keep their own verdict) and, from then on, the
conversation the model sees carries the latest answer (:func:`~mlx_sdm.executor.conversation.conversation_from`).
Pure functions over the store's records (no MLX, no store access)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mlx_sdm.errors import DataError
from mlx_sdm.executor.conversation import ANSWERS_KEPT, conversation_from
from mlx_sdm.store.records import MessageRecord

#: The sampling temperature of a regenerated answer (mlx-lm's usual chat temperature range; the first
#: answer of every turn is greedy).
REGENERATE_TEMPERATURE = 0.7


@dataclass(frozen=True)
class Regeneration:
    """The question to answer again: its message id, the answer the new one replaces, the messages the model
    sees (the conversation before the question, then the question) and the attempt number (= the seed)."""

    question_id: int
    replaces: int
    messages: list[dict[str, str]]
    attempt: int


def regeneration(records: Sequence[MessageRecord]) -> Regeneration:
    """The session's last question and its latest kept answer (a :class:`~mlx_sdm.errors.DataError` says why
    there is nothing to regenerate: no question yet, or the last one has no finished answer)."""
    question = next((i for i in range(len(records) - 1, -1, -1)
                     if records[i].role == "user" and records[i].kind == "chat"), None)
    if question is None:
        raise DataError("nothing to regenerate yet: ask something first", field="session")
    after = records[question + 1:]
    if any(m.role == "user" for m in after):
        raise DataError("the last question was followed by guidance; regenerate works on a plain question and answer",
                        field="session")
    answers = [m for m in after if m.role == "assistant" and m.kind == "chat" and m.status in ANSWERS_KEPT]
    if not answers:  # a paused answer counts: regenerating it moves on from the pause
        raise DataError("the last question has no finished answer to regenerate (a stopped or failed answer: "
                        "send the question again)", field="session")
    attempt = sum(1 for m in after if m.role == "assistant" and m.metadata.replaces is not None) + 1
    messages = conversation_from(records[:question]) + [{"role": "user", "content": records[question].text}]
    return Regeneration(records[question].id, answers[-1].id, messages, attempt)
