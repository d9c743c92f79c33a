"""The full-text index of message text that session search reads (SQLite FTS5), kept in step by triggers.

``messages_fts`` is an *external-content* FTS5 table over ``messages``: it stores only the index, the text
stays in ``messages``. Three triggers keep it in step with every write: an insert indexes the new row, a
delete (a deleted session's messages go by cascade) removes it, and an update of ``text`` (an answer's
partial text committed while it streams, then its final text) replaces it. ``'rebuild'`` indexes the rows
that were there before the index.

FTS5 is a compile-time option of SQLite. Where this Python's ``sqlite3`` lacks it the schema step that
creates the index does nothing (a store must always open), and :func:`require_fts5` says at search time
what is missing and how to get it; the index is built at the first search once FTS5 is there. A store
indexed by a SQLite with FTS5 and opened by one without it would fail every new message in the triggers, so
:func:`unhook_without_fts5` drops them at open (nothing is lost: the text is in ``messages``) and the first
search with FTS5 rebuilds the index.
"""

from __future__ import annotations

import sqlite3
from functools import lru_cache

from mlx_sdm.errors import MissingDependencyError

INDEX_TABLE = "messages_fts"

#: The index and its triggers. ``porter unicode61``: words are split on Unicode letters and digits, case and
#: diacritics folded, then stemmed, so "verify" also finds "verified".
INDEX_SQL = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS {INDEX_TABLE} USING fts5(
    text, content='messages', content_rowid='id', tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS {INDEX_TABLE}_insert AFTER INSERT ON messages BEGIN
    INSERT INTO {INDEX_TABLE}(rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER IF NOT EXISTS {INDEX_TABLE}_delete AFTER DELETE ON messages BEGIN
    INSERT INTO {INDEX_TABLE}({INDEX_TABLE}, rowid, text) VALUES ('delete', old.id, old.text);
END;
CREATE TRIGGER IF NOT EXISTS {INDEX_TABLE}_update AFTER UPDATE OF text ON messages BEGIN
    INSERT INTO {INDEX_TABLE}({INDEX_TABLE}, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO {INDEX_TABLE}(rowid, text) VALUES (new.id, new.text);
END;
INSERT INTO {INDEX_TABLE}({INDEX_TABLE}) VALUES ('rebuild');
"""

CHECK_COMMAND = """python -c "import sqlite3; sqlite3.connect(':memory:').execute('create virtual table t using fts5(x)')\""""


@lru_cache(maxsize=1)
def fts5_available() -> bool:
    """Whether this process's SQLite was built with FTS5 (one in-memory probe, remembered)."""
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE probe USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    return True


TRIGGERS = tuple(f"{INDEX_TABLE}_{event}" for event in ("insert", "delete", "update"))


def unhook_without_fts5(conn: sqlite3.Connection) -> bool:
    """Where this SQLite lacks FTS5, drop the index's triggers (they would make every write of a message
    fail); True when some were dropped. The index is then stale, and :func:`index_is_live` says so."""
    if fts5_available():
        return False
    present = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'") if r[0] in TRIGGERS]
    for name in present:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    return bool(present)


def index_is_live(conn: sqlite3.Connection) -> bool:
    """The index exists and its triggers keep it in step (else it must be (re)built before a search)."""
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name IN (?, ?, ?, ?)",
                                        (INDEX_TABLE, *TRIGGERS))}
    return names == {INDEX_TABLE, *TRIGGERS}


def migration_sql() -> str:
    """The schema step's SQL: the index where FTS5 exists, else nothing (the store still opens)."""
    return INDEX_SQL if fts5_available() else ""


def require_fts5() -> None:
    """One clear error, naming the cause and the fix, where search cannot work."""
    if not fts5_available():
        raise MissingDependencyError(
            f"session search needs SQLite's FTS5 full-text extension, and this Python's sqlite3 (SQLite "
            f"{sqlite3.sqlite_version}) was built without it; run mlx-sdm with a Python whose sqlite3 has FTS5 "
            f"(the python.org, Homebrew, conda and uv builds do; check with: {CHECK_COMMAND})")
