"""Streaming generation that keeps what verification needs, in one decoding pass.

``HiddenCapture`` wraps an mlx-lm model for ``mlx_lm.generate.generate_step``: its ``__call__``
runs ``model.model(...)`` (the final RMSNorm output, docs/method.md § 15.3), stashes those hidden states, and
returns logits of the last position from a pluggable ``head`` (default: the model's own output
projection). ``layers``/``make_cache`` are exposed so mlx-lm builds the KV cache as usual.

``stream_generate_features`` yields one :class:`~mlx_sdm.lm.pieces.TokenPiece` per token (text, id,
log-prob), then the detokenizer's flushed tail (a piece with no token) when there is one, and last the
``GenerationResult`` with the document feature vector ``[mean(h_0..h_k); h_k]`` where ``h_k`` is the
state that predicts the end-of-unit delimiter (see ``mlx_sdm.lm.features``), as mlx-lm's
``stream_generate`` yields its responses and its last one says why it stopped.

Head API (for the SDM network's joint heads): ``head(hidden: mx.array[..., D]) -> mx.array[..., V]``
or ``[..., 2V]`` (negative half first, then positive). A ``2V`` head is folded to ``V`` with an
elementwise max of the two halves, so greedy decoding equals ``argmax([z_neg; z_pos]) mod V``
(docs/method.md § 15.1/§ 15.7); reported log-probs are the log-softmax of the folded logits.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import KVCache

from mlx_sdm.errors import DataError
from mlx_sdm.lm.defaults import DEFAULT_MAX_TOKENS
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.lm.prefill import PREFILL_STEP_TOKENS
from mlx_sdm.lm.prompt import Prompt, fit_prompt
from mlx_sdm.lm.features import (
    DELIMITER_END_OF_TURN,
    DELIMITER_JSON_CLOSE,
    DocumentFeatures,
    delimiter_index,
    document_features_from_hidden,
)

Head = Callable[[mx.array], mx.array]



def default_head(model: nn.Module) -> Head:
    """The model's own output projection (tied embedding or ``lm_head``)."""
    if getattr(model, "lm_head", None) is not None and not getattr(getattr(model, "args", None), "tie_word_embeddings", False):
        return model.lm_head
    return model.model.embed_tokens.as_linear


def fold_joint_logits(logits: mx.array, vocab_size: int) -> mx.array:
    """``[z_neg; z_pos]`` (2V) -> V with an elementwise max: argmax equals the joint argmax mod V (§ 15.7)."""
    if logits.shape[-1] == vocab_size:
        return logits
    if logits.shape[-1] != 2 * vocab_size:
        raise ValueError(f"head returned {logits.shape[-1]} logits; expected {vocab_size} or {2 * vocab_size}.")
    return mx.maximum(logits[..., :vocab_size], logits[..., vocab_size:])


class HiddenCapture(nn.Module):
    """mlx-lm-compatible model: runs ``model.model`` once per call, stashes the normed hidden states,
    returns last-position logits from ``head``. ``captured`` lists the [1, L, D] blocks in call order,
    so their concatenation is the hidden state of every position fed so far."""

    def __init__(self, model: nn.Module, head: Head | None = None, vocab_size: int | None = None):
        super().__init__()
        self.lm = model
        self._head = head if head is not None else default_head(model)
        self._vocab_size = vocab_size
        self.captured: list[mx.array] = []

    @property
    def layers(self):
        return self.lm.layers

    def make_cache(self):
        if hasattr(self.lm, "make_cache"):
            return self.lm.make_cache()
        return [KVCache() for _ in self.lm.layers]

    def __call__(self, inputs: mx.array, cache=None, input_embeddings=None) -> mx.array:
        if input_embeddings is not None:
            hidden = self.lm.model(inputs, cache=cache, input_embeddings=input_embeddings)
        else:
            hidden = self.lm.model(inputs, cache=cache)
        self.captured.append(hidden)
        logits = self._head(hidden[:, -1:, :])
        if self._vocab_size is not None:
            logits = fold_joint_logits(logits, self._vocab_size)
        return logits

    def hidden_states(self, positions: int | None = None) -> mx.array:
        """[positions, D] of the first ``positions`` fed (prompt, then generated tokens; all by default).

        Only the blocks that hold those positions are joined: mlx-lm queues the forward pass of the token
        after the last one it yields, and its block, captured but still computing, is not waited for."""
        blocks, have = [], 0
        for h in self.captured:
            if positions is not None and have >= positions:
                break
            blocks.append(h[0])
            have += h.shape[1]
        return mx.concatenate(blocks, axis=0) if blocks else mx.zeros((0, 0))


