"""Every prompt built from a conversation fits the model's context (``lm.prompt.fit_prompt``, the one rule):
the answer's, P(True)'s, the reflection's, the System-2 samples' and the verifier's force-decoding, each
checked on the tiny model with a context of ``CONTEXT`` tokens and a message several times longer, by the
positions the model was actually fed (:class:`ContextWatch`)."""

from __future__ import annotations

import mlx.core as mx
import pytest

from mlx_sdm.lm.prefill import PREFILL_STEP_TOKENS
from mlx_sdm.lm.prompt import CUT_MARK, fit_prompt, render_prompt
from tests.tiny_verifier import tiny_loaded_model

CONTEXT = 384
#: A message about eight times the context on the tiny tokenizer, with a start and an end to find again.
LONG = "START here. " + "The quick brown fox jumps over the lazy dog. " * 120 + "What is it about? END"


class ContextWatch:
    """An mlx-lm model that records the most positions any call attended to (the cache's offset after it)
    and the largest number of positions fed in one call, through the whole model or its inner one."""

    def __init__(self, model):
        self._model, self.layers = model, model.layers
        self.args = model.args
        self.most_positions = 0
        self.largest_feed = 0
        self.model = _Inner(model.model, self)

    def make_cache(self):
        from mlx_lm.models.cache import make_prompt_cache

        return make_prompt_cache(self._model)

    def saw(self, inputs, cache) -> None:
        fed = int(inputs.shape[1])
        self.largest_feed = max(self.largest_feed, fed)
        self.most_positions = max(self.most_positions, int(cache[0].offset) if cache else fed)

    def __call__(self, inputs, cache=None, **kw):
        out = self._model(inputs, cache=cache, **kw)
        self.saw(inputs, cache)
        return out

    def __getattr__(self, name):
        return getattr(self.__dict__["_model"], name)


class _Inner:
    def __init__(self, inner, watch):
        self.inner, self.watch = inner, watch
        self.embed_tokens = inner.embed_tokens

    def __call__(self, inputs, cache=None, **kw):
        out = self.inner(inputs, cache=cache, **kw)
        self.watch.saw(inputs, cache)
        return out


@pytest.fixture()
def watched():
    lm = tiny_loaded_model(max_context=CONTEXT)
    lm.model = ContextWatch(lm.model)
    return lm


def _conversation() -> list[dict]:
    return [{"role": "user", "content": LONG}]


def test_a_long_message_loses_its_middle_and_the_sentence_says_how_much():
    lm = tiny_loaded_model()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": LONG}]
    rendered = len(render_prompt(lm.tokenizer, messages))
    fitted = fit_prompt(lm.tokenizer, messages, 200, context=CONTEXT)
    assert rendered > 5 * 200 and len(fitted.ids) <= 200 and fitted.was_cut
    assert list(fitted.ids) == render_prompt(lm.tokenizer, list(fitted.messages))  # the ids are the messages'
    (cut,) = fitted.cuts
    assert cut.index == 1 and cut.kept_head + cut.kept_tail + cut.left_out == cut.tokens
    text = fitted.messages[1]["content"]
    assert text.startswith("START here.") and text.endswith("END") and fitted.messages[0]["content"] == "Be brief."
    assert CUT_MARK.format(n=cut.left_out) in text
    sentence = fitted.sentence()
    assert f"{cut.tokens:,} tokens" in sentence and f"{cut.left_out:,} between were left out" in sentence
    assert f"{CONTEXT:,}-token context" in sentence
    same = fit_prompt(lm.tokenizer, list(fitted.messages), 200)  # a fitted prompt fits as it is
    assert not same.was_cut and same.ids == fitted.ids and same.sentence() == ""


def test_what_the_caller_adds_is_never_cut_and_earlier_messages_go_first():
    lm = tiny_loaded_model()
    question = {"role": "user", "content": "Is it True?"}
    messages = [{"role": "user", "content": LONG}, {"role": "assistant", "content": "A fox. " * 30},
                {"role": "user", "content": "And? " * 10}, {"role": "assistant", "content": "Dogs."}, question]
    fitted = fit_prompt(lm.tokenizer, messages, 160, keep_last=2)
    assert len(fitted.ids) <= 160
    assert fitted.messages[-1] == question and fitted.messages[-2] == messages[-2]
    assert fitted.cuts and all(c.index < len(messages) - 2 for c in fitted.cuts)
    tight = fit_prompt(lm.tokenizer, messages, 90, keep_last=2)  # no room for the paste even cut: it is left out
    assert len(tight.ids) <= 90 and tight.dropped_messages >= 2 and tight.messages[-1] == question
    assert not fitted.dropped_ids and not tight.dropped_ids  # the template's start is never cut here


def test_the_answer_prompt_fits(watched):
    from mlx_sdm.turn.answer import generate_answer

    answer = generate_answer(watched, _conversation(), max_tokens=8, keep_cache=True)
    assert answer.prompt_fit.was_cut and answer.prompt_tokens <= CONTEXT - 8
    assert watched.model.most_positions <= CONTEXT


