"""P(True) from a local mlx-lm model, reusing the conversation's KV cache (docs/monitoring.md, AUQ System 1 signals).

After the response is generated, the conversation's prompt cache holds the tokens of the prompt and
the response. The P(True) prompt is the same conversation plus one USER question with two answer
options, rendered by the chat template. Only the tokens after the longest common prefix with the
cached tokens are prefilled; the read-out is

    c_p = exp(LT) / (exp(LT) + exp(LF)),  LT = logsumexp(next-token logits over the "true" variants)

Afterwards the cache is trimmed back (mlx-lm trimmable caches), so the conversation can continue
as if the question had never been asked. A cache that cannot be trimmed is left alone: the
question is then scored from a fresh cache (full recompute) and ``reused_tokens = 0`` says so.

The question prompt is fitted into the model's context by ``lm.prompt.fit_prompt`` (the
answer and the question are never cut), and what is fed is read in chunks (``lm.prefill``) with the
logits of the last position only, so a long conversation costs bounded memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import mlx_sdm  # noqa: F401  (BLAS preload before mlx.core)
import mlx.core as mx
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

from mlx_sdm.lm.prefill import prefill_hidden
from mlx_sdm.lm.prompt import fit_prompt, splice_cached

DEFAULT_QUESTION = (
    "Is your previous answer correct? Answer with exactly one word: True or False."
)
TRUE_VARIANTS = ("True", " True", "true", " true", "TRUE")
FALSE_VARIANTS = ("False", " False", "false", " false", "FALSE")


@dataclass
class PTrueResult:
    p_true: float
    logit_true: float  # LT
    logit_false: float  # LF
    prefilled_tokens: int  # tokens fed to the model for the question
    reused_tokens: int  # tokens whose keys/values came from the conversation cache
    cache_restored: bool  # the cache is back to the conversation state


def option_token_ids(tokenizer, true_variants: Sequence[str] = TRUE_VARIANTS,
                     false_variants: Sequence[str] = FALSE_VARIANTS) -> tuple[list[int], list[int]]:
    """First token id of each variant; ids shared by both options (e.g. a bare space) are dropped."""

    def first_ids(variants):
        ids = []
        for v in variants:
            enc = tokenizer.encode(v, add_special_tokens=False)
            if enc:
                ids.append(int(enc[0]))
        return set(ids)

    t, f = first_ids(true_variants), first_ids(false_variants)
    shared = t & f
    t, f = sorted(t - shared), sorted(f - shared)
    if not t or not f:
        raise ValueError("the tokenizer cannot tell the True and False options apart by their first token")
    return t, f


def render_question_prompt(tokenizer, messages: list[dict[str, Any]], question: str = DEFAULT_QUESTION,
                           max_context: int | None = None) -> list[int]:
    """Token ids of the conversation + the P(True) question + the assistant generation prompt, fitted into
    ``max_context`` (the answer, the conversation's last message, and the question are never cut)."""
    msgs = [{"role": m["role"], "content": m["content"]} for m in messages]
    msgs.append({"role": "user", "content": question})
    if max_context is None:
        return list(tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True))
    return list(fit_prompt(tokenizer, msgs, max_context - 1, keep_last=2).ids)  # one position for the read-out


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _cache_length(cache: list[Any]) -> int | None:
    first = cache[0] if cache else None
    return getattr(first, "offset", None)


def p_true_from_cache(
    model,
    tokenizer,
    question_tokens: Sequence[int],
    *,
    cache: list[Any] | None = None,
    cached_tokens: Sequence[int] = (),
    true_ids: Sequence[int] | None = None,
    false_ids: Sequence[int] | None = None,
) -> PTrueResult:
    """P(True) for ``question_tokens`` (the full rendered question prompt).

    ``cache`` holds the keys/values of ``cached_tokens`` (the conversation so far). Only
    ``question_tokens[common_prefix:]`` is fed; the cache is restored to ``cached_tokens`` after.
    """
    if true_ids is None or false_ids is None:
        true_ids, false_ids = option_token_ids(tokenizer)
    question_tokens = list(question_tokens)
    reused = 0
    restored = True
    if cache is not None and can_trim_prompt_cache(cache):
        length = _cache_length(cache)
        if length is not None and length != len(cached_tokens):
            raise ValueError(f"the cache holds {length} tokens but cached_tokens has {len(cached_tokens)}; pass the tokens the cache was built from")
        # the answer in the tokens the cache holds, so it is not trimmed back and prefilled again
        question_tokens = splice_cached(tokenizer, cached_tokens, question_tokens)
        common = _common_prefix(cached_tokens, question_tokens)
        common = min(common, len(question_tokens) - 1)  # at least one token must be fed to get logits
        extra = len(cached_tokens) - common
        if extra > 0:
            # cached tokens past the shared prefix (e.g. an end token the template renders differently);
            # trim them now: they cannot be restored without recomputing them.
            trim_prompt_cache(cache, extra)
            restored = False
        work_cache, reused = cache, common
    else:
        work_cache = make_prompt_cache(model)  # no usable cache: full recompute, the caller's cache is untouched
    feed = question_tokens[reused:]
    logits = _last_logits(model, feed, work_cache)
    lt = mx.logsumexp(logits[mx.array(list(true_ids))])
    lf = mx.logsumexp(logits[mx.array(list(false_ids))])
    p = mx.sigmoid(lt - lf)  # exp(LT) / (exp(LT) + exp(LF))
    mx.eval(p, lt, lf)
    if work_cache is cache and cache is not None:
        trim_prompt_cache(cache, len(feed))
    return PTrueResult(float(p.item()), float(lt.item()), float(lf.item()), len(feed), reused, restored)


def _last_logits(model, feed: Sequence[int], cache: list[Any]) -> mx.array:
    """Next-token logits after ``feed``: all but its last token fed in chunks through ``cache``, then the model
    itself on the last one, so only that position's logits are made (the whole feed's would be feed × vocabulary
    floats: 1.6 GB for 8,192 SmolLM2 tokens)."""
    if len(feed) > 1:
        prefill_hidden(model, feed[:-1], cache)
    return model(mx.array(feed[-1:])[None], cache=cache)[0, -1].astype(mx.float32)


class PTrueScorer:
    """Callable P(True) for one step: ``AUQMonitor.score_step(..., p_true=PTrueScorer(...))``. ``max_context``:
    the model's context, into which the question prompt is fitted (default: the model's own, from its args)."""

    def __init__(self, model, tokenizer, messages: list[dict[str, Any]], *, cache: list[Any] | None = None,
                 cached_tokens: Sequence[int] = (), question: str = DEFAULT_QUESTION, max_context: int | None = None):
        self.model, self.tokenizer, self.messages = model, tokenizer, messages
        self.cache, self.cached_tokens, self.question = cache, list(cached_tokens), question
        self.max_context = max_context or getattr(getattr(model, "args", None), "max_position_embeddings", None)
        self.result: PTrueResult | None = None

    def __call__(self) -> float:
        tokens = render_question_prompt(self.tokenizer, self.messages, self.question, self.max_context)
        self.result = p_true_from_cache(self.model, self.tokenizer, tokens, cache=self.cache, cached_tokens=self.cached_tokens)
        return self.result.p_true
