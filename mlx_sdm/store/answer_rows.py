"""An answer's rows: the turn's one record (:class:`~mlx_sdm.turn.values.TurnOutcome`) becomes its
message row, verdict, monitor snapshot and review entry here, inside a caller's transaction, and is
read back from them here as the same type (:func:`outcome_from_row`). The typed verdict, reading and
metadata become their JSON here, and only here (the SQLite edge)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from typing import Any

import numpy as np

from mlx_sdm.monitor.session_file.provenance import Provenance
from mlx_sdm.store.message_meta import MessageMeta
from mlx_sdm.store.records import (
    dumps_json,
    features_array,
    features_blob,
    inserted_id,
    loads_json,
    stored_reading,
    stored_verdict,
)
from mlx_sdm.turn.answer import GeneratedAnswer
from mlx_sdm.monitor.online.auq_escalation import EscalationAction
from mlx_sdm.turn.escalation import REFLECTION_PROMPT, Escalation, TurnStatus
from mlx_sdm.turn.values import Resampled, TurnOutcome


def answer_meta(outcome: TurnOutcome) -> MessageMeta:
    """What the store keeps of a turn beside its text, verdict and reading. A turn with no verdict
    (stopped, failed) keeps how it ended and who asked, nothing of a judgement."""
    again = outcome.resampled
    meta = MessageMeta(finish_reason=outcome.finish_reason, source=outcome.source,
                       replaces=again.replaces if again else None, temperature=again.temperature if again else None,
                       seed=again.seed if again else None)
    if outcome.verdict_status is None:
        return meta
    escalation = outcome.escalation
    reflect = escalation.reflect
    return replace(
        meta, judged_text=outcome.judged_text if outcome.unverified_tail else None,
        explanation=escalation.explanation, tool_calls=tuple(outcome.tool_calls),
        pause_message=escalation.message if outcome.status is TurnStatus.PAUSED else None,
        reflection_prompt=REFLECTION_PROMPT if reflect else None, reflection=outcome.reflection if reflect else None)


def _answer_columns(outcome: TurnOutcome, stamp: str) -> dict[str, Any]:
    """The answer's message-row columns (log-prob summary included), but its session, role and creation time.
    A turn with no verdict keeps its text and tokens, not its features."""
    judged = outcome.verdict_status is not None
    features = outcome.features if judged else None
    logprobs = [float(x) for x in outcome.logprobs] if outcome.tokens else None
    finite = [x for x in (logprobs or []) if np.isfinite(x)]
    return {"kind": "chat", "text": outcome.text, "status": outcome.status.value, "finished_at": stamp,
            "token_count": None if logprobs is None else len(logprobs),
            "logprob_mean": float(np.mean(finite)) if finite else None,
            "logprob_min": float(np.min(finite)) if finite else None,
            "prompt_json": dumps_json(outcome.messages or None),
            "tokens_json": dumps_json(outcome.tokens or None), "logprobs_json": dumps_json(logprobs),
            "features": features_blob(features), "feature_model": outcome.feature_model if features is not None else None,
            "metadata_json": dumps_json(answer_meta(outcome).to_dict() or None)}


def _insert_answer(conn: sqlite3.Connection, session_id: str, outcome: TurnOutcome, stamp: str) -> int:
    """The answer's message row; returns its id."""
    columns = {"session_id": session_id, "role": "assistant", "created_at": stamp,
               **_answer_columns(outcome, stamp)}
    cur = conn.execute(f"INSERT INTO messages({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                       tuple(columns.values()))
    return inserted_id(cur)


def _update_answer(conn: sqlite3.Connection, message_id: int, outcome: TurnOutcome, stamp: str) -> None:
    """An answer row begun earlier (kept while it streamed) rewritten whole; its creation time stays."""
    columns = _answer_columns(outcome, stamp)
    conn.execute(f"UPDATE messages SET {', '.join(f'{name} = ?' for name in columns)} WHERE id = ?",
                 (*columns.values(), message_id))


def write_answer(conn: sqlite3.Connection, session_id: str, outcome: TurnOutcome, stamp: str,
                 message_id: int | None = None, provenance: Provenance | None = None) -> tuple[int, int | None]:
    """Inside a caller's transaction (:class:`~mlx_sdm.store.turn_writer.TurnWriter`): the answer of session
    ``session_id`` (a new row, or the row ``message_id`` kept while it streamed), its verdict, monitor snapshot and
    review entry (the escalation's review reasons); ``provenance``: the product that answered, kept by the session
    with its first answer. Returns (the answer's message id, its review entry's id or None)."""
    if message_id is None:
        message_id = _insert_answer(conn, session_id, outcome, stamp)
    else:
        _update_answer(conn, message_id, outcome, stamp)
    if provenance is not None:
        conn.execute("UPDATE sessions SET provenance_json = ? WHERE id = ? AND provenance_json IS NULL",
                     (dumps_json(provenance.to_dict()), session_id))
    status = outcome.verdict_status
    if outcome.verdict is not None:  # the typed verdict becomes its JSON here, and only here
        verdict = outcome.verdict.to_dict()
        conn.execute(
            "INSERT INTO verdicts(message_id, status, p_lower, reason, verdict_json, verifier, task, task_recorded, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)",
            (message_id, outcome.verdict.status.value, verdict.get("p_lower"), verdict.get("reason"),
             dumps_json(verdict), outcome.verifier, outcome.task, stamp),
        )
    if status is not None and outcome.monitor is not None:
        monitor = outcome.monitor.to_dict()
        conn.execute(
            "INSERT INTO monitor_snapshots(message_id, level, action, cumulative_confidence, step_confidence, "
            "tracer_risk, step_risk, details_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (message_id, monitor.get("level"), monitor.get("action"), monitor.get("cumulative_confidence"),
             monitor.get("step_confidence"), monitor.get("tracer_risk"), monitor.get("step_risk"),
             dumps_json(monitor), stamp),
        )
    reasons = [r for r in dict.fromkeys(outcome.escalation.review_reasons) if r] if status is not None else []
    review_id = None
    if reasons:
        review_id = inserted_id(conn.execute(
            "INSERT INTO review_queue(message_id, session_id, reason, created_at) VALUES (?, ?, ?, ?)",
            (message_id, session_id, ",".join(reasons), stamp),
        ))
    conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, session_id))
    return message_id, review_id


