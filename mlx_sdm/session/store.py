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

import json
import os
import sqlite3
import threading
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from mlx_sdm.atomic import atomic_write_text
from mlx_sdm.errors import ArtifactError, DataError

#: How long a writer waits for another process's write lock before giving up (milliseconds).
BUSY_TIMEOUT_MS = 10_000

#: A stored answer's verdict state: the three of ``mlx_sdm.network.verdict.VerdictStatus``, or
#: "unverifiable" when no verifier judged it.
VERDICT_STATES = ("verified", "not_verified", "out_of_scope", "unverifiable")

LABEL_ACCEPTABLE = 1
LABEL_UNACCEPTABLE = 0


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sql: str


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "sessions, messages and verdicts",
        """
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            title TEXT NOT NULL,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            model TEXT,
            verifier TEXT
        );
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            role TEXT NOT NULL,
            text TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'done',
            created_at TEXT NOT NULL,
            finished_at TEXT,
            token_count INTEGER,
            logprob_mean REAL,
            logprob_min REAL
        );
        CREATE INDEX messages_by_session ON messages(session_id, id);
        CREATE TABLE verdicts (
            message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
            status TEXT NOT NULL,
            p_lower REAL,
            reason TEXT,
            verdict_json TEXT,
            verifier TEXT,
            created_at TEXT NOT NULL
        );
        """,
    ),
    Migration(
        2,
        "review queue and decisions",
        """
        CREATE TABLE review_queue (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            message_id INTEGER NOT NULL UNIQUE REFERENCES messages(id) ON DELETE CASCADE,
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            reason TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX review_by_session ON review_queue(session_id, created_at);
        CREATE TABLE decisions (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            review_id INTEGER NOT NULL REFERENCES review_queue(id) ON DELETE CASCADE,
            label INTEGER NOT NULL CHECK (label IN (0, 1)),
            note TEXT,
            completion TEXT,
            created_at TEXT NOT NULL,
            undone_at TEXT
        );
        CREATE INDEX decisions_by_review ON decisions(review_id, id);
        """,
    ),
    Migration(
        3,
        "monitor snapshots; what verification needs to re-derive a label (prompt, tokens, features)",
        """
        CREATE TABLE monitor_snapshots (
            message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
            level TEXT,
            action TEXT,
            cumulative_confidence REAL,
            step_confidence REAL,
            tracer_risk REAL,
            step_risk REAL,
            details_json TEXT,
            created_at TEXT NOT NULL
        );
        ALTER TABLE messages ADD COLUMN kind TEXT NOT NULL DEFAULT 'chat';
        ALTER TABLE messages ADD COLUMN prompt_json TEXT;
        ALTER TABLE messages ADD COLUMN tokens_json TEXT;
        ALTER TABLE messages ADD COLUMN logprobs_json TEXT;
        ALTER TABLE messages ADD COLUMN features BLOB;
        ALTER TABLE messages ADD COLUMN feature_model TEXT;
        ALTER TABLE messages ADD COLUMN metadata_json TEXT;
        ALTER TABLE decisions ADD COLUMN features BLOB;
        ALTER TABLE decisions ADD COLUMN feature_model TEXT;
        """,
    ),
    Migration(
        4,
        "verdict states verified / not_verified / out_of_scope; a review label keeps the verifier it was given under",
        """
        UPDATE verdicts SET status = CASE WHEN reason = 'out_of_distribution' THEN 'out_of_scope' ELSE 'not_verified' END
            WHERE status = 'rejected';
        ALTER TABLE decisions ADD COLUMN verifier TEXT;
        """,
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version


def now_iso() -> str:
    """UTC timestamp with microseconds; ISO strings sort like the times they name."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _iso_bound(value: str | date | datetime | None, *, end: bool) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc)
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, date):
        return value.isoformat() + ("T23:59:59.999999Z" if end else "T00:00:00.000000Z")
    text = str(value)
    if len(text) == 10 and end:  # a bare date: the whole day
        return text + "T23:59:59.999999Z"
    return text


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _features_blob(features: np.ndarray | None) -> bytes | None:
    if features is None:
        return None
    array = np.asarray(features, dtype=np.float32).reshape(-1)
    if not np.all(np.isfinite(array)):
        raise DataError("document features contain NaN or infinity; refusing to store them", field="features")
    return array.tobytes()


def _features_array(blob: bytes | None) -> np.ndarray | None:
    return None if blob is None else np.frombuffer(blob, dtype=np.float32).copy()


@dataclass
class AnswerRecord:
    """An assistant answer to store (:meth:`ChatStore.add_answer`): the text and what the model saw,
    its tokens and features, the verdict and monitor reading (as their ``to_dict()``), the review
    reasons (empty = no review-queue entry)."""

    session_id: str
    text: str
    status: str = "done"
    kind: str = "chat"
    created_at: str | None = None
    prompt: list[dict] | None = None
    tokens: list[str] | None = None
    token_logprobs: Sequence[float] | None = None
    features: np.ndarray | None = None
    feature_model: str | None = None
    verdict_status: str | None = None  # one of VERDICT_STATES
    verdict: dict | None = None
    verifier: str | None = None
    monitor: dict | None = None
    review_reasons: Sequence[str] = ()
    metadata: dict | None = None


@dataclass
class SessionInfo:
    id: str
    title: str
    created_at: str
    updated_at: str
    model: str | None
    verifier: str | None
    message_count: int = 0


@dataclass
class MessageRecord:
    """One message of a session. Assistant answers also carry their verdict and monitor snapshot."""

    id: int
    session_id: str
    role: str  # "user" | "assistant" | "system"
    kind: str  # "chat" | "reflection" | "guidance" | "explanation"
    text: str
    status: str  # "done" | "cancelled" | "paused" | "resumed" | "aborted" | "error"
    created_at: str
    finished_at: str | None
    token_count: int | None = None
    logprob_mean: float | None = None
    logprob_min: float | None = None
    tokens: list[str] | None = None
    token_logprobs: list[float] | None = None
    prompt: list[dict] | None = None  # the chat messages the model saw before this answer
    feature_model: str | None = None
    metadata: dict | None = None
    verdict_status: str | None = None  # one of VERDICT_STATES
    verdict: dict | None = None  # DocumentVerdict.to_dict(): status, reason, explanation, exemplars, ...
    verifier: str | None = None
    monitor: dict | None = None
    review_id: int | None = None
    _features: bytes | None = field(default=None, repr=False)

    @property
    def features(self) -> np.ndarray | None:
        return _features_array(self._features)

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("_features")
        return out


@dataclass
class Decision:
    id: int
    review_id: int
    label: int  # 1 acceptable, 0 unacceptable
    note: str | None
    completion: str | None  # an edited, acceptable completion (label 1), or None
    created_at: str
    undone_at: str | None
    feature_model: str | None = None
    verifier: str | None = None  # the verifier the label was given under (its resolved folder)
    _features: bytes | None = field(default=None, repr=False)

    @property
    def features(self) -> np.ndarray | None:
        return _features_array(self._features)

    @property
    def support_id(self) -> str:
        """The id this decision's point has in the verifier's support set."""
        return f"review-{self.review_id}-decision-{self.id}"


@dataclass
class ReviewItem:
    id: int
    message_id: int
    session_id: str
    session_title: str
    reason: str  # comma-separated when several apply, e.g. "below_threshold,escalated_high"
    created_at: str
    prompt: str  # the user message the answer replied to
    answer: str
    verdict_status: str | None
    verdict: dict | None
    monitor: dict | None
    decision: Decision | None  # the latest decision that is not undone

    @property
    def reasons(self) -> list[str]:
        return [r for r in self.reason.split(",") if r]


@dataclass
class SupportPoint:
    """A decision as the verifier's support set sees it."""

    decision: Decision
    features: np.ndarray
    label: int
    text: str


class ChatStore:
    """SQLite chat store. Safe to share between threads (one connection behind a lock); several
    processes may open the same file (WAL)."""

    def __init__(self, path: str | os.PathLike, *, target_version: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
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
        title = (title or "").strip() or f"Chat {stamp[:16].replace('T', ' ')}"
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO sessions(id, title, created_at, updated_at, model, verifier) VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, title, stamp, stamp, model, verifier),
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
            cur = conn.execute("UPDATE sessions SET title = ?, updated_at = ? WHERE id = ?", (title, now_iso(), session_id))
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
        metadata: dict | None = None,
    ) -> int:
        """A message written whole (the user's, a system reflection, guidance, an explanation)."""
        stamp = now_iso()
        with self._tx() as conn:
            cur = conn.execute(
                "INSERT INTO messages(session_id, role, kind, text, status, created_at, finished_at, metadata_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, role, kind, text, status, stamp, stamp, _dumps(metadata)),
            )
            conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, session_id))
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
                (session_id, text, stamp, stamp, _dumps({"resumes": paused_message_id})),
            )
            conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, session_id))
            return int(cur.lastrowid)

    def add_answer(self, record: "AnswerRecord") -> int:
        """An assistant answer with everything judged about it, in ONE transaction: the message,
        its verdict, its monitor reading and (when not verified or escalated) its review-queue entry."""
        r = record
        session_id, text, status, kind, created_at = r.session_id, r.text, r.status, r.kind, r.created_at
        prompt, tokens, token_logprobs, features, feature_model = r.prompt, r.tokens, r.token_logprobs, r.features, r.feature_model
        verdict_status, verdict, verifier, monitor = r.verdict_status, r.verdict, r.verifier, r.monitor
        review_reasons, metadata = r.review_reasons, r.metadata
        stamp = now_iso()
        logprobs = None if token_logprobs is None else [float(x) for x in token_logprobs]
        finite = [x for x in (logprobs or []) if np.isfinite(x)]
        with self._tx() as conn:
            cur = conn.execute(
                "INSERT INTO messages(session_id, role, kind, text, status, created_at, finished_at, token_count, "
                "logprob_mean, logprob_min, prompt_json, tokens_json, logprobs_json, features, feature_model, metadata_json) "
                "VALUES (?, 'assistant', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    kind,
                    text,
                    status,
                    created_at or stamp,
                    stamp,
                    None if logprobs is None else len(logprobs),
                    float(np.mean(finite)) if finite else None,
                    float(np.min(finite)) if finite else None,
                    _dumps(prompt),
                    _dumps(tokens),
                    _dumps(logprobs),
                    _features_blob(features),
                    feature_model,
                    _dumps(metadata),
                ),
            )
            message_id = int(cur.lastrowid)
            if verdict_status is not None:
                conn.execute(
                    "INSERT INTO verdicts(message_id, status, p_lower, reason, verdict_json, verifier, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        message_id,
                        verdict_status,
                        None if verdict is None else verdict.get("p_lower"),
                        None if verdict is None else verdict.get("reason"),
                        _dumps(verdict),
                        verifier,
                        stamp,
                    ),
                )
            if monitor is not None:
                conn.execute(
                    "INSERT INTO monitor_snapshots(message_id, level, action, cumulative_confidence, step_confidence, "
                    "tracer_risk, step_risk, details_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        message_id,
                        monitor.get("level"),
                        monitor.get("action"),
                        monitor.get("cumulative_confidence"),
                        monitor.get("step_confidence"),
                        monitor.get("tracer_risk"),
                        monitor.get("step_risk"),
                        _dumps(monitor),
                        stamp,
                    ),
                )
            reasons = [r for r in dict.fromkeys(review_reasons) if r]
            if reasons:
                conn.execute(
                    "INSERT INTO review_queue(message_id, session_id, reason, created_at) VALUES (?, ?, ?, ?)",
                    (message_id, session_id, ",".join(reasons), stamp),
                )
            conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, session_id))
        return message_id

    def messages(self, session_id: str) -> list[MessageRecord]:
        """All messages of a session in order, answers with their verdicts and monitor snapshots."""
        self.get_session(session_id)
        rows = self._query(
            "SELECT m.*, v.status AS verdict_status, v.verdict_json, v.verifier, "
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
            "SELECT m.*, v.status AS verdict_status, v.verdict_json, v.verifier, "
            "ms.details_json AS monitor_json, r.id AS review_id "
            "FROM messages m LEFT JOIN verdicts v ON v.message_id = m.id "
            "LEFT JOIN monitor_snapshots ms ON ms.message_id = m.id "
            "LEFT JOIN review_queue r ON r.message_id = m.id WHERE m.id = ?",
            (message_id,),
        )
        if not rows:
            raise DataError(f"no message with id {message_id}", path=str(self.path), field="message")
        return _message(rows[0])

    # ------------------------------------------------------------------ review queue

    def review_items(
        self,
        *,
        session_id: str | None = None,
        reason: str | None = None,
        since: str | date | datetime | None = None,
        until: str | date | datetime | None = None,
        status: str = "all",
        review_id: int | None = None,
    ) -> list[ReviewItem]:
        """Review-queue entries, newest first. ``status``: "pending" (no active decision), "decided" or "all";
        ``since``/``until``: ISO timestamps or dates (a bare date covers its whole day)."""
        if status not in {"pending", "decided", "all"}:
            raise DataError(f"unknown review status {status!r}; use pending, decided or all", field="status")
        where, params = [], []
        if review_id is not None:
            where.append("r.id = ?")
            params.append(int(review_id))
        if session_id is not None:
            where.append("r.session_id = ?")
            params.append(session_id)
        if reason:
            where.append("(',' || r.reason || ',') LIKE ?")
            params.append(f"%,{reason},%")
        lo, hi = _iso_bound(since, end=False), _iso_bound(until, end=True)
        if lo is not None:
            where.append("r.created_at >= ?")
            params.append(lo)
        if hi is not None:
            where.append("r.created_at <= ?")
            params.append(hi)
        rows = self._query(
            "SELECT r.*, s.title AS session_title, m.text AS answer, m.prompt_json, "
            "v.status AS verdict_status, v.verdict_json, ms.details_json AS monitor_json, "
            "(SELECT u.text FROM messages u WHERE u.session_id = m.session_id AND u.role = 'user' AND u.id < m.id "
            " ORDER BY u.id DESC LIMIT 1) AS user_text "
            "FROM review_queue r JOIN messages m ON m.id = r.message_id JOIN sessions s ON s.id = r.session_id "
            "LEFT JOIN verdicts v ON v.message_id = m.id LEFT JOIN monitor_snapshots ms ON ms.message_id = m.id "
            + ("WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY r.created_at DESC, r.id DESC",
            params,
        )
        decisions = self._active_decisions_by_review()
        items = []
        for r in rows:
            decision = decisions.get(int(r["id"]))
            if status == "pending" and decision is not None or status == "decided" and decision is None:
                continue
            items.append(
                ReviewItem(
                    id=int(r["id"]),
                    message_id=int(r["message_id"]),
                    session_id=r["session_id"],
                    session_title=r["session_title"],
                    reason=r["reason"],
                    created_at=r["created_at"],
                    prompt=r["user_text"] or "",
                    answer=r["answer"],
                    verdict_status=r["verdict_status"],
                    verdict=_loads(r["verdict_json"]),
                    monitor=_loads(r["monitor_json"]),
                    decision=decision,
                )
            )
        return items

    def review_item(self, review_id: int) -> ReviewItem:
        for item in self.review_items(review_id=review_id):
            return item
        raise DataError(f"no review-queue entry with id {review_id}", path=str(self.path), field="review")

    def review_reasons(self) -> list[str]:
        """Every reason present in the queue (for the filter list)."""
        found: set[str] = set()
        for (reason,) in self._query("SELECT DISTINCT reason FROM review_queue"):
            found.update(r for r in reason.split(",") if r)
        return sorted(found)

    def _active_decisions_by_review(self) -> dict[int, Decision]:
        rows = self._query("SELECT * FROM decisions WHERE undone_at IS NULL ORDER BY id")
        return {int(r["review_id"]): _decision(r) for r in rows}  # the latest wins

    def record_decision(
        self,
        review_id: int,
        label: int,
        *,
        note: str | None = None,
        completion: str | None = None,
        features: np.ndarray | None = None,
        feature_model: str | None = None,
        verifier: str | None = None,
    ) -> Decision:
        """Label a queued answer. A new decision on an already decided entry supersedes the old one
        (the old one is marked undone in the same transaction)."""
        if label not in (LABEL_ACCEPTABLE, LABEL_UNACCEPTABLE):
            raise DataError(f"label must be 1 (acceptable) or 0 (unacceptable), got {label!r}", field="label")
        if completion is not None and not completion.strip():
            raise DataError("an edited completion cannot be empty", field="completion")
        if completion is not None and label != LABEL_ACCEPTABLE:
            raise DataError("an edited completion is the acceptable version of the answer: use label 1", field="completion")
        stamp = now_iso()
        with self._tx() as conn:
            if conn.execute("SELECT 1 FROM review_queue WHERE id = ?", (review_id,)).fetchone() is None:
                raise DataError(f"no review-queue entry with id {review_id}", path=str(self.path), field="review")
            conn.execute("UPDATE decisions SET undone_at = ? WHERE review_id = ? AND undone_at IS NULL", (stamp, review_id))
            cur = conn.execute(
                "INSERT INTO decisions(review_id, label, note, completion, created_at, features, feature_model, verifier) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (review_id, int(label), note, completion, stamp, _features_blob(features), feature_model, verifier),
            )
            decision_id = int(cur.lastrowid)
        return self.decision(decision_id)

    def decisions_by_message(self, session_id: str) -> dict[int, Decision]:
        """The active decision on each reviewed answer of a session, keyed by message id."""
        rows = self._query(
            "SELECT d.*, r.message_id AS reviewed_message FROM decisions d JOIN review_queue r ON r.id = d.review_id "
            "WHERE r.session_id = ? AND d.undone_at IS NULL ORDER BY d.id",
            (session_id,),
        )
        return {int(r["reviewed_message"]): _decision(r) for r in rows}

    def decision(self, decision_id: int) -> Decision:
        rows = self._query("SELECT * FROM decisions WHERE id = ?", (decision_id,))
        if not rows:
            raise DataError(f"no decision with id {decision_id}", path=str(self.path), field="decision")
        return _decision(rows[0])

    def last_decision(self) -> Decision | None:
        rows = self._query("SELECT * FROM decisions WHERE undone_at IS NULL ORDER BY id DESC LIMIT 1")
        return _decision(rows[0]) if rows else None

    def undo_last_decision(self) -> Decision | None:
        """Undo the most recent active decision (its entry goes back to pending). Returns it, or None."""
        with self._tx() as conn:
            row = conn.execute("SELECT * FROM decisions WHERE undone_at IS NULL ORDER BY id DESC LIMIT 1").fetchone()
            if row is None:
                return None
            conn.execute("UPDATE decisions SET undone_at = ? WHERE id = ?", (now_iso(), row["id"]))
        return self.decision(int(row["id"]))

    def support_points(self, feature_model: str | None = None, verifier: str | None = None) -> list[SupportPoint]:
        """Active decisions as labelled support points, oldest first. ``feature_model`` keeps only those
        whose features were computed by that model (features of another model mean nothing to its
        verifier); ``verifier`` (a resolved verifier folder) only labels given under that verifier
        (older decisions without one: the verifier that judged the answer)."""
        rows = self._query(
            "SELECT d.*, m.features AS message_features, m.feature_model AS message_model, m.text AS answer, "
            "v.verifier AS judged_by "
            "FROM decisions d JOIN review_queue r ON r.id = d.review_id JOIN messages m ON m.id = r.message_id "
            "LEFT JOIN verdicts v ON v.message_id = m.id WHERE d.undone_at IS NULL ORDER BY d.id"
        )
        points = []
        for r in rows:
            decision = _decision(r)
            blob, model = (r["features"], r["feature_model"]) if r["features"] is not None else (r["message_features"], r["message_model"])
            if blob is None or (feature_model is not None and model != feature_model):
                continue
            given_under = decision.verifier or (str(Path(r["judged_by"]).resolve()) if r["judged_by"] else None)
            if verifier is not None and given_under != verifier:
                continue
            points.append(
                SupportPoint(decision=decision, features=_features_array(blob), label=decision.label, text=decision.completion or r["answer"])
            )
        return points

    def training_rows(self) -> list[dict]:
        """Active decisions as training rows ``{"prompt", "completion", "label"}`` for `mlx-sdm train`/`finetune`.
        An edited completion gives label 1 for the edit; the original answer keeps the decision's label
        only when it was not edited (an edit says the original was not acceptable as written: label 0)."""
        rows = self._query(
            "SELECT d.*, m.text AS answer, "
            "(SELECT u.text FROM messages u WHERE u.session_id = m.session_id AND u.role = 'user' AND u.id < m.id "
            " ORDER BY u.id DESC LIMIT 1) AS user_text "
            "FROM decisions d JOIN review_queue r ON r.id = d.review_id JOIN messages m ON m.id = r.message_id "
            "WHERE d.undone_at IS NULL ORDER BY d.id"
        )
        out = []
        for r in rows:
            prompt = r["user_text"] or ""
            if r["completion"] is not None:
                out.append({"prompt": prompt, "completion": r["completion"], "label": LABEL_ACCEPTABLE})
                out.append({"prompt": prompt, "completion": r["answer"], "label": LABEL_UNACCEPTABLE})
            else:
                out.append({"prompt": prompt, "completion": r["answer"], "label": int(r["label"])})
        return out

    def export_training_rows(self, path: str | os.PathLike) -> int:
        """Write :meth:`training_rows` as JSONL (atomically). Returns the number of rows."""
        rows = self.training_rows()
        atomic_write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        return len(rows)


def _split_sql(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def _session(r: sqlite3.Row) -> SessionInfo:
    return SessionInfo(
        id=r["id"],
        title=r["title"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        model=r["model"],
        verifier=r["verifier"],
        message_count=int(r["message_count"]),
    )


def _message(r: sqlite3.Row) -> MessageRecord:
    return MessageRecord(
        id=int(r["id"]),
        session_id=r["session_id"],
        role=r["role"],
        kind=r["kind"],
        text=r["text"],
        status=r["status"],
        created_at=r["created_at"],
        finished_at=r["finished_at"],
        token_count=r["token_count"],
        logprob_mean=r["logprob_mean"],
        logprob_min=r["logprob_min"],
        tokens=_loads(r["tokens_json"]),
        token_logprobs=_loads(r["logprobs_json"]),
        prompt=_loads(r["prompt_json"]),
        feature_model=r["feature_model"],
        metadata=_loads(r["metadata_json"]),
        verdict_status=r["verdict_status"],
        verdict=_loads(r["verdict_json"]),
        verifier=r["verifier"],
        monitor=_loads(r["monitor_json"]),
        review_id=r["review_id"],
        _features=r["features"],
    )


def _decision(r: sqlite3.Row) -> Decision:
    return Decision(
        id=int(r["id"]),
        review_id=int(r["review_id"]),
        label=int(r["label"]),
        note=r["note"],
        completion=r["completion"],
        created_at=r["created_at"],
        undone_at=r["undone_at"],
        feature_model=r["feature_model"],
        verifier=r["verifier"] if "verifier" in r.keys() else None,
        _features=r["features"],
    )
