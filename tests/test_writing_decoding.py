"""No loops (issue 41): a writing turn (nothing the verifier judges) decodes with the model card's sampling plus
mlx-lm's repetition penalty, a judged turn stays greedy (its verdict is calibrated on greedy answers); a follow-up
never returns the previous answer verbatim: an answer that came out as the previous one word for word is dropped
unseen and asked once more with the repetition penalty (mlx_sdm/lm/decoding.py, TurnPipeline)."""

from __future__ import annotations

import pytest

from mlx_sdm.lm.decoding import NO_REPEAT, WRITING, Decoding
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.turn.answer import GeneratedAnswer
from mlx_sdm.turn.values import TurnOptions, TurnRequest
from tests.tiny_verifier import tiny_components

CLAIM = "Paris is the capital of France. Is this claim true or false?"


@pytest.fixture(scope="module")
def pipeline(verifier_dir):
    from mlx_sdm.executor.engine import EngineConfig
    from mlx_sdm.turn.pipeline import TurnPipeline

    return TurnPipeline(tiny_components(verifier_dir)(EngineConfig(embedder="none")))


def test_the_writing_decoding_is_the_model_cards_with_mlx_lms_repetition_penalty():
    assert (WRITING.temperature, WRITING.top_p, WRITING.repetition_penalty) == (0.2, 0.9, 1.1)
    assert WRITING.sampler() is not None and len(WRITING.logits_processors()) == 1
    assert NO_REPEAT.sampler() is None and NO_REPEAT.repetition_penalty and NO_REPEAT.repetition_context_size >= 256
    assert Decoding().sampler() is None and Decoding().logits_processors() == []


def test_a_writing_turn_samples_and_a_judged_turn_stays_greedy(pipeline):
    """(The tiny verifier judges every question; a routing verifier reads "Write me a poem" as having no checkable
    answer: that plan is made here by hand.)"""
    from dataclasses import replace

    from mlx_sdm.network.coverage import RouteKind, TaskRoute

    judged = pipeline.plan([{"role": "user", "content": CLAIM}])
    assert judged.judge and pipeline._decoding(judged, TurnOptions()) is None
    messages = [{"role": "user", "content": "Write me a poem about the sea."}]
    writing = replace(pipeline.plan(messages), judge=False, route=TaskRoute(kind=RouteKind.NO_CHECKABLE_ANSWER))
    assert pipeline._decoding(writing, TurnOptions()) is WRITING
    assert pipeline._decoding(writing, TurnOptions(temperature=0.7)) is None  # a regenerated answer keeps its own
    request = TurnRequest(messages, TurnOptions(max_tokens=8, reuse_cache=False, enable_p_true=False))
    first, again = (list(pipeline.stream(request, plan=writing))[-1] for _ in range(2))
    assert first.token_ids == again.token_ids and first.text  # sampled from a fixed seed: the same answer


def _answer(text: str) -> GeneratedAnswer:
    return GeneratedAnswer(text=text, tokens=list(text), token_ids=list(range(len(text))))


def test_a_follow_up_that_repeats_the_previous_answer_is_asked_once_more_with_the_repetition_penalty(pipeline,
                                                                                                      monkeypatch):
    previous = "Il Coriobella, Italy."
    calls = []

    def fake_generate(plan, options, stop, prefix, on_prefill, *, decoding=None):
        calls.append(decoding)
        text = previous if decoding is None else "Rome, Italy."
        yield from (TokenPiece(text=ch, token_id=i, logprob=0.0) for i, ch in enumerate(text))
        yield _answer(text)

    monkeypatch.setattr(pipeline, "_generate", fake_generate)
    messages = [{"role": "user", "content": "Where is it?"}, {"role": "assistant", "content": previous},
                {"role": "user", "content": "And where is that?"}]
    request = TurnRequest(messages, TurnOptions())
    plan = pipeline.plan(messages)
    items = list(pipeline._answer_once_more_if_repeated(request, plan, TurnOptions(), None, None, None))
    shown = "".join(i.text for i in items if isinstance(i, TokenPiece))
    assert calls == [None, NO_REPEAT] and shown == "Rome, Italy." and items[-1].text == "Rome, Italy."
    # an answer that departs from the previous one streams as it comes, once
    calls.clear()
    monkeypatch.setattr(pipeline, "_generate", lambda *a, decoding=None, **k: (
        calls.append(decoding) or iter([TokenPiece(text="Il ", token_id=0, logprob=0.0),
                                        TokenPiece(text="Duomo.", token_id=1, logprob=0.0), _answer("Il Duomo.")])))
    items = list(pipeline._answer_once_more_if_repeated(request, plan, TurnOptions(), None, None, None))
    assert calls == [None] and "".join(i.text for i in items[:-1]) == "Il Duomo."


