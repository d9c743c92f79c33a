"""Session search: the FTS5 index the schema step builds (an older store is indexed on upgrade, triggers keep
it in step with streaming, edits and deletes), the query a user types (never an FTS5 syntax error), the
filters on the answer's verdict state, task and day, the order of the hits, and a SQLite without FTS5."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mlx_sdm.store.search_index as search_index
import mlx_sdm.store.database as store_module
from mlx_sdm.errors import DataError, MissingDependencyError
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus
from mlx_sdm.store.migrations import MIGRATIONS, SCHEMA_VERSION, Migration
from mlx_sdm.store.search import (
    SearchHit,
    SearchQuery,
    match_expression,
    parse_day,
    parse_status,
    search_sessions,
    split_marks,
)
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.store.turn_writer import Question, TurnWriter
from mlx_sdm.turn.escalation import TurnStatus
from tests.stored import answer as stored_answer

VERIFIED = DocumentVerdict.from_dict({"prediction": 1, "p_lower": 0.97, "admitted": True, "q": 5, "d": 0.1})
BELOW = DocumentVerdict.from_dict({"prediction": 1, "p_lower": 0.4, "admitted": False, "q": 5, "d": 0.1,
                                   "reason": "below_threshold"})


def turn(store: ChatStore, session_id: str, question: str, answer: str, status: VerdictStatus | None,
         task: str | None = None, day: str | None = None) -> tuple[int, int]:
    """A question and its answer in state ``status`` (None: a cancelled turn, no verdict)."""
    verdict = {VerdictStatus.VERIFIED: VERIFIED, VerdictStatus.NOT_VERIFIED: BELOW}.get(status)
    kept = store.add_turn(session_id, Question(question), stored_answer(
        answer, state=status, verdict=verdict, task=task, status=TurnStatus.DONE if status is not None else TurnStatus.CANCELLED))
    ids = (kept.question_id, kept.message_id)
    if day is not None:
        with store.db.tx() as conn:
            conn.execute("UPDATE messages SET created_at = ? WHERE id IN (?, ?)", (f"{day}T12:00:00.000000Z", *ids))
    return ids


@pytest.fixture
def store(tmp_path) -> ChatStore:
    """Three sessions about Paris: a verified capitals answer, a not-verified river answer, an out-of-scope one."""
    store = ChatStore(tmp_path / "chat.db")
    capitals = store.create_session("Capitals")
    turn(store, capitals.id, "Is Paris the capital of France?", "Yes, Paris is the capital of France.",
         VerdictStatus.VERIFIED, task="capitals", day="2026-01-10")
    rivers = store.create_session("Rivers")
    turn(store, rivers.id, "How long is the Seine?", "The Seine is 777 km long and flows through Paris.",
         VerdictStatus.NOT_VERIFIED, day="2026-02-10")
    museums = store.create_session("Museums")
    turn(store, museums.id, "Which museum in Paris shows the Mona Lisa?", "The Louvre.", VerdictStatus.OUT_OF_SCOPE,
         day="2026-03-10")
    yield store
    store.close()


def titles(hits: list[SearchHit]) -> list[tuple[str, str]]:
    return [(h.session_title, h.role) for h in hits]


def index_is_consistent(store: ChatStore) -> bool:
    """FTS5's own check of an external-content index against the messages table."""
    store.db.query("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
    return True


def test_words_are_found_in_user_and_assistant_messages_with_the_answers_verdict(store):
    hits = search_sessions(store, SearchQuery("seine"))
    assert sorted(titles(hits)) == [("Rivers", "assistant"), ("Rivers", "user")]
    assert {h.status for h in hits} == {VerdictStatus.NOT_VERIFIED}  # the user message shows its answer's state
    capitals = search_sessions(store, SearchQuery("capital france"))
    assert {h.session_title for h in capitals} == {"Capitals"}
    assert {(h.status, h.task) for h in capitals} == {(VerdictStatus.VERIFIED, "capitals")}
    assert all("France" in h.marked() and "**" in h.marked() for h in capitals)
    # words are AND-ed; a quoted phrase keeps its words together and in order; stems match ("flowing" ~ "flows")
    assert search_sessions(store, SearchQuery("paris louvre")) == []
    assert titles(search_sessions(store, SearchQuery('"flows through paris"'))) == [("Rivers", "assistant")]
    assert search_sessions(store, SearchQuery('"paris through flows"')) == []
    assert titles(search_sessions(store, SearchQuery("flowing"))) == [("Rivers", "assistant")]


def test_filters_on_verdict_state_task_and_day(store):
    def found(**filters) -> set[str]:
        return {h.session_title for h in search_sessions(store, SearchQuery("paris", **filters))}

    assert found() == {"Capitals", "Rivers", "Museums"}
    assert found(statuses=frozenset({VerdictStatus.NOT_VERIFIED})) == {"Rivers"}
    assert found(statuses=frozenset({VerdictStatus.VERIFIED, VerdictStatus.OUT_OF_SCOPE})) == {"Capitals", "Museums"}
    assert found(statuses=frozenset({VerdictStatus.NO_VERIFIER})) == set()
    assert found(task="capitals") == {"Capitals"} and found(task="rivers") == set()
    assert found(since=date(2026, 2, 10)) == {"Rivers", "Museums"}  # both ends of the range are included
    assert found(until=date(2026, 2, 10)) == {"Capitals", "Rivers"}
    assert found(since=date(2026, 2, 1), until=date(2026, 2, 28)) == {"Rivers"}


def test_older_no_verifier_spellings_are_found_by_that_state(store):
    session = store.create_session("Old")
    _, answer = turn(store, session.id, "paris weather", "Sunny weather in Paris.", VerdictStatus.NO_VERIFIER)
    with store.db.tx() as conn:
        conn.execute("UPDATE verdicts SET status = 'unverifiable' WHERE message_id = ?", (answer,))
    hits = search_sessions(store, SearchQuery("weather", statuses=frozenset({VerdictStatus.NO_VERIFIER})))
    assert {h.status for h in hits} == {VerdictStatus.NO_VERIFIER} and len(hits) == 2


def test_best_match_first_then_newest_and_the_limit(store):
    session = store.create_session("Repeats")
    turn(store, session.id, "zebra", "ok", None, day="2026-01-01")
    turn(store, session.id, "zebra", "ok", None, day="2026-04-01")
    turn(store, session.id, "a zebra among many other words that dilute the match", "ok", None, day="2026-05-01")
    hits = search_sessions(store, SearchQuery("zebra"))
    assert [h.created_at[:10] for h in hits] == ["2026-04-01", "2026-01-01", "2026-05-01"]
    assert len(search_sessions(store, SearchQuery("zebra", limit=2))) == 2
    assert all(h.status is None for h in hits)  # an answer with no verdict (a cancelled turn)


def test_an_older_store_is_indexed_when_it_is_upgraded(tmp_path):
    path = tmp_path / "old.db"
    old = ChatStore(path, target_version=7)
    session = old.create_session("Before search")
    turn(old, session.id, "What is the tallest mountain?", "Everest.", VerdictStatus.VERIFIED)
    assert not old.db.query("SELECT 1 FROM sqlite_master WHERE name = 'messages_fts'")
    old.close()
    store = ChatStore(path)
    assert store.schema_version == SCHEMA_VERSION and 8 in [v for v, _, _ in store.db.applied_migrations()]
    assert titles(search_sessions(store, SearchQuery("everest"))) == [("Before search", "assistant")]
    assert titles(search_sessions(store, SearchQuery("mountain"))) == [("Before search", "user")]
    assert index_is_consistent(store)


def test_triggers_keep_the_index_in_step_with_streaming_edits_and_deletes(store):
    session = store.create_session("Streaming")
    writer = TurnWriter(store.answers, session.id, Question("Tell me about quokkas"), partial=True)
    answer = writer.message_id
    store.answers.update_partial(answer, "Quokkas are small", force=True)
    assert [h.message_id for h in search_sessions(store, SearchQuery("small"))] == [answer]  # the partial answer
    store.answers.update_partial(answer, "Quokkas are marsupials", force=True)
    writer.finish(stored_answer("Quokkas are marsupials of Rottnest Island.", state=VerdictStatus.NOT_VERIFIED,
                                verdict=BELOW))
    assert search_sessions(store, SearchQuery("small")) == []  # the old text left the index
    (hit,) = search_sessions(store, SearchQuery("rottnest"))
    assert hit.message_id == answer and hit.status is VerdictStatus.NOT_VERIFIED
    assert index_is_consistent(store)
    store.delete_session(session.id)  # its messages go by cascade, and out of the index with them
    assert search_sessions(store, SearchQuery("quokkas")) == []
    assert index_is_consistent(store)


def test_a_sqlite_without_fts5_opens_the_store_and_search_says_why_it_cannot(tmp_path, monkeypatch):
    monkeypatch.setattr(search_index, "fts5_available", lambda: False)
    assert search_index.migration_sql() == ""
    # the schema step as it is made where FTS5 is missing: the store opens and works, search explains
    without = tuple(m if m.version != 8 else Migration(8, m.description, search_index.migration_sql()) for m in MIGRATIONS)
    monkeypatch.setattr(store_module, "MIGRATIONS", without)
    store = ChatStore(tmp_path / "chat.db")
    session = store.create_session("No index")
    turn(store, session.id, "Where is Lyon?", "In France.", VerdictStatus.VERIFIED)
    with pytest.raises(MissingDependencyError, match="FTS5.*was built without it.*Python whose sqlite3 has FTS5"):
        search_sessions(store, SearchQuery("lyon"))
    # FTS5 back (another Python): the first search builds the index with what is already there
    monkeypatch.setattr(search_index, "fts5_available", lambda: True)
    assert titles(search_sessions(store, SearchQuery("lyon"))) == [("No index", "user")]
    assert index_is_consistent(store)
    store.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
       | st.lists(st.sampled_from(['"', "AND", "OR", "NOT", "NEAR(", ")", "*", "^", ":", "-", "+", "paris", "{a b}",
                                   "col:", "\x00", "'", "(", "\\"]), max_size=8).map(" ".join))
