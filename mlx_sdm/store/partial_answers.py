"""An answer written while it is generated, a part of :class:`~mlx_sdm.store.chat_store.ChatStore`.

A turn that keeps its answer while it streams (:class:`~mlx_sdm.store.turn_writer.TurnWriter`) commits an
empty answer row with status ``in_progress`` (:func:`insert_in_progress`, with its question);
:meth:`PartialAnswers.update_partial` commits the text so far, at most every ``PARTIAL_WRITE_SECONDS``; the
writer then writes the whole answer with its verdict over that row, in one transaction. A process killed in
between (``kill -9``, a power cut) leaves the row with the text of its last update; the next open of the store
marks such rows ``interrupted`` (when the process that wrote them is gone), so a reopened session shows the
partial answer and that it was cut.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from mlx_sdm.errors import DataError
from mlx_sdm.store.database import Database
from mlx_sdm.store.message_meta import MessageMeta
from mlx_sdm.store.records import dumps_json, inserted_id, loads_json

#: The partial text of an answer being generated is committed at most this often (each is an fsync).
PARTIAL_WRITE_SECONDS = 1.0

IN_PROGRESS = "in_progress"
INTERRUPTED = "interrupted"


def _process_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


class PartialAnswers:
    """Answers being written, in a chat store's database (:class:`~mlx_sdm.store.database.Database`)."""

    def __init__(self, db: Database):
        self.db = db
        self.written: dict[int, float] = {}  # message id -> when its partial text was last committed (monotonic)

    def update_partial(self, message_id: int, text: str, *, force: bool = False) -> bool:
        """Commit the text generated so far, unless the last update of this answer was less than
        ``PARTIAL_WRITE_SECONDS`` ago (``force``: write now). Returns whether it wrote."""
        written = self.written
        now = time.monotonic()
        if not force and now - written.get(message_id, -float("inf")) < PARTIAL_WRITE_SECONDS:
            return False
        with self.db.tx() as conn:
            cur = conn.execute("UPDATE messages SET text = ? WHERE id = ? AND status = ?", (text, message_id, IN_PROGRESS))
            if cur.rowcount == 0:
                raise DataError(f"message {message_id} is not an answer being written", field="message")
        written[message_id] = now
        return True

    def mark_interrupted(self) -> int:
        """Answers left ``in_progress`` by a process that is gone become ``interrupted`` (their partial
        text kept). Runs when the store opens; returns how many it marked."""
        rows = self.db.query("SELECT id, metadata_json FROM messages WHERE status = ?", (IN_PROGRESS,))
        dead = [int(r["id"]) for r in rows if not _process_alive(MessageMeta.from_dict(loads_json(r["metadata_json"])).writer_pid)]
        if not dead:
            return 0
        stamp = self.db.now()
        with self.db.tx() as conn:
            for message_id in dead:
                conn.execute("UPDATE messages SET status = ?, finished_at = ? WHERE id = ? AND status = ?",
                             (INTERRUPTED, stamp, message_id, IN_PROGRESS))
        return len(dead)


def insert_in_progress(conn: sqlite3.Connection, session_id: str, kind: str, stamp: str) -> int:
    """Inside a caller's transaction: an empty answer row, status ``in_progress``, marked with the writing process."""
    cur = conn.execute(
        "INSERT INTO messages(session_id, role, kind, text, status, created_at, metadata_json) "
        "VALUES (?, 'assistant', ?, '', ?, ?, ?)",
        (session_id, kind, IN_PROGRESS, stamp, dumps_json(MessageMeta(writer_pid=os.getpid()).to_dict())),
    )
    conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, session_id))
    return inserted_id(cur)
