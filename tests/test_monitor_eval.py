"""eval-monitor over the session JSONL and a hand-made tau2-bench Results file."""

import json

import numpy as np
import pytest

from mlx_sdm.commands.eval_monitor import main
from mlx_sdm.monitor.evaluation.evaluate import evaluate_sessions
from mlx_sdm.monitor.forecast.scoring import auarc, censored_trajectory_score, trajectory_proper_score
from mlx_sdm.monitor.evaluation.tau2 import read_tau2_results
from mlx_sdm.monitor.session_file.records import AUQOutput, Session, SessionStep, VerifierOutput
from mlx_sdm.monitor.session_file.writer import write_sessions_jsonl


def _labelled_sessions():
    sessions = []
    for i in range(12):
        success = i % 2 == 0
        conf = [0.9 - 0.01 * i, 0.85] if success else [0.5 + 0.01 * i, 0.3]
        steps = [SessionStep("user_0", "user", None, f"question number {i}")]
        for j, c in enumerate(conf):
            steps.append(SessionStep(
                f"llm_{j + 1}", "agent", "llm_call", f"answer {i} part {j}", token_logprobs=[-0.5], tokens=[" answer"],
                auq=AUQOutput(propagated_confidence=c, level="medium", action="proceed_with_log"),
                verifier=VerifierOutput(p_lower=0.97 if success else 0.2, admitted=success) if j == 1 else None,
            ))
        sessions.append(Session(f"s{i:02d}", steps=steps, outcome="success" if success else "failure", termination="complete"))
    sessions.append(Session("cens", steps=[SessionStep("llm_0", "agent", "llm_call", "x", token_logprobs=[-1.0], tokens=["x"],
                                                        auq=AUQOutput(propagated_confidence=0.6))],
                            termination="censored", horizon=3, pi=0.25))
    sessions.append(Session("gone", steps=[SessionStep("llm_0", "agent", "llm_call", "y", token_logprobs=[], tokens=[],
                                                        auq=AUQOutput(propagated_confidence=0.6))],
                            termination="abandoned", outcome="failure"))
    return sessions


def test_evaluate_sessions_values():
    sessions = _labelled_sessions()
    report = evaluate_sessions(sessions)
    auq, tracer, verifier = report.rows
    expected = [trajectory_proper_score([s.steps[1].auq.propagated_confidence, s.steps[2].auq.propagated_confidence],
                                        s.success) for s in sessions[:12]]
    expected.append(censored_trajectory_score([0.6], 3, complete=False, pi=0.25))
    assert auq.tps_sessions == 13 and auq.tps_log == pytest.approx(np.mean(expected))
    assert auq.auroc == 1.0  # every failure has a lower weighted-mean confidence
    success = np.array([1 - i % 2 for i in range(12)] + [0])  # "gone" is labelled failure, ranked too
    assert auq.auarc == pytest.approx(auarc(np.r_[[1 - (2 / 3 * c0 + 1 / 3 * c1) for c0, c1 in
                                                   [((0.9 - 0.01 * i, 0.85) if i % 2 == 0 else (0.5 + 0.01 * i, 0.3)) for i in range(12)]], 0.4],
                                                  success))
    assert verifier.sessions == 12 and verifier.auroc == 1.0
    assert tracer.sessions == 14 and report.tracer_embedder == "none (Jaccard only)"
    assert report.excluded_from_tps == {"abandoned": 1, "error": 0, "unlabelled": 0} and report.censored == 1
    assert report.tracer_early_warning is not None and len(report.tracer_early_warning.times) == 7  # 6 failed + "gone"


def test_cli_table_json_and_plot(tmp_path, capsys):
    path = tmp_path / "sessions.jsonl"
    write_sessions_jsonl(path, _labelled_sessions())
    assert main([str(path), "--plot", str(tmp_path / "m.png")]) == 0
    out = capsys.readouterr().out
    assert "AUQ confidence" in out and "TRACER exp(-risk)" in out and "verifier p_lower" in out
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([str(path), "--json", "--weights", "uniform"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["weights"] == "uniform" and [m["monitor"] for m in data["monitors"]] == ["auq", "tracer", "verifier"]
    assert data["monitors"][0]["auroc"] == 1.0


def test_cli_reports_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"record": "session", "session_id": "s"}\n{"record": "step", "step_id": "a", "actor": "agent", "step_type": "llm_call", "p_t": 3}\n')
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2" in err and "'p_t'" in err and "outside [0, 1]" in err


TAU2 = {
    "timestamp": "2025-06-10T00:00:00",
    "info": {"agent_info": {"llm": "gpt-4.1-mini"}, "user_info": {"llm": "gpt-4.1"}},
    "tasks": [{"id": "0"}],
    "simulations": [
        {
            "id": "sim-ok", "task_id": "0", "trial": 0, "termination_reason": "user_stop", "reward_info": {"reward": 1.0},
            "messages": [
                {"role": "system", "content": "policy"},
                {"role": "assistant", "content": "Hi! How can I help you today?", "turn_idx": 0},
                {"role": "user", "content": "Please cancel reservation ABC123.", "turn_idx": 1},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "get_reservation", "arguments": {"id": "ABC123"}}]},
                {"role": "tool", "id": "c1", "requestor": "assistant", "content": "{\"status\": \"active\"}"},
                {"role": "assistant", "content": "Your reservation is cancelled."},
                {"role": "user", "content": "Thanks! ###STOP###"},
            ],
        },
        {
            "id": "sim-fail", "task_id": "0", "trial": 1, "termination_reason": "max_steps", "reward_info": {"reward": 0.0},
            "messages": [
                {"role": "assistant", "content": "Hi! How can I help you today?"},
                {"role": "user", "content": "Please cancel reservation ABC123."},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "get_reservation", "arguments": "{\"id\": \"ABC123\"}"}]},
                {"role": "tool", "id": "c1", "requestor": "assistant", "content": ""},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c2", "name": "get_reservation", "arguments": {"id": "ABC123"}}]},
                {"role": "tool", "id": "c2", "requestor": "assistant", "content": ""},
            ],
        },
    ],
}


def test_tau2_import_and_cli(tmp_path, capsys):
    path = tmp_path / "airline.json"
    path.write_text(json.dumps(TAU2))
    ok, fail = read_tau2_results(path)
    assert ok.outcome == "success" and ok.termination == "complete" and ok.model == "gpt-4.1-mini"
    assert [s.actor for s in ok.steps] == ["agent", "user", "agent", "agent", "user"]
    assert [s.step_id for s in ok.steps] == ["llm_0", "user_1", "tool_2", "llm_3", "user_4"]
    assert ok.steps[2].observations == ['{"status": "active"}'] and ok.steps[2].step_type == "tool_call"
    assert fail.outcome == "failure" and fail.termination == "censored"
    assert fail.steps[2].observations == [""]
    report = evaluate_sessions([ok, fail])
    tracer = report.rows[1]
    assert tracer.auroc == 1.0  # the duplicate tool call (Da = 1, r = alpha = 4) ranks the failure first
    assert report.tracer_missing_logprobs == 6  # no log-probs in tau2 releases: situational signals only
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "had no token log-probs" in out and "AUARC needs >= 10" in out


def test_tau2_bad_file(tmp_path):
    from mlx_sdm.errors import DataError

    path = tmp_path / "x.json"
    path.write_text(json.dumps({"simulations": [{"messages": [{"role": "tool", "id": "zz", "content": "x"}]}]}))
    with pytest.raises(DataError, match="answers no earlier tool call"):
        read_tau2_results(path)
