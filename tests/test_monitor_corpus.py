"""The session corpus (scripts/session_corpus.py and, beside it, corpus.py and corpus_plan.py) on the tiny
model: a deterministic plan that mixes everyday questions, task questions and follow-ups; labels;
sessions through the chat's own turn with provenance; resume after a kill; shards merged in plan
order; and eval-monitor's held-out table on the shipped corpus."""

import json

import pytest

from mlx_sdm.network.verdict import DocumentVerdict
from tests.scripts_side import load_script

corpus_plan = load_script("corpus_plan.py")
corpus = load_script("corpus.py")  # after corpus_plan.py, which it imports by name
EVERYDAY, EverydayPrompt, PlannedTurn = corpus_plan.EVERYDAY, corpus_plan.EverydayPrompt, corpus_plan.PlannedTurn
check_everyday, everyday_prompts, label_turn = corpus_plan.check_everyday, corpus_plan.everyday_prompts, corpus_plan.label_turn
plan_sessions, session_success = corpus_plan.plan_sessions, corpus_plan.session_success

pytestmark = pytest.mark.filterwarnings("ignore::mlx_sdm.monitor.online.tracer.MonitorWarning")

EVERYDAY_TINY = [EverydayPrompt("e0", "arithmetic", "What is 12 times 7?", {"type": "number", "value": 84}),
                 EverydayPrompt("e1", "trivia", "What is the capital of Australia?", {"type": "contains", "any": ["Canberra"]}),
                 EverydayPrompt("e2", "greeting", "Hello!", {"type": "words", "min": 1})]


@pytest.fixture(scope="module")
def corpus_setup(tmp_path_factory):
    from mlx_sdm.network.tasks.registry import load_task
    from tests.tiny_verifier import build_tiny_verifier, tiny_components

    setup_from = corpus.setup_from

    tmp = tmp_path_factory.mktemp("corpus")
    capitals = tmp / "capitals.jsonl"
    capitals.write_text("".join(json.dumps({"prompt": f"Is city {i} a capital? Reply {{\"correctness\": bool}}.",
                                            "answer": {"correctness": i % 2 == 0}}) + "\n" for i in range(10)))
    tasks = {t.name: t for t in (load_task(str(capitals)),)}
    components = tiny_components(build_tiny_verifier(tmp / "verifier"))(None)
    return setup_from(components, tasks, max_tokens=4, split="pool", everyday=EVERYDAY_TINY), tmp


def test_plan_is_deterministic_and_mixes_everyday_task_and_follow_ups():
    a = plan_sessions({"x": 5, "y": 7}, 30, 60, seed=3)
    assert a == plan_sessions({"x": 5, "y": 7}, 30, 60, seed=3) and a != plan_sessions({"x": 5, "y": 7}, 30, 60, seed=4)
    assert {t.kind for p in a for t in p.turns} == {"everyday", "task", "sure", "why"}
    assert any({t.task for t in p.turns} >= {EVERYDAY, "x"} or {t.task for t in p.turns} >= {EVERYDAY, "y"} for p in a)
    for p in a:
        assert 2 <= len(p.turns) <= 5 and p.turns[0].kind in ("everyday", "task")
        for prev, t in zip(p.turns, p.turns[1:]):
            if t.kind in ("sure", "why"):  # a follow-up is about the question just asked
                assert (t.task, t.item_index) == (prev.task, prev.item_index)


def test_the_shipped_everyday_prompts_cover_every_kind():
    prompts = everyday_prompts()
    assert len(prompts) >= 30 and {p.kind for p in prompts} == {"greeting", "arithmetic", "howto", "trivia",
                                                               "writing", "translation"}
    for p in prompts:
        check_everyday(p.check, "")  # every check is one the labeller knows


def test_labels():
    ask = PlannedTurn("everyday", EVERYDAY, 0)
    assert label_turn(ask, "12 times 7 is 84.", check={"type": "number", "value": 84}).correct
    wrong = label_turn(ask, "12 times 7 is 72.", check={"type": "number", "value": 84})  # a wrong answer the model once gave
    assert not wrong.correct and wrong.why == "84 does not appear"
    # a number the answer only repeats from the question is not its answer
    division = {"type": "number", "value": 12}
    echo = label_turn(ask, "144 divided by 12 is 1.44.", check=division, question="What is 144 divided by 12?")
    assert not echo.correct and echo.why == "12 does not appear beyond the question's own"
    assert label_turn(ask, "144 divided by 12 is 12.", check=division, question="What is 144 divided by 12?").correct
    broken = label_turn(ask, '{"{" "{" " " " " " " " "', check={"type": "words", "min": 1})
    assert not broken.correct and broken.why.startswith("degenerate: ")
    assert label_turn(ask, "The capital is canberra.", check={"type": "contains", "any": ["Canberra"]}).correct
    why = PlannedTurn("why", EVERYDAY, 0)
    assert label_turn(why, "Because it is the product of the two numbers.").correct and not label_turn(why, "OK.").correct
    turns = [{"kind": "everyday", "task": EVERYDAY, "item": "e0", "correct": False},
             {"kind": "sure", "task": EVERYDAY, "item": "e0", "correct": True}]
    assert session_success(turns)  # the follow-up's answer replaces the first
    assert not session_success(turns + [{"kind": "why", "task": EVERYDAY, "item": "e0", "correct": False}])


