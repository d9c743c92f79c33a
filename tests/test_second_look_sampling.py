"""The second look's sampler (mlx_sdm/lm/sampling.py) on the tiny random model: the batch continues from the
answer's prompt cache with the same first-token distribution as a fresh prefill, leaves that cache as it
was, and draws the same answers for the same seed."""

import mlx.core as mx
import numpy as np
import pytest

from mlx_sdm.errors import DataError
from mlx_sdm.lm.prompt import render_prompt
from mlx_sdm.lm.sampling import batched_prompt_cache, first_logprobs, sample_for_prompts, sample_from_cache
from mlx_sdm.turn.answer import generate_answer
from tests.tiny_verifier import tiny_loaded_model

MESSAGES = [{"role": "user", "content": "Is Paris the capital of France? Check the claim."}]
#: float32 log-softmax over a few hundred logits, computed in two different graphs (one position
#: attended from a cache vs the whole prompt at once): agreement to a few float32 ulps of values ~10.
FLOAT32_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def answered():
    lm = tiny_loaded_model()
    answer = generate_answer(lm, MESSAGES, max_tokens=12, keep_cache=True)
    return lm, answer, render_prompt(lm.tokenizer, MESSAGES)


def test_the_batch_continues_from_the_cache_with_a_fresh_prefills_first_token_distribution(answered):
    lm, answer, prompt = answered
    assert answer.cache is not None and answer.cached_tokens[:len(prompt)] == prompt
    fresh = lm.model(mx.array(prompt)[None])[:, -1, :].astype(mx.float32)
    fresh = np.array(fresh - mx.logsumexp(fresh, axis=-1, keepdims=True))[0]
    batch = batched_prompt_cache(answer.cache, len(prompt), 4)
    assert [c.offset for c in batch] == [len(prompt) - 1] * len(batch)
    continued = np.array(first_logprobs(lm.model, batch, prompt[-1], 4))
    assert continued.shape == (4, fresh.shape[0])
    np.testing.assert_allclose(continued, np.broadcast_to(fresh, continued.shape), atol=FLOAT32_TOLERANCE, rtol=0)
    # greedy's first token is the argmax of that distribution
    assert int(np.argmax(fresh)) == answer.token_ids[0]


def test_the_answers_cache_is_left_as_it_was(answered):
    lm, answer, prompt = answered
    offsets = [c.offset for c in answer.cache]
    keys = np.array(answer.cache[0].keys[..., : offsets[0], :])
    sample_from_cache(lm, answer.cache, prompt, k=3, max_tokens=5)
    assert [c.offset for c in answer.cache] == offsets
    np.testing.assert_array_equal(np.array(answer.cache[0].keys[..., : offsets[0], :]), keys)


def test_the_draw_is_deterministic_per_seed_and_varies_across_rows(answered):
    lm, answer, prompt = answered
    one = sample_from_cache(lm, answer.cache, prompt, k=6, seed=3, max_tokens=10)
    two = sample_from_cache(lm, answer.cache, prompt, k=6, seed=3, max_tokens=10)
    other = sample_from_cache(lm, answer.cache, prompt, k=6, seed=4, max_tokens=10)
    assert one.k == 6 and one.texts == two.texts and one.token_ids == two.token_ids
    assert one.mean_logprobs == two.mean_logprobs
    assert other.token_ids != one.token_ids
    assert len(set(one.token_ids)) > 1  # the rows draw their own tokens (one key per step, K rows)
    eos = set(lm.tokenizer.eos_token_ids)
    for ids, text, mean in zip(one.token_ids, one.texts, one.mean_logprobs):
        assert len(ids) <= 10 and not eos & set(ids)
        assert text == lm.tokenizer.decode(list(ids))
        assert (mean <= 0.0) if ids else np.isnan(mean)


def test_the_mean_logprob_is_the_models_own_on_the_drawn_tokens(answered):
    lm, answer, prompt = answered
    drawn = sample_from_cache(lm, answer.cache, prompt, k=2, seed=1, max_tokens=6)
    for ids, mean in zip(drawn.token_ids, drawn.mean_logprobs):
        if not ids:
            continue
        full = mx.array(prompt + list(ids))[None]
        logits = lm.model(full).astype(mx.float32)
        logp = np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True))[0]
        own = [logp[len(prompt) - 1 + i, t] for i, t in enumerate(ids)]
        assert abs(float(np.mean(own)) - mean) < 1e-4  # float32 over a few tokens, two graphs


