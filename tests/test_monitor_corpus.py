"""The session corpus (mlx_sdm.app.session_corpus) on the tiny model: deterministic plan, labelled
sessions, resume after a kill; and eval-monitor's held-out table on the shipped corpus."""

import json

import pytest

from mlx_sdm.network.verdict import status_from_dict

def _corpus():
    from mlx_sdm.app import session_corpus

    return session_corpus


@pytest.fixture(scope="module")
def corpus_setup(tmp_path_factory):
    from mlx_sdm.network.tasks import load_task
    from mlx_sdm.network.verifier import DocumentVerifier
    from tests.tiny_verifier import build_tiny_verifier, tiny_loaded_model

    tmp = tmp_path_factory.mktemp("corpus")
    capitals = tmp / "capitals.jsonl"
    capitals.write_text("".join(json.dumps({"prompt": f"Is city {i} a capital? Reply {{\"correctness\": bool}}.",
                                            "answer": {"correctness": i % 2 == 0}}) + "\n" for i in range(10)))
    colours = tmp / "colours.jsonl"
    colours.write_text("".join(json.dumps({"prompt": f"Colour of thing {i}? Reply {{\"colour\": str}}.",
                                           "answer": {"colour": ["red", "blue"][i % 2]}}) + "\n" for i in range(10)))
    sc = _corpus()
    lm = tiny_loaded_model()
    verifier = DocumentVerifier.load(build_tiny_verifier(tmp / "verifier"))
    tasks = {t.name: t for t in (load_task(str(capitals)), load_task(str(colours)))}
    return sc, sc.CorpusComponents(lm, verifier, None, tasks, split="pool", max_tokens=4), tmp


def test_plan_is_deterministic_and_mixes_tasks():
    sc = _corpus()
    a = sc.plan_sessions({"x": 5, "y": 7, "z": 3}, 40, seed=3)
    assert a == sc.plan_sessions({"x": 5, "y": 7, "z": 3}, 40, seed=3)
    assert a != sc.plan_sessions({"x": 5, "y": 7, "z": 3}, 40, seed=4)
    kinds = {t.kind for p in a for t in p.turns}
    assert kinds == {"ask", "sure", "next"}
    assert any(len({t.task for t in p.turns}) > 1 for p in a)
    for p in a:
        assert p.turns[0].kind == "ask"
        for prev, t in zip(p.turns, p.turns[1:]):
            if t.kind in ("sure", "next"):
                assert t.task == prev.task
            if t.kind == "sure":
                assert t.item_index == prev.item_index


def test_corpus_resumes_after_a_kill(corpus_setup):
    from mlx_sdm.monitor.session_file import read_sessions_jsonl

    sc, components, tmp = corpus_setup
    whole = tmp / "whole.jsonl"
    assert sc.run_corpus(whole, components, 4, seed=1, progress=False) == 4
    killed = tmp / "killed.jsonl"
    calls = []

    def kill_at_fourth_step(n):
        calls.append(n)
        if len(calls) == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sc.run_corpus(killed, components, 4, seed=1, progress=False, on_step=kill_at_fourth_step)
    done_before = sc.completed_sessions(killed)
    assert 0 < len(done_before) < 4
    with open(killed, "a") as handle:  # a block torn by the kill
        handle.write('{"record": "session", "session_id": "corpus-1-0003", "metadata": {"n_steps": 4}}\n{"record": "st')
    written = sc.run_corpus(killed, components, 4, seed=1, progress=False)
    assert written == 4 - len(done_before)
    assert killed.read_text() == whole.read_text()
    sessions = read_sessions_jsonl(killed)
    assert [s.session_id for s in sessions] == [f"corpus-1-{i:04d}" for i in range(4)]
    for s in sessions:
        turns = s.metadata["turns"]
        assert len(turns) == len(s.agent_steps()) == s.metadata["n_steps"] // 2
        for t, step in zip(turns, s.agent_steps()):
            assert t["step_id"] == step.step_id and t["verdict"]["status"] in ("verified", "not_verified", "out_of_scope")
            # the stored word is the one rule's (network/verdict.py) on the stored fields, not a second copy of it
            fields = {k: v for k, v in t["verdict"].items() if k != "status"}
            assert status_from_dict(fields).value == t["verdict"]["status"]
            assert step.token_logprobs is not None and step.auq.p_true_confidence is not None and step.tracer is not None
        final = {}
        for t in turns:
            final[t["item"]] = t["correct"]
        assert s.outcome == ("success" if all(final.values()) else "failure")


def test_eval_monitor_heldout_on_the_shipped_corpus(capsys):
    """The claim of docs/monitoring-eval.md: on held-out folds the fused monitor beats the base rate's TPS_log with AUROC >= 0.70."""
    from mlx_sdm.commands.eval_monitor import main

    assert main(["shipped-corpus", "--json", "--bootstrap", "100"]) == 0
    data = json.loads(capsys.readouterr().out)["heldout"]
    assert data["sessions"] == 351 and data["folds"] == 5 and data["best"] == "fused"
    rows = {m["monitor"]: m for m in data["monitors"]}
    assert rows["fused"]["tps_log"]["value"] > rows["base_rate"]["tps_log"]["value"]
    assert rows["fused"]["delta_log"]["low"] > 0 and rows["fused"]["auroc"]["value"] >= 0.70
    assert rows["base_rate"]["auroc"]["value"] == pytest.approx(0.5, abs=0.01)
