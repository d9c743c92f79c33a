"""A review label joins only the verifier AND the task (of a multi-task verifier) it was
given under. The store keeps the routed task with each verdict and decision (schema 5); old stores
migrate and keep their labels, which count for every task of their verifier."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from mlx_sdm.network.coverage import TaskRoute
from mlx_sdm.network.verifier import DocumentVerifier, FeatureRecipe
from mlx_sdm.store.records import TaskScope
from mlx_sdm.store.chat_store import ChatStore
from tests.stored import answer as stored_answer, judged
from tests.tiny_verifier import build_tiny_verifier

V, OTHER = "/verifiers/suite", "/verifiers/other"


def _label(store, text, *, verifier, task, label=1, value=1.0):
    """An answer judged under (verifier, task), queued and labelled with the task it was stored under."""
    s = store.create_session(text)
    store.add_message(s.id, "user", text)
    mid = store.add_turn(s.id, None, stored_answer(text, state="not_verified", verdict=judged(),
                                         features=np.full(4, value), feature_model="m", verifier=verifier,
                                         task=task, review_reasons=["below_threshold"])).message_id
    message = store.message(mid)
    return store.review_queue.record_decision(message.review_id, label, verifier=verifier, task=message.task)


def _ids(points):
    return [p.decision.id for p in points]


def test_support_points_keep_each_task_of_a_verifier_apart(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    a = _label(store, "fever claim", verifier=V, task="fever")
    b = _label(store, "bbc article", verifier=V, task="bbc_topic", value=2.0)
    unrouted = _label(store, "capital of Australia?", verifier=V, task=None, value=3.0)
    elsewhere = _label(store, "fever claim", verifier=OTHER, task="fever", value=4.0)
    assert a.task == TaskScope("fever") and unrouted.task == TaskScope(None)
    assert _ids(store.review_queue.support_points(verifier=V, task=TaskScope("fever"))) == [a.id]
    assert _ids(store.review_queue.support_points(verifier=V, task=TaskScope("bbc_topic"))) == [b.id]
    assert _ids(store.review_queue.support_points(verifier=V, task=TaskScope(None))) == [unrouted.id]  # unrouted is a scope too
    assert _ids(store.review_queue.support_points(verifier=OTHER, task=TaskScope("fever"))) == [elsewhere.id]
    assert _ids(store.review_queue.support_points(verifier=V)) == [a.id, b.id, unrouted.id]  # no task given: every task
    # a decision without a task (the caller did not know it) counts for every task of its verifier only
    s = store.create_session("x")
    mid = store.add_turn(s.id, None, stored_answer("y", state="not_verified", features=np.zeros(4), feature_model="m",
                                         verifier=V, review_reasons=["below_threshold"])).message_id
    unknown = store.review_queue.record_decision(store.message(mid).review_id, 0, verifier=V)
    assert unknown.task is None
    assert _ids(store.review_queue.support_points(verifier=V, task=TaskScope("fever"))) == [a.id, unknown.id]
    assert _ids(store.review_queue.support_points(verifier=V, task=TaskScope("bbc_topic"))) == [b.id, unknown.id]
    assert _ids(store.review_queue.support_points(verifier=OTHER, task=TaskScope("fever"))) == [elsewhere.id]


def test_an_old_store_migrates_and_keeps_its_labels(tmp_path):
    """A schema-4 file (labels kept per verifier only): after the migration its labels are still there,
    without a task, and count for every task of their verifier (today's behaviour), never another's."""
    path = tmp_path / "old.db"
    old = ChatStore(path, target_version=4)
    stamp = "2026-01-01T00:00:0{}.000000Z"
    with old.db.tx() as conn:
        conn.execute("INSERT INTO sessions VALUES ('s1', 'old chat', ?, ?, 'm', ?)", (stamp.format(0), stamp.format(0), V))
        conn.execute("INSERT INTO messages(session_id, role, text, status, created_at) VALUES ('s1', 'user', 'q', 'done', ?)",
                     (stamp.format(1),))
        conn.execute("INSERT INTO messages(session_id, role, text, status, created_at, features, feature_model) "
                     "VALUES ('s1', 'assistant', 'a', 'done', ?, ?, 'm')", (stamp.format(2), np.ones(4, np.float32).tobytes()))
        conn.execute("INSERT INTO verdicts(message_id, status, verifier, created_at) VALUES (2, 'not_verified', ?, ?)",
                     (V, stamp.format(2)))
        conn.execute("INSERT INTO review_queue(message_id, session_id, reason, created_at) VALUES (2, 's1', 'below_threshold', ?)",
                     (stamp.format(3),))
        conn.execute("INSERT INTO decisions(review_id, label, created_at, verifier) VALUES (1, 1, ?, ?)", (stamp.format(4), V))
    old.close()

    store = ChatStore(path)
    assert store.schema_version >= 5
    assert store.message(2).task is None and store.message(2).verifier == V  # judged before tasks were kept
    (point,) = store.review_queue.support_points(verifier=V, task=TaskScope("fever"))
    assert point.decision.task is None and point.label == 1 and point.text == "a"
    assert _ids(store.review_queue.support_points(verifier=V, task=TaskScope("bbc_topic"))) == [point.decision.id]
    assert _ids(store.review_queue.support_points(verifier=V, task=TaskScope(None))) == [point.decision.id]
    assert store.review_queue.support_points(verifier=OTHER, task=TaskScope("fever")) == []
    # new labels on the migrated file keep their task
    b = _label(store, "bbc article", verifier=V, task="bbc_topic", value=2.0)
    assert _ids(store.review_queue.support_points(verifier=V, task=TaskScope("fever"))) == [point.decision.id]
    assert _ids(store.review_queue.support_points(verifier=V, task=TaskScope("bbc_topic"))) == [point.decision.id, b.id]
    assert store.db.integrity_check() == "ok"


def test_the_recipe_routes_a_question_to_its_task():
    recipe = FeatureRecipe(system="generic", task_systems=(("Claim:", "fact checker"), ("Article:", "topic classifier")),
                           task_names=("fever", "bbc_topic"))
    assert recipe.route("Claim: Paris is in France.") == TaskRoute("fact checker", "fever", "Claim:")
    assert recipe.route("  Article: oil prices fall") == TaskRoute("topic classifier", "bbc_topic", "Article:")
    assert recipe.route("What is the capital of Australia?") == TaskRoute("generic", None)
    assert not recipe.route("What is the capital of Australia?").matched
    assert recipe.system_for("Claim: x") == "fact checker"
    single = FeatureRecipe(task_systems=(("Claim:", "fact checker"),), task_names=("fever",))
    assert single.route("Claim: x") == TaskRoute("fact checker", None, "Claim:")  # one task: nothing to keep apart


def test_an_older_manifest_names_its_tasks_from_their_example_prompts(tmp_path):
    """verifier.json written before "task_names" (the shipped suite verifier): each routing entry gets
    the name of the listed task whose example prompt starts with its prefix."""
    folder = multi_task_verifier(tmp_path / "v")
    manifest = json.loads((folder / "verifier.json").read_text())
    del manifest["feature"]["task_names"]
    (folder / "verifier.json").write_text(json.dumps(manifest))
    verifier = DocumentVerifier.load(folder)
    assert verifier.recipe.task_names == ("task_a", "task_b")
    assert verifier.route(TASK_A + " Is Paris the capital of France?").task == "task_a"
    assert verifier.route(TASK_B + " Is Paris the capital of France?").task == "task_b"
    assert verifier.route("Is Paris the capital of France?").task is None


TASK_A, TASK_B = "Task A: check the claim.", "Task B: judge the claim."


def multi_task_verifier(directory):
    """The tiny verifier, declared as built on two tasks (each question routed by its instruction)."""
    folder = build_tiny_verifier(directory)
    verifier = DocumentVerifier.load(folder)
    verifier.recipe = FeatureRecipe(delimiter=verifier.recipe.delimiter, task_systems=((TASK_A, None), (TASK_B, None)),
                                    task_names=("task_a", "task_b"))
    verifier.tasks = [{"name": "task_a", "description": "A", "example_prompt": TASK_A + " Is Rome in Italy?"},
                      {"name": "task_b", "description": "B", "example_prompt": TASK_B + " Is Rome in Italy?"}]
    shutil.rmtree(folder)
    verifier.save(folder)
    return folder


@pytest.fixture
def suite_engine(tmp_path):
    from mlx_sdm.executor.engine import ChatEngine, EngineConfig
    from tests.tiny_verifier import tiny_components

    path = multi_task_verifier(tmp_path / "suite")
    engine = ChatEngine(EngineConfig(max_tokens=10, auq_thresholds=(1.0, 0.9999, 0.0), generate_reflection=False),
                        ChatStore(tmp_path / "chat.db"), components=tiny_components(path))
    engine.ready.result(120)
    yield engine
    engine.shutdown()


def _ask(engine, text):
    return engine.send(engine.store.create_session(text[:20]).id, text).result(60)


def _review_exemplars(result):
    return [e["id"] for e in result.outcome.verdict.to_dict()["exemplars"] if e["id"].startswith("review-")]


def test_a_label_under_one_task_never_reaches_another_task_of_the_verifier(suite_engine):
    """Through the engine and the review service: an answer labelled while the question was routed to
    task A joins A's support set; the same verifier judging a task-B (or unrouted) question does not
    see it, although it would be B's nearest exemplar if it leaked."""
    engine, store = suite_engine, suite_engine.store
    claim = " Is Paris the capital of France?"
    base = engine.info().support_size
    b_before = _ask(engine, TASK_B + claim)
    first = _ask(engine, TASK_A + claim)
    assert store.message(first.message_id).task == TaskScope("task_a")
    assert store.message(b_before.message_id).task == TaskScope("task_b")
    result = engine.decide(first.review_id, int(first.outcome.verdict.to_dict()["prediction"])).result(60)
    assert result.applied and result.support_size == base + 1 and "task task_a" in result.message
    assert store.review_queue.decision(result.decision_id).task == TaskScope("task_a")
    review = engine._require_review()  # the verifiers the turns are judged by (the review service provides them)
    assert engine.call(lambda c: review.verifier_for(None).estimator.support_size).result(60) == base  # unrouted: untouched
    assert engine.info().support_size == base + 1  # the status line counts every label of the verifier

    support_id = f"review-{first.review_id}-decision-{result.decision_id}"
    assert _review_exemplars(_ask(engine, TASK_A + claim)) == [support_id]  # the same task sees it
    b_after = _ask(engine, TASK_B + claim)
    assert _review_exemplars(b_after) == []
    assert b_after.outcome.verdict.to_dict()["q"] == b_before.outcome.verdict.to_dict()["q"]
    assert b_after.outcome.verdict.to_dict()["d"] == pytest.approx(b_before.outcome.verdict.to_dict()["d"])
    assert _review_exemplars(_ask(engine, "Is Paris the capital of France?")) == []
    # had it leaked, B's question would have found it: task A's verifier lists it among B's nearest
    b_features = store.message(b_after.message_id).features
    leaked = engine.call(lambda c: review.verifier_for("task_a").judge(b_features).to_dict()["exemplars"]).result(60)
    assert support_id in [e["id"] for e in leaked]

    # a label under task B joins B only; the saved copies are per task
    decided_b = engine.decide(b_after.review_id, int(b_after.outcome.verdict.to_dict()["prediction"])).result(60)
    assert decided_b.applied and decided_b.support_size == base + 2 and decided_b.saved_to != result.saved_to
    assert DocumentVerifier.load(decided_b.saved_to).estimator.support_size == base + 1
    assert engine.info().support_size == base + 2
    assert _review_exemplars(_ask(engine, TASK_A + claim)) == [support_id]
    # undo takes B's point out of B's set (and its saved copy); A keeps its own
    undone = engine.undo_decision().result(60)
    assert undone.decision_id == decided_b.decision_id and undone.support_size == base + 1  # the one count: A's label stays
    assert engine.info().support_size == base + 1
    assert DocumentVerifier.load(undone.saved_to).estimator.support_size == base
    assert _review_exemplars(_ask(engine, TASK_B + claim)) == []
    assert _review_exemplars(_ask(engine, TASK_A + claim)) == [support_id]
