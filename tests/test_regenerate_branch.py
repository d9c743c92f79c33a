"""Regenerate and branch below the UI: the store's branch records (and an older store file migrating to
them), the conversation the model sees after a regenerated answer, and the engine regenerating with the
tiny model and verifier (sampled, seeded per attempt, both answers kept with their own verdicts)."""

from __future__ import annotations

import pytest

from mlx_sdm.errors import DataError
from mlx_sdm.executor.conversation import conversation_from
from mlx_sdm.executor.engine import ChatEngine, EngineConfig
from mlx_sdm.executor.regeneration import REGENERATE_TEMPERATURE, regeneration
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.store.migrations import SCHEMA_VERSION
from mlx_sdm.store.records import BranchOrigin
from mlx_sdm.turn.values import Resampled
from mlx_sdm.turn.escalation import TurnStatus
from tests.stored import answer as stored_answer
from tests.tiny_verifier import build_tiny_verifier, tiny_components

VERIFIED = DocumentVerdict.from_dict({"prediction": 1, "p_lower": 0.97, "admitted": True, "q": 5, "d": 0.1})


def two_turns(store: ChatStore) -> tuple[str, list[int]]:
    s = store.create_session("Capitals")
    ids = []
    for q, a in (("Capital of France?", "Paris."), ("And of Italy?", "Rome.")):
        ids.append(store.add_message(s.id, "user", q))
        ids.append(store.add_turn(s.id, None, stored_answer(a, verdict=VERIFIED, state="verified", verifier="v")).message_id)
    return s.id, ids


def test_a_branch_copies_the_turns_before_its_point_and_remembers_where_it_came_from(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    parent, ids = two_turns(store)
    branch = store.branch_session(parent, before_message_id=ids[2])  # continue after turn 1
    assert branch.branch == BranchOrigin(parent, ids[1], 1, "Capitals")
    assert branch.title == "branch · Capitals" and branch.branch.words() == "branched from “Capitals”, turn 1"
    copied = store.messages(branch.id)
    assert [(m.role, m.text) for m in copied] == [("user", "Capital of France?"), ("assistant", "Paris.")]
    assert copied[1].verdict_status == "verified" and copied[1].verdict == store.messages(parent)[1].verdict
    assert len(store.messages(parent)) == 4  # the parent is unchanged
    store.delete_session(parent)  # a branch outlives its parent and still says where it came from
    assert store.get_session(branch.id).branch.title == "Capitals"
    whole = store.branch_session(branch.id)
    assert whole.branch.turn == 1 and len(store.messages(whole.id)) == 2
    with pytest.raises(DataError):
        store.branch_session("nope")


def test_an_older_store_migrates_to_branches_and_keeps_its_sessions(tmp_path):
    path = tmp_path / "chat.db"
    old = ChatStore(path, target_version=8)
    parent, ids = two_turns(old)
    old.close()
    store = ChatStore(path)
    assert store.schema_version == SCHEMA_VERSION >= 9
    assert store.get_session(parent).branch is None and len(store.messages(parent)) == 4
    assert store.branch_session(parent, before_message_id=ids[0]).branch.turn == 0  # before turn 1: edit turn 1


def test_the_conversation_carries_the_latest_answer_and_a_branch_remaps_what_it_replaces(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    parent, ids = two_turns(store)
    again = regeneration(store.messages(parent))
    assert again.replaces == ids[3] and again.attempt == 1
    assert again.messages[-1] == {"role": "user", "content": "And of Italy?"} and len(again.messages) == 3
    newer = stored_answer("Rome, of course.", state="verified", verdict=VERIFIED,
                          resampled=Resampled(ids[3], REGENERATE_TEMPERATURE, 1))
    newer_id = store.add_turn(parent, None, newer).message_id
    records = store.messages(parent)
    assert [m["content"] for m in conversation_from(records)][-2:] == ["And of Italy?", "Rome, of course."]
    assert "Rome." not in [m["content"] for m in conversation_from(records)]
    assert regeneration(records).attempt == 2 and regeneration(records).replaces == newer_id
    branch = store.branch_session(parent)
    copies = store.messages(branch.id)
    assert copies[-1].metadata.replaces == copies[-2].id  # points at the branch's own copy
    assert conversation_from(copies) == conversation_from(records)


def test_nothing_to_regenerate_is_said(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    s = store.create_session("empty")
    with pytest.raises(DataError, match="ask something first"):
        regeneration(store.messages(s.id))
    store.add_message(s.id, "user", "hi")
    with pytest.raises(DataError, match="no finished answer"):
        regeneration(store.messages(s.id))


def test_a_paused_answer_can_be_regenerated(tmp_path):
    """ctrl+g on a paused answer (it is on screen) answers the question again, moving on from the pause."""
    store = ChatStore(tmp_path / "chat.db")
    s = store.create_session("paused")
    store.add_message(s.id, "user", "Give me three tips for sleeping better.")
    paused = store.add_turn(s.id, None, stored_answer('" " ""}"}"}', status=TurnStatus.PAUSED)).message_id
    again = regeneration(store.messages(s.id))
    assert again.replaces == paused and again.messages[-1]["content"] == "Give me three tips for sleeping better."


def test_the_engine_regenerates_sampled_and_keeps_both_answers(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    engine = ChatEngine(EngineConfig(max_tokens=10, reflection_max_tokens=4, auq_thresholds=(0.02, 0.01, 0.0)),
                        store, components=tiny_components(build_tiny_verifier(tmp_path / "verifier")))
    try:
        engine.ready.result(120)
        s = store.create_session("t")
        first = engine.send(s.id, "Is Paris the capital of France?").result(60)
        second = engine.regenerate(s.id).result(60)
        assert second.question_id is None and first.question_id is not None  # the answer given again has no question of its own
        assert second.message_id != first.message_id
        answers = [m for m in store.messages(s.id) if m.role == "assistant"]
        assert [a.id for a in answers] == [first.message_id, second.message_id]
        assert answers[0].metadata.replaces is None and answers[0].metadata.temperature is None  # greedy, as before
        meta = answers[1].metadata
        assert (meta.replaces, meta.seed, meta.temperature) == (first.message_id, 1, REGENERATE_TEMPERATURE)
        assert all(a.verdict_status is not None for a in answers)  # each judged on its own
        assert sum(1 for m in store.messages(s.id) if m.role == "user") == 1  # the question is not repeated
        # the monitor scores both answers under the one turn, and says "turn 1" of the second, as the chat does
        assert [p.turn for p in engine._monitors[s.id].history] == [1, 1]
        assert "turn 2" not in second.outcome.monitor.fused.message
        third = engine.send(s.id, "And of Spain?").result(60)
        assert [p.turn for p in engine._monitors[s.id].history] == [1, 1, 2] and "turn 3" not in third.outcome.monitor.fused.message
    finally:
        engine.shutdown()


def test_the_markdown_export_says_which_answer_was_regenerated_and_where_a_branch_came_from(tmp_path):
    from mlx_sdm.store.export import session_to_markdown

    store = ChatStore(tmp_path / "chat.db")
    parent, ids = two_turns(store)
    store.add_turn(parent, None, stored_answer("Rome, of course.", state="no_verifier", resampled=Resampled(ids[3], 0.7, 1)))
    text = session_to_markdown(store, parent)
    assert "### Assistant (regenerated: sampled at temperature 0.7, seed 1)" in text and text.count("### Assistant") == 3
    branch = store.branch_session(parent, before_message_id=ids[2])
    assert f"- branched from “Capitals”, turn 1 (session `{parent}`)" in session_to_markdown(store, branch.id)
