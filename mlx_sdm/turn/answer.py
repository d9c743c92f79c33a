"""The turn's one call into the LM layer: an answer to a chat as a stream (:func:`stream_answer`
yields each :class:`~mlx_sdm.lm.pieces.TokenPiece`, then the :class:`GeneratedAnswer`), keeping what
verification and monitoring need (token strings, log-probs, document features from the same pass;
:func:`mlx_sdm.lm.generation.stream_generate_features`). A consumer stops it by setting ``stop``.

Prefix reuse across turns: a chat prompt is the previous prompt + the previous answer + the new
message, so the KV cache of the previous turn is kept (:class:`PrefixCache`) and only the new tokens
are prefilled; the first token then comes as fast on turn 20 as on turn 1. A conversation the model reads
otherwise than last turn (an earlier exchange left out) reuses the cache up to the first token that differs (the
cache is cut back there). The document features stay those of the whole conversation: their mean part
``mean(h_0..h_k)`` is recombined from the sum of the reused positions' final hidden states (kept per position
with the cache) and the mean over the newly fed ones (docs/method.md § 15.3; equal to a full recompute up to
float rounding, which a test checks).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from mlx_sdm.lm.decoding import Decoding
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.lm.prompt import FittedPrompt

if TYPE_CHECKING:  # MLX types: the UI imports the turn's values without loading MLX
    from mlx_sdm.lm.features import DocumentFeatures
    from mlx_sdm.lm.generation import GenerationConfig, GenerationResult, Head
    from mlx_sdm.lm.loading import LoadedModel


@dataclass
class PrefixCache:
    """A session's KV cache after its last answer: ``ids`` are the token ids it holds (its offset is
    ``len(ids)``), ``hidden`` their final normed hidden states ([len(ids), D] float32: the features' mean over
    any leading part of them, 2.3 kB a token for SmolLM2) and ``weights`` the weights that computed them
    (``LoadedModel.weights_tag``: "" for the base model, else the adapter set on)."""

    cache: list
    ids: list[int]
    hidden: np.ndarray
    weights: str = ""

    def shared_with(self, full_ids: list[int], weights: str) -> int:
        """How many leading tokens of the prompt ``full_ids`` this cache serves: the tokens both start with, at
        most all but the prompt's last (fed to predict the answer's first token). 0 when it serves none: made by
        other weights (a LoRA set changes the keys and values of the blocks it adapts, so a cache made with it
        serves no turn without it), or its offset no longer says which tokens it holds."""
        n = len(self.ids)
        offset = getattr(self.cache[0], "offset", None) if self.cache else None
        if not n or offset != n or weights != self.weights:
            return 0
        limit = min(n, len(full_ids) - 1)
        same = np.asarray(full_ids[:limit]) == np.asarray(self.ids[:limit])
        return limit if bool(same.all()) else int(np.argmin(same))


@dataclass
class GeneratedAnswer:
    text: str
    tokens: list[str] = field(default_factory=list)  # decoded piece per generated token (aligned with logprobs)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    features: np.ndarray | None = None  # [mean(h); h_delimiter], 2·hidden, float32
    finish_reason: str = "stop"  # stop | length | delimiter | cancelled
    cancelled: bool = False
    prompt_tokens: int = 0
    truncated_prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens whose keys/values came from the previous turn's cache
    cache: list | None = field(default=None, repr=False)  # the KV cache after the answer (for P(True))
    cached_tokens: list[int] = field(default_factory=list, repr=False)  # the token ids that cache holds
    prefix: PrefixCache | None = field(default=None, repr=False)  # what the next turn of this chat can reuse
    judged_tokens: int = 0  # answer tokens the document features cover (through the delimiter token)
    prompt_fit: FittedPrompt | None = field(default=None, repr=False)  # what the model read of the messages

    def release(self) -> None:
        """Drop the KV cache this answer holds, once P(True) and the next turn's prefix have used it: the
        turn's record then carries no MLX state to other threads."""
        self.cache, self.cached_tokens, self.prefix = None, [], None

    @property
    def judged_text(self) -> str:
        """The answer text the verifier judged (through its delimiter token)."""
        judged = "".join(self.tokens[: self.judged_tokens])
        return judged if self.text.startswith(judged) and self.judged_tokens < len(self.tokens) else self.text

    @property
    def unverified_tail(self) -> str:
        """Text generated after the judged unit (the verifier did not read it)."""
        return self.text[len(self.judged_text):]


