"""Branches: a session continued from an earlier turn of another as a new session. The branch gets copies
of the parent's messages up to that point (text, verdicts and monitor readings, so each answer keeps its
own badge; the review queue keeps only the parent's entries) and remembers where it came from
(:class:`~mlx_sdm.store.records.BranchOrigin`). The parent is never changed: nothing saved is lost. One
transaction. No MLX."""

from __future__ import annotations

import sqlite3
import uuid

from mlx_sdm.errors import DataError
from mlx_sdm.store.message_meta import MessageMeta
from mlx_sdm.store.records import dumps_json, inserted_id, loads_json

#: The message columns a branch copies (everything but the id and the session).
MESSAGE_COLUMNS = ("role", "kind", "text", "status", "created_at", "finished_at", "token_count", "logprob_mean",
                   "logprob_min", "prompt_json", "tokens_json", "logprobs_json", "features", "feature_model",
                   "metadata_json")
VERDICT_COLUMNS = ("status", "p_lower", "reason", "verdict_json", "verifier", "created_at", "task", "task_recorded")
MONITOR_COLUMNS = ("level", "action", "cumulative_confidence", "step_confidence", "tracer_risk", "step_risk",
                   "details_json", "created_at")


def branch_session(conn: sqlite3.Connection, parent_id: str, before_message_id: int | None, stamp: str,
                   title: str | None = None) -> str:
    """Copy session ``parent_id``'s messages with ids below ``before_message_id`` (None: all of them) into a
    new session and return its id. Answers still being written are not copied. ``title``: the branch's
    (default: the parent's after "branch · ", which stays in sight when a list shortens it)."""
    parent = conn.execute("SELECT * FROM sessions WHERE id = ?", (parent_id,)).fetchone()
    if parent is None:
        raise DataError(f"no session with id {parent_id!r}", field="session")
    limit = before_message_id if before_message_id is not None else 1 << 62
    rows = conn.execute(f"SELECT id, {', '.join(MESSAGE_COLUMNS)} FROM messages WHERE session_id = ? AND id < ? "
                        "AND status NOT IN ('in_progress') ORDER BY id", (parent_id, limit)).fetchall()
    turn = sum(1 for r in rows if r["role"] == "user" and r["kind"] == "chat")
    branch_id = uuid.uuid4().hex[:12]
    conn.execute(
        "INSERT INTO sessions(id, title, created_at, updated_at, model, verifier, title_pending, provenance_json, "
        "parent_session_id, parent_message_id, parent_turn, parent_title) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?)",
        (branch_id, title or f"branch · {parent['title']}", stamp, stamp, parent["model"], parent["verifier"],
         parent["provenance_json"], parent_id, rows[-1]["id"] if rows else None, turn, parent["title"]),
    )
    new_ids: dict[int, int] = {}
    placeholders = ", ".join("?" for _ in MESSAGE_COLUMNS)
    for r in rows:
        values = dict(zip(MESSAGE_COLUMNS, (r[c] for c in MESSAGE_COLUMNS)))
        values["metadata_json"] = _remapped(values["metadata_json"], new_ids)
        cur = conn.execute(f"INSERT INTO messages(session_id, {', '.join(MESSAGE_COLUMNS)}) VALUES (?, {placeholders})",
                           (branch_id, *values.values()))
        new_ids[r["id"]] = inserted_id(cur)
        _copy_row(conn, "verdicts", VERDICT_COLUMNS, r["id"], new_ids[r["id"]])
        _copy_row(conn, "monitor_snapshots", MONITOR_COLUMNS, r["id"], new_ids[r["id"]])
    return branch_id


def _copy_row(conn: sqlite3.Connection, table: str, columns: tuple[str, ...], old_id: int, new_id: int) -> None:
    names = ", ".join(columns)
    conn.execute(f"INSERT INTO {table}(message_id, {names}) SELECT ?, {names} FROM {table} WHERE message_id = ?",
                 (new_id, old_id))


def _remapped(metadata_json: str | None, new_ids: dict[int, int]) -> str | None:
    """The metadata with the message ids it names (the paused answer guidance resumes, the answer a
    regenerated one replaces) pointing at the branch's copies."""
    meta = MessageMeta.from_dict(loads_json(metadata_json))
    if meta.resumes is None and meta.replaces is None:
        return metadata_json
    from dataclasses import replace

    meta = replace(meta, resumes=new_ids.get(meta.resumes) if meta.resumes is not None else None,
                   replaces=new_ids.get(meta.replaces) if meta.replaces is not None else None)
    return dumps_json(meta.to_dict() or None)
