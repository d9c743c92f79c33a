"""Batched greedy answers with document features, for building verifiers (many short JSON answers).

On a CPU a small model's decoding step is bound by reading the weights, so answering B prompts in one
batch costs little more than answering one. The prompts are left-padded into one batch and decoded
with mlx-lm's ``BatchKVCache`` (its mask hides the padding and its per-row offsets keep each row's
positions as if it were alone); the final normed hidden states of every position are kept, and each
row's ``[mean(h_0..h_k); h_k]`` is taken exactly as ``lm.generation`` takes it for one prompt (tested
equal to ``generate_with_features`` up to float rounding). Each row stops at its own end of turn or at
the token that closes its JSON unit; rows that stopped are carried along until all have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache

from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE, DocumentFeatures, delimiter_index, document_features_from_hidden
from mlx_sdm.lm.generation import default_head, fold_joint_logits
from mlx_sdm.lm.prompt import fit_prompt

Sampler = Callable[[mx.array], mx.array]


@dataclass
class BatchAnswer:
    text: str
    tokens: list[int]
    finish_reason: str  # "stop" | "delimiter" | "length"
    features: DocumentFeatures


def _closed_json(text: str) -> bool:
    start = text.find("{")
    return start >= 0 and "}" in text[start:]


def _next_tokens(logits: mx.array, samplers: Sequence[Sampler | None] | None) -> list[int]:
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    greedy = mx.argmax(logprobs, axis=-1)
    if samplers is None:
        return [int(t) for t in greedy.tolist()]
    out = greedy.tolist()
    for b, sampler in enumerate(samplers):
        if sampler is not None:
            out[b] = int(sampler(logprobs[b : b + 1]).item())
    return [int(t) for t in out]


def generate_batch(lm, prompts: Sequence[Any], *, max_tokens: int, delimiter: str, system: str | None = None,
                   head: Callable[[mx.array], mx.array] | None = None,
                   samplers: Sequence[Sampler | None] | None = None) -> list[BatchAnswer]:
    """Answers to ``prompts`` (user messages, rendered with ``system``) and their features, in one batch."""
    tokenizer, model = lm.tokenizer, lm.model
    max_context = getattr(lm, "max_context", 2048)
    rendered = [list(fit_prompt(tokenizer, p, max_context - max_tokens, system=system).ids) for p in prompts]
    lengths = [len(ids) for ids in rendered]
    width = max(lengths)
    padding = [width - n for n in lengths]
    pad_id = min(tokenizer.eos_token_ids) if tokenizer.eos_token_ids else 0  # masked out; any id works
    batch = mx.array([[pad_id] * p + ids for p, ids in zip(padding, rendered)])
    head_fn = head if head is not None else default_head(model)
    vocab = getattr(lm, "vocab_size", None)
    cache = [BatchKVCache(padding) for _ in model.layers]
    eos = set(tokenizer.eos_token_ids)

    def forward(inputs: mx.array) -> tuple[mx.array, mx.array]:
        hidden = model.model(inputs, cache=cache)
        logits = head_fn(hidden[:, -1, :])
        if head is not None and vocab is not None:
            logits = fold_joint_logits(logits, vocab)
        return hidden, logits

    hidden, logits = forward(batch)
    blocks = [hidden]
    tokens: list[list[int]] = [[] for _ in prompts]
    finish = ["length"] * len(prompts)
    done = [False] * len(prompts)
    for _ in range(max_tokens):
        step = _next_tokens(logits, samplers)
        for b, token in enumerate(step):
            if done[b]:
                continue
            if token in eos:
                done[b], finish[b] = True, "stop"
                continue
            tokens[b].append(token)
            if delimiter == DELIMITER_JSON_CLOSE and _closed_json(tokenizer.decode(tokens[b])):
                done[b], finish[b] = True, "delimiter"
        hidden, logits = forward(mx.array(step)[:, None])  # every row's last token is fed (its state is used)
        blocks.append(hidden)
        mx.eval(logits, hidden)
        if all(done):
            break
    states = mx.concatenate(blocks, axis=1)
    answers = []
    for b, ids in enumerate(tokens):
        row = states[b, padding[b]:]
        k = delimiter_index(tokenizer, ids, delimiter)
        features = document_features_from_hidden(row, prompt_len=lengths[b], completion_len=len(ids), delimiter=k,
                                                 delimiter_rule=delimiter)
        answers.append(BatchAnswer(tokenizer.decode(ids), ids, finish[b], features))
    return answers
