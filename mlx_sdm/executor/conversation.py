"""A stored session as the model sees it, and the turn waiting for guidance. Pure functions over the
store's records (no MLX, no store access)."""

from __future__ import annotations

from typing import Sequence

from mlx_sdm.executor.events import PauseInfo
from mlx_sdm.store.records import MessageRecord

#: Answers the model sees again next turn (cancelled, aborted and failed answers are left out).
ANSWERS_KEPT = {"done", "paused", "resumed"}


def conversation_from(records: Sequence[MessageRecord], guidance: str | None = None) -> list[dict[str, str]]:
    """The chat so far (without a system prompt; the pipeline adds the verifier's): user messages and
    guidance, kept answers, and a HIGH pause's reflection prompt and the model's reflection. An answer that a
    regenerated one replaces is left out: the model sees the latest answer to each question.

    A paused answer that derailed (the monitor found a loop, runs of quotes and braces: :func:`looped`) is left out
    with its reflection, so the model never reads it again to repeat it, and the guidance given for it becomes part
    of the question it answers: the next user message is joined to the one before it. ``guidance``: this turn's
    guidance for the paused turn, added as that next message (else the caller adds this turn's message)."""
    replaced = {m.metadata.replaces for m in records
                if m.role == "assistant" and m.status in ANSWERS_KEPT and m.metadata.replaces is not None}
    messages: list[dict[str, str]] = []
    join_next = False  # a derailed answer was left out: the next user message joins the question before it
    for m in records:
        if m.id in replaced:
            continue
        if m.role == "user":
            join_next = _add_user(messages, m.text, join_next)
        elif m.role == "assistant" and m.kind == "chat" and m.status in ANSWERS_KEPT:
            if looped(m):
                join_next = bool(messages) and messages[-1]["role"] == "user"
                continue
            join_next = False
            messages.append({"role": "assistant", "content": m.text})
            meta = m.metadata
            if meta.reflection_prompt:
                messages.append({"role": "system", "content": meta.reflection_prompt})
                if meta.reflection:
                    messages.append({"role": "assistant", "content": meta.reflection})
    if guidance is not None:
        _add_user(messages, guidance, join_next)
    return messages


def looped(record: MessageRecord) -> bool:
    """A paused (or since resumed) answer the monitor found derailed: a loop, the same word or character over and
    over, runs of quotes and braces (``MonitorReading.degenerate``)."""
    return record.status in ("paused", "resumed") and record.monitor is not None \
        and record.monitor.degenerate is not None


def _add_user(messages: list[dict[str, str]], text: str, join: bool) -> bool:
    """Add a user message, joined to the user message before it when ``join``; False (what ``join_next`` becomes)."""
    if join and messages and messages[-1]["role"] == "user":
        messages[-1] = {"role": "user", "content": f"{messages[-1]['content'].rstrip()}\n\n{text.strip()}"}
    else:
        messages.append({"role": "user", "content": text})
    return False


def pending_pause(records: Sequence[MessageRecord]) -> PauseInfo | None:
    """The paused answer waiting for guidance (None once the user moved on or resumed)."""
    for m in reversed(records):
        if m.role == "user" and m.kind in {"chat", "guidance"}:
            return None
        if m.role == "assistant" and m.kind == "chat":
            if m.status != "paused":
                return None
            meta, mon = m.metadata, m.monitor
            return PauseInfo(
                session_id=m.session_id, message_id=m.id, level=mon.level.value if mon else None,
                confidence=mon.cumulative_confidence if mon else None,
                reflection=meta.reflection or meta.reflection_prompt,
                irreversible=bool(mon and mon.irreversible), message=meta.pause_message or "",
            )
    return None
