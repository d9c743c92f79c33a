"""ChatEngine with the tiny model and a tiny verifier fitted in the test (no mocks of our own code):
streaming, verdicts, monitor, the escalation ladder, cancel, reopen."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from mlx_sdm.errors import DataError
from mlx_sdm.executor.events import TurnFailed, TurnRef
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.monitor.online.auq_escalation import EscalationAction
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.executor.engine import ChatEngine, EngineConfig
from mlx_sdm.turn.escalation import Escalation
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.store.turn_writer import TurnReceipt
from mlx_sdm.turn.values import AnswerComplete
from mlx_sdm.monitor.session_file.records import ToolCall
from mlx_sdm.turn.values import parse_tool_calls
from mlx_sdm.store.chat_store import ChatStore
from tests.tiny_verifier import build_tiny_verifier, tiny_components

# AUQ floors (LOW, MEDIUM, HIGH) that put any cumulative confidence in one tier (docs/monitoring.md, AUQ levels and actions thresholds are config)
ALWAYS_HIGH = (1.0, 0.9999, 0.0)
ALWAYS_CRITICAL = (1.0, 0.9999, 0.9998)
ALWAYS_MEDIUM = (1.0, 1e-9, 0.0)
QUESTION = "Is Paris the capital of France?"


@pytest.fixture
def make_engine(tmp_path):
    engines = []

    def make(*, verifier=True, db="chat.db", **config):
        path = build_tiny_verifier(tmp_path / "verifier") if verifier else None
        store = ChatStore(tmp_path / db)
        events = []  # (TurnRef, item) as the engine handed them to its listener
        config.setdefault("max_tokens", 12)
        config.setdefault("reflection_max_tokens", 6)
        engine = ChatEngine(EngineConfig(**config), store, listener=lambda ref, item: events.append((ref, item)),
                            components=tiny_components(path))
        engine.ready.result(120)
        engines.append(engine)
        return engine, store, events

    yield make
    for engine in engines:
        engine.shutdown()


def items(events, kind, turn=None):
    """The items of type ``kind`` the listener got (of ``turn`` only, when given)."""
    return [item for ref, item in events if isinstance(item, kind) and (turn is None or ref.turn == turn)]


def turn_of(events, receipt):
    """The engine's turn number of the turn ``receipt`` ended (its ref)."""
    return next(ref.turn for ref, item in events if item is receipt)


def kinds(events, turn):
    """The types of the items of ``turn``, in the order they came."""
    return [type(item) for ref, item in events if ref.turn == turn]


def test_turn_streams_then_verdict_monitor_and_one_stored_answer(make_engine):
    engine, store, events = make_engine(auq_thresholds=(0.02, 0.01, 0.0))  # LOW for any P_t >= 0.02
    session = store.create_session("t")
    result = engine.send(session.id, QUESTION).result(60)
    seq = kinds(events, turn_of(events, result))
    tokens = len(result.outcome.tokens)
    assert seq[:tokens] == [TokenPiece] * tokens and tokens == 12  # max_tokens, streamed one by one
    # AnswerComplete: the answer is done, the verifier reads it
    assert seq[tokens:] == [AnswerComplete, DocumentVerdict, MonitorReading, TurnReceipt]
    assert {ref for ref, _ in events if ref.turn == turn_of(events, result)} == {TurnRef(session.id, turn_of(events, result))}
    (finished,) = items(events, TurnReceipt, turn_of(events, result))
    assert finished is result  # the last item is the turn's receipt (its one record, kept) the future resolves to
    assert "".join(p.text for p in items(events, TokenPiece, turn_of(events, result))) == result.outcome.text
    assert all(p.logprob <= 0 for p in items(events, TokenPiece) if p.logprob is not None)
    assert result.outcome.status == "done" and result.outcome.first_token_s is not None and result.outcome.first_token_s < result.outcome.generation_s + 1
    assert result.outcome.verdict_status in {"verified", "not_verified", "out_of_scope"}
    assert result.outcome.verdict_status == result.outcome.verdict.status.value
    verdict = result.outcome.verdict.to_dict()
    assert set(verdict) >= {"p_lower", "q", "d", "q_bin", "reason", "exemplars", "prediction", "status"}
    assert len(verdict["exemplars"]) > 0 and "text" in verdict["exemplars"][0]
    mon = result.outcome.monitor.to_dict()
    assert "history" not in mon  # a reading holds its own turn only
    assert mon["level"] == "low" and mon["action"] == "proceed"
    assert mon["auq"]["p_true_ran"] and 0.0 <= mon["auq"]["p_true_confidence"] <= 1.0
    assert mon["cumulative_confidence"] == pytest.approx(mon["step_confidence"])  # first step: P_1 = s_1
    assert mon["tracer_risk"] >= 0 and mon["tracer"]["surprisal_source"] == "logprobs"
    user, answer = store.messages(session.id)
    assert user.text == QUESTION and answer.id == result.message_id and answer.text == result.outcome.text
    # the store reads the turn back as the same types the turn made (JSON only inside SQLite)
    assert answer.verdict == result.outcome.verdict and answer.verdict_status is result.outcome.verdict_status
    assert answer.monitor == result.outcome.monitor and answer.monitor.level.value == "low"
    assert answer.token_count == 12 and len(answer.tokens) == 12
    assert answer.features.shape == (64,) and answer.feature_model == engine.info().feature_model
    assert answer.prompt[-1] == {"role": "user", "content": QUESTION}
    # answers the verifier does not vouch for (and only they, at LOW) are queued
    assert (answer.review_id is not None) == (result.outcome.verdict_status != "verified")


