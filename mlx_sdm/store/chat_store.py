"""The chat store: sessions, messages, verdicts, monitor snapshots, the review queue and its decisions.

One SQLite file (stdlib ``sqlite3``) in WAL mode with ``synchronous=FULL``: a process killed at any
point loses nothing it had committed, and readers (the UI, another process) never block the writer.
Every public write is exactly one transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``).

The schema is versioned: :data:`MIGRATIONS` is the ordered list of steps; ``schema_migrations``
records which ones a file has, and opening a store applies the missing ones (each in its own
transaction). Never edit a released step: append a new one.

This module imports no MLX: the UI and the tests can open a store without loading a model.
"""


from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from mlx_sdm.errors import ArtifactError, DataError, OutputError
from mlx_sdm.network.verdict import VerdictStatus
from mlx_sdm.store.message_meta import MessageMeta
from mlx_sdm.store.migrations import MIGRATIONS, SCHEMA_VERSION
from mlx_sdm.store.partial_answers import PartialAnswerStore
from mlx_sdm.store.review_queue import ReviewQueueStore
from mlx_sdm.store.schema import (
    AnswerRecord,
    MessageRecord,
    SessionInfo,
    _dumps,
    _features_blob,
    _message,
    _session,
    _split_sql,
    now_iso,
)
from mlx_sdm.store.titles import insert_user_message, placeholder_title, title_from_first_message

#: How long a writer waits for another process's write lock before giving up (milliseconds).
BUSY_TIMEOUT_MS = 10_000


