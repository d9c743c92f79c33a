"""A chat's next turn reuses the KV cache even when the model generated its answer in tokens the
tokenizer would split differently (a made-up word): the rendered prompt is read in the tokens the cache
holds (``splice_cached``), so only the new tokens are prefilled, and P(True) keeps the cache whole."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from mlx_sdm.lm.prompt import render_prompt, splice_cached
from mlx_sdm.monitor.online.p_true import p_true_from_cache, render_question_prompt
from mlx_sdm.turn.answer import PrefixCache, stream_answer, GeneratedAnswer
from tests.tiny_verifier import tiny_loaded_model

WORD = "Bouillabadou"
QUESTION = [{"role": "user", "content": "Name a dish."}]


def _odd_answer(tokenizer) -> tuple[list[int], list[int]]:
    """(the prompt's ids + the answer WORD one character per token: not how the tokenizer splits it,
    the prompt's ids)."""
    prompt = render_prompt(tokenizer, QUESTION)
    odd = [i for ch in WORD for i in tokenizer.encode(ch, add_special_tokens=False)]
    assert odd != list(tokenizer.encode(WORD, add_special_tokens=False)) and tokenizer.decode(odd) == WORD
    return list(prompt) + odd, prompt


def test_the_rendered_prompt_is_read_in_the_tokens_the_cache_holds():
    tokenizer = tiny_loaded_model().tokenizer
    cached, _ = _odd_answer(tokenizer)
    follow = QUESTION + [{"role": "assistant", "content": WORD}, {"role": "user", "content": "And a drink?"}]
    rendered = render_prompt(tokenizer, follow)
    assert rendered[:len(cached)] != cached  # rendered again from text: the cached tokens are left
    spliced = splice_cached(tokenizer, cached, rendered)
    assert spliced[:len(cached)] == cached and tokenizer.decode(spliced) == tokenizer.decode(rendered)
    assert splice_cached(tokenizer, cached, rendered[:5]) == rendered[:5]  # another text: unchanged
    other = render_prompt(tokenizer, QUESTION + [{"role": "assistant", "content": "Soup"}, follow[-1]])
    assert splice_cached(tokenizer, cached, other) == other


def test_turn_two_prefills_only_its_new_tokens_after_an_answer_in_odd_tokens():
    lm = tiny_loaded_model()
    cached, _ = _odd_answer(lm.tokenizer)
    cache = make_prompt_cache(lm.model)
    lm.model(mx.array(cached)[None], cache=cache)
    mx.eval([c.state for c in cache])
    hidden = lm.model.args.hidden_size
    prefix = PrefixCache(cache=cache, ids=cached, hidden=np.zeros((len(cached), hidden), dtype=np.float32))
    follow = QUESTION + [{"role": "assistant", "content": WORD}, {"role": "user", "content": "And a drink?"}]
    *_, answer = stream_answer(lm, follow, max_tokens=3, keep_cache=True, prefix=prefix)
    assert isinstance(answer, GeneratedAnswer)
    assert answer.reused_tokens == len(cached)  # turn 2 prefills its new tokens only
    new = len(splice_cached(lm.tokenizer, cached, render_prompt(lm.tokenizer, follow))) - len(cached)
    assert answer.prompt_tokens - answer.reused_tokens == new < len(cached)


def test_p_true_keeps_a_cache_of_odd_tokens_whole():
    model, tokenizer = tiny_loaded_model().model, tiny_loaded_model().tokenizer
    cached, _ = _odd_answer(tokenizer)
    cache = make_prompt_cache(model)
    model(mx.array(cached)[None], cache=cache)
    question = render_question_prompt(tokenizer, QUESTION + [{"role": "assistant", "content": WORD}])
    result = p_true_from_cache(model, tokenizer, question, cache=cache, cached_tokens=cached)
    assert result.cache_restored and cache[0].offset == len(cached)  # the next turn can still reuse it
    assert result.reused_tokens == len(cached)
    spliced = splice_cached(tokenizer, cached, question)
    assert result.prefilled_tokens == len(spliced) - len(cached)
    full = p_true_from_cache(model, tokenizer, spliced)  # the same tokens recomputed from scratch
    assert abs(result.p_true - full.p_true) < 2e-5