def test_stream_yields_the_items_the_listeners_get_and_the_record_last(make_engine):
    engine, store, events = make_engine(auq_thresholds=(0.02, 0.01, 0.0))
    session = store.create_session()
    streamed = list(engine.stream(session.id, QUESTION))
    given = [item for ref, item in events if ref.session_id == session.id]
    assert len(streamed) == len(given) and all(a is b for a, b in zip(streamed, given))  # the very objects, unwrapped
    assert isinstance(streamed[-1], TurnReceipt) and streamed[-1].message_id == store.messages(session.id)[-1].id
    with pytest.raises(DataError, match="no session"):  # a failed turn raises its error after its items
        list(engine.stream("nope", "hello"))


def test_unverifiable_when_no_verifier_fits(make_engine):
    engine, store, events = make_engine(verifier=False)
    assert engine.info().verifier_path is None and engine.info().unverifiable_reason
    result = engine.send(store.create_session().id, QUESTION).result(60)
    (verdict,) = items(events, DocumentVerdict)
    assert result.outcome.verdict_status == "no_verifier" and result.outcome.verdict is verdict  # the one value, streamed and kept
    assert verdict.status.value == "no_verifier" and verdict.why == engine.info().unverifiable_reason


def test_cancel_stops_generation_at_the_next_token(make_engine):
    engine, store, events = make_engine(max_tokens=60)

    def stop_after_three(_ref, item):
        if isinstance(item, TokenPiece) and len(items(events, TokenPiece)) == 3:
            engine.cancel()

    engine.subscribe(stop_after_three)
    session = store.create_session()
    result = engine.send(session.id, QUESTION).result(60)
    assert result.outcome.status == "cancelled" and len(result.outcome.tokens) <= 4
    assert kinds(events, turn_of(events, result))[-1] is TurnReceipt and DocumentVerdict not in kinds(events, turn_of(events, result))
    answer = store.messages(session.id)[-1]
    assert answer.status == "cancelled" and answer.verdict is None and answer.review_id is None
    # the next turn runs normally (the stop applied to one turn only)
    engine.cancel()  # a stale stop request before a turn starts is cleared by the turn
    assert engine.send(session.id, "And Rome?").result(60).outcome.status != "cancelled"