class ChatStore(ReviewQueueStore, PartialAnswerStore):
    """SQLite chat store. Safe to share between threads (one connection behind a lock); several
    processes may open the same file (WAL)."""

    def __init__(self, path: str | os.PathLike, *, target_version: int | None = None):
        self.path = Path(path)
        _check_writable(self.path)
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
            )
            self._conn.row_factory = sqlite3.Row
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise ArtifactError(f"{self.path}: not a usable chat store ({exc}); move it aside to start a new one") from exc
        if str(mode).lower() != "wal":
            raise ArtifactError(f"{self.path}: could not switch the store to WAL mode (got {mode!r})")
        self._conn.execute("PRAGMA synchronous = FULL")
        self._conn.execute("PRAGMA foreign_keys = ON")
        self._migrate(SCHEMA_VERSION if target_version is None else target_version)
        self._partial_written: dict[int, float] = {}
        if self.schema_version == SCHEMA_VERSION:
            self.mark_interrupted()  # answers a killed process was writing

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "ChatStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: everything inside commits together or not at all."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    @property
    def schema_version(self) -> int:
        rows = self._query("SELECT name FROM sqlite_master WHERE type='table' AND name='schema_migrations'")
        if not rows:
            return 0
        return int(self._query("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")[0][0])

    def applied_migrations(self) -> list[tuple[int, str, str]]:
        return [tuple(r) for r in self._query("SELECT version, description, applied_at FROM schema_migrations ORDER BY version")]

    def _migrate(self, target: int) -> None:
        with self._tx() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
        current = self.schema_version
        if current > SCHEMA_VERSION:
            raise ArtifactError(
                f"{self.path}: chat store schema version {current} is newer than this mlx-sdm understands "
                f"({SCHEMA_VERSION}); upgrade mlx-sdm or open another --db"
            )
        for migration in MIGRATIONS:
            if current < migration.version <= target:
                with self._tx() as conn:
                    for statement in _split_sql(migration.sql):
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO schema_migrations(version, description, applied_at) VALUES (?, ?, ?)",
                        (migration.version, migration.description, now_iso()),
                    )

    def integrity_check(self) -> str:
        return str(self._query("PRAGMA integrity_check")[0][0])

    # ------------------------------------------------------------------ sessions

    def create_session(self, title: str | None = None, *, model: str | None = None, verifier: str | None = None) -> SessionInfo:
        session_id = uuid.uuid4().hex[:12]
        stamp = now_iso()
        title = (title or "").strip()
        with self._tx() as conn:  # untitled: a placeholder until the first user message names it
            conn.execute(
                "INSERT INTO sessions(id, title, created_at, updated_at, model, verifier, title_pending) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (session_id, title or placeholder_title(stamp), stamp, stamp, model, verifier, int(not title)),
            )
        return self.get_session(session_id)

    def get_session(self, session_id: str) -> SessionInfo:
        rows = self._query(
            "SELECT s.*, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS message_count "
            "FROM sessions s WHERE s.id = ?",
            (session_id,),
        )
        if not rows:
            raise DataError(f"no session with id {session_id!r}; `mlx-sdm chat --list` shows the ids", path=str(self.path), field="session")
        return _session(rows[0])

    def list_sessions(self) -> list[SessionInfo]:
        rows = self._query(
            "SELECT s.*, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS message_count "
            "FROM sessions s ORDER BY s.updated_at DESC, s.id"
        )
        return [_session(r) for r in rows]

    def rename_session(self, session_id: str, title: str) -> SessionInfo:
        title = title.strip()
        if not title:
            raise DataError("a session title cannot be empty", field="title")
        with self._tx() as conn:
            cur = conn.execute("UPDATE sessions SET title = ?, title_pending = 0, updated_at = ? WHERE id = ?",
                               (title, now_iso(), session_id))
            if cur.rowcount == 0:
                raise DataError(f"no session with id {session_id!r}", path=str(self.path), field="session")
        return self.get_session(session_id)

    def delete_session(self, session_id: str) -> int:
        """Delete a session and everything under it. Returns how many active decisions went with it
        (the engine then rebuilds the verifier's support set without them)."""
        with self._tx() as conn:
            active = conn.execute(
                "SELECT COUNT(*) FROM decisions d JOIN review_queue r ON r.id = d.review_id "
                "WHERE r.session_id = ? AND d.undone_at IS NULL",
                (session_id,),
            ).fetchone()[0]
            cur = conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            if cur.rowcount == 0:
                raise DataError(f"no session with id {session_id!r}", path=str(self.path), field="session")
        return int(active)

    # ------------------------------------------------------------------ messages

    def add_message(
        self,
        session_id: str,
        role: str,
        text: str,
        *,
        kind: str = "chat",
        status: str = "done",
        metadata: MessageMeta = MessageMeta(),
    ) -> int:
        """A message written whole (the user's, a system reflection, guidance, an explanation)."""
        stamp = now_iso()
        with self._tx() as conn:
            cur = conn.execute(
                "INSERT INTO messages(session_id, role, kind, text, status, created_at, finished_at, metadata_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, role, kind, text, status, stamp, stamp, _dumps(metadata.to_dict() or None)),
            )
            conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, session_id))
            if role == "user" and kind == "chat":
                title_from_first_message(conn, session_id, text)
            return int(cur.lastrowid)

    def add_guidance(self, session_id: str, paused_message_id: int, text: str) -> int:
        """The user's guidance for a paused answer: stored as a user message, and the paused answer
        marked "resumed", in one transaction."""
        stamp = now_iso()
        with self._tx() as conn:
            row = conn.execute("SELECT status FROM messages WHERE id = ? AND session_id = ?", (paused_message_id, session_id)).fetchone()
            if row is None or row["status"] != "paused":
                raise DataError(f"message {paused_message_id} of session {session_id!r} is not a paused answer", field="message")
            conn.execute("UPDATE messages SET status = 'resumed' WHERE id = ?", (paused_message_id,))
            cur = conn.execute(
                "INSERT INTO messages(session_id, role, kind, text, status, created_at, finished_at, metadata_json) "
                "VALUES (?, 'user', 'guidance', ?, 'done', ?, ?, ?)",
                (session_id, text, stamp, stamp, _dumps(MessageMeta(resumes=paused_message_id).to_dict())),
            )
            conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, session_id))
            return int(cur.lastrowid)

    def add_answer(self, record: AnswerRecord) -> int:
        """An assistant answer with everything judged about it, in ONE transaction: the message,
        its verdict, its monitor reading and (when not verified or escalated) its review-queue entry."""
        stamp = now_iso()
        with self._tx() as conn:
            return _write_answer(conn, record, stamp)

    def add_turn(self, user_text: str, record: AnswerRecord, *,
                 user_metadata: MessageMeta = MessageMeta()) -> tuple[int, int]:
        """A whole turn, the user's message and the answer to it (as :meth:`add_answer` writes it), in ONE
        transaction: a kill in between leaves neither, never a question without its answer.
        Returns (user message id, answer message id)."""
        stamp = now_iso()
        with self._tx() as conn:
            user_id = insert_user_message(conn, record.session_id, user_text, stamp, user_metadata)
            return user_id, _write_answer(conn, record, stamp)

    def _now(self) -> str:
        """The store's clock (one seam for every row it stamps)."""
        return now_iso()

    def _finish_answer_row(self, conn: sqlite3.Connection, message_id: int, record: AnswerRecord, stamp: str) -> int:
        return _write_answer(conn, record, stamp, message_id)

    def messages(self, session_id: str) -> list[MessageRecord]:
        """All messages of a session in order, answers with their verdicts and monitor snapshots."""
        self.get_session(session_id)
        rows = self._query(
            "SELECT m.*, v.status AS verdict_status, v.verdict_json, v.verifier, v.task AS verdict_task, "
            "v.task_recorded AS verdict_task_recorded, "
            "ms.details_json AS monitor_json, r.id AS review_id "
            "FROM messages m LEFT JOIN verdicts v ON v.message_id = m.id "
            "LEFT JOIN monitor_snapshots ms ON ms.message_id = m.id "
            "LEFT JOIN review_queue r ON r.message_id = m.id "
            "WHERE m.session_id = ? ORDER BY m.id",
            (session_id,),
        )
        return [_message(r) for r in rows]

    def message(self, message_id: int) -> MessageRecord:
        rows = self._query(
            "SELECT m.*, v.status AS verdict_status, v.verdict_json, v.verifier, v.task AS verdict_task, "
            "v.task_recorded AS verdict_task_recorded, "
            "ms.details_json AS monitor_json, r.id AS review_id "
            "FROM messages m LEFT JOIN verdicts v ON v.message_id = m.id "
            "LEFT JOIN monitor_snapshots ms ON ms.message_id = m.id "
            "LEFT JOIN review_queue r ON r.message_id = m.id WHERE m.id = ?",
            (message_id,),
        )
        if not rows:
            raise DataError(f"no message with id {message_id}", path=str(self.path), field="message")
        return _message(rows[0])


