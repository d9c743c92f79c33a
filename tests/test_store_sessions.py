"""ChatStore: sessions, messages, verdicts, monitor snapshots, schema migrations."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from mlx_sdm.errors import ArtifactError, DataError
from mlx_sdm.monitor.online.auq_escalation import UncertaintyLevel
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.monitor.session_file.records import ToolCall
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus
from mlx_sdm.store.message_meta import MessageMeta
from mlx_sdm.store.migrations import MIGRATIONS, SCHEMA_VERSION
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.store.turn_writer import Question
from tests.stored import answer as stored_answer, judged

VERIFIED_097 = DocumentVerdict.from_dict({"prediction": 1, "p_lower": 0.97, "admitted": True, "q": 5, "d": 0.1})


def test_wal_mode_and_schema_version(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    assert store.db.query("PRAGMA journal_mode")[0][0] == "wal"
    assert store.schema_version == SCHEMA_VERSION == MIGRATIONS[-1].version
    assert [v for v, _, _ in store.db.applied_migrations()] == [m.version for m in MIGRATIONS]
    assert store.db.integrity_check() == "ok"


def test_session_lifecycle_and_reopen(tmp_path):
    path = tmp_path / "chat.db"
    store = ChatStore(path)
    a = store.create_session("first", model="smollm2", verifier="weights/default")
    b = store.create_session()
    assert b.title.startswith("Chat ")
    store.add_message(a.id, "user", "Is Paris the capital of France?")
    feats = np.arange(6, dtype=np.float32)
    verdict = {"prediction": 1, "p_lower": 0.97, "admitted": True, "q": 5, "d": 0.1, "q_bin": 3, "reason": None,
               "exemplars": [{"id": "t1", "label": 1, "prediction": 1, "distance": 0.2, "text": "x"}], "softmax": [0.03, 0.97]}
    mid = store.add_turn(a.id, None, stored_answer("Yes.", prompt=[{"role": "user", "content": "Is Paris the capital of France?"}],
        tokens=["Yes", "."], logprobs=[-0.5, -1.5], features=feats, feature_model="abc",
        state=VerdictStatus.VERIFIED, verdict=DocumentVerdict.from_dict(verdict), verifier="weights/default",
        monitor=MonitorReading(cumulative_confidence=0.84, tracer_risk=0.7),
    )).message_id
    store.rename_session(a.id, "capitals")
    store.close()

    store = ChatStore(path)
    sessions = {s.id: s for s in store.list_sessions()}
    assert sessions[a.id].title == "capitals" and sessions[a.id].message_count == 2
    msgs = store.messages(a.id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    ans = msgs[1]
    assert ans.id == mid and ans.text == "Yes." and ans.token_count == 2
    assert ans.logprob_mean == pytest.approx(-1.0) and ans.logprob_min == pytest.approx(-1.5)
    # read back as the same types (JSON only inside SQLite)
    assert ans.verdict == DocumentVerdict.from_dict(verdict) and ans.verdict_status is VerdictStatus.VERIFIED
    assert ans.verdict.verdict.exemplars[0].text == "x" and ans.verdict.verdict.softmax == [0.03, 0.97]
    assert ans.monitor == MonitorReading(cumulative_confidence=0.84, tracer_risk=0.7)
    np.testing.assert_array_equal(ans.features, feats)
    assert ans.review_id is None
    row = store.db.query("SELECT p_lower, reason FROM verdicts WHERE message_id = ?", (mid,))[0]
    assert row[0] == pytest.approx(0.97) and row[1] is None
    assert store.delete_session(a.id) == 0
    assert [s.id for s in store.list_sessions()] == [b.id]
    # cascades removed the children
    assert store.db.query("SELECT COUNT(*) FROM messages")[0][0] == 0
    assert store.db.query("SELECT COUNT(*) FROM verdicts")[0][0] == 0
    with pytest.raises(DataError, match="no session"):
        store.messages(a.id)
    with pytest.raises(DataError, match="cannot be empty"):
        store.rename_session(b.id, "  ")


def test_nan_features_are_refused_and_nothing_is_written(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    s = store.create_session("s")
    with pytest.raises(DataError, match="NaN"):
        store.add_turn(s.id, None, stored_answer("x", features=np.array([1.0, np.nan]), state="not_verified", review_reasons=["below_threshold"])).message_id
    assert store.messages(s.id) == [] and store.review_queue.review_items() == []


def test_migration_from_v1_keeps_data(tmp_path):
    path = tmp_path / "old.db"
    old = ChatStore(path, target_version=1)
    assert old.schema_version == 1
    tables = {r[0] for r in old.db.query("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "review_queue" not in tables and "monitor_snapshots" not in tables
    # a v1-era file: raw inserts in the v1 columns only
    with old.db.tx() as conn:
        conn.execute("INSERT INTO sessions VALUES ('s1', 'old chat', '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z', 'm', NULL)")
        conn.execute("INSERT INTO messages(session_id, role, text, status, created_at) VALUES ('s1', 'user', 'hi', 'done', '2026-01-01T00:00:01.000000Z')")
        conn.execute("INSERT INTO messages(session_id, role, text, status, created_at) VALUES ('s1', 'assistant', 'hello', 'done', '2026-01-01T00:00:02.000000Z')")
        conn.execute("INSERT INTO verdicts VALUES (2, 'rejected', 0.4, 'below_threshold', '{\"p_lower\": 0.4}', 'v', '2026-01-01T00:00:02.000000Z')")
    old.close()

    store = ChatStore(path)
    assert store.schema_version == SCHEMA_VERSION
    assert [v for v, _, _ in store.db.applied_migrations()] == [m.version for m in MIGRATIONS]
    msgs = store.messages("s1")
    assert [m.text for m in msgs] == ["hi", "hello"]
    assert msgs[0].kind == "chat" and msgs[1].features is None  # new columns got their defaults
    assert msgs[1].verdict is not None and msgs[1].verdict_status is VerdictStatus.NOT_VERIFIED  # v4: "rejected" is now named by state
    # the new tables work on the migrated file
    high = MonitorReading(level=UncertaintyLevel.HIGH)
    ood = DocumentVerdict.from_dict({"prediction": 1, "p_lower": 0.1, "admitted": False, "reason": "out_of_distribution"})
    mid = store.add_turn("s1", None, stored_answer("again", state=VerdictStatus.OUT_OF_SCOPE, verdict=ood,
                                         monitor=high, review_reasons=["out_of_distribution", "escalated_high"])).message_id
    (item,) = store.review_queue.review_items()
    assert item.message_id == mid and item.reasons == ["out_of_distribution", "escalated_high"]
    assert item.prompt == "hi" and item.monitor == high and item.verdict == ood
    assert store.db.integrity_check() == "ok"


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "new.db"
    ChatStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_migrations VALUES (?, 'from the future', 'x')", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(ArtifactError, match="newer than this mlx-sdm"):
        ChatStore(path)


def test_not_a_database_is_a_clear_error(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ArtifactError, match="not a usable chat store"):
        ChatStore(path)


def test_add_turn_writes_question_and_answer_in_one_transaction(tmp_path, monkeypatch):
    import mlx_sdm.store.turn_writer as writer_module

    store = ChatStore(tmp_path / "turn.db")
    session = store.create_session("t")
    kept = store.add_turn(
        session.id, Question("Capital of France?", source="api:test"),
        stored_answer("Paris.", state=VerdictStatus.VERIFIED, verdict=VERIFIED_097, verifier="v", review_reasons=("below",)))
    user_id, answer_id = kept.question_id, kept.message_id
    user, answer = store.messages(session.id)
    assert (user.id, user.role, user.text, user.metadata) == (user_id, "user", "Capital of France?", MessageMeta(source="api:test"))
    assert (answer.id, answer.role, answer.text, answer.verdict_status) == (answer_id, "assistant", "Paris.", "verified")
    assert answer.review_id is not None and answer.review_id == kept.review_id

    def killed_midway(*args, **kwargs):  # the answer's write fails after the question's row went in
        raise RuntimeError("killed")

    monkeypatch.setattr(writer_module, "write_answer", killed_midway)
    with pytest.raises(RuntimeError):
        store.add_turn(session.id, Question("A second question?"), stored_answer("lost"))
    assert [m.text for m in ChatStore(tmp_path / "turn.db").messages(session.id)] == ["Capital of France?", "Paris."]


def test_an_untitled_session_is_named_after_its_first_user_message(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    engine_style = store.create_session()  # the engine writes the question, then the answer
    assert engine_style.title.startswith("Chat ")  # the placeholder until a question exists
    store.add_message(engine_style.id, "system", "a monitor note")  # not a user question: still the placeholder
    assert store.get_session(engine_style.id).title.startswith("Chat ")
    store.add_message(engine_style.id, "user", "What is the capital of Australia?")
    store.add_message(engine_style.id, "user", "And of New Zealand, please?")
    assert store.get_session(engine_style.id).title == "What is the capital of Australia?"

    server_style = store.create_session()  # the server writes a whole turn at once
    store.add_turn(server_style.id, Question("Give me three tips for sleeping better tonight\nthanks"),
                   stored_answer("1. ..."))
    assert store.get_session(server_style.id).title == "Give me three tips for sleeping…"

    named = store.create_session("my chat")  # a title given, or a rename, is never replaced
    store.add_message(named.id, "user", "hello there")
    assert store.get_session(named.id).title == "my chat"
    renamed = store.create_session()
    store.rename_session(renamed.id, "kept")
    store.add_message(renamed.id, "user", "hello there")
    assert store.get_session(renamed.id).title == "kept"


def test_title_from_message_is_one_short_line():
    from mlx_sdm.store.titles import TITLE_CHARS, title_from_message

    assert title_from_message("  \n hi there \n") == "hi there"
    assert title_from_message("hi\nthere") == "hi…"  # more lines than the title shows
    assert title_from_message("Classify the topic of the following news article. Respond") == \
        "Classify the topic of the following…"
    assert len(title_from_message("x" * 500)) == TITLE_CHARS
    assert title_from_message(" \n ") is None


def test_old_stores_title_their_empty_placeholder_sessions_on_upgrade(tmp_path):
    path = tmp_path / "chat.db"
    old = ChatStore(path, target_version=5)
    with old.db.tx() as conn:
        conn.execute("INSERT INTO sessions(id, title, created_at, updated_at) VALUES "
                     "('e', 'Chat 2026-01-02 03:04', 'x', 'x'), ('u', 'Chat 2026-01-02 03:05', 'x', 'x'), "
                     "('n', 'Chat about cats', 'x', 'x')")
        conn.execute("INSERT INTO messages(session_id, role, text, created_at) VALUES ('u', 'user', 'earlier', 'x')")
    old.close()
    store = ChatStore(path)
    for sid in ("e", "u", "n"):
        store.add_message(sid, "user", "new question here")
    titles = {s.id: s.title for s in store.list_sessions()}
    assert titles == {"e": "new question here", "u": "Chat 2026-01-02 03:05", "n": "Chat about cats"}


def test_a_task_question_is_titled_by_its_task_and_document():
    from mlx_sdm.network.encoding import FACTCHECK, TOPIC
    from mlx_sdm.store.titles import title_from_message

    article = TOPIC.user_message("Ink helps drive Democrat gains in the mid-term elections, analysts say")
    assert title_from_message(article) == "topic: Ink helps drive Democrat gains in…"
    assert title_from_message(FACTCHECK.user_message("Paris is in France.")) == "factcheck: Paris is in France."
    assert title_from_message(TOPIC.instruction) == "topic"


def test_message_meta_is_typed_in_the_store_and_older_rows_still_read(tmp_path):
    store = ChatStore(tmp_path / "meta.db")
    session = store.create_session("t")
    meta = MessageMeta(finish_reason="length", source="api:chat", judged_text='{"a": 1}',
                       tool_calls=(ToolCall("send", {"to": "x"}),))
    # the turn's record says all of it: how it ended, who asked, the judged span (its first token; text follows
    # it) and the proposed tool calls; the verdict's reason is the verdict's own
    store.add_turn(session.id, None, stored_answer('{"a": 1} and more', tokens=['{"a": 1}', " and more"], judged_tokens=1,
                                   finish_reason="length", source="api:chat", verdict=judged("below_threshold"),
                                   tool_calls=meta.tool_calls)).message_id
    store.add_message(session.id, "user", "plain")  # no metadata at all: the column stays NULL
    conn = sqlite3.connect(tmp_path / "meta.db")
    conn.execute("INSERT INTO messages(session_id, role, kind, text, status, created_at, metadata_json) VALUES "
                 "(?, 'assistant', 'chat', 'old', 'done', 'x', ?)",
                 (session.id, '{"finish_reason": "stop", "reflection": "unsure", "written_by": "v0.1", "tool_calls": null}'))
    conn.commit()
    stored = [row[0] for row in conn.execute("SELECT metadata_json FROM messages ORDER BY id")]
    conn.close()
    answer, user, old = store.messages(session.id)
    assert answer.metadata == meta and answer.metadata.tool_calls[0].name == "send"
    assert answer.verdict is not None and answer.verdict.reason == "below_threshold"
    assert user.metadata == MessageMeta() and stored[1] is None
    assert (old.metadata.finish_reason, old.metadata.reflection, old.metadata.tool_calls) == ("stop", "unsure", ())
    assert old.metadata.extra == {"written_by": "v0.1"}  # a key of another version, kept
    assert MessageMeta.from_dict(old.metadata.to_dict()) == old.metadata and old.metadata.to_dict()["written_by"] == "v0.1"
    assert answer.to_dict()["metadata"] == {"finish_reason": "length", "source": "api:chat",
                                            "judged_text": '{"a": 1}', "tool_calls": [{"name": "send", "arguments": {"to": "x"}}]}


def test_a_store_written_by_schema_9_migrates_to_one_verdict_value(tmp_path):
    """tests/fixtures/chat-store-v9 was written by the version before the verdict was one value (schema 9: an
    answer no verifier judged had no verdict JSON, its why in the message's metadata; every verdict JSON kept its
    badge and sentence). Opened now, each answer reads back as the same verdict with the same words, the one with
    no verifier carries its why, no stored JSON keeps words, and the Markdown export is today's (expected.md:
    rewritten when the words changed, issue 41's short line)."""
    import json
    import shutil
    from pathlib import Path

    from mlx_sdm.network.verdict_words import verdict_words
    from mlx_sdm.store.export import session_to_markdown

    fixture = Path(__file__).parent / "fixtures" / "chat-store-v9"
    shutil.copy(fixture / "chat.db", tmp_path / "chat.db")
    expected = json.loads((fixture / "expected.json").read_text(encoding="utf-8"))
    assert expected["schema_version"] == 9
    with ChatStore(tmp_path / "chat.db") as store:
        assert store.schema_version == SCHEMA_VERSION
        for was in expected["answers"]:
            back = store.answer(was["message_id"])
            assert back.status.value == was["status"]
            if was["words"] is None:  # a stopped turn: no verdict, then and now
                assert back.verdict is None and back.verdict_status is None
                continue
            words = verdict_words(back.verdict)
            status, badge, sentence = was["words"].values()
            # the same state and evidence; the badge lost its numbers (issue 41: they are the evidence's)
            assert (words.status.value, words.badge, words.sentence) == (status, badge.split(" · p_lower")[0], sentence)
            assert back.verdict_status.value == was["verdict_status"]
        (no_verifier,) = [a for a in store.answers_of(expected["session_id"]).values()
                          if a.verdict is not None and a.verdict.status is VerdictStatus.NO_VERIFIER]
        assert no_verifier.verdict.why == "verification is off (--verifier none)"
        kept = [json.loads(r[0]) for r in store.db.query("SELECT verdict_json FROM verdicts")]
        assert len(kept) == 4 and not any({"badge", "explanation"} & set(k) for k in kept)
        assert session_to_markdown(store, expected["session_id"]) == (fixture / "expected.md").read_text(encoding="utf-8")
