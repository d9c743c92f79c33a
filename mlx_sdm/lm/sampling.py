"""K answers drawn in one batch that continues from an answer's prompt KV cache (the second look).

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
    _check_temperature(temperature)
    tic = time.perf_counter()
    prompt_ids = list(prompt_ids)
    batch = batched_prompt_cache(cache, len(prompt_ids), k)
    rows = _decode_rows(lm, batch, [prompt_ids[-1]] * k, [None] * k, temperature, seed, max_tokens)
    return _answers(lm, rows, time.perf_counter() - tic)


def sample_after_answer(lm, prompt_ids: Sequence[int], answer_ids: Sequence[int], *, k: int = DEFAULT_SAMPLES,
                        temperature: float = DEFAULT_TEMPERATURE, seed: int = DEFAULT_SEED,
                        max_tokens: int = ANSWER_HEAD_TOKENS) -> tuple[SampledAnswers, tuple[float, ...]]:
    """The second look of an answer made elsewhere, drawn as the chat draws it for its own answer: the prompt
    and the answer are read in one prefill (its KV cache is what generating the answer would have left), the
    answer's per-token log-probabilities are read off that pass (under the untempered model, as the chat's
    are), and ``k`` answers are drawn from the cache with :func:`sample_from_cache` (same prompt, same seed:
    the chat's draws, up to float32 rounding)."""
    from mlx_lm.models.cache import make_prompt_cache

    from mlx_sdm.lm.generation import default_head
    from mlx_sdm.lm.prefill import prefill_hidden

    prompt_ids, answer_ids = list(prompt_ids), list(answer_ids)
    if len(prompt_ids) < 2:
        raise DataError("the second look needs a prompt of at least two tokens", field="prompt")
    cache = make_prompt_cache(lm.model)
    hidden = prefill_hidden(lm.model, prompt_ids + answer_ids, cache)  # [1, L, D]
    logprobs: tuple[float, ...] = ()
    if answer_ids:  # position i predicts token i + 1: the answer's tokens are predicted from len(prompt) - 1 on
        start = len(prompt_ids) - 1
        scores = _log_softmax(default_head(lm.model)(hidden[:, start:start + len(answer_ids), :]))[0]
        picked = mx.take_along_axis(scores, mx.array(answer_ids, dtype=mx.int32)[:, None], axis=-1)[:, 0]
        logprobs = tuple(float(v) for v in picked.tolist())
    drawn = sample_from_cache(lm, cache, prompt_ids, k=k, temperature=temperature, seed=seed, max_tokens=max_tokens)
    return drawn, logprobs


def sample_for_prompts(lm, prompts: Sequence[Sequence[int]], *, k: int = DEFAULT_SAMPLES,
                       temperature: float = DEFAULT_TEMPERATURE, seed: int = DEFAULT_SEED,
                       max_tokens: int = ANSWER_HEAD_TOKENS, forced: Sequence[Sequence[int]] | None = None
                       ) -> list[tuple[SampledAnswers, tuple[float, ...] | None]]:
    """``k`` answers to each of several prompts, all in one batch (a build's second look, where the greedy
    answers were made in batches that keep no per-answer cache): the prompts but their last token are
    prefilled once, left-padded in a ``BatchKVCache``, each row copied ``k`` times, and decoded together.
    ``forced``: per prompt, token ids (the greedy answer) decoded along as one more row, whose per-token
    log-probabilities come back beside the samples (None without ``forced``)."""
    from mlx_lm.models.cache import BatchKVCache

    _check_temperature(temperature)
    tic = time.perf_counter()
    prompts = [list(p) for p in prompts]
    if not prompts or min(map(len, prompts)) < 2:
        raise DataError("each prompt needs at least two tokens", field="prompt")
    per = k + (1 if forced is not None else 0)
    width = max(len(p) - 1 for p in prompts)
    padding = [width - (len(p) - 1) for p in prompts]
    padded = mx.array([[0] * pad + p[:-1] for pad, p in zip(padding, prompts)], dtype=mx.int32)
    cache = [BatchKVCache(padding) for _ in lm.model.layers]
    lm.model(padded, cache=cache)  # one prefill of every prompt (its hidden states are not needed)
    for layer in cache:  # each prompt's row copied ``per`` times, in place
        layer.keys = mx.repeat(layer.keys[..., : layer._idx, :], per, axis=0)
        layer.values = mx.repeat(layer.values[..., : layer._idx, :], per, axis=0)
        layer.offset = mx.repeat(layer.offset, per, axis=0)
        layer.left_padding = mx.repeat(layer.left_padding, per, axis=0)
    mx.eval([c.state for c in cache])
    firsts, forcing = [], []
    for i, p in enumerate(prompts):
        firsts += [p[-1]] * per
        forcing += ([list(forced[i])] if forced is not None else []) + [None] * k
    rows = _decode_rows(lm, cache, firsts, forcing, temperature, seed, max_tokens)
    seconds = time.perf_counter() - tic
    out = []
    for i in range(len(prompts)):
        mine = rows[i * per:(i + 1) * per]
        forced_lps = tuple(mine[0][1]) if forced is not None else None
        out.append((_answers(lm, mine[1:] if forced is not None else mine, seconds / len(prompts)), forced_lps))
    return out


def _check_temperature(temperature: float) -> None:
    if temperature <= 0:
        raise DataError(f"the second look samples at a temperature above 0 (got {temperature})", field="temperature")


def _decode_rows(lm, cache: list, firsts: list[int], forced: list[list[int] | None], temperature: float,
                 seed: int, max_tokens: int) -> list[tuple[list[int], list[float]]]:
    """Decode every row of ``cache`` from its first token: a forced row follows its ids, any other draws
    from softmax(log p / T) with one seeded key per step. Each row's (token ids, log-probs under the
    untempered model) up to its end of turn or ``max_tokens``."""
    n = len(firsts)
    eos_arr = mx.array(sorted(set(lm.tokenizer.eos_token_ids)), dtype=mx.int32)
    is_forced = mx.array([f is not None for f in forced])
    steps = max([max_tokens] + [len(f) for f in forced if f is not None]) if any(f is not None for f in forced) else max_tokens
    pad_id = int(eos_arr[0].item())
    forced_ids = mx.array([(f or []) + [pad_id] * (steps - len(f or [])) for f in forced], dtype=mx.int32)
    key = mx.random.key(seed)
    logits = lm.model(mx.array(firsts, dtype=mx.int32)[:, None], cache=cache)[:, -1, :]
    logprobs = _log_softmax(logits)
    tokens, chosen, alive = [], [], []
    live = mx.ones((n,), dtype=mx.bool_)
    for step in range(steps):
        key, sub = mx.random.split(key)
        # x ~ softmax(log p / T): the tempered draw; its log-probability is read from the untempered log p
        drawn = mx.random.categorical(logprobs * (1.0 / temperature), axis=-1, key=sub).astype(mx.int32)
        token = mx.where(is_forced, forced_ids[:, step], drawn)
        lp = mx.take_along_axis(logprobs, token[:, None], axis=-1)[:, 0]
        live = mx.logical_and(live, mx.logical_not((token[:, None] == eos_arr[None, :]).any(axis=-1)))
        tokens.append(token)
        chosen.append(lp)
        alive.append(live)  # the token counts for its row while the row has not ended (its EOS does not)
        mx.eval(token, lp, live)
        if not bool(live.any().item()) or step == steps - 1:
            break
        logprobs = _log_softmax(lm.model(token[:, None], cache=cache)[:, -1, :])
    ids = mx.stack(tokens, axis=1).tolist()
    lps = mx.stack(chosen, axis=1).tolist()
    keep = mx.stack(alive, axis=1).tolist()
    out = []
    for i, (row_ids, row_lps, row_keep) in enumerate(zip(ids, lps, keep)):
        m = sum(row_keep)  # tokens before the row's end of turn (live is monotone: once False, False)
        if forced[i] is None:
            m = min(m, max_tokens)
        out.append(([int(t) for t in row_ids[:m]], [float(v) for v in row_lps[:m]]))
    return out


def _answers(lm, rows: list[tuple[list[int], list[float]]], seconds: float) -> SampledAnswers:
    texts = tuple(lm.tokenizer.decode(ids) for ids, _ in rows)
    means = tuple(float(sum(lps) / len(lps)) if lps else float("nan") for _, lps in rows)
    return SampledAnswers(texts, tuple(tuple(ids) for ids, _ in rows), means, seconds)
