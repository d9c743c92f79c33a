"""A stored session as the model sees it, and the turn waiting for guidance. Pure functions over the
store's records (no MLX, no store access)."""

from __future__ import annotations

from typing import Sequence

from mlx_sdm.executor.events import PauseInfo
from mlx_sdm.store.records import MessageRecord

#: Answers the model sees again next turn (cancelled, aborted and failed answers are left out).
ANSWERS_KEPT = {"done", "paused", "resumed"}


def conversation_from(records: Sequence[MessageRecord]) -> list[dict[str, str]]:
    """The chat so far (without a system prompt; the pipeline adds the verifier's): user messages and
    guidance, kept answers, and a HIGH pause's reflection prompt and the model's reflection. An answer that a
    regenerated one replaces is left out: the model sees the latest answer to each question."""
    replaced = {m.metadata.replaces for m in records
                if m.role == "assistant" and m.status in ANSWERS_KEPT and m.metadata.replaces is not None}
    messages: list[dict[str, str]] = []
    for m in records:
        if m.id in replaced:
            continue
        if m.role == "user":
            messages.append({"role": "user", "content": m.text})
        elif m.role == "assistant" and m.kind == "chat" and m.status in ANSWERS_KEPT:
            messages.append({"role": "assistant", "content": m.text})
            meta = m.metadata
            if meta.reflection_prompt:
                messages.append({"role": "system", "content": meta.reflection_prompt})
                if meta.reflection:
                    messages.append({"role": "assistant", "content": meta.reflection})
    return messages


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
