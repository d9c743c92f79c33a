"""K answers drawn in ONE batch that continues from an answer's prompt KV cache (the second look).

The greedy answer's generation leaves a KV cache holding the prompt (then the answer). The prompt's
first ``n - 1`` positions are copied ``K`` times along the batch axis (a slice of the cache's arrays: the
answer's own cache is not touched), and the prompt's last token is fed to all ``K`` rows: one decode step,
not a second prefill. Its logits are those of a fresh prefill of the whole prompt (tested to float32
precision), and each row then draws its own continuation at ``temperature``, with one seeded
``mx.random`` key per step, so the same (prompt, seed) gives the same K answers.

    answer = generate_answer(lm, messages, max_tokens=64, keep_cache=True)
    drawn = sample_from_cache(lm, answer.cache, prompt_ids, k=6)     # drawn.texts: 6 answers

Every row shares the prompt, so the batch needs no padding: plain mlx-lm ``KVCache`` s with batch ``K``.
A model whose cache is not a plain ``KVCache`` (a rotating or quantized cache) gets one clear error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from mlx_sdm.errors import DataError
from mlx_sdm.lm.features import ANSWER_HEAD_TOKENS

#: Answers drawn per second look (docs/verifiers.md, the second look).
DEFAULT_SAMPLES = 6
#: Their temperature: spread enough that an answer the model does not know varies, low enough that one it
#: knows is repeated (the issue's measurement and the semantic-entropy literature use 0.5–1.0).
DEFAULT_TEMPERATURE = 0.7
DEFAULT_SEED = 0


@dataclass(frozen=True)
class SampledAnswers:
    """K answers drawn from one prompt: their texts, token ids, the mean of each answer's token
    log-probabilities under the model's own (untempered) distribution, and the time the draw took."""

    texts: tuple[str, ...]
    token_ids: tuple[tuple[int, ...], ...]
    mean_logprobs: tuple[float, ...]
    seconds: float

    @property
    def k(self) -> int:
        return len(self.texts)


def batched_prompt_cache(cache: Sequence, prompt_len: int, k: int) -> list[KVCache]:
    """``k`` copies, along the batch axis, of the first ``prompt_len - 1`` positions of a batch-1 cache
    (the prompt but its last token, which the first decode step feeds). The source cache is not changed."""
    if prompt_len < 1:
        raise DataError("the second look needs a non-empty prompt", field="prompt")
    if k < 1:
        raise DataError(f"the second look draws at least one answer (got k={k})", field="k")
    out = []
    for layer in cache:
        if type(layer) is not KVCache:
            raise DataError(f"the second look continues from a plain KV cache; this model's cache is "
                            f"{type(layer).__name__}: give --no-second-look", field="cache")
        if layer.keys is None or layer.offset < prompt_len - 1 or layer.keys.shape[0] != 1:
            raise DataError(f"the cache holds {layer.offset} positions of batch {getattr(layer.keys, 'shape', [0])[0]}; "
                            f"the second look needs the {prompt_len}-token prompt of one answer", field="cache")
        copy = KVCache()
        n = prompt_len - 1
        if n:
            copy.keys = mx.repeat(layer.keys[..., :n, :], k, axis=0)
            copy.values = mx.repeat(layer.values[..., :n, :], k, axis=0)
            copy.offset = n
        out.append(copy)
    return out


def _log_softmax(logits: mx.array) -> mx.array:
    logits = logits.astype(mx.float32)
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def first_logprobs(model, cache: list[KVCache], last_token: int, k: int) -> mx.array:
    """[k, V] log-probabilities of the first answer token: the prompt's last token fed to every row."""
    logits = model(mx.full((k, 1), last_token, dtype=mx.int32), cache=cache)
    return _log_softmax(logits[:, -1, :])


def sample_from_cache(lm, cache: Sequence, prompt_ids: Sequence[int], *, k: int = DEFAULT_SAMPLES,
                      temperature: float = DEFAULT_TEMPERATURE, seed: int = DEFAULT_SEED,
                      max_tokens: int = ANSWER_HEAD_TOKENS) -> SampledAnswers:
    """``k`` answers to the prompt whose ids ``cache`` holds first (module docstring).

    ``lm``: a ``LoadedModel`` (``.model``, ``.tokenizer``). ``cache``: the batch-1 mlx-lm cache of the
    answer (``GeneratedAnswer.cache``), holding at least the prompt's first ``len(prompt_ids) - 1``
    positions. Each row stops at the end of its turn or after ``max_tokens`` tokens."""
    if temperature <= 0:
        raise DataError(f"the second look samples at a temperature above 0 (got {temperature})", field="temperature")
    tic = time.perf_counter()
    prompt_ids = list(prompt_ids)
    batch = batched_prompt_cache(cache, len(prompt_ids), k)
    eos = sorted(set(lm.tokenizer.eos_token_ids))
    eos_arr = mx.array(eos, dtype=mx.int32)
    key = mx.random.key(seed)
    logprobs = first_logprobs(lm.model, batch, prompt_ids[-1], k)
    tokens, chosen, alive = [], [], []
    live = mx.ones((k,), dtype=mx.bool_)
    for step in range(max_tokens):
        key, sub = mx.random.split(key)
        # x ~ softmax(log p / T): the tempered draw; its log-probability is read from the untempered log p
        token = mx.random.categorical(logprobs * (1.0 / temperature), axis=-1, key=sub).astype(mx.int32)
        lp = mx.take_along_axis(logprobs, token[:, None], axis=-1)[:, 0]
        ended = (token[:, None] == eos_arr[None, :]).any(axis=-1)
        live = mx.logical_and(live, mx.logical_not(ended))
        tokens.append(token)
        chosen.append(lp)
        alive.append(live)  # the token counts for its row while the row has not ended (its EOS does not)
        mx.eval(token, lp, live)
        if not bool(live.any().item()) or step == max_tokens - 1:
            break
        logprobs = _log_softmax(lm.model(token[:, None], cache=batch)[:, -1, :])
    ids = mx.stack(tokens, axis=1).tolist()
    lps = mx.stack(chosen, axis=1).tolist()
    keep = mx.stack(alive, axis=1).tolist()
    texts, token_ids, means = [], [], []
    for row_ids, row_lps, row_keep in zip(ids, lps, keep):
        n = sum(row_keep)  # tokens before the row's end of turn (live is monotone: once False, False)
        token_ids.append(tuple(int(t) for t in row_ids[:n]))
        texts.append(lm.tokenizer.decode(list(token_ids[-1])))
        means.append(float(sum(row_lps[:n]) / n) if n else float("nan"))
    return SampledAnswers(tuple(texts), tuple(token_ids), tuple(means), time.perf_counter() - tic)
