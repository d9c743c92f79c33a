"""The chat store's schema: :data:`MIGRATIONS`, the ordered steps ``ChatStore`` applies to an older
file (never edit a released step: append one)."""

from __future__ import annotations

from dataclasses import dataclass

from mlx_sdm.store.search_index import migration_sql as search_index_sql


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
    Migration(
        5,
        "the task of a multi-task verifier an answer was judged under, kept with its verdict and review labels",
        """
        ALTER TABLE verdicts ADD COLUMN task TEXT;
        ALTER TABLE verdicts ADD COLUMN task_recorded INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE decisions ADD COLUMN task TEXT;
        ALTER TABLE decisions ADD COLUMN task_recorded INTEGER NOT NULL DEFAULT 0;
        """,
    ),
    Migration(
        6,
        "a session created without a title is titled from its first user message once that exists",
        """
        ALTER TABLE sessions ADD COLUMN title_pending INTEGER NOT NULL DEFAULT 0;
        UPDATE sessions SET title_pending = 1
            WHERE title GLOB 'Chat [0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]'
            AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.id AND m.role = 'user');
        """,
    ),
    Migration(
        7,
        "the product that made a session (model, verifier, head, embedder with checksums), recorded at its first answer",
        """
        ALTER TABLE sessions ADD COLUMN provenance_json TEXT;
        """,
    ),
    Migration(
        8,
        "full-text index of message text for session search (FTS5, kept in step by triggers; where SQLite lacks "
        "FTS5 nothing is created and the first search that can builds it)",
        search_index_sql(),
    ),
    Migration(
        9,
        "a branch remembers where it came from: the session and the message it was continued from, and that "
        "turn's number (no foreign key: the branch outlives a deleted parent)",
        """
        ALTER TABLE sessions ADD COLUMN parent_session_id TEXT;
        ALTER TABLE sessions ADD COLUMN parent_message_id INTEGER;
        ALTER TABLE sessions ADD COLUMN parent_turn INTEGER;
        ALTER TABLE sessions ADD COLUMN parent_title TEXT;
        """,
    ),
    Migration(
        10,
        "a verdict is one stored value: an answer no verifier judged keeps its verdict JSON with why (before: no JSON, "
        "the why in the message's metadata), and no verdict JSON keeps the words a person reads (its badge and "
        "sentence are said from the numbers when shown)",
        """
        UPDATE verdicts SET status = 'no_verifier', reason = 'no_verifier', verdict_json = json_object(
                'status', 'no_verifier', 'verified', json('false'), 'reason', 'no_verifier', 'why',
                (SELECT json_extract(m.metadata_json, '$.verdict_reason') FROM messages m WHERE m.id = verdicts.message_id))
            WHERE status IN ('no_verifier', 'unverifiable', 'none') AND verdict_json IS NULL;
        UPDATE verdicts SET verdict_json = json_remove(verdict_json, '$.badge', '$.explanation')
            WHERE verdict_json IS NOT NULL AND (json_type(verdict_json, '$.badge') IS NOT NULL
                                                OR json_type(verdict_json, '$.explanation') IS NOT NULL);
        """,
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version