def test_high_pauses_with_reflection_then_resumes_with_guidance(make_engine):
    engine, store, events = make_engine(auq_thresholds=ALWAYS_HIGH)
    session = store.create_session()
    first = engine.send(session.id, QUESTION).result(60)
    assert first.outcome.status == "paused" and first.outcome.monitor.level.value == "high"
    seq = kinds(events, turn_of(events, first))
    assert seq.index(MonitorReading) < seq.index(Escalation) < seq.index(TurnReceipt)
    (esc,) = items(events, Escalation)
    assert esc.action is EscalationAction.PAUSE_FOR_HUMAN and esc.level.value == "high"
    assert not esc.irreversible
    reflection_tokens = [p for p in items(events, TokenPiece) if p.phase == "reflection"]
    assert 0 < len(reflection_tokens) <= 6 and first.outcome.reflection == "".join(p.text for p in reflection_tokens)
    pause = engine.pending_pause(session.id)
    assert pause.message_id == first.message_id and pause.level == "high" and pause.reflection == first.outcome.reflection
    item = store.review_queue.review_item(first.review_id)
    assert "escalated_high" in item.reasons

    with pytest.raises(DataError, match="guidance is empty"):
        engine.resume(session.id, "  ").result(60)
    second = engine.resume(session.id, "Answer with one word.").result(60)
    assert second.message_id != first.message_id
    msgs = store.messages(session.id)
    assert [(m.role, m.kind, m.status) for m in msgs] == [
        ("user", "chat", "done"), ("assistant", "chat", "resumed"), ("user", "guidance", "done"),
        ("assistant", "chat", second.outcome.status),
    ]
    # the resumed generation saw the paused answer, the reflection request, the model's reflection and the guidance
    prompt = msgs[-1].prompt
    assert [m["role"] for m in prompt[-5:]] == ["user", "assistant", "system", "assistant", "user"]
    assert "NOT confident" in prompt[-3]["content"] and prompt[-1]["content"] == "Answer with one word."
    # P_t carried over (no reset on resume); the answer after guidance is the paused turn's, as the chat numbers it
    assert [h.turn for h in engine._monitors[session.id].history] == [1, 1]
    assert second.outcome.status == "paused"  # still HIGH: the resumed answer pauses again, and can be resumed again
    assert engine.pending_pause(session.id).message_id == second.message_id


def test_resume_without_a_pause_is_refused(make_engine):
    engine, store, _ = make_engine(auq_thresholds=ALWAYS_MEDIUM)
    session = store.create_session()
    engine.send(session.id, QUESTION).result(60)
    with pytest.raises(DataError, match="no paused turn"):
        engine.resume(session.id, "go on").result(60)


def test_critical_aborts_with_an_explanation_and_the_chat_goes_on(make_engine):
    engine, store, events = make_engine(auq_thresholds=ALWAYS_CRITICAL)
    session = store.create_session()
    result = engine.send(session.id, QUESTION).result(60)
    assert result.outcome.status == "aborted" and result.outcome.monitor.level.value == "critical"
    assert result.outcome.monitor.action is EscalationAction.ABORT
    assert "CRITICAL" in result.outcome.explanation
    (esc,) = items(events, Escalation)
    assert esc.action is EscalationAction.ABORT and esc.message == result.outcome.explanation
    assert "escalated_critical" in store.review_queue.review_item(result.review_id).reasons
    assert store.messages(session.id)[-1].status == "aborted"
    assert engine.pending_pause(session.id) is None
    again = engine.send(session.id, "Try again.").result(60)
    # the aborted answer is not shown to the model again
    assert all(m["content"] != result.outcome.text or m["role"] != "assistant" for m in store.messages(session.id)[-1].prompt)
    assert again.outcome.status == "aborted"


def test_medium_logs_and_proceeds(make_engine):
    engine, store, events = make_engine(auq_thresholds=ALWAYS_MEDIUM)
    result = engine.send(store.create_session().id, QUESTION).result(60)
    assert result.outcome.status == "done" and result.outcome.monitor.level.value == "medium"
    (esc,) = items(events, Escalation)
    assert esc.action is EscalationAction.PROCEED_WITH_LOG and "MEDIUM" in esc.message


def test_reopened_session_continues_its_conversation_and_monitor(make_engine):
    engine, store, _ = make_engine(auq_thresholds=ALWAYS_MEDIUM)
    session = store.create_session("reopen me")
    first = engine.send(session.id, QUESTION).result(60)
    engine.shutdown()
    store.close()
    engine2, store2, _ = make_engine(auq_thresholds=ALWAYS_MEDIUM)
    engine2.send(session.id, "And Rome?").result(60)
    msgs = store2.messages(session.id)
    assert [m.text for m in msgs[:2]] == [QUESTION, first.outcome.text]
    assert [m["content"] for m in msgs[-1].prompt[-3:]] == [QUESTION, first.outcome.text, "And Rome?"]
    history = engine2._monitors[session.id].history
    assert [h.turn for h in history] == [1, 2]
    # TRACER replayed the stored steps: 4 steps observed, prefix risk over all of them
    assert history[0].tracer_risk == pytest.approx(first.outcome.monitor.tracer_risk)


def test_items_arrive_on_the_engine_thread(make_engine):
    engine, store, _ = make_engine()
    threads = set()
    engine.send(store.create_session().id, QUESTION,
                listener=lambda ref, item: threads.add(threading.current_thread().name)).result(60)
    assert threads == {"mlx-sdm-engine"}