class TopLogprobs:
    """Records the ``k`` most likely tokens and their log-probs at each generated position, by wrapping
    the sampler (mlx-lm calls it exactly once per generated token, in order, with the log-probs the
    token is drawn from). Read back lazily with :meth:`at` (OpenAI ``top_logprobs``)."""

    def __init__(self, k: int):
        self.k = k
        self._steps: list[tuple[Any, Any]] = []

    def wrap(self, sampler: Callable | None) -> Callable:
        import mlx.core as mx

        def sample(logprobs):
            best = mx.argpartition(-logprobs, kth=self.k - 1, axis=-1)[..., : self.k]
            values = mx.take_along_axis(logprobs, best, axis=-1)
            order = mx.argsort(-values, axis=-1)
            self._steps.append((mx.take_along_axis(best, order, axis=-1), mx.take_along_axis(values, order, axis=-1)))
            return sampler(logprobs) if sampler is not None else mx.argmax(logprobs, axis=-1)

        return sample

    def at(self, index: int) -> tuple[tuple[int, float], ...]:
        """(token id, log-prob) pairs of position ``index``, most likely first."""
        if index >= len(self._steps):
            return ()
        ids, values = self._steps[index]
        return tuple(zip((int(i) for i in ids.reshape(-1).tolist()), (float(v) for v in values.reshape(-1).tolist())))


def stream_answer(
    lm: LoadedModel,
    messages: list[dict],
    *,
    prompt: FittedPrompt | None = None,
    max_tokens: int,
    temperature: float = 0.0,
    head: Head | None = None,
    stop: threading.Event | None = None,
    phase: str = "answer",
    features: bool = True,
    keep_cache: bool = False,
    delimiter: str = "end_of_turn",
    prefix: PrefixCache | None = None,
    stop_at_delimiter: bool = False,
    top_logprobs: TopLogprobs | None = None,
    on_prefill: Callable[[int, int], None] | None = None,
    keep_last: int = 0,
    decoding: Decoding | None = None,
) -> Iterator[TokenPiece | GeneratedAnswer]:
    """Stream one answer: its :class:`TokenPiece` s (of ``phase``), then the :class:`GeneratedAnswer`.
    ``stop`` (a ``threading.Event``) set while a piece is handled ends generation at that token (the stop key).
    ``delimiter`` is the verifier's feature rule ("end_of_turn", or "json_close" for verifiers built on
    JSON answers); it picks ``h_k``. ``prefix``: the previous turn's cache, used when the new prompt
    extends the tokens it holds. ``stop_at_delimiter``: end the answer at the unit the verifier judges
    (the JSON unit's closing brace for ``json_close``), so the verdict covers the whole answer.
    ``top_logprobs``: a recorder of the most likely tokens at each position (the server's ``top_logprobs``).
    ``on_prefill(done, total)``: prompt tokens prefilled so far (mlx-lm's ``prompt_progress_callback``).
    The conversation is fitted into the context left after ``max_tokens`` (``lm.prompt.fit_prompt``; the last
    ``keep_last`` messages are never cut), unless ``prompt`` holds it fitted already (the turn's plan). ``decoding``:
    mlx-lm's sampler and logits processors (``lm.decoding``), in place of greedy or ``temperature``."""
    from mlx_sdm.lm.generation import GenerationConfig
    from mlx_sdm.lm.prompt import fit_prompt, splice_cached

    fitted = prompt if prompt is not None else fit_prompt(lm.tokenizer, messages, lm.max_context - max_tokens,
                                                          keep_last=keep_last, context=lm.max_context)
    full_ids = list(fitted.ids)
    if keep_cache and prefix is not None:  # the previous answer in the tokens the cache holds (splice_cached)
        full_ids = splice_cached(lm.tokenizer, prefix.ids, full_ids)
    start = _Start.of(lm, full_ids, max_tokens, keep_cache, prefix)
    sampler, extra = _decode_with(decoding, temperature, top_logprobs)
    extra.update({"prompt_cache": start.cache} if start.cache is not None else {})
    extra.update({"prompt_progress_callback": on_prefill} if on_prefill is not None else {})
    config = GenerationConfig(max_tokens=max_tokens, sampler=sampler, delimiter=delimiter,
                              stop_at_delimiter=stop_at_delimiter, keep_hidden=keep_cache, extra=extra)
    # the prompt is rendered once per turn (full_ids); generation reads its ids (after a reused prefix: the new ones)
    streamed = _Streamed([], [], [], None)
    yield from _stream(lm, start.feed, config, head, stop, phase, top_logprobs, streamed)
    result = streamed.done
    vector = _feature_vector(result, start) if result.finish_reason != "cancelled" and streamed.ids else None
    cache, cached_tokens, next_prefix = _kept_cache(lm, full_ids, start, streamed.ids, result, vector)
    yield GeneratedAnswer(
        text=result.text, tokens=streamed.pieces, token_ids=streamed.ids, logprobs=streamed.logprobs,
        features=vector if features else None, finish_reason=result.finish_reason,
        cancelled=result.finish_reason == "cancelled", prompt_tokens=start.base_len + result.prompt_tokens,
        truncated_prompt_tokens=result.truncated_prompt_tokens, reused_tokens=start.base_len, cache=cache,
        cached_tokens=cached_tokens, prefix=next_prefix,
        judged_tokens=_judged_tokens(result.features, len(streamed.ids)) if streamed.ids else 0,
        prompt_fit=fitted,
    )


