"""ChatStore: the review queue, decisions, undo, filters and training-row export."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mlx_sdm.errors import DataError
from mlx_sdm.store.chat_store import ChatStore
from tests.stored import answer as stored_answer, judged


def _fill(store):
    a = store.create_session("alpha")
    b = store.create_session("beta")
    ids = {}
    store.add_message(a.id, "user", "q1")
    ids["a_ok"] = store.add_turn(a.id, None, stored_answer("fine", state="verified", features=np.ones(4), feature_model="m")).message_id
    store.add_message(a.id, "user", "q2")
    ids["a_ood"] = store.add_turn(a.id, None, stored_answer("weird", state="out_of_scope", verdict=judged("out_of_distribution", d=0.0),
                                                  features=np.full(4, 2.0), feature_model="m", review_reasons=["out_of_distribution"])).message_id
    store.add_message(b.id, "user", "q3")
    ids["b_low"] = store.add_turn(b.id, None, stored_answer("meh", state="not_verified", verdict=judged(),
                                                  features=np.full(4, 3.0), feature_model="other",
                                                  review_reasons=["below_threshold", "escalated_high"])).message_id
    return a, b, ids


def test_queue_filters(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    a, b, ids = _fill(store)
    items = store.review_queue.review_items()
    assert [i.message_id for i in items] == [ids["b_low"], ids["a_ood"]]  # newest first; verified answer not queued
    assert [i.message_id for i in store.review_queue.review_items(session_id=a.id)] == [ids["a_ood"]]
    assert [i.message_id for i in store.review_queue.review_items(reason="escalated_high")] == [ids["b_low"]]
    assert store.review_queue.review_items(reason="escalated") == []  # whole reasons only
    assert store.review_queue.review_reasons() == ["below_threshold", "escalated_high", "out_of_distribution"]
    first = items[-1].created_at
    assert len(store.review_queue.review_items(since=first)) == 2
    assert len(store.review_queue.review_items(until="1999-12-31")) == 0
    assert len(store.review_queue.review_items(since=items[0].created_at[:10])) == 2  # a bare date = from that day's start
    assert len(store.review_queue.review_items(until=items[0].created_at[:10])) == 2  # ... to that day's end
    assert items[1].prompt == "q2" and items[1].answer == "weird" and items[1].session_title == "alpha"
    with pytest.raises(DataError, match="unknown review status"):
        store.review_queue.review_items(status="maybe")


def test_decide_undo_and_export(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    a, b, ids = _fill(store)
    ood, low = store.review_queue.review_items(session_id=a.id)[0], store.review_queue.review_items(session_id=b.id)[0]
    d1 = store.review_queue.record_decision(ood.id, 0, note="nonsense")
    edited = np.full(4, 9.0, dtype=np.float32)
    d2 = store.review_queue.record_decision(low.id, 1, note="fixed", completion="better answer", features=edited, feature_model="other")
    assert store.review_queue.review_items(status="pending") == []
    assert {i.id: i.decision.label for i in store.review_queue.review_items(status="decided")} == {ood.id: 0, low.id: 1}
    # support points: the edited completion's own features, filtered by the model that computed them
    pts = store.review_queue.support_points()
    assert [p.label for p in pts] == [0, 1] and pts[1].text == "better answer"
    np.testing.assert_array_equal(pts[0].features, np.full(4, 2.0, dtype=np.float32))
    np.testing.assert_array_equal(pts[1].features, edited)
    assert [p.decision.id for p in store.review_queue.support_points(feature_model="m")] == [d1.id]
    assert pts[0].decision.support_id == f"review-{ood.id}-decision-{d1.id}"

    out = tmp_path / "rows.jsonl"
    assert store.review_queue.export_training_rows(out) == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == [
        {"prompt": "q2", "completion": "weird", "label": 0},
        {"prompt": "q3", "completion": "better answer", "label": 1},
        {"prompt": "q3", "completion": "meh", "label": 0},
    ]

    undone = store.review_queue.undo_last_decision()
    assert undone.id == d2.id and undone.undone_at is not None
    assert [i.id for i in store.review_queue.review_items(status="pending")] == [low.id]
    assert [p.decision.id for p in store.review_queue.support_points()] == [d1.id]
    assert store.review_queue.undo_last_decision().id == d1.id
    assert store.review_queue.undo_last_decision() is None
    assert store.review_queue.training_rows() == []

    # a second decision on the same entry supersedes the first
    store.review_queue.record_decision(ood.id, 0)
    d4 = store.review_queue.record_decision(ood.id, 1)
    assert [p.decision.id for p in store.review_queue.support_points()] == [d4.id]


def test_bad_decisions_are_refused(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    a, b, ids = _fill(store)
    item = store.review_queue.review_items()[0]
    with pytest.raises(DataError, match="label must be 1"):
        store.review_queue.record_decision(item.id, 2)
    with pytest.raises(DataError, match="use label 1"):
        store.review_queue.record_decision(item.id, 0, completion="x")
    with pytest.raises(DataError, match="cannot be empty"):
        store.review_queue.record_decision(item.id, 1, completion="  ")
    with pytest.raises(DataError, match="no review-queue entry"):
        store.review_queue.record_decision(999, 1)
    assert store.review_queue.last_decision() is None


def test_deleting_a_session_reports_its_active_decisions(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    a, b, ids = _fill(store)
    store.review_queue.record_decision(store.review_queue.review_items(session_id=b.id)[0].id, 0)
    assert store.delete_session(a.id) == 0
    assert store.delete_session(b.id) == 1
    assert store.review_queue.review_items() == [] and store.review_queue.support_points() == []


def test_the_queue_lists_apart_what_no_verifier_judged_and_its_labels_join_no_support_set(tmp_path):
    """What a label can change (an estimator verdict, out of scope at d = 0 included) is the reviewable
    list; an answer no verifier judged (no task, no checkable answer, no verifier) is listed apart with
    why, and a label on it is a training row but no support point."""
    from mlx_sdm.network.verdict import DocumentVerdict

    store = ChatStore(tmp_path / "chat.db")
    a, b, ids = _fill(store)
    s = store.create_session("gamma")
    store.add_message(s.id, "user", "Write a haiku.")
    ids["no_task"] = store.add_turn(s.id, None, stored_answer("leaves fall", state="out_of_scope", verdict=DocumentVerdict(None, unjudged="no_checkable_answer"),
        features=np.full(4, 5.0), feature_model="m", review_reasons=["no_checkable_answer"])).message_id
    store.add_message(s.id, "user", "hello")
    ids["none"] = store.add_turn(s.id, None, stored_answer("hi", state="no_verifier", features=np.full(4, 6.0),
                                                 feature_model="m", review_reasons=["escalated_high"])).message_id
    judged_ids = [i.message_id for i in store.review_queue.review_items(judged=True)]
    apart = store.review_queue.review_items(judged=False)
    assert judged_ids == [ids["b_low"], ids["a_ood"]]  # out of scope at d = 0 was judged: a label can change it
    assert [i.message_id for i in apart] == [ids["none"], ids["no_task"]]
    assert len(store.review_queue.review_items()) == 4
    assert all(i.judged and i.why_a_label_changes_nothing is None for i in store.review_queue.review_items(judged=True))
    words = {i.message_id: i.why_a_label_changes_nothing for i in apart}
    assert "no checkable answer" in words[ids["no_task"]] and "changes no verdict" in words[ids["no_task"]]
    assert "no verifier judged this answer" in words[ids["none"]]
    for item in apart:
        store.review_queue.record_decision(item.id, 1)
    ood = store.review_queue.review_items(judged=True, session_id=a.id)[0]
    store.review_queue.record_decision(ood.id, 0)
    assert [p.decision.review_id for p in store.review_queue.support_points(feature_model="m")] == [ood.id]
    assert len(store.review_queue.training_rows()) == 3  # the labels still export as training rows
