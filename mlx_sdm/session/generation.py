"""The engine's one call into the LM layer: generate an answer to a chat, streaming each token to
a callback that can stop it, and keep what verification and monitoring need (token strings,
log-probs, document features from the same pass; :func:`mlx_sdm.lm.generation.stream_generate_features`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

#: on_token(piece, token_id, logprob) -> keep going?
TokenCallback = Callable[[str, "int | None", "float | None"], bool]


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
    cache: list | None = field(default=None, repr=False)  # the KV cache after the answer (for P(True))
    cached_tokens: list[int] = field(default_factory=list, repr=False)  # the token ids that cache holds


def generate_answer(
    lm: Any,
    messages: list[dict],
    *,
    max_tokens: int,
    temperature: float = 0.0,
    head: Any | None = None,
    on_token: TokenCallback | None = None,
    features: bool = True,
    keep_cache: bool = False,
    delimiter: str = "end_of_turn",
) -> GeneratedAnswer:
    """Stream one answer. ``on_token`` returning False stops generation at that token (the stop key).
    ``delimiter`` is the verifier's feature rule ("end_of_turn", or "json_close" for verifiers built on
    JSON answers); a chat answer always runs to the end of its turn, the rule only picks ``h_k``."""
    from mlx_lm.models.cache import make_prompt_cache

    from mlx_sdm.lm.generation import GenerationConfig, as_numpy, render_prompt, stream_generate_features

    sampler = None
    if temperature > 0:
        from mlx_lm.sample_utils import make_sampler

        sampler = make_sampler(temp=temperature)
    stopped = [False]
    cache = make_prompt_cache(lm.model) if keep_cache else None
    config = GenerationConfig(max_tokens=max_tokens, sampler=sampler, delimiter=delimiter, stop_at_delimiter=False,
                              extra={"prompt_cache": cache} if cache is not None else {})
    pieces: list[str] = []
    ids: list[int] = []
    logprobs: list[float] = []
    result = None
    for chunk in stream_generate_features(lm, messages, config, head=head, stop=lambda: stopped[0]):
        if chunk.result is not None:
            result = chunk.result
            if chunk.text and pieces:  # the detokenizer's flushed tail belongs to the last token
                pieces[-1] += chunk.text
                if on_token is not None:
                    on_token(chunk.text, None, None)
            continue
        pieces.append(chunk.text)
        ids.append(int(chunk.token))
        logprobs.append(float(chunk.logprob))
        if on_token is not None and not on_token(chunk.text, chunk.token, chunk.logprob):
            stopped[0] = True
    assert result is not None
    cancelled = result.finish_reason == "cancelled"
    cached_tokens: list[int] = []
    if cache is not None:
        held = render_prompt(lm.tokenizer, messages)[result.truncated_prompt_tokens :] + ids
        offset = getattr(cache[0], "offset", None) if cache else None
        if offset is None or offset > len(held):
            cache = None  # cannot tell which tokens it holds: P(True) recomputes from scratch
        else:
            cached_tokens = held[:offset]
    return GeneratedAnswer(
        text=result.text,
        tokens=pieces,
        token_ids=ids,
        logprobs=logprobs,
        features=as_numpy(result.features) if features and not cancelled and ids else None,
        finish_reason=result.finish_reason,
        cancelled=cancelled,
        prompt_tokens=result.prompt_tokens,
        truncated_prompt_tokens=result.truncated_prompt_tokens,
        cache=cache,
        cached_tokens=cached_tokens,
    )
