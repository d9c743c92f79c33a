"""Search across every stored session: the words of a query in user and assistant messages, filtered by
the verdict of the answer (verified, not verified, ...), its verifier's task and the date.

    hits = search_sessions(store, SearchQuery("capital france", statuses=frozenset({VerdictStatus.NOT_VERIFIED})))

The text is read as words, all of which must occur ("quoted phrases" keep their words together and in
order); every word is quoted before it reaches FTS5, so no text a user types is an FTS5 syntax error.
Hits come best match first (FTS5's bm25 rank), then newest first. A user message is filtered by, and
shows, the verdict of the answer that follows it in its session. Dates are the stored UTC days.

:meth:`SearchQuery.parse` reads the same query typed on one line, filters as ``status:``, ``task:``,
``since:`` and ``until:`` words (what the chat UI's search screen takes). No MLX.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any, Iterable

from mlx_sdm.errors import DataError
from mlx_sdm.network.verdict import LEGACY_NO_VERIFIER, VerdictStatus
from mlx_sdm.store.records import split_sql
from mlx_sdm.store.search_index import INDEX_SQL, INDEX_TABLE, index_is_live, require_fts5

if TYPE_CHECKING:
    from mlx_sdm.store.chat_store import ChatStore

DEFAULT_LIMIT = 50
#: Words of context around the matches in a hit's snippet (FTS5 allows at most 64).
SNIPPET_WORDS = 16
#: What FTS5 puts around each match in a snippet: control characters no chat text holds, turned into
#: :attr:`SearchHit.marks` (spans) before anything shows them.
_OPEN, _CLOSE = "\x02", "\x03"
#: A quoted phrase, or a run of anything but white space.
_TERM = re.compile(r'"([^"]*)"|(\S+)')
#: The words a filter is typed with on one line (``status:not_verified``), each at the start of a word.
FILTER_WORDS = ("status", "task", "since", "until")
_FILTER = re.compile(rf'(?<!\S)({"|".join(FILTER_WORDS)}):("[^"]*"|\S+)', re.IGNORECASE)
STATUS_CHOICES = tuple(s.value for s in VerdictStatus)
SEARCHED_ROLES = ("user", "assistant")


def parse_status(word: str, name: str = "status") -> VerdictStatus:
    """A verdict state as a user types it: ``not_verified``, ``not verified``, ``Not-Verified``; the older
    stored word ``unverifiable`` is ``no_verifier``."""
    spelled = "_".join(re.split(r"[\s_-]+", word.strip().lower()))
    status = VerdictStatus.read(spelled)
    if status is None:
        raise DataError(f"unknown verdict status {word!r}; use one of {', '.join(STATUS_CHOICES)} "
                        "(or the same in plain words, 'not verified')", field=name)
    return status


def parse_day(text: str, name: str) -> date:
    """A YYYY-MM-DD date, or a clear error naming the filter."""
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise DataError(f"{text!r} is not a date; write it as YYYY-MM-DD, e.g. 2026-03-31", field=name) from None


def match_expression(text: str, *, prefix: bool = False) -> str | None:
    """The FTS5 MATCH expression for ``text``: every word and "quoted phrase" as one quoted FTS5 string
    (quotes inside doubled, NULs dropped), AND-ed; with ``prefix`` a last bare word also matches the words it
    begins (a query being typed: "capi" finds "capital"). None when it holds nothing to search for (no letter
    or digit)."""
    terms, bare = [], False
    for phrase, word in _TERM.findall(text.replace("\x00", "")):
        term = phrase or word
        if any(ch.isalnum() for ch in term):
            terms.append('"' + term.replace('"', '""') + '"')
            bare = not phrase
    if prefix and bare:
        terms[-1] += "*"
    return " ".join(terms) or None


@dataclass(frozen=True)
class SearchQuery:
    """What to look for: words (all of them), and optional filters on the answer's verdict state (any of
    ``statuses``), its verifier's task and the UTC day (``since`` and ``until`` both included)."""

    text: str
    statuses: frozenset[VerdictStatus] = frozenset()
    task: str | None = None
    since: date | None = None
    until: date | None = None
    limit: int = DEFAULT_LIMIT
    prefix: bool = False  # the last word, while it is being typed, also matches longer words

    def __post_init__(self) -> None:
        if match_expression(self.text) is None:
            raise DataError("nothing to search for: type one or more words (letters or digits), or a "
                            "\"quoted phrase\"", field="query")
        if self.limit < 1:
            raise DataError(f"the limit must be at least 1, got {self.limit}", field="limit")
        if self.since and self.until and self.since > self.until:
            raise DataError(f"since {self.since} is after until {self.until}: no day is in between", field="since")

    @property
    def expression(self) -> str:
        """The FTS5 MATCH expression (a query with no word to search for is refused when it is made)."""
        return match_expression(self.text, prefix=self.prefix) or ""

    @classmethod
    def parse(cls, typed: str, **defaults: Any) -> "SearchQuery":
        """A query typed on one line: words, plus ``status:WORD`` (repeatable, ``status:"not verified"``
        too), ``task:NAME``, ``since:YYYY-MM-DD`` and ``until:YYYY-MM-DD``; ``defaults`` are keyword fields."""
        found = dict(defaults)
        statuses = set(found.pop("statuses", ()))
        for name, value in _FILTER.findall(typed):
            name, value = name.lower(), value.strip('"')
            if name == "status":
                statuses.add(parse_status(value))
            elif name == "task":
                found["task"] = value
            else:
                found[name] = parse_day(value, name)
        return cls(" ".join(_FILTER.sub(" ", typed).split()), statuses=frozenset(statuses), **found)