#: The escalation a stored answer's status says was taken (a logged MEDIUM is not kept apart from PROCEED).
ACTION_OF_STATUS = {TurnStatus.PAUSED: EscalationAction.PAUSE_FOR_HUMAN, TurnStatus.RESUMED: EscalationAction.PAUSE_FOR_HUMAN,
                    TurnStatus.ABORTED: EscalationAction.ABORT}


def outcome_from_row(r: sqlite3.Row) -> TurnOutcome:
    """An answer's row (the message joined with its verdict, monitor snapshot and review entry, as
    :meth:`~mlx_sdm.store.chat_store.ChatStore.messages` selects it) read back as the turn's record: what
    the store keeps of it. Not kept, so not read back: the KV cache, timings, the escalation's level
    and a logged MEDIUM (the reading has the level)."""
    meta = MessageMeta.from_dict(loads_json(r["metadata_json"]))
    tokens = loads_json(r["tokens_json"]) or []
    text = r["text"]
    answer = GeneratedAnswer(text, tokens=tokens, logprobs=loads_json(r["logprobs_json"]) or [],
                             features=features_array(r["features"]), finish_reason=meta.finish_reason or "stop",
                             cancelled=r["status"] == TurnStatus.CANCELLED.value,
                             judged_tokens=_judged_tokens(tokens, meta.judged_text))
    status = TurnStatus(r["status"])
    verdict = stored_verdict(r)
    reading = stored_reading(r)
    keys = r.keys()
    reasons = (r["review_reason"] or "") if "review_reason" in keys else ""
    escalation = Escalation(
        action=ACTION_OF_STATUS.get(status, EscalationAction.PROCEED),
        level=reading.level if reading is not None else Escalation().level,
        message=meta.pause_message or "", review_reasons=[x for x in reasons.split(",") if x],
        reflect=meta.reflection_prompt is not None, explanation=meta.explanation)
    again = (Resampled(meta.replaces, meta.temperature if meta.temperature is not None else 0.0, meta.seed or 0)
             if meta.replaces is not None else None)
    return TurnOutcome(
        status=status, answer=answer, messages=loads_json(r["prompt_json"]) or [],
        task=r["verdict_task"] if "verdict_task" in keys else None, verdict=verdict, monitor=reading,
        escalation=escalation, reflection=meta.reflection, tool_calls=tuple(meta.tool_calls),
        verifier=r["verifier"], resampled=again, source=meta.source, feature_model=r["feature_model"])


def _judged_tokens(tokens: list[str], judged_text: str | None) -> int:
    """How many of the answer's tokens the verdict covered: all of them unless the stored judged span is
    shorter (then the tokens that spell it)."""
    if judged_text is None:
        return len(tokens)
    spelled = ""
    for n, piece in enumerate(tokens):
        if spelled == judged_text:
            return n
        spelled += piece
    return len(tokens)
