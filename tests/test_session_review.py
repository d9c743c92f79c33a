"""Review decisions feed the verifier's support set at once (no retraining); undo takes the point out;
the updated verifier is saved atomically and later verdicts change because of it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mlx_sdm.network.verifier import DocumentVerifier
from mlx_sdm.executor.engine import ChatEngine, EngineConfig
from mlx_sdm.store.chat_store import ChatStore
from tests.tiny_verifier import build_tiny_verifier, tiny_components, tiny_loaded_model

ALWAYS_HIGH = (1.0, 0.9999, 0.0)  # every answer escalates, so every answer lands in the review queue
QUESTION = "Is Paris the capital of France?"


@pytest.fixture
def engine(tmp_path):
    path = build_tiny_verifier(tmp_path / "verifier")
    store = ChatStore(tmp_path / "chat.db")
    engine = ChatEngine(EngineConfig(max_tokens=10, auq_thresholds=ALWAYS_HIGH, generate_reflection=False),
                        store, components=tiny_components(path))
    engine.ready.result(120)
    yield engine
    engine.shutdown()


def _ask(engine, title):
    return engine.send(engine.store.create_session(title).id, QUESTION).result(60)


def test_decision_grows_the_support_set_and_changes_a_near_duplicate_verdict(engine):
    store = engine.store
    base_size = engine.info().support_size
    first = _ask(engine, "a")
    assert first.review_id is not None and store.review_queue.review_item(first.review_id).reasons[-1] == "escalated_high"
    # the verifier's own prediction as the label: the new point extends the q prefix of a near-duplicate
    label = int(first.outcome.verdict.to_dict()["prediction"])
    result = engine.decide(first.review_id, label, note="checked").result(60)
    assert result.applied and result.support_size == base_size + 1 == engine.info().support_size

    again = _ask(engine, "b")  # the same question in a fresh session: the same (greedy) answer and features
    np.testing.assert_allclose(store.message(again.message_id).features, store.message(first.message_id).features, atol=1e-5)
    assert again.outcome.verdict.to_dict()["q"] > first.outcome.verdict.to_dict()["q"]
    assert again.outcome.verdict.to_dict()["d"] != first.outcome.verdict.to_dict()["d"]  # the nearest support point is now the answer itself
    assert f"review-{first.review_id}-decision-{result.decision_id}" in [e["id"] for e in again.outcome.verdict.to_dict()["exemplars"]]

    # saved atomically beside the store, with the decision ids it holds, and loadable as a verifier
    saved = DocumentVerifier.load(result.saved_to, expect_fingerprint=tiny_loaded_model().fingerprint)
    assert saved.estimator.support_size == base_size + 1
    sidecar = json.loads(open(result.saved_to + ".review.json").read())
    assert sidecar["decision_ids"] == [result.decision_id] and sidecar["support_size"] == base_size + 1

    undone = engine.undo_decision().result(60)
    assert undone.decision_id == result.decision_id and undone.support_size == base_size
    third = _ask(engine, "c")
    assert third.outcome.verdict.to_dict()["q"] == first.outcome.verdict.to_dict()["q"] and third.outcome.verdict.to_dict()["d"] == pytest.approx(first.outcome.verdict.to_dict()["d"])
    assert DocumentVerifier.load(undone.saved_to).estimator.support_size == base_size
    assert engine.undo_decision().result(60) is None


def test_opposite_label_removes_the_answer_from_its_own_q(engine):
    first = _ask(engine, "a")
    flipped = 1 - int(first.outcome.verdict.to_dict()["prediction"])
    engine.decide(first.review_id, flipped).result(60)
    again = _ask(engine, "b")
    assert again.outcome.verdict.to_dict()["q"] == 0  # the nearest neighbour now disagrees: q stops at once (Eq. 5)
    assert again.outcome.verdict_status != "verified"


def test_edited_completion_is_force_decoded_and_superseding_decisions_rebuild(engine):
    store = engine.store
    base = engine.info().support_size
    first = _ask(engine, "a")
    edited = '{"correctness": true}'
    r1 = engine.decide(first.review_id, 1, completion=edited, note="fixed").result(60)
    assert r1.applied and r1.support_size == base + 1
    point = store.review_queue.support_points()[0]
    assert point.text == edited and point.label == 1
    assert not np.allclose(point.features, store.message(first.message_id).features)  # features of the edit
    # relabelling the same entry replaces the point (rebuilt from the base verifier), it does not add a second one
    r2 = engine.decide(first.review_id, 0).result(60)
    assert r2.support_size == base + 1 and [p.label for p in store.review_queue.support_points()] == [0]
    rows = store.review_queue.training_rows()
    assert rows == [{"prompt": QUESTION, "completion": first.outcome.text, "label": 0}]


def test_decisions_survive_a_restart(engine, tmp_path):
    first = _ask(engine, "a")
    engine.decide(first.review_id, int(first.outcome.verdict.to_dict()["prediction"])).result(60)
    size = engine.info().support_size
    engine.shutdown()
    again = ChatEngine(EngineConfig(max_tokens=10), ChatStore(tmp_path / "chat.db"),
                       components=tiny_components(tmp_path / "verifier"))
    try:
        assert again.ready.result(120).support_size == size  # base verifier + the store's active decisions
    finally:
        again.shutdown()


def test_a_reviewed_copy_passed_as_the_verifier_is_not_given_its_points_twice(engine, tmp_path):
    first = _ask(engine, "a")
    result = engine.decide(first.review_id, int(first.outcome.verdict.to_dict()["prediction"])).result(60)
    engine.shutdown()
    again = ChatEngine(EngineConfig(max_tokens=10), ChatStore(tmp_path / "chat.db"),
                       components=tiny_components(result.saved_to))
    try:
        assert again.ready.result(120).support_size == result.support_size
    finally:
        again.shutdown()


def test_a_label_joins_only_the_verifier_it_was_given_under(engine, tmp_path):
    """Labels given under one verifier never reach another verifier on the same model
    (support points are selected by verifier, not by feature model alone)."""
    from mlx_sdm.executor.review import verifier_key

    first = _ask(engine, "under A")
    label = int(first.outcome.verdict.to_dict()["prediction"])
    assert engine.decide(first.review_id, label).result(60).applied
    base_a = tmp_path / "verifier"
    engine.shutdown()
    other = build_tiny_verifier(tmp_path / "other-verifier")  # another verifier for the same model
    b = ChatEngine(EngineConfig(max_tokens=10, auq_thresholds=ALWAYS_HIGH, generate_reflection=False),
                   ChatStore(tmp_path / "chat.db"), components=tiny_components(other))
    try:
        info = b.ready.result(120)
        assert info.support_size == DocumentVerifier.load(other).estimator.support_size  # nothing leaked into B
        store = b.store
        points = store.review_queue.support_points(feature_model=info.feature_model)
        assert len(points) == 1 and points[0].decision.verifier == verifier_key(str(base_a))
        assert store.review_queue.support_points(feature_model=info.feature_model, verifier=verifier_key(str(other))) == []
        # an answer judged under A and labelled while B is loaded is recorded for A, not applied to B
        again = b.decide(first.review_id, label).result(60)
        assert not again.applied and "another one" in again.message
        assert b.info().support_size == info.support_size
        # an answer judged under B joins B
        second = b.send(store.create_session("under B").id, QUESTION).result(60)
        decided = b.decide(second.review_id, int(second.outcome.verdict.to_dict()["prediction"])).result(60)
        assert decided.applied and b.info().support_size == info.support_size + 1
        assert [p.decision.id for p in store.review_queue.support_points(verifier=verifier_key(str(other)))] == [decided.decision_id]
    finally:
        b.shutdown()


def test_the_one_count_includes_the_open_question_member_and_agrees_after_a_decision_and_an_undo(tmp_path):
    """A verifier with an open-question member: the count shown (the decision's message, its
    ``support_size`` and the status line's ``info().support_size``) holds the member's own points too,
    moves by one with a decision on an everyday answer (routed to the member) and back on its undo."""
    from mlx_sdm.network.question_router import OPEN_KIND

    folder = build_tiny_verifier(tmp_path / "verifier")
    verifier = DocumentVerifier.load(folder)
    verifier.members = {OPEN_KIND: DocumentVerifier.load(build_tiny_verifier(tmp_path / "member"))}
    verifier.save(folder)
    own = verifier.estimator.support_size
    member = verifier.members[OPEN_KIND].estimator.support_size
    engine = ChatEngine(EngineConfig(max_tokens=10, auq_thresholds=ALWAYS_HIGH, generate_reflection=False),
                        ChatStore(tmp_path / "chat.db"), components=tiny_components(folder))
    try:
        assert engine.ready.result(120).support_size == own + member
        answer = _ask(engine, "a")
        assert answer.outcome.verdict.task == OPEN_KIND and answer.review_id is not None
        result = engine.decide(answer.review_id, int(answer.outcome.verdict.to_dict()["prediction"])).result(60)
        assert result.applied and result.support_size == own + member + 1 == engine.info().support_size
        assert f"support set {own + member + 1} points" in result.message and "open_questions" in result.message
        undone = engine.undo_decision().result(60)
        assert undone.support_size == own + member == engine.info().support_size
        assert f"support set {own + member} points" in undone.message
    finally:
        engine.shutdown()


def test_a_label_on_an_answer_no_verifier_judged_says_it_changes_no_verdict(engine):
    """An answer with no estimator judgement (here: no checkable answer) is recorded as a training row
    only; the decision's message says why, and the support set's count does not move."""
    from mlx_sdm.network.verdict import DocumentVerdict
    from tests.stored import answer as stored_answer

    store, size = engine.store, engine.info().support_size
    session = store.create_session("haiku")
    store.add_message(session.id, "user", "Write a haiku about autumn.")
    store.add_turn(session.id, None, stored_answer("leaves fall", state="out_of_scope",
                                   verdict=DocumentVerdict(None, unjudged="no_checkable_answer"),
                                   features=np.ones(2 * tiny_loaded_model().fingerprint["hidden_size"]),
                                   feature_model=engine.info().feature_model, review_reasons=["no_checkable_answer"])).message_id
    item = store.review_queue.review_items(judged=False)[0]
    result = engine.decide(item.id, 1).result(60)
    assert not result.applied and "no checkable answer" in result.message and "changes no verdict" in result.message
    assert result.support_size == size == engine.info().support_size
    assert store.review_queue.support_points() == [] and len(store.review_queue.training_rows()) == 1