# ----- a loop that still starts is stopped and goes on once, before any pause -----------------------------------
def _writing_plan(pipeline, messages):
    from dataclasses import replace

    from mlx_sdm.network.coverage import RouteKind, TaskRoute

    plan = replace(pipeline.plan(messages), judge=False, route=TaskRoute(kind=RouteKind.NO_CHECKABLE_ANSWER))
    return pipeline.fit(plan, TurnOptions(max_tokens=64)) if hasattr(pipeline, "fit") else plan


def test_a_writing_turn_that_starts_to_loop_is_stopped_and_goes_on_once_with_a_stronger_penalty(pipeline,
                                                                                                   monkeypatch):
    from mlx_sdm.lm.decoding import LOOP_RETRY
    from mlx_sdm.turn.pipeline import LOOP_WINDOW, loop_in

    messages = [{"role": "user", "content": "Write me a poem about the sea."}]
    plan = _writing_plan(pipeline, messages)
    calls, prompts = [], []
    intro = [f"Line {i} of the poem, " for i in range(LOOP_WINDOW + 4)]  # more than the window: some is shown
    verse = "the sea is blue and wide, "

    def fake_generate(plan, options, stop, prefix, on_prefill, *, decoding=None):
        calls.append(decoding)
        prompts.append(plan.prompt.ids if plan.prompt is not None else None)
        pieces = intro + [verse] * 50 if decoding is None else ["and then the tide went out."]
        text = ""
        for i, piece in enumerate(pieces):
            if stop is not None and stop.is_set():
                break
            text += piece
            yield TokenPiece(text=piece, token_id=i, logprob=-0.1)
        yield _answer(text)

    monkeypatch.setattr(pipeline, "_generate", fake_generate)
    options = TurnOptions(max_tokens=256)
    items = list(pipeline._answer_once_more_if_repeated(TurnRequest(messages, options), plan, options, None, None,
                                                         None))
    shown = "".join(i.text for i in items if isinstance(i, TokenPiece))
    answer = items[-1]
    assert calls == [None, LOOP_RETRY]  # the writing decoding, then the one retry
    assert shown == answer.text and answer.text.endswith("and then the tide went out.")
    assert loop_in(answer.text) is None and verse * 3 not in answer.text  # the loop was never shown
    assert answer.text.startswith("".join(intro[:4]))  # what was shown stays: the answer goes on from it
    shown_ids = [i.token_id for i in items[:-1] if isinstance(i, TokenPiece)][:-1]
    assert prompts[1] == tuple(prompts[0]) + tuple(shown_ids)  # the retry reads the prompt and the text shown
    assert answer.token_ids[:len(shown_ids)] == shown_ids


