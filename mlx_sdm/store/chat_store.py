"""The chat store: sessions, messages, verdicts, monitor snapshots, the review queue and its decisions.

One SQLite file (:class:`~mlx_sdm.store.database.Database`: WAL, ``synchronous=FULL``, versioned
schema). Every public write is exactly one transaction. :class:`ChatStore` holds sessions and messages
itself; its parts are reached as attributes, not through it: ``store.review_queue`` (the review queue and
its decisions, :class:`~mlx_sdm.store.review_queue.ReviewQueue`), ``store.answers`` (the answer written
while it streams, :class:`~mlx_sdm.store.partial_answers.PartialAnswers`) and ``store.db`` (migrations,
integrity), which share the one database, each through its public ``tx`` and ``query``.

This module imports no MLX: the UI and the tests can open a store without loading a model.
"""


from __future__ import annotations

import os
import uuid
from pathlib import Path


from mlx_sdm.errors import DataError
from mlx_sdm.monitor.session_file.provenance import Provenance
from mlx_sdm.store.answer_rows import outcome_from_row
from mlx_sdm.store.branches import branch_session
from mlx_sdm.store.database import Database
from mlx_sdm.store.message_meta import MessageMeta
from mlx_sdm.store.migrations import SCHEMA_VERSION
from mlx_sdm.store.partial_answers import PartialAnswers
from mlx_sdm.store.review_queue import ReviewQueue
from mlx_sdm.store.records import (
    MESSAGE_ROWS,
    MessageRecord,
    SessionInfo,
    dumps_json,
    inserted_id,
    message_from_row,
    now_iso,
    session_from_row,
)
from mlx_sdm.store.turn_writer import Question, TurnReceipt, TurnWriter
from mlx_sdm.turn.values import TurnOutcome
from mlx_sdm.store.titles import placeholder_title, title_from_first_message


class ChatStore:
    """SQLite chat store. Safe to share between threads (one connection behind a lock); several
    processes may open the same file (WAL)."""

    def __init__(self, path: str | os.PathLike, *, target_version: int | None = None):
        self.db = Database(path, target_version=target_version, clock=lambda: now_iso())  # looked up at each stamp
        self.path: Path = self.db.path
        self.review_queue = ReviewQueue(self.db)
        self.answers = PartialAnswers(self.db)
        if self.schema_version == SCHEMA_VERSION:
            self.answers.mark_interrupted()  # answers a killed process was writing

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "ChatStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return self.db.schema_version

    # ------------------------------------------------------------------ sessions

    def create_session(self, title: str | None = None, *, model: str | None = None, verifier: str | None = None) -> SessionInfo:
        session_id = uuid.uuid4().hex[:12]
        stamp = now_iso()
        title = (title or "").strip()
        with self.db.tx() as conn:  # untitled: a placeholder until the first user message names it
            conn.execute(
                "INSERT INTO sessions(id, title, created_at, updated_at, model, verifier, title_pending) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (session_id, title or placeholder_title(stamp), stamp, stamp, model, verifier, int(not title)),
            )
        return self.get_session(session_id)

    def get_session(self, session_id: str) -> SessionInfo:
        rows = self.db.query(
            "SELECT s.*, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS message_count "
            "FROM sessions s WHERE s.id = ?",
            (session_id,),
        )
        if not rows:
            raise DataError(f"no session with id {session_id!r}; `mlx-sdm chat --list` shows the ids", path=str(self.path), field="session")
        return session_from_row(rows[0])

    def list_sessions(self) -> list[SessionInfo]:
        rows = self.db.query(
            "SELECT s.*, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS message_count "
            "FROM sessions s ORDER BY s.updated_at DESC, s.id"
        )
        return [session_from_row(r) for r in rows]

    def branch_session(self, session_id: str, *, before_message_id: int | None = None,
                       title: str | None = None) -> SessionInfo:
        """A new session that continues ``session_id`` from an earlier point: a copy of its messages with ids
        below ``before_message_id`` (None: all), remembering the parent, the last message copied and that
        turn's number (:class:`~mlx_sdm.store.records.BranchOrigin`). The parent is unchanged. One transaction."""
        with self.db.tx() as conn:
            branch_id = branch_session(conn, session_id, before_message_id, now_iso(), title)
        return self.get_session(branch_id)

    def rename_session(self, session_id: str, title: str) -> SessionInfo:
        title = title.strip()
        if not title:
            raise DataError("a session title cannot be empty", field="title")
        with self.db.tx() as conn:
            cur = conn.execute("UPDATE sessions SET title = ?, title_pending = 0, updated_at = ? WHERE id = ?",
                               (title, now_iso(), session_id))
            if cur.rowcount == 0:
                raise DataError(f"no session with id {session_id!r}", path=str(self.path), field="session")
        return self.get_session(session_id)

    def delete_session(self, session_id: str) -> int:
        """Delete a session and everything under it. Returns how many active decisions went with it
        (the engine then rebuilds the verifier's support set without them)."""
        with self.db.tx() as conn:
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
        with self.db.tx() as conn:
            cur = conn.execute(
                "INSERT INTO messages(session_id, role, kind, text, status, created_at, finished_at, metadata_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, role, kind, text, status, stamp, stamp, dumps_json(metadata.to_dict() or None)),
            )
            conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, session_id))
            if role == "user" and kind == "chat":
                title_from_first_message(conn, session_id, text)
            return inserted_id(cur)

    def add_turn(self, session_id: str, question: Question | None, outcome: TurnOutcome, *,
                 provenance: Provenance | None = None) -> TurnReceipt:
        """A whole turn, the question and the answer to it with everything judged about it, in one transaction, as
        the server keeps a turn (:class:`~mlx_sdm.store.turn_writer.TurnWriter`): a kill in between leaves neither,
        never a question without its answer (``question`` None: an answer given again to a stored question)."""
        return TurnWriter(self.answers, session_id, question, partial=False).finish(outcome, provenance=provenance)

    def messages(self, session_id: str) -> list[MessageRecord]:
        """All messages of a session in order, answers with their verdicts and monitor snapshots."""
        self.get_session(session_id)
        return [message_from_row(r) for r in self.db.query(MESSAGE_ROWS + "WHERE m.session_id = ? ORDER BY m.id", (session_id,))]

    def answer(self, message_id: int) -> TurnOutcome:
        """A stored answer read back as the turn's one record, the type the pipeline yielded and the turn
        service stored (:func:`~mlx_sdm.store.answer_rows.outcome_from_row`)."""
        rows = self.db.query(MESSAGE_ROWS + "WHERE m.id = ? AND m.role = 'assistant'", (message_id,))
        if not rows:
            raise DataError(f"no answer with id {message_id}", path=str(self.path), field="message")
        return outcome_from_row(rows[0])

    def answers_of(self, session_id: str) -> dict[int, TurnOutcome]:
        """Every answer of a session (message id -> its record), read back as :meth:`answer` reads one."""
        self.get_session(session_id)
        rows = self.db.query(MESSAGE_ROWS + "WHERE m.session_id = ? AND m.role = 'assistant' AND m.kind = 'chat' "
                             "ORDER BY m.id", (session_id,))
        return {int(r["id"]): outcome_from_row(r) for r in rows}

    def message(self, message_id: int) -> MessageRecord:
        rows = self.db.query(MESSAGE_ROWS + "WHERE m.id = ?", (message_id,))
        if not rows:
            raise DataError(f"no message with id {message_id}", path=str(self.path), field="message")
        return message_from_row(rows[0])
