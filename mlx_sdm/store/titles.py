"""Session titles: a session created without one shows a placeholder until its first user message
exists, then is named after that message's first words (in the store, so the engine and the server
alike get it through ``add_message`` / ``add_turn``). A task question is named after its task and the
first words of its document, not the instruction every question of that task starts with."""

from __future__ import annotations

import sqlite3

from mlx_sdm.network.encoding import (
    FACTCHECK,
    MULTIPLE_CHOICE,
    PLAUSIBILITY,
    SENTIMENT,
    SPAM,
    TOPIC,
    YES_NO,
)
from mlx_sdm.store.message_meta import MessageMeta
from mlx_sdm.store.records import dumps_json, inserted_id

#: The shipped task formats whose instruction a task question starts with.
TASK_FORMATS = (FACTCHECK, PLAUSIBILITY, TOPIC, YES_NO, MULTIPLE_CHOICE, SPAM, SENTIMENT)


#: A session titled from its first message gets at most this many of its words (and characters).
TITLE_WORDS = 6
TITLE_CHARS = 48


def placeholder_title(stamp: str) -> str:
    """The title of a session created without one, until its first user message exists."""
    return f"Chat {stamp[:16].replace('T', ' ')}"


def title_from_message(text: str) -> str | None:
    """A short one-line title from a user message: the first words of its first non-empty line
    ("…" where cut), after "TASK: " for a task question; None for a message with no words."""
    for fmt in TASK_FORMATS:
        if text.lstrip().startswith(fmt.instruction):
            document = text.lstrip()[len(fmt.instruction):].strip()
            label = f"{fmt.document_label}:"
            document = document[len(label):] if document.startswith(label) else document
            words = _first_words(document)
            return f"{fmt.name}: {words}" if words else fmt.name
    return _first_words(text)


def _first_words(text: str) -> str | None:
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    words = line.split()
    if not words:
        return None
    title = " ".join(words[:TITLE_WORDS])
    cut = len(words) > TITLE_WORDS or len(text.strip()) > len(line.strip())
    if len(title) > TITLE_CHARS:
        title, cut = title[: TITLE_CHARS - 1].rstrip(), True
    return title + "…" if cut else title


def title_from_first_message(conn: sqlite3.Connection, session_id: str, text: str) -> None:
    """Inside a caller's transaction: a session still on its placeholder title is named after this message."""
    title = title_from_message(text)
    if title is not None:
        conn.execute("UPDATE sessions SET title = ?, title_pending = 0 WHERE id = ? AND title_pending = 1",
                     (title, session_id))


def insert_user_message(conn: sqlite3.Connection, session_id: str, text: str, stamp: str,
                        metadata: MessageMeta = MessageMeta()) -> int:
    """A user's message (a session still without a title is named after its first one); returns its id."""
    cur = conn.execute(
        "INSERT INTO messages(session_id, role, kind, text, status, created_at, finished_at, metadata_json) "
        "VALUES (?, 'user', 'chat', ?, 'done', ?, ?, ?)",
        (session_id, text, stamp, stamp, dumps_json(metadata.to_dict() or None)),
    )
    title_from_first_message(conn, session_id, text)
    return inserted_id(cur)
