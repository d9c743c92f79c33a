"""The chat's monitor glue (AUQ + TRACER per session) and the escalation ladder it drives,
including the irreversible-tool override (docs/monitoring.md, AUQ levels and actions) and replay from the store."""

from __future__ import annotations

import pytest

from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.monitor.session_file.records import ToolCall

from mlx_sdm.calibration.row_verdict import Verdict
from mlx_sdm.monitor.online.auq_escalation import EscalationAction
from mlx_sdm.monitor.online.reading import HistoryPoint
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.turn.escalation import plan_escalation
from mlx_sdm.turn.monitoring import MonitorConfig, SessionMonitor
from mlx_sdm.store.chat_store import ChatStore
from tests.stored import answer as stored_answer

pytestmark = pytest.mark.filterwarnings("ignore::mlx_sdm.monitor.online.tracer.MonitorWarning")  # steps without log-probs on purpose

SEND = [ToolCall("send_email_to_client", {"to": "x@y"})]
TOKENS = ["I", " booked", " flight", " 1234", " the", " Paris"]
LOGPROBS = [-0.01, -1.20, -0.80, -2.0, -0.50, -0.03]  # docs/monitoring.md, TRACER surprisal example: content = {booked, flight}, U = 1.0


def verdict(prediction=1, p_lower=0.99, reason=None):
    admitted = reason is None
    return DocumentVerdict(Verdict(prediction=prediction, p_lower=p_lower if admitted else None, admitted=admitted,
                                   q=3 if admitted else 0, d=0.5 if admitted else 0.0, q_bin=1, reason=reason))


VERIFIED = verdict()


def score(m, **kw):
    """The typed reading and its stored dict form."""
    reading = m.score_answer(**kw)
    return reading, reading.to_dict()


def monitor(**kw):
    return SessionMonitor("s", MonitorConfig(irreversible_tool_names=("send_email",), **kw))


def test_p_true_drives_auq_and_tracer_reads_the_log_probs():
    m = monitor()
    m.observe_user("Book me a flight to Paris")
    reading, snap = score(m, answer="I booked flight 1234 the Paris", tokens=TOKENS, logprobs=LOGPROBS, tool_calls=[], p_true=0.80)
    # c'_p = 0.80 - 0.10; P(True) only: f = s = P_1 = 0.70 -> MEDIUM (floors 0.80 / 0.60 / 0.40)
    assert snap["cumulative_confidence"] == pytest.approx(0.70) and snap["level"] == "medium"
    assert snap["action"] == "proceed_with_log" and not snap["irreversible"]
    assert snap["tracer"]["U"] == pytest.approx(1.0) and snap["step_risk"] == pytest.approx(1.0)
    assert snap["tracer_risk"] == pytest.approx(1.0)  # user step r = 0 (no log-probs, no agent before it)
    assert "history" not in snap  # the history lives in the session monitor, not in each reading
    # typed all the way down: the AUQ step and the TRACER features, and back from the stored dict as the same values
    assert reading.auq.level.value == "medium" and reading.tracer.U == pytest.approx(1.0)
    assert MonitorReading.from_dict(snap) == reading
    assert m.history == [HistoryPoint(1, "medium", pytest.approx(0.70), pytest.approx(1.0), snap["fused"]["p"])]
    plan = plan_escalation(reading, [], VERIFIED)
    assert (plan.status.value, plan.action, plan.review_reasons, plan.reflect) == (
        "done", EscalationAction.PROCEED_WITH_LOG, [], False)


def test_irreversible_tool_pauses_at_medium_without_reflection():
    m = monitor()
    reading, snap = score(m, answer="sending", tokens=None, logprobs=None, tool_calls=SEND, p_true=0.80)
    assert snap["level"] == "medium" and snap["action"] == "pause_for_human" and snap["irreversible"]
    assert snap["auq"]["step_type"] == "tool_call"
    plan = plan_escalation(reading, ["send_email_to_client"], VERIFIED)
    assert plan.status.value == "paused" and plan.action is EscalationAction.PAUSE_FOR_HUMAN and plan.irreversible
    assert plan.review_reasons == ["escalated_irreversible"] and not plan.reflect
    assert "send_email_to_client" in plan.message