@dataclass(frozen=True)
class SearchHit:
    """One message that matches: where it is, a snippet of its text around the matches (``marks``: the
    matched spans of ``snippet``), and the verdict state and task of the answer (for a user message: of the
    answer that followed it; None where there is none)."""

    session_id: str
    session_title: str
    message_id: int
    role: str
    created_at: str
    snippet: str
    marks: tuple[tuple[int, int], ...] = ()
    status: VerdictStatus | None = None
    task: str | None = None
    rank: float = field(default=0.0, compare=False)

    def marked(self, before: str = "**", after: str = "**") -> str:
        """The snippet with each match between ``before`` and ``after`` (Markdown bold by default)."""
        out, last = [], 0
        for start, end in self.marks:
            out += [self.snippet[last:start], before, self.snippet[start:end], after]
            last = end
        return "".join(out + [self.snippet[last:]])

    def to_dict(self) -> dict[str, Any]:
        """The JSON form ``mlx-sdm history search`` prints (the snippet's matches in ``**``)."""
        return {"session_id": self.session_id, "session_title": self.session_title, "message_id": self.message_id,
                "role": self.role, "created_at": self.created_at, "snippet": self.marked(),
                "status": None if self.status is None else self.status.value, "task": self.task}


def split_marks(marked: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """FTS5's snippet (matches between the control marks) as plain text and the matched spans."""
    plain: list[str] = []
    marks: list[tuple[int, int]] = []
    start: int | None = None
    for piece in re.split(f"([{_OPEN}{_CLOSE}])", marked):
        if piece == _OPEN:
            start = sum(map(len, plain))
        elif piece == _CLOSE:
            if start is not None:
                marks.append((start, sum(map(len, plain))))
            start = None
        else:
            plain.append(piece)
    return "".join(plain), tuple(marks)


def _stored_words(statuses: Iterable[VerdictStatus]) -> list[str]:
    """The stored spellings of the states (older rows say ``unverifiable`` or ``none`` for no verifier)."""
    words = []
    for status in sorted(statuses, key=lambda s: s.value):
        words += [status.value, *(LEGACY_NO_VERIFIER if status is VerdictStatus.NO_VERIFIER else ())]
    return words


#: The answer a message's verdict is read from: the message itself when it is an answer, else (a user
#: message) the next message of its session, whose verdict row exists only when it is an answer.
_ANSWER_ID = ("CASE WHEN m.role = 'assistant' THEN m.id ELSE (SELECT n.id FROM messages n "
              "WHERE n.session_id = m.session_id AND n.id > m.id ORDER BY n.id LIMIT 1) END")


def _sql(query: SearchQuery) -> tuple[str, list[Any]]:
    where, params = [f"{INDEX_TABLE} MATCH ?", f"m.role IN ({', '.join('?' * len(SEARCHED_ROLES))})"], \
        [query.expression, *SEARCHED_ROLES]
    if query.statuses:
        words = _stored_words(query.statuses)
        where.append(f"v.status IN ({', '.join('?' * len(words))})")
        params += words
    if query.task is not None:
        where.append("v.task = ?")
        params.append(query.task)
    if query.since is not None:  # stored times are ISO UTC strings: they sort like the times they name
        where.append("m.created_at >= ?")
        params.append(query.since.isoformat())
    if query.until is not None:
        where.append("m.created_at < ?")
        params.append((query.until + timedelta(days=1)).isoformat())
    sql = (f"SELECT m.id, m.session_id, s.title, m.role, m.created_at, v.status AS verdict_status, v.task, "
           f"snippet({INDEX_TABLE}, 0, char(2), char(3), '…', {SNIPPET_WORDS}) AS snippet, "
           f"bm25({INDEX_TABLE}) AS rank "
           f"FROM {INDEX_TABLE} JOIN messages m ON m.id = {INDEX_TABLE}.rowid "
           f"JOIN sessions s ON s.id = m.session_id LEFT JOIN verdicts v ON v.message_id = {_ANSWER_ID} "
           f"WHERE {' AND '.join(where)} ORDER BY rank, m.created_at DESC, m.id DESC LIMIT ?")
    return sql, [*params, query.limit]


def _hit(row: sqlite3.Row) -> SearchHit:
    snippet, marks = split_marks(row["snippet"] or "")
    return SearchHit(session_id=row["session_id"], session_title=row["title"], message_id=int(row["id"]),
                     role=row["role"], created_at=row["created_at"], snippet=snippet, marks=marks,
                     status=VerdictStatus.read(row["verdict_status"]), task=row["task"], rank=float(row["rank"]))


def ensure_index(store: "ChatStore") -> None:
    """The index, built now (with what the store already holds) if the store was upgraded, or last opened,
    where SQLite lacked FTS5; a clear error if it still does."""
    with store.db.lock:
        if index_is_live(store.db.conn):
            return
    require_fts5()
    with store.db.tx() as conn:
        for statement in split_sql(INDEX_SQL):  # CREATE ... IF NOT EXISTS, then 'rebuild' from messages
            conn.execute(statement)


def search_sessions(store: "ChatStore", query: SearchQuery) -> list[SearchHit]:
    """The messages of every session that match ``query``, best first, at most ``query.limit``."""
    sql, params = _sql(query)
    ensure_index(store)
    try:
        rows = store.db.query(sql, params)
    except sqlite3.OperationalError as exc:
        if "fts5" in str(exc).lower():  # a store indexed elsewhere, opened by a SQLite without FTS5
            require_fts5()
        raise
    return [_hit(row) for row in rows]

