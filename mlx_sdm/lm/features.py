"""The verifier's input for one document (docs/method.md § 15.3, § 15.8):

    x = [ mean(h_0 .. h_k) ; h_k ]        (dim 2·hidden)

where ``h_i`` is the final normed hidden state (input to the LM head) at position ``i`` of the
document (prompt then completion) and ``k`` is the position whose state PREDICTS the end-of-unit
delimiter token, i.e. the position just before it. The delimiter is found by token (only the
``answer_head`` rule also caps the unit at a fixed number of answer tokens, and says so):

- ``"json_close"``: the first completion token whose text closes the JSON unit, i.e. holds a ``}``
  after the first ``{`` (the span the § 14 parsing rule reads: first ``{`` to first ``}``);
- ``"end_of_turn"``: the end-of-turn token that follows the completion (ChatML ``<|im_end|>``);
- ``"answer_head"``: the end-of-turn token, or, for an answer longer than ``ANSWER_HEAD_TOKENS``
  tokens, the token after its first ``ANSWER_HEAD_TOKENS`` (an everyday answer: the verdict covers
  its head, where a short factual answer is, and the rest streams on as the model's, unjudged).

If a ``json_close`` document has no closing brace the features fall back to the end of the
completion and say so (``delimiter_kind == "end_of_completion"``) instead of silently cutting.

Force-decoding runs the whole (prompt, completion) once through ``model.model`` (in chunks,
``mlx_sdm.lm.prefill``) and gives the same vector (up to float rounding) as generating that completion
(``mlx_sdm.lm.generation``). A prompt longer than the context is fitted by ``fit_prompt``, the rule every
prompt built from a conversation follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import mlx.core as mx
import numpy as np

from mlx_sdm.errors import DataError
from mlx_sdm.lm.prefill import prefill_hidden
from mlx_sdm.lm.prompt import fit_prompt

DELIMITER_END_OF_TURN = "end_of_turn"
DELIMITER_JSON_CLOSE = "json_close"
DELIMITER_ANSWER_HEAD = "answer_head"
DELIMITER_RULES = (DELIMITER_END_OF_TURN, DELIMITER_JSON_CLOSE, DELIMITER_ANSWER_HEAD)
#: The answer tokens an ``answer_head`` verdict covers (open questions; docs/verifiers.md).
ANSWER_HEAD_TOKENS = 64
#: Reported when a json_close document has no closing brace.
DELIMITER_MISSING = "end_of_completion"


@dataclass
class DocumentFeatures:
    vector: np.ndarray  # [2·hidden] float32: [mean ; h_delimiter]
    positions: int  # number of positions averaged (0..k)
    delimiter_position: int  # absolute index of the delimiter token (k + 1)
    delimiter_kind: str  # "json_close" | "end_of_turn" | "end_of_completion"
    prompt_tokens: int
    completion_tokens: int  # completion tokens before the delimiter
    truncated_prompt_tokens: int = 0


def _token_texts(tokenizer, tokens: Sequence[int]) -> list[str]:
    return [tokenizer.decode([int(t)]) for t in tokens]


def delimiter_index(tokenizer, completion: Sequence[int], rule: str) -> int | None:
    """Index (within the completion) of the delimiter token, or ``len(completion)`` for the
    end-of-turn token that follows it; None when a ``json_close`` unit never closes."""
    if rule == DELIMITER_END_OF_TURN:
        return len(completion)
    if rule == DELIMITER_ANSWER_HEAD:
        return min(len(completion), ANSWER_HEAD_TOKENS)
    if rule != DELIMITER_JSON_CLOSE:
        raise ValueError(f"unknown delimiter rule {rule!r}; expected one of {DELIMITER_RULES}.")
    opened = False
    for i, text in enumerate(_token_texts(tokenizer, completion)):
        if not opened:
            start = text.find("{")
            if start < 0:
                continue
            opened = True
            text = text[start:]
        if "}" in text:
            return i
    return None


def document_features_from_hidden(
    hidden: mx.array,
    *,
    prompt_len: int,
    completion_len: int,
    delimiter: int | None,
    delimiter_rule: str,
    truncated_prompt_tokens: int = 0,
) -> DocumentFeatures:
    """``[mean(h_0..h_k); h_k]`` from the [positions, D] hidden states of prompt + completion."""
    if delimiter is None:
        kind, d = DELIMITER_MISSING, completion_len
    else:
        kind, d = delimiter_rule, delimiter
    k = prompt_len + d - 1  # the state that predicts the delimiter token at position k + 1
    if k < 0 or hidden.shape[0] <= k:
        raise ValueError(f"hidden states cover {hidden.shape[0]} positions; the delimiter needs {k + 1}.")
    block = hidden[: k + 1].astype(mx.float32)
    vector = mx.concatenate([mx.mean(block, axis=0), block[k]])
    return DocumentFeatures(
        vector=np.asarray(vector, dtype=np.float32),
        positions=k + 1,
        delimiter_position=k + 1,
        delimiter_kind=kind,
        prompt_tokens=prompt_len,
        completion_tokens=d,
        truncated_prompt_tokens=truncated_prompt_tokens,
    )


def _completion_ids(tokenizer, completion: str | Sequence[int]) -> list[int]:
    if isinstance(completion, str):
        if not completion.strip():
            raise DataError("the completion is empty; there is nothing to verify.", field="completion")
        return list(tokenizer.encode(completion, add_special_tokens=False))
    ids = [int(t) for t in completion]
    if not ids:
        raise DataError("the completion is empty; there is nothing to verify.", field="completion")
    return ids


@dataclass
class _Prepared:
    ids: list[int]  # prompt + completion up to and including the delimiter token (if any)
    prompt_len: int
    completion_len: int
    delimiter: int | None
    dropped: int


def _prepare(lm, prompt: Any, completion: str | Sequence[int], *, delimiter: str, system: str | None,
             max_context: int | None) -> _Prepared:
    tokenizer = lm.tokenizer
    comp = _completion_ids(tokenizer, completion)
    d = delimiter_index(tokenizer, comp, delimiter)
    used = comp[: (d if d is not None else len(comp))]
    max_context = max_context or getattr(lm, "max_context", 2048)
    # The delimiter token (or end of turn) needs one more position after the completion.
    budget = max_context - len(used) - 1
    if budget < 1:
        raise DataError(
            f"the completion is {len(used)} tokens up to its delimiter; it does not fit the {max_context}-token "
            "context together with any prompt. Shorten the completion.",
            field="completion",
        )
    fitted = fit_prompt(tokenizer, prompt, budget, system=system)
    prompt_ids = list(fitted.ids)
    return _Prepared(ids=prompt_ids + used, prompt_len=len(prompt_ids), completion_len=len(comp), delimiter=d,
                     dropped=fitted.left_out_tokens)


def force_decode_document(lm, prompt: Any, completion: str | Sequence[int], *, delimiter: str = DELIMITER_END_OF_TURN,
                          system: str | None = None, max_context: int | None = None) -> DocumentFeatures:
    """Features of a given (prompt, completion) from one forward pass (no generation)."""
    p = _prepare(lm, prompt, completion, delimiter=delimiter, system=system, max_context=max_context)
    hidden = prefill_hidden(lm.model, p.ids)[0]
    return document_features_from_hidden(
        hidden, prompt_len=p.prompt_len, completion_len=p.completion_len, delimiter=p.delimiter,
        delimiter_rule=delimiter, truncated_prompt_tokens=p.dropped,
    )


def force_decode_features(lm, prompt_messages_or_text: Any, completion: str | Sequence[int], *,
                          delimiter: str = DELIMITER_END_OF_TURN, system: str | None = None) -> np.ndarray:
    """The [2·hidden] feature vector of a given (prompt, completion); equals the generated one."""
    return force_decode_document(lm, prompt_messages_or_text, completion, delimiter=delimiter, system=system).vector


def _common_prefix_len(sequences: Sequence[Sequence[int]]) -> int:
    first = sequences[0]
    n = min(len(seq) for seq in sequences)
    for seq in sequences[1:]:
        i = 0
        while i < n and seq[i] == first[i]:
            i += 1
        n = i
    return n


class _SharedPrefix:
    """KV cache and hidden-state sum of a token prefix that every document starts with (the system
    prompt, template and task instruction): computed once, broadcast into every batch."""

    def __init__(self, lm, ids: Sequence[int]):
        from mlx_lm.models.cache import KVCache, make_prompt_cache

        self.length = len(ids)
        self.cache = make_prompt_cache(lm.model)
        self.usable = all(type(c) is KVCache for c in self.cache)
        if not self.usable:
            return
        hidden = lm.model.model(mx.array(ids)[None], cache=self.cache)[0].astype(mx.float32)
        self.sum = mx.sum(hidden, axis=0)
        self.last = hidden[-1]
        mx.eval(self.sum, self.last, [(c.keys, c.values) for c in self.cache])

    def batch_cache(self, batch: int) -> list:
        from mlx_lm.models.cache import KVCache

        caches = []
        for c in self.cache:
            fresh = KVCache()
            fresh.keys = mx.repeat(c.keys[..., : self.length, :], batch, axis=0)
            fresh.values = mx.repeat(c.values[..., : self.length, :], batch, axis=0)
            fresh.offset = self.length
            caches.append(fresh)
        return caches


def force_decode_batch(
    lm,
    documents: Sequence[tuple[Any, str | Sequence[int]]],
    *,
    delimiter: str = DELIMITER_END_OF_TURN,
    system: str | None = None,
    max_batch_tokens: int = 2048,
    progress: Callable[[int], None] | None = None,
    share_prefix: bool = True,
) -> list[DocumentFeatures]:
    """Features of many (prompt, completion) documents. Documents are sorted by length and run in
    right-padded batches of at most ``max_batch_tokens`` tokens; with a causal mask right padding
    leaves every real position's state unchanged. With ``share_prefix`` the token prefix common to
    all documents (system prompt, template, instruction) is run once and its KV cache reused."""
    prepared = [
        _prepare(lm, prompt, completion, delimiter=delimiter, system=system, max_context=None)
        for prompt, completion in documents
    ]
    if not prepared:
        return []
    prefix = _shared_prefix(lm, prepared) if share_prefix else None
    skip = prefix.length if prefix is not None else 0
    order = sorted(range(len(prepared)), key=lambda i: len(prepared[i].ids))
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    results: list[DocumentFeatures | None] = [None] * len(prepared)
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and (len(prepared[order[end]].ids) - skip) * (end - start + 1) <= max_batch_tokens:
            end += 1
        batch = [prepared[i] for i in order[start:end]]
        width = max(len(p.ids) for p in batch) - skip
        rows = [p.ids[skip:] + [pad] * (width - len(p.ids) + skip) for p in batch]
        cache = prefix.batch_cache(len(batch)) if prefix is not None else None
        hidden = prefill_hidden(lm.model, mx.array(rows), cache).astype(mx.float32)  # a long document in chunks
        mx.eval(hidden)
        for row, i in enumerate(order[start:end]):
            p = prepared[i]
            if prefix is None:
                results[i] = document_features_from_hidden(
                    hidden[row], prompt_len=p.prompt_len, completion_len=p.completion_len, delimiter=p.delimiter,
                    delimiter_rule=delimiter, truncated_prompt_tokens=p.dropped,
                )
                continue
            results[i] = _prefixed_features(p, hidden[row], prefix, delimiter)
        if progress is not None:
            progress(end - start)
        start = end
    return [r for r in results if r is not None]


def _shared_prefix(lm, prepared: list) -> "_SharedPrefix | None":
    """The token prefix common to all documents, run once, when it is at least 4 tokens and usable."""
    if len(prepared) < 2:
        return None
    # every document keeps at least one own token: the state predicting its delimiter
    n = min(_common_prefix_len([p.ids for p in prepared]), min(len(p.ids) for p in prepared) - 1)
    if n < 4:
        return None
    prefix = _SharedPrefix(lm, prepared[0].ids[:n])
    return prefix if prefix.usable else None


def _prefixed_features(p, hidden_row: mx.array, prefix: "_SharedPrefix", delimiter: str) -> DocumentFeatures:
    """Features of a document run after the shared prefix: the mean adds the prefix's summed states."""
    skip = prefix.length
    k = len(p.ids) - 1  # the last position fed is the one that predicts the delimiter
    own = hidden_row[: k + 1 - skip]
    mean = (prefix.sum + mx.sum(own, axis=0)) / (k + 1)
    d = p.delimiter if p.delimiter is not None else p.completion_len
    return DocumentFeatures(
        vector=np.asarray(mx.concatenate([mean, own[-1]]), dtype=np.float32),
        positions=k + 1,
        delimiter_position=k + 1,
        delimiter_kind=delimiter if p.delimiter is not None else DELIMITER_MISSING,
        prompt_tokens=p.prompt_len,
        completion_tokens=d,
        truncated_prompt_tokens=p.dropped,
    )
