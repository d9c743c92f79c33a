"""``mlx-sdm review``: the queue as JSON, accept / reject / correct through the one write path
(``executor/review.py: record_review``) the review screen and the server use, bad input as one line and exit
status 2, and a decision made with no model loaded reaching the verifier at its next load."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from mlx_sdm import cli
from mlx_sdm.commands import review as review_cmd
from mlx_sdm.executor import review as review_mod
from mlx_sdm.store.chat_store import ChatStore
from tests.stored import answer as stored_answer, judged

ENTRY_KEYS = {"id", "prompt", "answer", "task", "status", "verdict_status", "verdict_reason", "judged",
              "not_judged_because", "reasons", "created_at", "session_id", "session_title", "message_id", "decision"}
QUESTION = "Is Paris the capital of France?"


def _turn(store: ChatStore, session: str, question: str, answer: str, **fields) -> int:
    store.add_message(session, "user", question)
    return store.add_turn(session, None, stored_answer(answer, prompt=[{"role": "user", "content": question}],
                                                       **fields)).review_id


@pytest.fixture
def db(tmp_path):
    """A store with three queued answers: two judged (one under task "capitals"), one no verifier judged."""
    path = tmp_path / "chat.db"
    with ChatStore(path) as store:
        s = store.create_session("Capitals").id
        ids = {
            "capital": _turn(store, s, QUESTION, "No.", state="not_verified", verdict=judged(), task="capitals",
                             features=np.ones(4), feature_model="m", review_reasons=["below_threshold"]),
            "river": _turn(store, s, "How long is the Seine?", "12 km.", state="not_verified", verdict=judged(),
                           features=np.full(4, 2.0), feature_model="m", review_reasons=["below_threshold"]),
            "haiku": _turn(store, s, "Write a haiku.", "leaves fall", state="no_verifier", features=np.full(4, 3.0),
                           feature_model="m", review_reasons=["escalated_high"]),
        }
    return SimpleNamespace(path=path, ids=ids)


def run(capsys, *argv: str) -> object:
    assert cli.main(["review", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def refused(capsys, *argv: str) -> str:
    """Bad input: exit status 2 and one line on stderr, which is returned."""
    assert review_cmd.main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err
    return err


def test_list_prints_the_queue_as_one_json_array(db, capsys):
    entries = run(capsys, "list", "--db", str(db.path))
    assert [e["id"] for e in entries] == [db.ids["haiku"], db.ids["river"], db.ids["capital"]]  # newest first
    assert all(set(e) == ENTRY_KEYS for e in entries)
    capital = entries[-1]
    assert (capital["prompt"], capital["answer"], capital["task"], capital["status"]) == (QUESTION, "No.", "capitals", "pending")
    assert capital["verdict_status"] == "not_verified" and capital["verdict_reason"] and capital["judged"]
    assert capital["decision"] is None and capital["reasons"] == ["below_threshold"]
    assert entries[0]["judged"] is False and "changes no verdict" in entries[0]["not_judged_because"]
    # the review screen's filters
    assert [e["id"] for e in run(capsys, "list", "--db", str(db.path), "--task", "capitals")] == [db.ids["capital"]]
    assert [e["id"] for e in run(capsys, "list", "--db", str(db.path), "--judged", "no")] == [db.ids["haiku"]]
    assert len(run(capsys, "list", "--db", str(db.path), "--limit", "1")) == 1
    assert run(capsys, "list", "--db", str(db.path), "--status", "decided") == []
    assert len(run(capsys, "list", "--db", str(db.path), "--reason", "below_threshold", "--since", "2000-01-01")) == 2


def test_accept_reject_and_correct_decide_entries(db, capsys):
    accepted = run(capsys, "accept", str(db.ids["capital"]), "--db", str(db.path), "--note", "checked")
    assert accepted["decision"] == "accepted" and accepted["replaced"] is None and "next load" in accepted["applies"]
    assert accepted["entry"]["status"] == "decided" and accepted["entry"]["decision"]["note"] == "checked"
    assert accepted["entry"]["decision"]["task"] == "capitals"  # kept under the task the answer was judged under
    assert run(capsys, "reject", str(db.ids["haiku"]), "--db", str(db.path))["applies"].startswith("kept as a training row")
    corrected = run(capsys, "correct", str(db.ids["river"]), "The Seine is 777 km long.", "--db", str(db.path))
    assert corrected["decision"] == "corrected" and corrected["entry"]["decision"]["answer"] == "The Seine is 777 km long."
    assert "reads the corrected answer" in corrected["applies"]
    decided = run(capsys, "list", "--db", str(db.path), "--status", "decided")
    assert {e["id"]: e["decision"]["decision"] for e in decided} == {
        db.ids["capital"]: "accepted", db.ids["river"]: "corrected", db.ids["haiku"]: "rejected"}
    with ChatStore(db.path) as store:
        # the accepted answer is a support point at once; the edit waits for a model to read it (never the
        # original answer's features under the edit's label); the unjudged one is a training row only
        assert [p.decision.review_id for p in store.review_queue.support_points()] == [db.ids["capital"]]
        assert [d.review_id for d, _ in store.review_queue.edits_awaiting_features()] == [db.ids["river"]]
        assert {"prompt": "How long is the Seine?", "completion": "The Seine is 777 km long.", "label": 1} in \
            store.review_queue.training_rows()


def test_a_decided_entry_changes_only_with_replace(db, capsys):
    entry = str(db.ids["capital"])
    run(capsys, "accept", entry, "--db", str(db.path))
    err = refused(capsys, "reject", entry, "--db", str(db.path))
    assert f"review #{db.ids['capital']} is already decided: accepted" in err and "--replace" in err
    changed = run(capsys, "reject", entry, "--db", str(db.path), "--replace")
    assert (changed["decision"], changed["replaced"]) == ("rejected", "accepted")
    with ChatStore(db.path) as store:
        assert [p.label for p in store.review_queue.support_points()] == [0]  # the old label left


def test_bad_input_is_one_line_and_exit_status_2(db, tmp_path, capsys):
    assert "no review-queue entry with id 999" in refused(capsys, "accept", "999", "--db", str(db.path))
    err = refused(capsys, "correct", str(db.ids["river"]), "  ", "--db", str(db.path))
    assert "correct needs the corrected answer" in err and "'answer'" in err
    missing = tmp_path / "nowhere.db"
    err = refused(capsys, "list", "--db", str(missing))
    assert str(missing) in err and "--db" in err and not missing.exists()  # never created here
    assert str(missing) in refused(capsys, "accept", "1", "--db", str(missing))
    with pytest.raises(SystemExit) as exit_:  # argparse: an id that is no whole number
        review_cmd.main(["accept", "x", "--db", str(db.path)])
    assert exit_.value.code == 2 and "ID" in capsys.readouterr().err


def test_the_default_store_is_the_chats(db, capsys, monkeypatch):
    monkeypatch.setenv("MLX_SDM_HOME", str(db.path.parent))  # `mlx-sdm chat` and `serve` keep it at $MLX_SDM_HOME/chat.db
    assert len(run(capsys, "list")) == 3


def test_help_names_the_json_and_the_decisions(capsys):
    with pytest.raises(SystemExit):
        review_cmd.main(["list", "--help"])
    text = capsys.readouterr().out
    assert all(word in text for word in ('"prompt"', '"answer"', '"task"', "--status", "--task", "--limit", "--db"))
    assert "review" in cli.COMMANDS and cli.COMMANDS["review"][0] == "mlx_sdm.commands.review"


# ---------------------------------------------------------------------- the model's side


def _engine(store, verifier_dir):
    from mlx_sdm.executor.engine import ChatEngine, EngineConfig
    from tests.tiny_verifier import tiny_components

    engine = ChatEngine(EngineConfig(max_tokens=10, auq_thresholds=(1.0, 0.9999, 0.0), generate_reflection=False),
                        store, components=tiny_components(verifier_dir))
    engine.ready.result(120)
    return engine


def test_a_decision_made_with_no_model_reaches_the_verifier_at_its_next_load(tmp_path, verifier_dir, capsys):
    """The CLI records; the next load takes the store's decisions into the support set as it takes the TUI's, and
    reads a corrected answer with the model that judged the original."""
    store = ChatStore(tmp_path / "chat.db")
    engine = _engine(store, verifier_dir)
    base = engine.info().support_size
    first, second = (engine.send(store.create_session(t).id, QUESTION).result(60) for t in ("a", "b"))
    engine.shutdown()
    run(capsys, "accept", str(first.review_id), "--db", str(store.path))
    run(capsys, "correct", str(second.review_id), '{"correctness": true}', "--db", str(store.path))
    assert store.review_queue.review_item(second.review_id).decision.features is None  # no model read it yet
    engine = _engine(store, verifier_dir)
    try:
        assert engine.info().support_size == base + 2
        edit = store.review_queue.review_item(second.review_id).decision
        assert edit.features is not None and not edit.awaits_features
        held = engine._require_review().verifier_for(None).estimator.support_ids
        assert edit.support_id in held and store.review_queue.review_item(first.review_id).decision.support_id in held
    finally:
        engine.shutdown()
        store.close()


@pytest.mark.asyncio
async def test_the_review_screen_and_the_cli_record_through_the_same_function(tmp_path, verifier_dir, capsys, monkeypatch):
    from tests.test_tui_flows import SIZE, wait_until
    from tui.app import SdmChatApp
    from tui.screens.review import ReviewScreen

    calls: list[tuple[int, str]] = []
    original = review_mod.record_review

    def spy(store, decision, service=None):
        calls.append((decision.review_id, decision.verb))
        return original(store, decision, service)

    monkeypatch.setattr(review_mod, "record_review", spy)
    store = ChatStore(tmp_path / "chat.db")
    entry = _turn(store, store.create_session("s").id, QUESTION, "No.", state="not_verified", verdict=judged(),
                  features=np.ones(4), feature_model="m", review_reasons=["below_threshold"])
    engine = _engine(store, verifier_dir)
    try:
        app = SdmChatApp(engine=engine, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("ctrl+r")
            await wait_until(pilot, lambda: isinstance(app.screen, ReviewScreen))
            await pilot.press("a")  # the review screen's accept
            await wait_until(pilot, lambda: store.review_queue.review_item(entry).decision is not None)
    finally:
        engine.shutdown()
    run(capsys, "reject", str(entry), "--replace", "--db", str(store.path))
    assert calls == [(entry, "accept"), (entry, "reject")]
    store.close()
