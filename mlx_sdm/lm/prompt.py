"""Prompt rendering: a user message, a list of chat messages or token ids -> the token ids the model
reads (chat template with ``add_generation_prompt=True``), and left truncation to a context budget.

Its own module so that generation (``lm/generation.py``) and force-decoding (``lm/features.py``)
both build on it without importing each other.
"""

from __future__ import annotations

import warnings
from typing import Sequence

from mlx_sdm.errors import DataError

Prompt = str | Sequence[dict] | Sequence[int]

__all__ = ["Prompt", "render_prompt", "truncate_left"]


def render_prompt(tokenizer, prompt: Prompt, system: str | None = None) -> list[int]:
    """Token ids of a prompt: a user message string or a list of chat messages is rendered with the
    chat template (``add_generation_prompt=True``); a list of ints is used as is."""
    if isinstance(prompt, str):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    elif len(prompt) and isinstance(prompt[0], dict):
        messages = list(prompt)
        if system and messages[0].get("role") != "system":
            messages = [{"role": "system", "content": system}] + messages
    else:
        ids = [int(t) for t in prompt]
        if not ids:
            raise DataError("the prompt is empty.", field="prompt")
        return ids
    if not any(str(m.get("content") or "").strip() for m in messages if m.get("role") != "system"):
        raise DataError("the prompt is empty (a system prompt alone is not a question).", field="prompt")
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


def truncate_left(ids: list[int], budget: int, what: str = "prompt") -> tuple[list[int], int]:
    """Keep the last ``budget`` ids; returns (ids, number dropped) and warns when it drops any."""
    if budget <= 0:
        raise DataError(f"no room left for the {what} in the model's context.", field=what)
    dropped = max(0, len(ids) - budget)
    if dropped:
        warnings.warn(
            f"{what} is {len(ids)} tokens, longer than the {budget} that fit the context; "
            f"dropped the first {dropped} tokens (left truncation).",
            stacklevel=3,
        )
    return ids[dropped:], dropped


def splice_cached(tokenizer, cached: Sequence[int], ids: list[int]) -> list[int]:
    """``ids`` (a rendered prompt) starting with the ``cached`` token ids when both say the same text there.

    A conversation is rendered again from its text every turn, but the model may have generated an answer
    in tokens the tokenizer would split differently (a made-up word: "Bouillabadou"); the rendered prompt
    then leaves the KV cache's tokens at that point, and every token after it would be prefilled again
    (the whole conversation, every later turn). When the cached tokens decode to the text the rendered
    prompt holds at that place, the prompt is those cached tokens plus its remaining text tokenized: the
    same text, read in the tokens the model already holds. Otherwise (the texts differ) ``ids`` unchanged."""
    cached = list(cached)
    n = len(cached)
    if not n or ids[:n] == cached:
        return ids
    common = 0
    for a, b in zip(cached, ids):
        if a != b:
            break
        common += 1
    try:
        head = tokenizer.decode(cached[common:])
        rest = tokenizer.decode(ids[common:])
    except Exception:  # a tokenizer that cannot decode a slice: keep the rendered ids
        return ids
    if not head or "\ufffd" in head or not rest.startswith(head):
        return ids
    tail = rest[len(head):]
    tail_ids = list(tokenizer.encode(tail, add_special_tokens=False)) if tail else []
    if tokenizer.decode(tail_ids) != tail:
        return ids
    return cached + tail_ids