def test_low_irreversible_proceeds_and_high_reflects():
    low = monitor(low_threshold=0.5, medium_threshold=0.3, high_threshold=0.1)
    reading, snap = score(low, answer="ok", tokens=None, logprobs=None, tool_calls=SEND, p_true=0.80)
    assert snap["level"] == "low" and snap["action"] == "proceed"
    assert plan_escalation(reading, ["send_email_to_client"], VERIFIED).action is EscalationAction.PROCEED
    high = monitor()
    reading, snap = score(high, answer="maybe", tokens=None, logprobs=None, tool_calls=[], p_true=0.60)  # s = 0.50
    assert snap["level"] == "high" and snap["inject_reflection"]
    plan = plan_escalation(reading, [], verdict(reason="out_of_distribution"))
    assert plan.reflect and plan.review_reasons == ["out_of_distribution", "escalated_high"]
    # the user moves on without resuming; the next answer is scored (EMA carries P_t, docs/monitoring.md, AUQ propagation)
    reading2, snap2 = score(high, answer="sure", tokens=None, logprobs=None, tool_calls=[], p_true=1.0)
    assert snap2["cumulative_confidence"] == pytest.approx(0.55 * 0.90 + 0.45 * 0.50)


def test_critical_abort_plan_and_the_chat_continues():
    m = monitor()
    reading, snap = score(m, answer="no idea", tokens=None, logprobs=None, tool_calls=[], p_true=0.30)  # 0.20
    assert snap["level"] == "critical" and snap["action"] == "abort"
    plan = plan_escalation(reading, [], DocumentVerdict.no_verifier())
    assert plan.status.value == "aborted" and plan.review_reasons == ["escalated_critical"] and "0.200" in plan.explanation
    _, again = score(m, answer="ok", tokens=None, logprobs=None, tool_calls=[], p_true=1.0)
    assert again["cumulative_confidence"] == pytest.approx(0.55 * 0.90 + 0.45 * 0.20)


def test_verifier_p_lower_caps_the_step_confidence():
    m = monitor()
    reading, snap = score(m, answer="x", tokens=None, logprobs=None, tool_calls=[], p_true=0.95,
                          verdict=verdict(p_lower=0.42))
    assert snap["step_confidence"] == pytest.approx(0.42) and snap["auq"]["verifier_confidence"] == pytest.approx(0.42)
    reading, snap = score(monitor(), answer="x", tokens=None, logprobs=None, tool_calls=[], p_true=0.95,
                                  verdict=verdict(prediction=0))  # confident it is wrong: no cap from it
    assert snap["step_confidence"] == pytest.approx(0.85)


def test_replay_rebuilds_the_state_from_stored_messages(tmp_path):
    store = ChatStore(tmp_path / "c.db")
    s = store.create_session()
    live = SessionMonitor(s.id, MonitorConfig())
    for q, p in (("Book me a flight to Paris", 0.80), ("And a hotel?", 0.60)):
        store.add_message(s.id, "user", q)
        live.observe_user(q)
        reading, snap = score(live, answer="I booked flight 1234 the Paris", tokens=TOKENS, logprobs=LOGPROBS, tool_calls=[], p_true=p)
        store.add_turn(s.id, None, stored_answer("I booked flight 1234 the Paris", tokens=TOKENS, logprobs=LOGPROBS, monitor=reading,
                                       status="paused" if snap["action"] == "pause_for_human" else "done")).message_id
    replayed = SessionMonitor(s.id, MonitorConfig())
    replayed.replay(store.messages(s.id))
    assert replayed.history == live.history[:2]
    assert [o.to_dict() for o in replayed.tracer.outputs] == [o.to_dict() for o in live.tracer.outputs]
    state = replayed.auq.belief(s.id)
    assert state.cumulative_confidence == pytest.approx(live.auq.belief(s.id).cumulative_confidence)
    assert state.status.value == "waiting_for_human"  # the last answer was HIGH and paused
    replayed.resume("go on")
    _, nxt = score(replayed, answer="done", tokens=None, logprobs=None, tool_calls=[], p_true=1.0)
    assert nxt["level"] and replayed.history[-1].turn == 2  # the paused turn answered after guidance, as the chat numbers it


