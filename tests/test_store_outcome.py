"""The store reads back the type it was given: a turn's one record (TurnOutcome) is written as it is, with its
question, the one way a turn is kept (``TurnWriter``; ``add_turn`` as the server keeps one, the writer's
``partial`` answer as the chat does), answered with a receipt, and read back as a TurnOutcome (``answer``, ``answers_of``),
with what the store keeps of it: text, tokens, features, the typed verdict and reading, the escalation's
words and review reasons, where it is kept, and whether it was given again."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from mlx_sdm.errors import DataError
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.monitor.online.auq_escalation import EscalationAction, UncertaintyLevel
from mlx_sdm.store.chat_store import ChatStore
from mlx_sdm.store.turn_writer import Question, TurnWriter
from mlx_sdm.turn.escalation import REFLECTION_PROMPT, TurnStatus
from mlx_sdm.turn.values import Resampled, TurnOutcome
from tests.stored import answer as stored_answer, judged, reading

PROMPT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Capital of France?"}]


def kept(outcome: TurnOutcome) -> dict[str, Any]:
    """What the store keeps of a turn, in plain values (a TurnOutcome's ``==`` would compare arrays)."""
    features = outcome.features
    return {
        "status": outcome.status, "text": outcome.text, "tokens": outcome.tokens, "logprobs": outcome.logprobs,
        "features": None if features is None else (str(features.dtype), features.tolist()),
        "finish_reason": outcome.finish_reason, "judged_text": outcome.judged_text, "messages": outcome.messages,
        "task": outcome.task, "verdict": None if outcome.verdict is None else outcome.verdict.to_dict(),
        "verdict_status": outcome.verdict_status,
        "monitor": None if outcome.monitor is None else outcome.monitor.to_dict(), "escalation": outcome.escalation,
        "reflection": outcome.reflection, "tool_calls": outcome.tool_calls, "verifier": outcome.verifier,
        "resampled": outcome.resampled, "source": outcome.source, "feature_model": outcome.feature_model,
    }


@pytest.fixture
def store(tmp_path):
    store = ChatStore(tmp_path / "chat.db")
    yield store
    store.close()


def test_a_judged_paused_answer_reads_back_as_the_record_it_was(store):
    s = store.create_session("capitals")
    tokens = ["Paris", " is", " the", " capital."]
    original = stored_answer("".join(tokens), status=TurnStatus.PAUSED, verdict=judged(p_lower=0.4),
        monitor=reading("high", cumulative_confidence=0.3, inject_reflection=True, action=EscalationAction.PAUSE_FOR_HUMAN),
        features=np.linspace(-1.0, 1.0, 8), feature_model="abc123", tokens=tokens, logprobs=[-0.1, -0.25, -0.5, -1.75],
        prompt=PROMPT, task="capitals", verifier="weights/default", review_reasons=["below_threshold", "escalated_high"],
        pause_message="Paused at HIGH uncertainty (cumulative confidence 0.300). Give guidance to resume.",
        reflect=True, reflection="I am not sure the question asks for the capital city.")
    original = replace(original, escalation=replace(original.escalation, action=EscalationAction.PAUSE_FOR_HUMAN,
                                                    level=UncertaintyLevel.HIGH))
    receipt = store.add_turn(s.id, Question("Capital of France?"), original)
    mid = receipt.message_id
    assert receipt.outcome is original and receipt.session_id == s.id
    assert [m.role for m in store.messages(s.id)] == ["user", "assistant"] and receipt.question_id < mid

    back = store.answer(mid)
    assert isinstance(back, TurnOutcome)
    assert back.status is TurnStatus.PAUSED and back.text == original.text == "Paris is the capital."
    assert back.tokens == tokens and back.logprobs == pytest.approx(original.logprobs)
    assert back.features is not None and back.features.dtype == np.float32
    assert np.allclose(back.features, original.features)
    assert back.messages == PROMPT and back.task == "capitals"
    assert back.verdict is not None and back.verdict.to_dict() == original.verdict.to_dict()
    assert back.verdict_status is original.verdict_status and back.verdict_status.value == "not_verified"
    assert back.monitor is not None and back.monitor.to_dict() == original.monitor.to_dict()
    assert back.escalation.review_reasons == ["below_threshold", "escalated_high"]
    assert back.escalation.message == original.escalation.message and back.escalation.message.startswith("Paused at HIGH")
    assert (back.escalation.action, back.escalation.level) == (EscalationAction.PAUSE_FOR_HUMAN, UncertaintyLevel.HIGH)
    assert back.escalation.reflect and back.reflection == original.reflection
    assert back.reflection_shown == original.reflection_shown == original.reflection
    assert back.verifier == "weights/default" and back.feature_model == "abc123"
    assert receipt.review_id is not None and receipt.review_id == store.message(mid).review_id
    assert [item.message_id for item in store.review_queue.review_items()] == [mid]
    assert back.finish_reason == "stop" and back.resampled is None and back.source is None


def test_a_reflection_asked_but_not_answered_shows_the_prompt_after_reading_back(store):
    s = store.create_session()
    original = stored_answer("Maybe.", status=TurnStatus.PAUSED, state="not_verified", reflect=True,
                             pause_message="Paused.")
    back = store.answer(store.add_turn(s.id, None, original).message_id)
    assert back.reflection is None and back.reflection_shown == original.reflection_shown == REFLECTION_PROMPT


@pytest.mark.parametrize("judged_tokens", [0, 1, 2])
def test_an_answer_judged_on_its_first_tokens_keeps_its_judged_span_and_tail(store, judged_tokens):
    s = store.create_session()
    tokens = ['{"a": 1}', " and", " more"]
    original = stored_answer("".join(tokens), tokens=tokens, logprobs=[-0.1, -0.2, -0.3],
                             judged_tokens=judged_tokens, verdict=judged())
    assert original.unverified_tail  # text follows the judged unit
    back = store.answer(store.add_turn(s.id, None, original).message_id)
    assert (back.judged_text, back.unverified_tail) == (original.judged_text, original.unverified_tail)
    assert back.judged_text + back.unverified_tail == back.text == original.text


def test_an_answer_judged_whole_reads_back_judged_whole(store):
    s = store.create_session()
    original = stored_answer("Paris.", tokens=["Paris", "."], verdict=judged())
    mid = store.add_turn(s.id, None, original).message_id
    back = store.answer(mid)
    assert back.judged_text == "Paris." and back.unverified_tail == ""
    assert store.message(mid).metadata.judged_text is None  # nothing to keep apart


def test_a_cancelled_answer_keeps_nothing_of_a_judgement_and_reads_back_cancelled(store):
    s = store.create_session()
    cancelled = stored_answer("Once upon", status=TurnStatus.CANCELLED, tokens=["Once", " upon"],
                              logprobs=[-0.5, -0.6], features=np.ones(4), feature_model="m", monitor=reading("high"),
                              review_reasons=["escalated_high"], finish_reason="cancelled")
    assert cancelled.verdict_status is None
    receipt = store.add_turn(s.id, Question("Tell me a story."), cancelled)
    mid = receipt.message_id
    row = store.message(mid)
    assert row.verdict is None and row.verdict_status is None and row.features is None and row.review_id is None
    assert store.review_queue.review_items() == []
    for table in ("verdicts", "monitor_snapshots", "review_queue"):
        assert store.db.query(f"SELECT COUNT(*) FROM {table}")[0][0] == 0, table
    back = store.answer(mid)
    assert back.status is TurnStatus.CANCELLED and back.verdict_status is None and back.verdict is None
    assert back.text == "Once upon" and back.tokens == ["Once", " upon"] and back.finish_reason == "cancelled"
    assert back.answer.cancelled
    assert back.features is None and back.monitor is None and receipt.review_id is None
    assert back.escalation.review_reasons == []


def test_a_failed_streaming_answer_reads_back_as_an_error_with_its_partial_text(store):
    s = store.create_session()
    streaming = TurnWriter(store.answers, s.id, Question("hi"), partial=True)
    assert [m.role for m in store.messages(s.id)] == ["user", "assistant"]  # the question and its answer row, at once
    for piece in ("Hel", "lo, wor"):
        streaming.token(TokenPiece(piece))
    streaming.fail()
    row = store.message(streaming.message_id)
    back = store.answer(streaming.message_id)
    assert back.status is TurnStatus.ERROR and back.text == "Hello, wor" and back.verdict_status is None
    assert back.verdict is None and row.review_id is None and row.session_id == s.id


def test_a_finished_streaming_answer_reads_back_as_the_record_it_finished_with(store):
    s = store.create_session()
    streaming = TurnWriter(store.answers, s.id, Question("hi"), partial=True)
    streaming.token(TokenPiece("Hel"))
    done = stored_answer("Hello.", tokens=["Hello", "."], logprobs=[-0.1, -0.2], state="verified", verifier="v")
    receipt = streaming.finish(done)
    assert (receipt.message_id, receipt.question_id) == (streaming.message_id, streaming.question_id)
    assert kept(store.answer(receipt.message_id)) == kept(done)


def test_finishing_refuses_an_answer_no_longer_being_written(store):
    s = store.create_session()
    streaming = TurnWriter(store.answers, s.id, Question("hi"), partial=True)
    with store.db.tx() as conn:  # another writer finished it meanwhile
        conn.execute("UPDATE messages SET status = 'done' WHERE id = ?", (streaming.message_id,))
    with pytest.raises(DataError, match="not an answer being written"):
        streaming.finish(stored_answer("Hello.", state="verified"))


def test_answers_of_a_session_are_its_chat_answers_by_message_id(store):
    s, other = store.create_session("mine"), store.create_session("other")
    ids = []
    for question, text, state in (("Capital of France?", "Paris.", "verified"), ("And of Italy?", "Rome?", "not_verified")):
        mid = store.add_turn(s.id, Question(question), stored_answer(
            text, state=state, tokens=[text], logprobs=[-0.5], features=np.full(4, len(ids)), feature_model="m",
            review_reasons=["below_threshold"] if state == "not_verified" else [])).message_id
        ids.append(mid)
    store.add_message(s.id, "assistant", "I am unsure.", kind="reflection")  # not a chat answer
    store.add_message(s.id, "system", "a monitor note")
    store.add_turn(other.id, None, stored_answer("elsewhere", state="no_verifier"))
    ids.append(store.add_turn(s.id, None, stored_answer("Stopped", status=TurnStatus.CANCELLED)).message_id)

    answers = store.answers_of(s.id)
    assert list(answers) == ids
    assert all(isinstance(a, TurnOutcome) for a in answers.values())
    assert {mid: kept(a) for mid, a in answers.items()} == {mid: kept(store.answer(mid)) for mid in ids}
    assert [a.text for a in answers.values()] == ["Paris.", "Rome?", "Stopped"]
    assert [a.verdict_status and a.verdict_status.value for a in answers.values()] == ["verified", "not_verified", None]
    assert store.answers_of(store.create_session().id) == {}
    with pytest.raises(DataError):
        store.answers_of("no such session")
    user_id = store.messages(s.id)[0].id
    with pytest.raises(DataError, match="no answer"):
        store.answer(user_id)  # a user message is not an answer


@pytest.mark.parametrize("again", [Resampled(1, 0.7, 3), Resampled(1, 0.0, 0)])
def test_a_regenerated_answer_reads_back_resampled_as_it_was(store, again):
    s = store.create_session()
    first = store.add_turn(s.id, Question("Capital of Italy?"), stored_answer("Rome.", state="verified")).message_id
    again = replace(again, replaces=first)
    mid = store.add_turn(s.id, None, stored_answer("Rome, of course.", state="verified", resampled=again)).message_id
    assert store.answer(mid).resampled == again
    assert store.answer(first).resampled is None
    meta = store.message(mid).metadata
    assert (meta.replaces, meta.temperature, meta.seed) == (again.replaces, again.temperature, again.seed)


def test_who_asked_and_the_tool_calls_read_back(store):
    from mlx_sdm.monitor.session_file.records import ToolCall

    s = store.create_session()
    calls = [ToolCall("send_email", {"to": "x@y"})]
    original = stored_answer("ok", state="not_verified", source="api:chat", tool_calls=calls)
    back = store.answer(store.add_turn(s.id, None, original).message_id)
    assert back.source == "api:chat" and back.tool_calls == tuple(calls)
    no_verifier = stored_answer("hm", verdict=DocumentVerdict.no_verifier("verification is off"))
    back = store.answer(store.add_turn(s.id, None, no_verifier).message_id)
    assert back.verdict == no_verifier.verdict and back.verdict.why == "verification is off"
    assert back.verdict_status is no_verifier.verdict_status and back.verdict_status.value == "no_verifier"