class ChosenLogprob:
    """mlx-lm sampler wrapper that also gathers ``log p(chosen token)`` inside the step's own graph.

    ``generate_step`` queues step n+1 (``mx.async_eval(y, logprobs)``) before it yields token n. Reading
    ``logprobs[token].item()`` afterwards builds a NEW op, queued behind step n+1, so the read waits
    for the whole next forward pass and the device idles while Python queues step n+2 (on a GPU that
    cost 0.64x of plain mlx-lm). Here the gather is made a dependency of the sampled token
    (``mx.depends``), so it is computed in the same evaluation as the token, and reading it after
    ``generate_step`` has materialised the token is a 4-byte host read with no extra synchronisation.
    The values come out in sampling order (one per ``generate_step`` step).
    """

    def __init__(self, sampler: Callable[[mx.array], mx.array] | None = None):
        self.sampler = sampler if sampler is not None else (lambda logprobs: mx.argmax(logprobs, axis=-1))
        self.pending: deque[mx.array] = deque()

    def __call__(self, logprobs: mx.array) -> mx.array:
        token = self.sampler(logprobs)
        rows = logprobs.reshape(-1, logprobs.shape[-1])  # [batch, V] (generate_step) or [V]
        chosen = mx.take_along_axis(rows, token.reshape(-1, 1).astype(mx.int32), axis=-1).reshape(token.shape)
        self.pending.append(chosen)
        return mx.depends(token, chosen)

    def pop(self) -> float:
        """The log-prob of the next token in sampling order (already computed with that token)."""
        return float(self.pending.popleft().item())


@dataclass
class GenerationResult:
    """One finished generation: answer text and ids, per-token log-probs, why it stopped, and the
    document features (``features.vector`` = ``[mean; h_delimiter]``, dim 2·hidden)."""

    text: str
    tokens: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (end of turn) | "delimiter" | "length" | "cancelled"
    prompt_tokens: int
    truncated_prompt_tokens: int
    features: DocumentFeatures
    prompt_time_s: float
    generation_time_s: float
    feature_time_s: float
    #: the [features.positions, D] hidden states the features read (``GenerationConfig.keep_hidden``; else None)
    hidden: mx.array | None = field(default=None, repr=False)

    @property
    def generation_tps(self) -> float:
        return len(self.tokens) / self.generation_time_s if self.generation_time_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tokens": self.tokens,
            "logprobs": self.logprobs,
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "truncated_prompt_tokens": self.truncated_prompt_tokens,
            "delimiter": self.features.delimiter_kind,
            "generation_tps": self.generation_tps,
        }


@dataclass
class GenerationConfig:
    max_tokens: int = DEFAULT_MAX_TOKENS
    delimiter: str = DELIMITER_END_OF_TURN  # or "json_close"
    stop_at_delimiter: bool = True  # with "json_close": stop once the JSON unit is closed
    system: str | None = None
    max_context: int | None = None  # default: the model's context length
    prefill_step_size: int = PREFILL_STEP_TOKENS  # mlx-lm prefills the prompt in chunks of this many tokens
    sampler: Callable[[mx.array], mx.array] | None = None  # default greedy
    #: keep the hidden states the features read in the result (a chat keeps them with its KV cache); off where many
    #: results are kept (a verifier's build), each would hold its [positions, D] states
    keep_hidden: bool = False
    extra: dict = field(default_factory=dict)  # passed on to mlx-lm's generate_step


def _is_stopped(stop: Any) -> bool:
    if stop is None:
        return False
    if hasattr(stop, "is_set"):
        return bool(stop.is_set())
    return bool(stop())


