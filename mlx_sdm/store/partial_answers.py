"""An answer written while it is generated, a part of :class:`~mlx_sdm.store.chat_store.ChatStore`.

:meth:`begin_answer` (or :meth:`begin_turn`, the question with it) commits an empty answer row with
status ``in_progress``; :meth:`update_partial` commits the text so far, at most every
``PARTIAL_WRITE_SECONDS``; :meth:`finish_answer` writes the whole answer with its verdict over that
row, in one transaction. A process killed in between (``kill -9``, a power cut) leaves the row with
the text of its last update; the next open of the store marks such rows ``interrupted`` (when the
process that wrote them is gone), so a reopened session shows the partial answer and that it was cut.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from mlx_sdm.errors import DataError
from mlx_sdm.monitor.session_file.provenance import Provenance
from mlx_sdm.store.answer_rows import write_answer
from mlx_sdm.store.database import Database
from mlx_sdm.store.message_meta import MessageMeta
from mlx_sdm.store.schema import dumps_json, loads_json
from mlx_sdm.store.titles import insert_user_message
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.turn.answer import GeneratedAnswer
from mlx_sdm.turn.escalation import TurnStatus
from mlx_sdm.turn.values import TurnOutcome

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

    def begin_answer(self, session_id: str, *, kind: str = "chat", created_at: str | None = None) -> int:
        """An empty answer row, status ``in_progress`` (committed); returns its message id."""
        stamp = created_at or self.db.now()
        with self.db.tx() as conn:
            return _insert_in_progress(conn, session_id, kind, stamp)

    def begin_turn(self, session_id: str, user_text: str, *,
                   user_metadata: MessageMeta = MessageMeta()) -> tuple[int, int]:
        """The user's message and an empty ``in_progress`` answer to it, in one transaction.
        Returns (user message id, answer message id)."""
        stamp = self.db.now()
        with self.db.tx() as conn:
            user_id = insert_user_message(conn, session_id, user_text, stamp, user_metadata)
            return user_id, _insert_in_progress(conn, session_id, "chat", stamp)

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

    def finish_answer(self, message_id: int, outcome: TurnOutcome, *, provenance: Provenance | None = None) -> int:
        """The whole answer (the turn's record, as :meth:`add_answer` writes it) over its ``in_progress``
        row, with its verdict, monitor reading and review entry, in one transaction."""
        stamp = self.db.now()
        with self.db.tx() as conn:
            row = conn.execute("SELECT status, session_id FROM messages WHERE id = ?", (message_id,)).fetchone()
            if row is None or row["status"] != IN_PROGRESS or row["session_id"] != outcome.session_id:
                raise DataError(f"message {message_id} is not an answer being written in session "
                                f"{outcome.session_id!r}", field="message")
            self.written.pop(message_id, None)
            return write_answer(conn, outcome, stamp, message_id, provenance=provenance)

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


class StreamingAnswer:
    """One answer kept in the store while it streams, for a chat turn: begun on creation, fed the turn's
    tokens (:meth:`token`: a ``TokenPiece``; answer tokens only), then finished with the turn's record,
    or with what was generated marked "error" when the turn fails (:meth:`fail`)."""

    def __init__(self, answers: PartialAnswers, session_id: str, *, created_at: str | None = None):
        self.answers, self.session_id = answers, session_id
        self.message_id = answers.begin_answer(session_id, created_at=created_at)
        self.pieces: list[str] = []
        self.finished = False

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def token(self, piece: TokenPiece) -> None:
        if piece.phase == "answer" and piece.text:
            self.pieces.append(piece.text)
            self.answers.update_partial(self.message_id, self.text)

    def finish(self, outcome: TurnOutcome, *, provenance: Provenance | None = None) -> int:
        message_id = self.answers.finish_answer(self.message_id, outcome, provenance=provenance)
        self.finished = True
        return message_id

    def fail(self) -> None:
        """The turn raised: the row keeps what was generated, status "error". Safe to call from the turn's
        error handler: nothing once finished, and a store that cannot take the write leaves the row in
        progress (marked interrupted on the next open) rather than hiding the turn's own error."""
        if self.finished:
            return
        failed = TurnOutcome(TurnStatus.ERROR, GeneratedAnswer(self.text, finish_reason="error"), messages=[],
                             session_id=self.session_id)
        try:
            self.answers.finish_answer(self.message_id, failed)
        except Exception:  # noqa: BLE001  (the turn's error is the one to report)
            return
        self.finished = True


def _insert_in_progress(conn: sqlite3.Connection, session_id: str, kind: str, stamp: str) -> int:
    cur = conn.execute(
        "INSERT INTO messages(session_id, role, kind, text, status, created_at, metadata_json) "
        "VALUES (?, 'assistant', ?, '', ?, ?, ?)",
        (session_id, kind, IN_PROGRESS, stamp, dumps_json(MessageMeta(writer_pid=os.getpid()).to_dict())),
    )
    conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, session_id))
    return int(cur.lastrowid)
