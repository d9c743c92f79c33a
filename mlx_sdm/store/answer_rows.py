"""An answer's rows, written inside a caller's transaction: its message (new, or the row begun while it
streamed), verdict, monitor snapshot and review entry. The typed verdict and reading become their JSON
here, and only here (the SQLite edge)."""

from __future__ import annotations

import sqlite3
from typing import Any

import numpy as np

from mlx_sdm.network.verdict import VerdictStatus
from mlx_sdm.store.schema import AnswerRecord, dumps_json, features_blob


def _answer_columns(r: AnswerRecord, stamp: str) -> dict[str, Any]:
    """The answer's message-row columns (log-prob summary included), but its session, role and creation time."""
    logprobs = None if r.token_logprobs is None else [float(x) for x in r.token_logprobs]
    finite = [x for x in (logprobs or []) if np.isfinite(x)]
    return {"kind": r.kind, "text": r.text, "status": r.status, "finished_at": stamp,
            "token_count": None if logprobs is None else len(logprobs),
            "logprob_mean": float(np.mean(finite)) if finite else None,
            "logprob_min": float(np.min(finite)) if finite else None, "prompt_json": dumps_json(r.prompt),
            "tokens_json": dumps_json(r.tokens), "logprobs_json": dumps_json(logprobs), "features": features_blob(r.features),
            "feature_model": r.feature_model, "metadata_json": dumps_json(r.metadata.to_dict() or None)}


def _insert_answer(conn: sqlite3.Connection, r: AnswerRecord, stamp: str) -> int:
    """The answer's message row; returns its id."""
    columns = {"session_id": r.session_id, "role": "assistant", "created_at": r.created_at or stamp,
               **_answer_columns(r, stamp)}
    cur = conn.execute(f"INSERT INTO messages({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                       tuple(columns.values()))
    return int(cur.lastrowid)


def _update_answer(conn: sqlite3.Connection, message_id: int, r: AnswerRecord, stamp: str) -> int:
    """An answer row begun earlier (``begin_answer``) rewritten whole; its creation time stays."""
    columns = _answer_columns(r, stamp)
    conn.execute(f"UPDATE messages SET {', '.join(f'{name} = ?' for name in columns)} WHERE id = ?",
                 (*columns.values(), message_id))
    return message_id


def write_answer(conn: sqlite3.Connection, record: AnswerRecord, stamp: str, message_id: int | None = None) -> int:
    """Inside a caller's transaction: the answer's message (new, or the begun row ``message_id``), verdict,
    monitor snapshot and review entry."""
    message_id = _insert_answer(conn, record, stamp) if message_id is None else _update_answer(conn, message_id, record, stamp)
    if record.provenance is not None:  # the session keeps the product of its first answer
        conn.execute("UPDATE sessions SET provenance_json = ? WHERE id = ? AND provenance_json IS NULL",
                     (dumps_json(record.provenance.to_dict()), record.session_id))
    if record.verdict_status is not None:  # the typed verdict becomes its JSON here, and only here
        verdict = record.verdict.to_dict() if record.verdict is not None else None
        conn.execute(
            "INSERT INTO verdicts(message_id, status, p_lower, reason, verdict_json, verifier, task, task_recorded, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)",
            (message_id, VerdictStatus(record.verdict_status).value, (verdict or {}).get("p_lower"),
             (verdict or {}).get("reason"), dumps_json(verdict), record.verifier, record.task.name, stamp),
        )
    if record.monitor is not None:
        monitor = record.monitor.to_dict()
        conn.execute(
            "INSERT INTO monitor_snapshots(message_id, level, action, cumulative_confidence, step_confidence, "
            "tracer_risk, step_risk, details_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (message_id, monitor.get("level"), monitor.get("action"), monitor.get("cumulative_confidence"),
             monitor.get("step_confidence"), monitor.get("tracer_risk"), monitor.get("step_risk"),
             dumps_json(monitor), stamp),
        )
    reasons = [r for r in dict.fromkeys(record.review_reasons) if r]
    if reasons:
        conn.execute(
            "INSERT INTO review_queue(message_id, session_id, reason, created_at) VALUES (?, ?, ?, ?)",
            (message_id, record.session_id, ",".join(reasons), stamp),
        )
    conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, record.session_id))
    return message_id
