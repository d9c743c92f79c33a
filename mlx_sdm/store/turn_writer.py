"""How a turn is kept, the one way the chat and the server write one: the question the turn answers and its answer
in one transaction (:class:`TurnWriter`). The chat keeps the answer while it streams (``partial``): its question and
an empty answer row are committed together when the turn starts, the text so far as it grows
(:meth:`~mlx_sdm.store.partial_answers.PartialAnswers.update_partial`), and the whole answer with its verdict,
monitor reading and review entry in one transaction at the end; a kill in between leaves the question with its
partial answer, marked interrupted when the store is next opened. The server writes the question and the whole
answer in one transaction at the end, so a kill leaves neither. Either way the store answers with a
:class:`TurnReceipt`: the turn's record and where it is kept."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from mlx_sdm.errors import DataError
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.monitor.session_file.provenance import Provenance
from mlx_sdm.store.answer_rows import write_answer
from mlx_sdm.store.message_meta import MessageMeta
from mlx_sdm.store.partial_answers import IN_PROGRESS, PartialAnswers, insert_in_progress
from mlx_sdm.store.records import dumps_json, inserted_id
from mlx_sdm.store.titles import insert_user_message
from mlx_sdm.turn.answer import GeneratedAnswer
from mlx_sdm.turn.escalation import TurnStatus
from mlx_sdm.turn.values import TurnOutcome


@dataclass(frozen=True)
class Question:
    """The user's message a turn answers, written with its answer: a question, or (``resumes``) the guidance
    for a paused answer, which that answer is marked resumed by. ``source``: who asked (None: the chat)."""

    text: str
    source: str | None = None
    resumes: int | None = None  # guidance: the paused answer's message id


@dataclass(frozen=True)
class TurnReceipt:
    """A kept turn: its record as the pipeline built it and where the store keeps it."""

    outcome: TurnOutcome
    session_id: str
    message_id: int  # the answer's
    review_id: int | None  # its review-queue entry (None: not queued)
    question_id: int | None  # the question written with it (None: an answer given again has none of its own)


class TurnWriter:
    """One turn of session ``session_id`` written to the store (see the module docstring). ``question``: the
    message the turn answers, written with it (None: an answer given again to a question already stored);
    ``partial``: keep the answer while it streams (the chat) rather than whole at the end (the server)."""

    def __init__(self, answers: PartialAnswers, session_id: str, question: Question | None, *, partial: bool):
        self.answers, self.session_id, self.question, self.partial = answers, session_id, question, partial
        self.pieces: list[str] = []
        self.finished = False
        self.question_id: int | None = None
        self.message_id: int | None = None
        if partial:  # the question as it is asked, then the answer as it begins (each row its own time)
            with answers.db.tx() as conn:
                self.question_id = _write_question(conn, session_id, question, answers.db.now())
                self.message_id = insert_in_progress(conn, session_id, "chat", answers.db.now())

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def token(self, piece: TokenPiece) -> None:
        """An answer piece as it streams (kept only when ``partial``)."""
        if self.partial and self.message_id is not None and piece.phase == "answer" and piece.text:
            self.pieces.append(piece.text)
            self.answers.update_partial(self.message_id, self.text)

    def finish(self, outcome: TurnOutcome, *, provenance: Provenance | None = None) -> TurnReceipt:
        """The whole answer with everything judged about it, in one transaction (with its question when it was
        not written at the start); ``provenance``: the product that answered, kept with the session's first answer."""
        with self.answers.db.tx() as conn:
            stamp = self.answers.db.now()
            if self.message_id is None:
                self.question_id = _write_question(conn, self.session_id, self.question, stamp)
            else:
                self._check_in_progress(conn)
            message_id, review_id = write_answer(conn, self.session_id, outcome, stamp, self.message_id, provenance)
        self.answers.written.pop(message_id, None)
        self.message_id, self.finished = message_id, True
        return TurnReceipt(outcome, self.session_id, message_id, review_id, self.question_id)

    def fail(self) -> None:
        """The turn raised: a kept answer keeps what was generated, status "error" (nothing is written when the
        answer was to be written whole). Safe in the turn's error handler: nothing once finished, and a store that
        cannot take the write leaves the row in progress (marked interrupted on the next open) rather than hiding
        the turn's own error."""
        if self.finished or self.message_id is None:
            return
        failed = TurnOutcome(TurnStatus.ERROR, GeneratedAnswer(self.text, finish_reason="error"), messages=[])
        try:
            self.finish(failed)
        except Exception:  # noqa: BLE001  (the turn's error is the one to report)
            return

    def _check_in_progress(self, conn: sqlite3.Connection) -> None:
        row = conn.execute("SELECT status, session_id FROM messages WHERE id = ?", (self.message_id,)).fetchone()
        if row is None or row["status"] != IN_PROGRESS or row["session_id"] != self.session_id:
            raise DataError(f"message {self.message_id} is not an answer being written in session "
                            f"{self.session_id!r}", field="message")


def _write_question(conn: sqlite3.Connection, session_id: str, question: Question | None, stamp: str) -> int | None:
    """Inside a caller's transaction: the question's row (guidance marks the answer it resumes); None for none."""
    if question is None:
        return None
    if question.resumes is None:
        return insert_user_message(conn, session_id, question.text, stamp, MessageMeta(source=question.source))
    paused = question.resumes
    row = conn.execute("SELECT status FROM messages WHERE id = ? AND session_id = ?", (paused, session_id)).fetchone()
    if row is None or row["status"] != TurnStatus.PAUSED.value:
        raise DataError(f"message {paused} of session {session_id!r} is not a paused answer", field="message")
    conn.execute("UPDATE messages SET status = ? WHERE id = ?", (TurnStatus.RESUMED.value, paused))
    cur = conn.execute(
        "INSERT INTO messages(session_id, role, kind, text, status, created_at, finished_at, metadata_json) "
        "VALUES (?, 'user', 'guidance', ?, 'done', ?, ?, ?)",
        (session_id, question.text, stamp, stamp, dumps_json(MessageMeta(source=question.source, resumes=paused).to_dict())),
    )
    return inserted_id(cur)