def stream_generate_features(lm, prompt: Prompt, config: GenerationConfig | None = None, *, head: Head | None = None,
                             stop: Any = None) -> Iterator[TokenPiece | GenerationResult]:
    """Greedy (or ``config.sampler``) generation through mlx-lm's ``generate_step`` that captures the
    final normed hidden states of prompt and completion in the same pass.

    ``lm``: a ``LoadedModel`` (or anything with ``.model``, ``.tokenizer``, ``.max_context``).
    ``stop``: a ``threading.Event`` or a callable returning True to cancel (checked after each token is
    yielded, so a consumer that sets it on a piece stops the generation at that piece).
    """
    config = config or GenerationConfig()
    tokenizer = lm.tokenizer
    ids, dropped = _prompt_ids(lm, prompt, config)
    wrapper = HiddenCapture(lm.model, head=head, vocab_size=getattr(lm, "vocab_size", None) if head is not None else None)
    eos = set(tokenizer.eos_token_ids)
    detok = tokenizer.detokenizer
    detok.reset()
    tokens: list[int] = []
    logprobs: list[float] = []
    pieces: list[str] = []
    finish = "length"
    tic = time.perf_counter()
    prompt_time = 0.0
    chosen = ChosenLogprob(config.sampler)
    steps = generate_step(
        mx.array(ids),
        wrapper,
        max_tokens=config.max_tokens,
        sampler=chosen,
        prefill_step_size=config.prefill_step_size,
        **config.extra,
    )
    index = 0
    for token, _logprob_vector in steps:
        if index == 0:
            prompt_time = time.perf_counter() - tic
            tic = time.perf_counter()
        if token in eos:
            finish = "stop"
            break
        tokens.append(int(token))
        logprobs.append(chosen.pop())  # computed with the token: no extra device sync (see ChosenLogprob)
        detok.add_token(token)
        piece = detok.last_segment
        pieces.append(piece)
        yield TokenPiece(piece, int(token), logprobs[-1])
        index += 1
        if config.delimiter == DELIMITER_JSON_CLOSE and config.stop_at_delimiter and _json_closed("".join(pieces)):
            finish = "delimiter"
            break
        if _is_stopped(stop):
            finish = "cancelled"
            break
    steps.close()
    generation_time = time.perf_counter() - tic
    tail = _final_piece(detok, pieces)
    if tail:
        yield TokenPiece(tail)
    yield _final_result(wrapper, tokenizer, config, ids, dropped, tokens, logprobs, pieces, finish,
                        prompt_time, generation_time)


def _prompt_ids(lm, prompt: Prompt, config: GenerationConfig) -> tuple[list[int], int]:
    """The rendered prompt fitted to leave ``max_tokens`` of the context (``fit_prompt``); (ids, tokens left out)."""
    max_context = config.max_context or getattr(lm, "max_context", 2048)
    if config.max_tokens < 1:
        raise DataError("max_tokens must be at least 1.", field="max_tokens")
    if config.max_tokens >= max_context:
        raise DataError(
            f"max_tokens={config.max_tokens} leaves no room for the prompt in a {max_context}-token context.",
            field="max_tokens",
        )
    fitted = fit_prompt(lm.tokenizer, prompt, max_context - config.max_tokens, system=config.system)
    return list(fitted.ids), fitted.left_out_tokens


def _final_piece(detok, pieces: list[str]) -> str:
    """Flush the detokenizer: the text it still held, also appended to ``pieces`` when not empty."""
    detok.finalize()
    tail = detok.last_segment
    if tail:
        pieces.append(tail)
    return tail


def _json_closed(text_so_far: str) -> bool:
    """The JSON delimiter rule: a ``}`` after the first ``{`` of the completion ends generation."""
    return "{" in text_so_far and "}" in text_so_far[text_so_far.index("{"):]


def _final_result(wrapper, tokenizer, config: GenerationConfig, ids: list[int], dropped: int, tokens: list[int],
                  logprobs: list[float], pieces: list[str], finish: str, prompt_time: float,
                  generation_time: float) -> GenerationResult:
    """The document features from the captured hidden states (same pass) and the whole result."""
    tic = time.perf_counter()
    k = delimiter_index(tokenizer, tokens, config.delimiter)
    hidden = wrapper.hidden_states(len(ids) + (len(tokens) if k is None else k))  # the positions the features read
    features = document_features_from_hidden(
        hidden, prompt_len=len(ids), completion_len=len(tokens), delimiter=k,
        delimiter_rule=config.delimiter, truncated_prompt_tokens=dropped,
    )
    feature_time = time.perf_counter() - tic
    wrapper.captured.clear()
    return GenerationResult(
        text="".join(pieces),
        tokens=tokens,
        logprobs=logprobs,
        finish_reason=finish,
        prompt_tokens=len(ids),
        truncated_prompt_tokens=dropped,
        features=features,
        prompt_time_s=prompt_time,
        generation_time_s=generation_time,
        feature_time_s=feature_time,
        hidden=hidden[: features.positions] if config.keep_hidden else None,
    )


def generate_with_features(lm, prompt: Prompt, config: GenerationConfig | None = None, *, head: Head | None = None,
                           stop: Any = None) -> GenerationResult:
    """Run ``stream_generate_features`` to the end and return its ``GenerationResult`` (its last item)."""
    for item in stream_generate_features(lm, prompt, config, head=head, stop=stop):
        pass
    assert isinstance(item, GenerationResult)
    return item