def generate_answer(lm: LoadedModel, messages: list[dict], **kwargs: Any) -> GeneratedAnswer:
    """:func:`stream_answer` to its end: the :class:`GeneratedAnswer` (its last item)."""
    for item in stream_answer(lm, messages, **kwargs):
        pass
    assert isinstance(item, GeneratedAnswer)
    return item


def _decode_with(decoding: Decoding | None, temperature: float,
                 top_logprobs: TopLogprobs | None) -> tuple[Any, dict[str, Any]]:
    """The sampler (None: greedy) and mlx-lm's ``generate_step`` keywords of this decoding (its logits processors);
    a decoding with a seed seeds MLX's generator, so the same conversation gets the same sampled answer."""
    sampler = _sampler(temperature) if decoding is None else decoding.sampler()
    if decoding is not None and decoding.seed is not None:
        import mlx.core as mx

        mx.random.seed(decoding.seed)
    if top_logprobs is not None and top_logprobs.k > 0:
        sampler = top_logprobs.wrap(sampler)
    processors = decoding.logits_processors() if decoding is not None else []
    return sampler, ({"logits_processors": processors} if processors else {})


def _sampler(temperature: float) -> Any:
    if temperature <= 0:
        return None  # greedy
    from mlx_lm.sample_utils import make_sampler

    return make_sampler(temp=temperature)


@dataclass
class _Start:
    """Where generation starts: a fresh cache (or none), or the previous turn's cache cut to the tokens the
    prompt starts with (``base_len``) and their hidden states (``base_hidden``, summed in ``base_sum``), feeding
    only the rest. A conversation read otherwise than last turn (a task exchange a follow-up leaned on is left out
    again: ``without_task_exchanges``) still reuses the part before the first token that differs."""

    cache: list | None
    base_len: int
    base_sum: np.ndarray | None
    base_hidden: np.ndarray | None
    feed: list[int]

    @classmethod
    def of(cls, lm: LoadedModel, full_ids: list[int], max_tokens: int, keep_cache: bool,
           prefix: PrefixCache | None) -> "_Start":
        from mlx_lm.models.cache import make_prompt_cache

        shared = 0
        if keep_cache and prefix is not None and len(full_ids) + max_tokens < lm.max_context:
            shared = prefix.shared_with(full_ids, lm.weights_tag)
        if prefix is not None and shared and _cut(prefix.cache, len(prefix.ids) - shared):
            rows = prefix.hidden[:shared]
            return cls(prefix.cache, shared, rows.sum(axis=0, dtype=np.float64), rows, full_ids[shared:])
        return cls(make_prompt_cache(lm.model) if keep_cache else None, 0, None, None, full_ids)


def _cut(cache: list, tokens: int) -> bool:
    """The cache's last ``tokens`` positions dropped (mlx-lm's trim: the offset moves back); False where its
    layers cannot be trimmed (a rotating window that has wrapped), so the caller prefills afresh."""
    from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

    if not tokens:
        return True
    if not can_trim_prompt_cache(cache):
        return False
    return trim_prompt_cache(cache, tokens) == tokens


@dataclass
class _Streamed:
    pieces: list[str]
    ids: list[int]
    logprobs: list[float]
    result: GenerationResult | None

    @property
    def done(self) -> GenerationResult:
        """The generation's result, its last item (set once the stream has ended)."""
        assert self.result is not None
        return self.result