def test_a_writing_turn_that_does_not_loop_streams_as_it_comes(pipeline, monkeypatch):
    messages = [{"role": "user", "content": "Write me a poem about the sea."}]
    plan = _writing_plan(pipeline, messages)
    calls = []
    words = [f"word{i} " for i in range(80)]

    def fake_generate(plan, options, stop, prefix, on_prefill, *, decoding=None):
        calls.append(decoding)
        yield from (TokenPiece(text=w, token_id=i, logprob=0.0) for i, w in enumerate(words))
        yield _answer("".join(words))

    monkeypatch.setattr(pipeline, "_generate", fake_generate)
    items = list(pipeline._answer_once_more_if_repeated(TurnRequest(messages, TurnOptions()), plan, TurnOptions(),
                                                         None, None, None))
    assert calls == [None] and "".join(i.text for i in items[:-1]) == "".join(words) == items[-1].text


def test_the_tiny_model_goes_on_from_the_text_shown_when_a_loop_is_stopped(pipeline, monkeypatch):
    """The real path (mlx-lm's generation stopped by the loop, the retry prefilled with the prompt and the text
    shown): the loop rule is made to trip once on the tiny model's answer."""
    import mlx_sdm.turn.pipeline as pipeline_module

    tripped = []

    def trips_once(text):
        if not tripped and len(text) >= 12:
            tripped.append(text)
            return "loop"
        return None

    monkeypatch.setattr(pipeline_module, "loop_in", trips_once)
    messages = [{"role": "user", "content": "Write me a poem about the sea."}]
    plan = _writing_plan(pipeline, messages)
    options = TurnOptions(max_tokens=24, reuse_cache=False, enable_p_true=False)
    items = list(pipeline._answer_once_more_if_repeated(TurnRequest(messages, options), plan, options, None, None,
                                                         None))
    answer = items[-1]
    assert tripped and isinstance(answer, GeneratedAnswer) and not answer.cancelled
    assert "".join(i.text for i in items[:-1]) == answer.text  # what streamed is the answer
    assert len(answer.token_ids) == len(answer.logprobs) <= options.max_tokens


def test_guidance_after_a_looping_pause_is_part_of_the_next_prompt_without_the_loop():
    from mlx_sdm.executor.conversation import conversation_from
    from mlx_sdm.monitor.online.auq_escalation import EscalationAction, UncertaintyLevel
    from mlx_sdm.monitor.online.degenerate import degenerate_answer
    from mlx_sdm.monitor.online.reading import MonitorReading
    from mlx_sdm.store.records import MessageRecord

    loop = "The sea, the sea, the sea is blue. " * 6
    reading = MonitorReading(level=UncertaintyLevel.HIGH, action=EscalationAction.PAUSE_FOR_HUMAN,
                             degenerate=degenerate_answer(loop))
    assert reading.degenerate is not None

    def record(i, role, text, status="done", monitor=None, kind="chat"):
        return MessageRecord(i, "s", role, kind, text, status, "t", None, monitor=monitor)

    records = [record(1, "user", "Hello!"), record(2, "assistant", "Hi! How can I help?"),
               record(3, "user", "Write a poem about the sea."),
               record(4, "assistant", loop, status="paused", monitor=reading)]
    messages = conversation_from(records, guidance="Make it four short lines.")
    assert messages[-1] == {"role": "user", "content": "Write a poem about the sea.\n\nMake it four short lines."}
    assert all(loop not in m["content"] for m in messages) and len(messages) == 3
    # later turns read the same: the resumed loop stays out, the guidance stays with its question
    records[3] = record(4, "assistant", loop, status="resumed", monitor=reading)
    records += [record(5, "user", "Make it four short lines.", kind="guidance"),
                record(6, "assistant", "Blue waves roll in.")]
    later = conversation_from(records)
    assert later[-2:] == [messages[-1], {"role": "assistant", "content": "Blue waves roll in."}]
    # a paused answer that did not derail is read as before, and guidance follows it
    records[3] = record(4, "assistant", "A calm sea.", status="paused",
                        monitor=MonitorReading(level=UncertaintyLevel.HIGH, action=EscalationAction.PAUSE_FOR_HUMAN))
    kept = conversation_from(records[:4], guidance="Longer, please.")
    assert kept[-2:] == [{"role": "assistant", "content": "A calm sea."}, {"role": "user", "content": "Longer, please."}]