def test_empty_message_and_unknown_session_are_refused(make_engine):
    engine, store, events = make_engine()
    with pytest.raises(DataError, match="empty"):
        engine.send("whatever", "   ")
    with pytest.raises(DataError, match="no session"):
        engine.send("nope", "hello").result(60)
    (ref, failed), = [(ref, item) for ref, item in events if ref.turn > 0]  # the failed turn's one item: why, and its end
    assert ref == TurnRef("nope", ref.turn) and isinstance(failed, TurnFailed)
    assert failed.error_type == "DataError" and "no session" in failed.message
    # the engine keeps serving after a failed turn
    assert engine.send(store.create_session().id, QUESTION).result(60).outcome.status in {"done", "paused", "aborted"}


def test_tool_calls_are_parsed_from_the_answer():
    text = 'Sure. <tool_call>{"name": "send_email_to_client", "arguments": {"to": "a@b"}}</tool_call> <tool_call>{bad}</tool_call>'
    assert parse_tool_calls(text) == (ToolCall("send_email_to_client", {"to": "a@b"}),)
    assert parse_tool_calls("no tools") == ()


def test_prefix_reuse_gives_the_features_of_a_full_recompute(make_engine):
    """Turn 2 prefills only its new tokens (the previous turn's KV cache is kept), yet its answer, log-probs
    and document features equal those of an engine that recomputes the whole conversation."""
    questions = [QUESTION, "And Rome?", "Name a river."]
    runs = {}
    for reuse in (True, False):
        engine, store, _ = make_engine(reuse_cache=reuse, auq_thresholds=ALWAYS_MEDIUM, db=f"{reuse}.db")
        session = store.create_session()
        results = [engine.send(session.id, q).result(60).outcome for q in questions]
        runs[reuse] = (results, [m for m in store.messages(session.id) if m.role == "assistant"])
    (fast, fast_msgs), (slow, slow_msgs) = runs[True], runs[False]
    assert [r.reused_tokens for r in slow] == [0, 0, 0]
    assert fast[0].reused_tokens == 0 and all(r.reused_tokens > 0 for r in fast[1:])
    assert [r.prompt_tokens for r in fast] == [r.prompt_tokens for r in slow]
    assert fast[2].prompt_tokens - fast[2].reused_tokens < slow[2].prompt_tokens // 2
    for a, b in zip(fast_msgs, slow_msgs):
        assert a.text == b.text
        np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=1e-4)
        np.testing.assert_allclose(a.features, b.features, rtol=1e-4, atol=1e-5)
        assert a.monitor.auq.p_true_confidence == pytest.approx(b.monitor.auq.p_true_confidence, abs=1e-4)


def test_the_reflection_reuses_the_answers_kv_cache_and_leaves_it_for_the_next_turn(make_engine, monkeypatch):
    """A HIGH pause's reflection extends the answer's KV cache (only the reflection request is prefilled,
    not the conversation again), says what a full recompute says, and the next turn still reuses the
    conversation's prefix."""
    import mlx_sdm.turn.pipeline as pipeline
    from mlx_sdm.turn.answer import GeneratedAnswer

    reflections: list[GeneratedAnswer] = []
    real = pipeline.stream_answer

    def spy(*args, **kwargs):
        for item in real(*args, **kwargs):
            if isinstance(item, GeneratedAnswer) and kwargs.get("phase") == "reflection":
                reflections.append(item)
            yield item

    monkeypatch.setattr(pipeline, "stream_answer", spy)
    runs = {}
    for reuse in (True, False):
        engine, store, _ = make_engine(reuse_cache=reuse, auq_thresholds=ALWAYS_HIGH, db=f"r{reuse}.db")
        session = store.create_session()
        runs[reuse] = [engine.send(session.id, q).result(60).outcome for q in (QUESTION, "And Rome?")]
    fast, slow = reflections[:2], reflections[2:]
    assert [r.reused_tokens for r in slow] == [0, 0]
    for f, s, turn in zip(fast, slow, runs[True]):
        # the turn's whole prompt and its answer come from the cache: only the reflection request is prefilled
        assert f.prompt_tokens == s.prompt_tokens and f.reused_tokens >= turn.prompt_tokens + len(turn.token_ids) - 1
        assert f.text == s.text
    assert runs[True][1].reused_tokens > 0  # the prefix survived the reflection
    assert [r.text for r in runs[True]] == [r.text for r in runs[False]]
    assert [r.reflection for r in runs[True]] == [r.reflection for r in runs[False]]