def _stream(lm: LoadedModel, prompt: list[int], config: GenerationConfig, head: Head | None,
            stop: threading.Event | None, phase: str, top: TopLogprobs | None, out: _Streamed) -> Iterator[TokenPiece]:
    """Run the generation, yielding each piece (of ``phase``, with its alternatives when ``top`` records
    them) and keeping the token strings, ids and log-probs in ``out``."""
    from mlx_sdm.lm.generation import stream_generate_features

    for item in stream_generate_features(lm, prompt, config, head=head, stop=stop):
        if not isinstance(item, TokenPiece):
            out.result = item
            continue
        token_id, logprob = item.token_id, item.logprob
        if token_id is None or logprob is None:  # the detokenizer's flushed tail belongs to the last token
            if out.pieces:
                out.pieces[-1] += item.text
                yield replace(item, phase=phase) if phase != item.phase else item
            continue
        if top is not None:
            item = replace(item, top=top.at(len(out.ids)))
        out.pieces.append(item.text)
        out.ids.append(token_id)
        out.logprobs.append(float(logprob))
        yield replace(item, phase=phase) if phase != item.phase else item
    assert out.result is not None


def _feature_vector(result: GenerationResult, start: _Start) -> np.ndarray:
    """The document features of the whole conversation: with a reused prefix, the mean part is
    recombined from the cached positions' sum and the fed positions' mean (docs/method.md § 15.3)."""
    vector = np.asarray(result.features.vector, dtype=np.float32).copy()
    if start.base_len:
        hidden = vector.shape[0] // 2
        fed = int(result.features.positions)
        vector[:hidden] = ((start.base_sum + vector[:hidden].astype(np.float64) * fed)
                           / (start.base_len + fed)).astype(np.float32)
    return vector


def _kept_cache(lm: LoadedModel, full_ids: list[int], start: _Start, ids: list[int], result: GenerationResult,
                vector: np.ndarray | None) -> tuple[list | None, list[int], PrefixCache | None]:
    """(the KV cache after the answer, the token ids it holds, what the next turn can reuse)."""
    from mlx_lm.models.cache import can_trim_prompt_cache

    cache = start.cache
    if cache is None:
        return None, [], None
    held = (full_ids[result.truncated_prompt_tokens:] if not start.base_len else full_ids) + ids
    eos = sorted(lm.tokenizer.eos_token_ids)
    ended = result.finish_reason == "stop" and len(eos) == 1
    if ended:
        held = held + eos  # the end-of-turn token was fed before generation stopped
    offset = getattr(cache[0], "offset", None) if cache else None
    if offset is None or offset > len(held):
        return None, [], None  # cannot tell which tokens it holds: P(True) recomputes from scratch
    # Reusable next turn when the feature mean covers exactly prompt + answer (end-of-turn rule).
    covered = start.base_len + int(result.features.positions) if vector is not None else -1
    span = len(held) - (1 if ended else 0)
    next_prefix = None
    if (vector is not None and covered == span and offset >= span and not result.truncated_prompt_tokens
            and can_trim_prompt_cache(cache)):
        next_prefix = PrefixCache(cache=cache, ids=held[:span], hidden=_held_hidden(start, result),
                                  weights=lm.weights_tag)
    return cache, held[:offset], next_prefix


def _held_hidden(start: _Start, result: GenerationResult) -> np.ndarray:
    """The final hidden states of every position the kept cache holds: the reused part's, then the fed ones'."""
    import mlx.core as mx

    assert result.hidden is not None  # kept: stream_answer asks for it with a cache (keep_hidden)
    fed = np.array(result.hidden.astype(mx.float32))  # numpy reads no bfloat16: float32 first
    return np.concatenate([start.base_hidden, fed]) if start.base_hidden is not None else fed


def _judged_tokens(features: DocumentFeatures, generated: int) -> int:
    """Answer tokens through the delimiter token (h_k predicts token k + 1 = the delimiter, § 15.3)."""
    kind = features.delimiter_kind
    if kind == "json_close":
        return min(generated, int(features.completion_tokens) + 1)
    if kind == "answer_head":  # the verdict reads the answer's first ANSWER_HEAD_TOKENS tokens
        return min(generated, int(features.completion_tokens))
    return generated


def settle_prefix(prefix: PrefixCache | None) -> PrefixCache | None:
    """After P(True) (which trims its question back out of the cache), cut the cache back to the
    prefix's tokens; None when that is no longer possible."""
    if prefix is None or not prefix.cache:
        return None
    from mlx_lm.models.cache import trim_prompt_cache

    offset = getattr(prefix.cache[0], "offset", None)
    if offset is None or offset < len(prefix.ids):
        return None
    if offset > len(prefix.ids):
        trim_prompt_cache(prefix.cache, offset - len(prefix.ids))
    return prefix if getattr(prefix.cache[0], "offset", None) == len(prefix.ids) else None
