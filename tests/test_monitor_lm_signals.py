"""P(True) with the conversation's KV cache reused, System 2 sampling and hidden-state embeddings on the tiny LM."""

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

from mlx_sdm.monitor.online.auq import AUQMonitor
from mlx_sdm.monitor.online.auq_config import EstimatorConfig
from mlx_sdm.monitor.online.auq_escalation import UncertaintyPolicy
from mlx_sdm.monitor.online.embedders import HiddenStateEmbedder
from mlx_sdm.monitor.online.p_true import PTrueScorer, option_token_ids, p_true_from_cache, render_question_prompt
from mlx_sdm.monitor.online.sampling import MLXResponseSampler


class CountingModel:
    """Wraps an mlx-lm model and records how many tokens each call feeds: through the whole model (logits) or
    its inner ``model.model`` (hidden states; P(True) prefills a long feed that way, in chunks)."""

    def __init__(self, model):
        self._model, self.fed = model, []
        self.layers = model.layers
        self.model = _CountingInner(model.model, self.fed)

    def __call__(self, inputs, cache=None, **kw):
        self.fed.append(int(inputs.shape[1]))
        return self._model(inputs, cache=cache, **kw)


class _CountingInner:
    def __init__(self, inner, fed):
        self.inner, self.fed = inner, fed

    def __call__(self, inputs, cache=None, **kw):
        self.fed.append(int(inputs.shape[1]))
        return self.inner(inputs, cache=cache, **kw)


def _conversation(model, tokenizer, n_tokens=6):
    messages = [{"role": "user", "content": "Paris is the capital of France. Was this claim true or false?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    cache = make_prompt_cache(model)
    generated = []
    for token, _ in generate_step(mx.array(prompt), model, max_tokens=n_tokens, prompt_cache=cache):
        generated.append(int(token))
    # generate_step feeds every yielded token before yielding it: the cache holds prompt + generated
    assert cache[0].offset == len(prompt) + len(generated)
    reply = tokenizer.decode(generated)
    messages = messages + [{"role": "assistant", "content": reply}]
    return messages, cache, list(prompt) + generated, len(prompt)


def test_p_true_with_cache_equals_full_recompute_and_prefills_only_the_question(tiny_lm):
    model, tokenizer = tiny_lm
    messages, cache, cached_tokens, prompt_len = _conversation(model, tokenizer)
    question = render_question_prompt(tokenizer, messages)
    offset_before = cache[0].offset
    counting = CountingModel(model)
    cached = p_true_from_cache(counting, tokenizer, question, cache=cache, cached_tokens=cached_tokens)
    full = p_true_from_cache(model, tokenizer, question)  # fresh cache: everything recomputed
    assert cached.p_true == pytest.approx(full.p_true, abs=2e-5)
    assert cached.logit_true == pytest.approx(full.logit_true, abs=1e-3)
    common = 0
    while common < len(cached_tokens) and cached_tokens[common] == question[common]:
        common += 1
    assert cached.reused_tokens == common >= prompt_len  # at least the whole user prompt is reused
    assert sum(counting.fed) == len(question) - common == cached.prefilled_tokens
    assert full.prefilled_tokens == len(question) and full.reused_tokens == 0
    assert 0.0 < cached.p_true < 1.0
    # the cache is trimmed back to the shared prefix (conversation tokens past it are not restorable)
    assert cache[0].offset == common <= offset_before
    t_ids, f_ids = option_token_ids(tokenizer)
    assert t_ids and f_ids and not set(t_ids) & set(f_ids)


def test_p_true_restores_cache_when_conversation_is_a_prefix(tiny_lm):
    model, tokenizer = tiny_lm
    messages = [{"role": "user", "content": "Hello world!"}, {"role": "assistant", "content": "The quick brown fox."}]
    convo = tokenizer.apply_chat_template(messages, tokenize=True)
    question = render_question_prompt(tokenizer, messages)
    assert question[: len(convo)] == list(convo)
    cache = make_prompt_cache(model)
    model(mx.array(convo)[None], cache=cache)
    result = p_true_from_cache(model, tokenizer, question, cache=cache, cached_tokens=convo)
    assert result.cache_restored and cache[0].offset == len(convo)
    assert result.prefilled_tokens == len(question) - len(convo)
    again = p_true_from_cache(model, tokenizer, question, cache=cache, cached_tokens=convo)
    assert again.p_true == pytest.approx(result.p_true, abs=1e-6)  # the restored cache gives the same answer
    # the scorer plugs into the AUQ monitor as a callable
    scorer = PTrueScorer(model, tokenizer, messages, cache=cache, cached_tokens=convo)
    step = AUQMonitor().score_step("s", "llm_call", "", p_true=scorer)
    assert step.p_true_ran and step.p_true_confidence == pytest.approx(result.p_true, abs=1e-6)


def test_mlx_sampler_drives_system2(tiny_lm):
    model, tokenizer = tiny_lm
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hello world!"}], add_generation_prompt=True, tokenize=True)
    sampler = MLXResponseSampler(model, tokenizer, prompt, original_length=6, seed=3)
    assert sampler.max_tokens == 9
    samples = sampler.sample(2)
    assert len(samples) == 2 and all(isinstance(s, str) for s in samples)
    assert sampler._cache[0].offset == len(prompt) - 1  # trimmed back to the prefilled prompt each time
    again = MLXResponseSampler(model, tokenizer, prompt, original_length=6, seed=3).sample(2)
    assert again == samples  # seeded: reproducible
    monitor = AUQMonitor(UncertaintyPolicy(enable_semantic_sampling=True), EstimatorConfig())
    monitor.start("s").cumulative_confidence = 1.0  # keeps P_t >= 0.45 whatever the samples say
    step = monitor.score_step("s", "llm_call", "<confidence>0.95</confidence>", p_true=0.8,
                              sampler=MLXResponseSampler(model, tokenizer, prompt, original_length=6, seed=1))
    assert step.samples_used in (2, 5) and step.entropy_confidence is not None
    assert step.step_confidence == pytest.approx(min(0.7, step.entropy_confidence))


def test_hidden_state_embedder(tiny_lm):
    model, tokenizer = tiny_lm
    emb = HiddenStateEmbedder(model, tokenizer, "tiny")
    v = emb.encode(["Hello world!", "Hello world!", "The quick brown fox."])
    assert v.shape == (3, 32) and emb.name == "hidden:tiny"
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(v[0], v[1], atol=1e-6)
    assert float(v[0] @ v[2]) < 0.999