def _check_writable(path: Path) -> None:
    """A store is written from the moment it opens (migrations, and the -wal and -shm files SQLite keeps
    beside it): a folder or file that cannot be written is said so, not taken for a broken store."""
    fix = "pick a --db path in a folder you can write to"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{path}: cannot create its folder {path.parent} ({exc.strerror or exc}); {fix}") from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: the folder {path.parent} is not writable, and the chat store writes there (its "
                          f"-wal and -shm files sit beside it); {fix}")
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"{path}: the chat store file is read-only; make it writable, or {fix}")


def _answer_columns(r: AnswerRecord, stamp: str) -> dict[str, Any]:
    """The answer's message-row columns (log-prob summary included), but its session, role and creation time."""
    logprobs = None if r.token_logprobs is None else [float(x) for x in r.token_logprobs]
    finite = [x for x in (logprobs or []) if np.isfinite(x)]
    return {"kind": r.kind, "text": r.text, "status": r.status, "finished_at": stamp,
            "token_count": None if logprobs is None else len(logprobs),
            "logprob_mean": float(np.mean(finite)) if finite else None,
            "logprob_min": float(np.min(finite)) if finite else None, "prompt_json": _dumps(r.prompt),
            "tokens_json": _dumps(r.tokens), "logprobs_json": _dumps(logprobs), "features": _features_blob(r.features),
            "feature_model": r.feature_model, "metadata_json": _dumps(r.metadata.to_dict() or None)}


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


def _write_answer(conn: sqlite3.Connection, record: AnswerRecord, stamp: str, message_id: int | None = None) -> int:
    """Inside a caller's transaction: the answer's message (new, or the begun row ``message_id``), verdict,
    monitor snapshot and review entry."""
    message_id = _insert_answer(conn, record, stamp) if message_id is None else _update_answer(conn, message_id, record, stamp)
    if record.provenance is not None:  # the session keeps the product of its first answer
        conn.execute("UPDATE sessions SET provenance_json = ? WHERE id = ? AND provenance_json IS NULL",
                     (_dumps(record.provenance.to_dict()), record.session_id))
    if record.verdict_status is not None:  # the typed verdict becomes its JSON here, and only here
        verdict = record.verdict.to_dict() if record.verdict is not None else None
        conn.execute(
            "INSERT INTO verdicts(message_id, status, p_lower, reason, verdict_json, verifier, task, task_recorded, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)",
            (message_id, VerdictStatus(record.verdict_status).value, (verdict or {}).get("p_lower"),
             (verdict or {}).get("reason"), _dumps(verdict), record.verifier, record.task.name, stamp),
        )
    if record.monitor is not None:
        monitor = record.monitor.to_dict()
        conn.execute(
            "INSERT INTO monitor_snapshots(message_id, level, action, cumulative_confidence, step_confidence, "
            "tracer_risk, step_risk, details_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (message_id, monitor.get("level"), monitor.get("action"), monitor.get("cumulative_confidence"),
             monitor.get("step_confidence"), monitor.get("tracer_risk"), monitor.get("step_risk"),
             _dumps(monitor), stamp),
        )
    reasons = [r for r in dict.fromkeys(record.review_reasons) if r]
    if reasons:
        conn.execute(
            "INSERT INTO review_queue(message_id, session_id, reason, created_at) VALUES (?, ?, ?, ?)",
            (message_id, record.session_id, ",".join(reasons), stamp),
        )
    conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, record.session_id))
    return message_id
