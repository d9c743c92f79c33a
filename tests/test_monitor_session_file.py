"""Session JSONL format: round trip, atomic write, and clear errors/warnings on bad input."""

import json
import warnings

import pytest

from mlx_sdm.errors import DataError
from mlx_sdm.monitor.session_file.records import (
    AUQOutput,
    Session,
    SessionFormatWarning,
    SessionStep,
    ToolCall,
    TracerOutput,
    VerifierOutput,
    step_id_for,
)
from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl
from mlx_sdm.monitor.session_file.writer import write_session_jsonl, write_sessions_jsonl


def _session(sid="s1"):
    return Session(
        session_id=sid,
        outcome="failure",
        termination="complete",
        model="tiny",
        steps=[
            SessionStep(step_id="user_0", actor="user", step_type=None, text="Book me a flight"),
            SessionStep(
                step_id="tool_1", actor="agent", step_type="tool", text="Searching",
                tool_calls=[ToolCall("search_flights", {"to": "Paris"})], observations=["[]"],
                token_logprobs=[-0.1, -2.0], tokens=["Search", "ing"],
                verifier=VerifierOutput(p_lower=0.9, admitted=True),
                auq=AUQOutput(fused_confidence=0.7, propagated_confidence=0.6, level="medium", action="proceed_with_log"),
                tracer=TracerOutput(U=2.0, r=2.0, prefix_risk=2.0, embedder="minilm"),
                p_t=0.4,
            ),
        ],
    )


def test_round_trip(tmp_path):
    path = tmp_path / "s.jsonl"
    write_sessions_jsonl(path, [_session("a"), _session("b")])
    back = read_sessions_jsonl(path)
    assert [s.session_id for s in back] == ["a", "b"]
    step = back[0].steps[1]
    assert step.step_type == "tool_call"  # alias normalised
    assert step.tool_calls[0].arguments == {"to": "Paris"}
    assert step.verifier.p_lower == 0.9 and step.auq.level == "medium" and step.tracer.embedder == "minilm"
    assert back[0].success == 0 and back[0].steps[0].token_logprobs is None
    assert len(path.read_text().splitlines()) == 6
    assert not list(tmp_path.glob(".*tmp"))  # atomic write left no temporary file


def _write(tmp_path, records):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


HEADER = {"record": "session", "session_id": "s"}


@pytest.mark.parametrize(
    "step, field",
    [
        ({"step_id": "llm_0", "actor": "agent", "step_type": "llm_call", "p_t": 1.5}, "p_t"),
        ({"step_id": "llm_0", "actor": "agent", "step_type": "llm_call", "verifier": {"p_lower": -0.1}}, "verifier.p_lower"),
        ({"step_id": "llm_0", "actor": "agent", "step_type": "llm_call", "auq": {"propagated_confidence": 80}}, "auq.propagated_confidence"),
        ({"step_id": "llm_0", "actor": "robot", "step_type": "llm_call"}, "actor"),
        ({"step_id": "llm_0", "actor": "agent", "step_type": "llm_call", "token_logprobs": [-1.0], "tokens": ["a", "b"]}, "tokens"),
        ({"step_id": "llm_0", "actor": "agent", "step_type": "llm_call", "token_logprobs": [0.5]}, "token_logprobs[0]"),
        ({"step_id": "llm_0", "actor": "agent", "step_type": "tool_call", "tool_calls": [{"arguments": {}}]}, "tool_calls[0].name"),
    ],
)
def test_bad_values_name_file_line_field(tmp_path, step, field):
    path = _write(tmp_path, [HEADER, {"record": "step", "session_id": "s", **step}])
    with pytest.raises(DataError) as info:
        read_sessions_jsonl(path)
    assert info.value.line == 2 and info.value.field == field and str(path) in str(info.value)


def test_unknown_step_type_warns_and_keeps(tmp_path):
    path = _write(tmp_path, [HEADER, {"record": "step", "step_id": "x_0", "actor": "agent", "step_type": "planning"}])
    with pytest.warns(SessionFormatWarning, match=r"bad.jsonl:2: field 'step_type': unknown step type 'planning'"):
        (session,) = read_sessions_jsonl(path)
    assert session.steps[0].step_type == "planning"


def test_missing_logprobs_allowed_without_warning(tmp_path):
    path = _write(tmp_path, [HEADER, {"record": "step", "step_id": "llm_0", "actor": "agent", "step_type": "llm_call", "text": "hi"}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (session,) = read_sessions_jsonl(path)
    assert session.steps[0].token_logprobs is None


def test_structural_errors(tmp_path):
    with pytest.raises(DataError, match="no preceding session record"):
        read_sessions_jsonl(_write(tmp_path, [{"record": "step", "session_id": "zz", "step_id": "a", "actor": "agent"}]))
    path = tmp_path / "broken.jsonl"
    path.write_text('{"record": "session", "session_id": "s"}\n{not json\n')
    with pytest.raises(DataError, match=r"broken.jsonl:2: not valid JSON"):
        read_sessions_jsonl(path)
    with pytest.raises(DataError, match="format_version"):
        read_sessions_jsonl(_write(tmp_path, [{**HEADER, "format_version": 99}]))
    with pytest.raises(DataError, match="duplicate step_id"):
        step = {"record": "step", "step_id": "a", "actor": "user"}
        read_sessions_jsonl(_write(tmp_path, [HEADER, step, step]))
    with pytest.raises(DataError, match="no such file"):
        read_sessions_jsonl(tmp_path / "missing.jsonl")


def test_write_refuses_nan(tmp_path):
    s = _session()
    s.steps[1].p_t = float("nan")
    with pytest.raises(ValueError):
        write_session_jsonl(tmp_path / "x.jsonl", s)
    assert not (tmp_path / "x.jsonl").exists()


def test_step_ids():
    assert step_id_for("llm_call", "agent", 3) == "llm_3"
    assert step_id_for("tool", "agent", 1) == "tool_1"
    assert step_id_for(None, "user", 0) == "user_0"


def test_a_routed_verdict_reads_back_with_the_state_the_chat_showed(tmp_path):
    """Out of distribution on a question routed to one of the verifier's tasks is 'not verified' in the chat
    (network/verdict.status_of); the session file keeps the task, so the monitor reads the same state."""
    from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus

    path = tmp_path / "routed.jsonl"
    session = _session("r")
    session.steps[1].verifier = VerifierOutput(admitted=False, reason="out_of_distribution", prediction=1, task="fever")
    write_sessions_jsonl(path, [session])
    with warnings.catch_warnings():
        warnings.simplefilter("error", SessionFormatWarning)  # "task" is a known key: no warning
        (back,) = read_sessions_jsonl(path)
    assert back.steps[1].verifier.task == "fever"
    assert DocumentVerdict.from_dict(back.steps[1].verifier.to_dict()).status is VerdictStatus.NOT_VERIFIED
    unrouted = VerifierOutput(admitted=False, reason="out_of_distribution", prediction=1)
    assert "task" not in unrouted.to_dict()  # files without a task are written as before
    assert DocumentVerdict.from_dict(unrouted.to_dict()).status is VerdictStatus.OUT_OF_SCOPE