def test_no_text_a_user_types_is_an_fts5_syntax_error(store, text):
    expression = match_expression(text)
    for prefix in (False, True):  # as a finished query, and as one being typed
        if expression is None:
            with pytest.raises(DataError, match="nothing to search for"):
                search_sessions(store, SearchQuery(text, prefix=prefix))
        else:
            assert isinstance(search_sessions(store, SearchQuery(text, prefix=prefix)), list)


def test_the_query_typed_on_one_line_and_its_bad_input():
    query = SearchQuery.parse('paris status:not_verified Status:"out of scope" task:capitals since:2026-01-01 '
                              'until:2026-02-01 "the end"')
    assert query.text == 'paris "the end"' and query.task == "capitals"
    assert query.statuses == {VerdictStatus.NOT_VERIFIED, VerdictStatus.OUT_OF_SCOPE}
    assert (query.since, query.until) == (date(2026, 1, 1), date(2026, 2, 1))
    assert [parse_status(w) for w in ("verified", "not verified", "Not-Verified", "out_of_scope", "unverifiable")] == [
        VerdictStatus.VERIFIED, VerdictStatus.NOT_VERIFIED, VerdictStatus.NOT_VERIFIED, VerdictStatus.OUT_OF_SCOPE,
        VerdictStatus.NO_VERIFIER]
    with pytest.raises(DataError, match="unknown verdict status 'maybe'; use one of verified, not_verified"):
        parse_status("maybe")
    with pytest.raises(DataError, match="field 'since': '2026-13-01' is not a date; write it as YYYY-MM-DD"):
        parse_day("2026-13-01", "since")
    with pytest.raises(DataError, match="since 2026-03-01 is after until 2026-02-01"):
        SearchQuery("x", since=date(2026, 3, 1), until=date(2026, 2, 1))
    with pytest.raises(DataError, match="at least 1"):
        SearchQuery("x", limit=0)
    with pytest.raises(DataError, match="nothing to search for"):
        SearchQuery.parse("status:verified   ")
    assert match_expression('say "hi there" to a"b !!!') == '"say" "hi there" "to" "a""b"'
    assert match_expression('say "hi there" capi', prefix=True) == '"say" "hi there" "capi"*'
    assert match_expression('say "hi there"', prefix=True) == '"say" "hi there"'  # a phrase is never a prefix


