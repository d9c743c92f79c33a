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
