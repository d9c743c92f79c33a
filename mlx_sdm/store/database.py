"""The one SQLite connection of a chat store: opened in WAL mode with ``synchronous=FULL`` (a process
killed at any point loses nothing it had committed; readers never block the writer), migrated to the
schema this mlx-sdm knows, and shared by the store's parts (:class:`~mlx_sdm.store.chat_store.ChatStore`,
:class:`~mlx_sdm.store.review_queue.ReviewQueue`, :class:`~mlx_sdm.store.partial_answers.PartialAnswers`)
through :meth:`Database.tx` (one write transaction) and :meth:`Database.query`.

The schema is versioned: :data:`~mlx_sdm.store.migrations.MIGRATIONS` is the ordered list of steps;
``schema_migrations`` records which ones a file has, and opening a store applies the missing ones (each
in its own transaction). Never edit a released step: append a new one.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from mlx_sdm.errors import ArtifactError, OutputError
from mlx_sdm.store.migrations import MIGRATIONS, SCHEMA_VERSION
from mlx_sdm.store import search_index
from mlx_sdm.store.records import now_iso, split_sql

#: How long a writer waits for another process's write lock before giving up (milliseconds).
BUSY_TIMEOUT_MS = 10_000


class Database:
    """One connection behind a lock: safe to share between threads; several processes may open the
    same file (WAL)."""

    def __init__(self, path: str | os.PathLike, *, target_version: int | None = None,
                 clock: Callable[[], str] = now_iso):
        self.path = Path(path)
        self.clock = clock
        check_writable(self.path)
        self.lock = threading.RLock()
        try:
            self.conn = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
            )
            self.conn.row_factory = sqlite3.Row
            self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise ArtifactError(f"{self.path}: not a usable chat store ({exc}); move it aside to start a new one") from exc
        if str(mode).lower() != "wal":
            raise ArtifactError(f"{self.path}: could not switch the store to WAL mode (got {mode!r})")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute("PRAGMA foreign_keys = ON")
        self.migrate(SCHEMA_VERSION if target_version is None else target_version)
        if not search_index.fts5_available():  # a store indexed elsewhere must still take new messages here
            with self.tx() as conn:
                search_index.unhook_without_fts5(conn)

    def close(self) -> None:
        with self.lock:
            self.conn.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``): everything inside commits together or not at all."""
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self.lock:
            return self.conn.execute(sql, params).fetchall()

    def now(self) -> str:
        """The store's clock (one seam for every row it stamps)."""
        return self.clock()

    @property
    def schema_version(self) -> int:
        rows = self.query("SELECT name FROM sqlite_master WHERE type='table' AND name='schema_migrations'")
        if not rows:
            return 0
        return int(self.query("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")[0][0])

    def applied_migrations(self) -> list[tuple[int, str, str]]:
        return [tuple(r) for r in self.query("SELECT version, description, applied_at FROM schema_migrations ORDER BY version")]

    def migrate(self, target: int) -> None:
        with self.tx() as conn:
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
                with self.tx() as conn:
                    for statement in split_sql(migration.sql):
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO schema_migrations(version, description, applied_at) VALUES (?, ?, ?)",
                        (migration.version, migration.description, self.now()),
                    )

    def integrity_check(self) -> str:
        return str(self.query("PRAGMA integrity_check")[0][0])


def check_writable(path: Path) -> None:
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