def test_a_query_being_typed_finds_the_words_its_last_word_begins(store):
    assert search_sessions(store, SearchQuery("capi")) == []
    assert {h.session_title for h in search_sessions(store, SearchQuery("paris capi", prefix=True))} == {"Capitals"}


def test_snippet_marks_become_spans():
    plain, marks = split_marks("the \x02capital\x03 of \x02France\x03…")
    assert plain == "the capital of France…" and marks == ((4, 11), (15, 21))
    hit = SearchHit("s", "t", 1, "user", "2026", plain, marks)
    assert hit.marked("[", "]") == "the [capital] of [France]…"
    assert hit.to_dict()["snippet"] == "the **capital** of **France**…" and hit.to_dict()["status"] is None


def test_a_store_indexed_with_fts5_still_takes_messages_where_sqlite_lacks_it(tmp_path, monkeypatch):
    """Indexed by one Python, opened by another whose SQLite has no FTS5: the index's triggers would fail
    every new message, so they go at open; the message is kept, and search with FTS5 again rebuilds the
    index with everything, the message written meanwhile included."""
    path = tmp_path / "chat.db"
    with ChatStore(path) as first:
        session = first.create_session("Trips")
        turn(first, session.id, "Where is Lyon?", "In France.", VerdictStatus.VERIFIED)
    monkeypatch.setattr(search_index, "fts5_available", lambda: False)
    with ChatStore(path) as elsewhere:
        # (this SQLite has FTS5, so the triggers could still run here; that they are gone is what counts)
        assert not elsewhere.db.query("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'messages_fts%'")
        assert not search_index.index_is_live(elsewhere.db.conn)
        turn(elsewhere, session.id, "Where is Porto?", "In Portugal.", VerdictStatus.NOT_VERIFIED)
        with pytest.raises(MissingDependencyError, match="FTS5"):
            search_sessions(elsewhere, SearchQuery("porto"))
    monkeypatch.setattr(search_index, "fts5_available", lambda: True)
    with ChatStore(path) as back:
        assert [h.snippet for h in search_sessions(back, SearchQuery("porto"))] == ["Where is Porto?"]
        assert search_index.index_is_live(back.db.conn)
        assert len(search_sessions(back, SearchQuery("lyon"))) == 1
        assert index_is_consistent(back)
        turn(back, session.id, "Where is Graz?", "In Austria.", None)  # the triggers are back
        assert len(search_sessions(back, SearchQuery("graz"))) == 1