def test_bad_requests_get_one_clear_error(answered):
    lm, answer, prompt = answered
    with pytest.raises(DataError, match="temperature"):
        sample_from_cache(lm, answer.cache, prompt, temperature=0.0)
    with pytest.raises(DataError, match="at least one"):
        batched_prompt_cache(answer.cache, len(prompt), 0)
    with pytest.raises(DataError, match="positions"):
        batched_prompt_cache(answer.cache, answer.cache[0].offset + 5, 2)


def test_several_prompts_in_one_left_padded_batch_continue_as_fresh_prefills():
    """The build's second look: prompts of different lengths prefilled together (left padding); a forced row's
    log-probs equal a fresh pass over prompt + those tokens, and each prompt's samples are its own."""
    lm = tiny_loaded_model()
    prompts = [render_prompt(lm.tokenizer, [{"role": "user", "content": q}])
               for q in ("Hello world!", "Is Paris the capital of France? Check the claim.", "The quick brown fox")]
    assert len({len(p) for p in prompts}) == 3
    forced = [lm.tokenizer.encode("Paris is", add_special_tokens=False), [5, 9, 11, 13], [7]]
    out = sample_for_prompts(lm, prompts, k=3, seed=2, max_tokens=6, forced=forced)
    assert len(out) == 3
    for prompt, ids, (drawn, lps) in zip(prompts, forced, out):
        logits = lm.model(mx.array(prompt + ids)[None]).astype(mx.float32)
        logp = np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True))[0]
        own = [logp[len(prompt) - 1 + i, t] for i, t in enumerate(ids)]
        np.testing.assert_allclose(lps, own, atol=FLOAT32_TOLERANCE, rtol=0)
        assert drawn.k == 3 and all(len(t) <= 6 for t in drawn.token_ids)
    again = sample_for_prompts(lm, prompts, k=3, seed=2, max_tokens=6, forced=forced)
    assert [d.token_ids for d, _ in again] == [d.token_ids for d, _ in out]


def test_auq_reads_the_shared_answers_first_then_draws_more_in_one_batch_from_the_cache(answered, monkeypatch):
    """One sampling, two readers: System 2's sampler hands out the second look's answers before drawing, and
    its own draws continue from the answer's cache (no fresh generation), each call with new answers."""
    import mlx_sdm.turn.answer as answer_module
    from mlx_sdm.turn.monitoring import AUQ_SAMPLE_SEED, ChatSampler

    lm, answer, prompt = answered
    monkeypatch.setattr(answer_module, "generate_answer", lambda *a, **k: pytest.fail("a fresh generation"))
    sampler = ChatSampler(lm, MESSAGES, len(answer.token_ids), cache=answer.cache, prompt_ids=prompt,
                          shared=("shared one", "shared two"))
    first = sampler.sample(3)
    expected = sample_from_cache(lm, answer.cache, prompt, k=1, temperature=sampler.temperature,
                                 seed=AUQ_SAMPLE_SEED, max_tokens=sampler.max_tokens).texts
    assert first == ["shared one", "shared two", *expected]
    more = sampler.sample(2)
    again = sample_from_cache(lm, answer.cache, prompt, k=2, temperature=sampler.temperature,
                              seed=AUQ_SAMPLE_SEED + 3, max_tokens=sampler.max_tokens).texts
    assert more == list(again) and sampler.drawn == first + more


def test_an_answer_made_elsewhere_gets_the_chats_draws_and_its_own_log_probabilities(answered):
    """/v1/verify's second look (sample_after_answer: the prompt and the answer read in one prefill) draws the
    answers the chat drew from its generation cache with the same seed, and reads the answer's log-probs as the
    generation gave them."""
    from mlx_sdm.lm.sampling import sample_after_answer

    lm, answer, prompt = answered
    chat = sample_from_cache(lm, answer.cache, prompt, k=4, seed=5, max_tokens=8)
    drawn, logprobs = sample_after_answer(lm, prompt, answer.token_ids, k=4, seed=5, max_tokens=8)
    assert drawn.texts == chat.texts and drawn.token_ids == chat.token_ids
    np.testing.assert_allclose(logprobs, answer.logprobs, atol=FLOAT32_TOLERANCE, rtol=0)