def test_corpus_runs_the_chat_turn_resumes_after_a_kill_and_merges_shards(corpus_setup):
    completed_sessions, merge_shards, run_corpus = corpus.completed_sessions, corpus.merge_shards, corpus.run_corpus
    from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl

    setup, tmp = corpus_setup
    whole = tmp / "whole.jsonl"
    assert run_corpus(whole, setup, 4, seed=1) == 4
    killed, calls = tmp / "killed.jsonl", []

    def kill_at_sixth_turn(n):
        calls.append(n)
        if len(calls) == 6:  # sessions have 2-5 turns: at least one written, not all four
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_corpus(killed, setup, 4, seed=1, on_step=kill_at_sixth_turn)
    done_before = completed_sessions(killed)
    assert 0 < len(done_before) < 4
    with open(killed, "a") as handle:  # a block torn by the kill
        handle.write('{"record": "session", "session_id": "corpus-1-0003", "metadata": {"n_steps": 4}}\n{"record": "st')
    assert run_corpus(killed, setup, 4, seed=1) == 4 - len(done_before)
    assert killed.read_text() == whole.read_text()
    shards = [tmp / f"shard-{i}.jsonl" for i in range(2)]
    for i, shard in enumerate(shards):
        run_corpus(shard, setup, 4, seed=1, shard=(i, 2))
    assert merge_shards(shards, tmp / "merged.jsonl") == 4
    assert (tmp / "merged.jsonl").read_text() == whole.read_text()
    sessions = read_sessions_jsonl(whole)
    assert [s.session_id for s in sessions] == [f"corpus-1-{i:04d}" for i in range(4)]
    for s in sessions:
        assert s.provenance == setup.provenance and s.provenance.verifier.sha256
        turns = s.metadata["turns"]
        assert len(turns) == len(s.agent_steps()) == s.metadata["n_steps"] // 2
        for t, step in zip(turns, s.agent_steps()):
            assert t["step_id"] == step.step_id and isinstance(t["correct"], bool)
            fields = {k: v for k, v in t["verdict"].items() if k != "status"}
            assert DocumentVerdict.from_dict(fields).status.value == t["verdict"]["status"]
            assert step.token_logprobs is not None and step.auq.p_true_confidence is not None and step.tracer is not None
            assert t["fused_p"] is not None and t["action"]
        assert s.outcome == ("success" if session_success(turns) else "failure")


def test_eval_monitor_heldout_on_the_shipped_corpus(capsys):
    """The claims of docs/monitoring.md on the shipped corpus (400 sessions of the product as it ships):
    held out, the fused forecast and the verdict monitor rank failures above successes better than chance
    (both AUROC intervals lie above 0.5; the fused forecast's is 0.735, short of the goal of 0.75), the
    fused forecast beats the base rate's TPS_log (its gain interval lies above 0), AUQ and TRACER alone do not."""
    from mlx_sdm.commands.eval_monitor import main

    assert main(["shipped-corpus", "--json", "--bootstrap", "100"]) == 0
    out = json.loads(capsys.readouterr().out)
    data = out["heldout"]
    policy = out["pause_policy"]  # chosen as the shipped one was: the same threshold, the rate held out
    from mlx_sdm.monitor.forecast.policy import PausePolicy

    # float64 throughout, stable to about 1e-15 across machines (tests/test_monitor_fused.py)
    assert policy["threshold"] == pytest.approx(PausePolicy.shipped().threshold, rel=1e-6)
    assert policy["paused"]["low"] <= policy["pause_rate"] <= policy["paused"]["high"]
    assert data["sessions"] == 400 and data["folds"] == 5
    rows = {m["monitor"]: m for m in data["monitors"]}
    assert rows["verifier"]["auroc"]["low"] > 0.5 and rows["fused"]["auroc"]["low"] > 0.5
    assert rows["fused"]["auroc"]["value"] > 0.7
    for name in ("fused", "verifier"):
        assert rows[name]["tps_log"]["value"] > rows["base_rate"]["tps_log"]["value"]
    assert rows["fused"]["delta_log"]["low"] > 0
    for name in ("auq", "tracer"):
        assert rows[name]["delta_log"]["low"] <= 0