def test_p_true_fits_and_reads_in_chunks(watched):
    from mlx_sdm.monitor.online.p_true import PTrueScorer

    messages = _conversation() + [{"role": "assistant", "content": "A fox jumps."}]
    scorer = PTrueScorer(watched.model, watched.tokenizer, messages, max_context=CONTEXT)  # no cache: all prefilled
    p = scorer()
    assert 0.0 < p < 1.0 and scorer.result.prefilled_tokens < CONTEXT
    assert watched.model.most_positions <= CONTEXT
    # the model's own context when none is given (its args), and the feed read in chunks
    long_lm = tiny_loaded_model(max_context=2048)
    long_lm.model = ContextWatch(long_lm.model)
    PTrueScorer(long_lm.model, long_lm.tokenizer, [{"role": "user", "content": LONG * 3},
                                                   {"role": "assistant", "content": "A fox."}])()
    assert long_lm.model.most_positions <= 2048 and long_lm.model.largest_feed <= PREFILL_STEP_TOKENS


def test_the_reflection_prompt_fits_and_keeps_its_request(watched):
    from mlx_sdm.turn.answer import generate_answer
    from mlx_sdm.turn.escalation import REFLECTION_PROMPT

    ask = _conversation() + [{"role": "assistant", "content": "A fox jumps."},
                             {"role": "system", "content": REFLECTION_PROMPT}]
    reflection = generate_answer(watched, ask, max_tokens=8, features=False, keep_last=2)
    assert reflection.prompt_fit.was_cut and reflection.prompt_tokens <= CONTEXT - 8
    assert reflection.prompt_fit.messages[-1]["content"] == REFLECTION_PROMPT
    assert watched.model.most_positions <= CONTEXT


def test_the_system2_samples_fit(watched):
    from mlx_sdm.turn.monitoring import ChatSampler

    samples = ChatSampler(watched, _conversation(), answer_tokens=6).sample(2)
    assert len(samples) == 2 and watched.model.most_positions <= CONTEXT


def test_the_verifiers_force_decoding_fits_and_reads_in_chunks(watched):
    from mlx_sdm.lm.features import force_decode_document

    features = force_decode_document(watched, _conversation(), "A fox jumps over a dog.")
    assert features.truncated_prompt_tokens > 0 and features.positions <= CONTEXT
    assert watched.model.most_positions <= CONTEXT and watched.model.largest_feed <= PREFILL_STEP_TOKENS


def test_chunked_force_decoding_equals_one_pass():
    from mlx_sdm.lm.prefill import prefill_hidden

    lm = tiny_loaded_model()
    ids = render_prompt(lm.tokenizer, _conversation())[:300]
    whole = lm.model.model(mx.array(ids)[None])[0]
    chunked = prefill_hidden(lm.model, ids, step=64)[0]
    assert chunked.shape == whole.shape
    assert float(mx.max(mx.abs(chunked - whole))) < 1e-4  # float32 rounding of a different summation order


def test_a_turn_fits_and_p_true_reuses_the_answers_cache():
    """The pipeline fits the conversation once, with room for the answer and the follow-up prompts, so P(True)
    prefills its question alone (the answer's KV cache is reused, not a second pass over the conversation)."""
    from mlx_sdm.monitor.online.p_true import DEFAULT_QUESTION
    from mlx_sdm.turn.monitoring import MonitorConfig, SessionMonitor
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnComponents, TurnOptions, TurnRequest

    lm = tiny_loaded_model(max_context=640)
    options = TurnOptions(max_tokens=8, enable_p_true=True, reuse_cache=True, generate_reflection=True)
    monitor = SessionMonitor("fit", MonitorConfig())
    with pytest.warns(UserWarning, match="Your message is"):  # said as the answer starts (generate's "note:")
        outcome = TurnPipeline(TurnComponents(lm=lm)).run(TurnRequest(_conversation(), options), monitor=monitor)
    assert outcome.prompt_fit is not None and outcome.prompt_fit.was_cut
    assert outcome.truncated_prompt_tokens == outcome.prompt_fit.left_out_tokens > 0
    assert outcome.prompt_note.startswith("Your message is ") and "640-token context" in outcome.prompt_note
    assert outcome.messages[-1]["content"].startswith("START here.")
    assert outcome.monitor.p_true["reused_tokens"] >= len(outcome.prompt_fit.ids)
    question = len(lm.tokenizer.encode(DEFAULT_QUESTION))  # its template's few tokens and the answer's end aside
    assert outcome.monitor.p_true["prefilled_tokens"] < question + 16


def test_the_chat_shows_what_was_cut_under_the_answer():
    from mlx_sdm.turn.answer import GeneratedAnswer
    from mlx_sdm.turn.escalation import TurnStatus
    from mlx_sdm.turn.values import TurnOutcome
    from tui.widgets.chat_log import answer_notes

    lm = tiny_loaded_model()
    fitted = fit_prompt(lm.tokenizer, _conversation(), 200, context=CONTEXT)
    outcome = TurnOutcome(TurnStatus.DONE, GeneratedAnswer("A fox."), messages=list(fitted.messages), prompt_fit=fitted)
    notes = list(answer_notes(outcome))
    assert [n.text for n in notes] == [fitted.sentence()] and notes[0].role == "system"
    assert not list(answer_notes(TurnOutcome(TurnStatus.DONE, GeneratedAnswer("A fox."), messages=_conversation())))