def test_semantic_sampling_runs_inside_the_trigger_zone_only():
    """AUQ System 2 with real samples from the tiny model (temperature 0.8, capped at 1.5x the answer)."""
    from mlx_sdm.turn.monitoring import ChatSampler
    from tests.tiny_verifier import tiny_loaded_model

    lm = tiny_loaded_model()
    messages = [{"role": "user", "content": "Is Paris the capital of France?"}]
    m = monitor(enable_semantic_sampling=True)
    sampler = ChatSampler(lm, messages, answer_tokens=6)
    assert sampler.max_tokens == 9
    reading, snap = score(m, answer="yes", tokens=None, logprobs=None, tool_calls=[], p_true=0.75, sampler=sampler)  # f = 0.65
    auq = snap["auq"]
    assert 2 <= auq["samples_used"] <= 5 and len(sampler.drawn) == auq["samples_used"]
    assert auq["entropy_confidence"] is not None and auq["step_confidence"] == pytest.approx(min(0.65, auq["entropy_confidence"]))
    outside = ChatSampler(lm, messages, answer_tokens=6)
    reading, snap = score(m, answer="yes", tokens=None, logprobs=None, tool_calls=[], p_true=0.95, sampler=outside)  # f = 0.85
    assert snap["auq"]["samples_used"] == 0 and outside.drawn == []


def test_a_stored_reading_does_not_grow_with_the_session(tmp_path):
    """Each stored monitor reading holds its own turn only (the history stays in the session monitor):
    over a 200-turn session the bytes stored per turn stay flat instead of growing with the turn number."""
    import sqlite3

    store = ChatStore(tmp_path / "c.db")
    s = store.create_session()
    m = monitor()
    for i in range(200):
        store.add_message(s.id, "user", f"question {i}")
        m.observe_user(f"question {i}")
        reading = m.score_answer(answer=f"answer {i}", tokens=TOKENS, logprobs=LOGPROBS, tool_calls=[], p_true=0.9)
        store.add_turn(s.id, None, stored_answer(f"answer {i}", tokens=TOKENS, logprobs=LOGPROBS, monitor=reading)).message_id
    store.close()
    with sqlite3.connect(tmp_path / "c.db") as conn:
        sizes = [n for (n,) in conn.execute("SELECT length(details_json) FROM monitor_snapshots ORDER BY message_id")]
    assert len(sizes) == 200 and len(m.history) == 200
    assert max(sizes) - min(sizes[1:]) < 64  # flat (number formatting only), not proportional to the turn
    assert max(sizes[150:]) < 1.1 * sizes[10]


def test_an_answer_given_again_keeps_its_question_s_turn_number():
    """Two answers to one question (the second regenerated): both are turn 1 in the history and the fused
    forecast's sentence; the next question is turn 2, live and when the session is replayed."""
    m = SessionMonitor("s", MonitorConfig())
    m.observe_user("What is 2 + 2?")
    first = m.score_answer(answer="4", tokens=TOKENS, logprobs=LOGPROBS, tool_calls=[], verdict=VERIFIED)
    again = m.score_answer(answer="Four.", tokens=TOKENS, logprobs=LOGPROBS, tool_calls=[], verdict=VERIFIED)
    m.observe_user("And 3 + 3?")
    m.score_answer(answer="6", tokens=TOKENS, logprobs=LOGPROBS, tool_calls=[], verdict=VERIFIED)
    assert [p.turn for p in m.history] == [1, 1, 2]
    for reading in (first, again):
        if reading.fused is not None:
            assert "turn 1" in reading.fused.message or "turn" not in reading.fused.message
