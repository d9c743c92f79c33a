"""Fine-tuning data: documents, next-token targets with cached hidden states, greedy joint
generation and the task-answer parser (spec § 14, § 15.5, § 15.8).

A document is a chat prompt, a completion (the JSON answer), its verification label y and,
optionally, the task label. Only y = 1 documents give next-token targets: the completion's tokens
up to and including the one that closes the JSON (the delimiter), each shifted by |V|. Their
hidden states (the final-norm output that predicts each target) are computed once from the frozen
model, since only the positive head trains.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import mlx.core as mx
import numpy as np

from mlx_sdm.errors import DataError

#: The delimiter that closes the answer unit (§ 15.3): the JSON object's closing brace.
DELIMITER = "}"


@dataclass
class FinetuneDocument:
    id: str
    messages: list[dict[str, str]]
    completion: str
    label: int  # verification label y: 1 = verified (correct answer), 0 = unverified
    task_label: int | None = None
    max_generation_tokens: int = 16
    extra: dict[str, Any] = field(default_factory=dict)


def _as_messages(prompt: Any, path: str, line: int) -> list[dict[str, str]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]
    raise DataError("must be a string or a list of {role, content} messages", path=path, line=line, field="prompt")


def read_documents_jsonl(path: str | Path) -> list[FinetuneDocument]:
    """Read ``{"prompt", "completion", "label", "task_label"?, "id"?, "max_generation_tokens"?}`` rows."""
    path = str(path)
    documents: list[FinetuneDocument] = []
    try:
        handle = open(path, encoding="utf-8")
    except FileNotFoundError:
        raise DataError("file not found; pass a JSONL file of {prompt, completion, label} rows", path=path) from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise DataError(f"not valid JSON ({exc.msg})", path=path, line=number) from None
            for key in ("prompt", "completion", "label"):
                if key not in row:
                    raise DataError("missing; every row needs prompt, completion and label", path=path, line=number, field=key)
            if row["label"] not in (0, 1) or isinstance(row["label"], bool):
                raise DataError(f"must be 0 or 1, got {row['label']!r}", path=path, line=number, field="label")
            task = row.get("task_label")
            if task is not None and (isinstance(task, bool) or not isinstance(task, int)):
                raise DataError(f"must be an integer, got {task!r}", path=path, line=number, field="task_label")
            documents.append(
                FinetuneDocument(
                    id=str(row.get("id", f"{Path(path).name}:{number}")),
                    messages=_as_messages(row["prompt"], path, number),
                    completion=str(row["completion"]),
                    label=int(row["label"]),
                    task_label=task,
                    max_generation_tokens=int(row.get("max_generation_tokens", 16)),
                )
            )
    if not documents:
        raise DataError("no rows; the file is empty", path=path)
    return documents


def documents_hash(documents: Sequence[FinetuneDocument]) -> str:
    """sha256 over the documents' content (ids, prompts, completions, labels): the manifest's data hash."""
    digest = hashlib.sha256()
    for doc in documents:
        digest.update(json.dumps([doc.id, doc.messages, doc.completion, doc.label, doc.task_label], sort_keys=True).encode())
    return digest.hexdigest()


def parse_task_answer(text: str) -> int | None:
    """The task prediction in a generated JSON answer (§ 14): the substring from the first ``{`` to
    the first ``}``, parsed as JSON; a boolean value → 1/0, ``"positive"``/``"negative"`` → 1/0.
    Anything else (no JSON, several keys, another value) → None, which counts as wrong."""
    start = text.find("{")
    end = text.find("}", start + 1) if start >= 0 else -1
    if start < 0 or end < 0:
        return None
    try:
        value = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or len(value) != 1:
        return None
    (answer,) = value.values()
    if isinstance(answer, bool):
        return int(answer)
    if answer in ("negative", "positive"):
        return int(answer == "positive")
    return None


def prompt_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of the chat prompt with the generation marker (the completion starts right after)."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict):  # transformers may return a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def completion_target_ids(tokenizer, completion: str) -> list[int]:
    """The completion's tokens up to and including the one that closes the JSON (§ 15.8)."""
    ids = [int(i) for i in tokenizer.encode(completion, add_special_tokens=False)]
    last = None
    for i in range(len(ids)):
        if DELIMITER in tokenizer.decode(ids[i : i + 1]):
            last = i
    return ids if last is None else ids[: last + 1]


@dataclass
class TokenTargets:
    """Next-token training data of the y = 1 documents: one row per target token."""

    hidden: np.ndarray  # [N, D] float32, final-norm hidden state that predicts the target
    targets: np.ndarray  # [N] int64, target token id shifted by |V|
    document_index: np.ndarray  # [N] int64, index into the y = 1 document list

    def __len__(self) -> int:
        return int(self.targets.shape[0])


def final_hidden_states(model, ids: Sequence[int], cache=None) -> mx.array:
    """Output of the final norm (input to the LM head) for ``ids``: [T, D]."""
    return model.model(mx.array([list(ids)], dtype=mx.int32), cache=cache)[0]


def build_token_targets(
    model,
    tokenizer,
    documents: Sequence[FinetuneDocument],
    vocab_size: int,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> TokenTargets:
    """Force-decode every document once and keep the states that predict its target tokens."""
    hidden, targets, owners = [], [], []
    iterator = progress(range(len(documents))) if progress else range(len(documents))
    for i in iterator:
        doc = documents[i]
        prompt = prompt_ids(tokenizer, doc.messages)
        answer = completion_target_ids(tokenizer, doc.completion)
        if not answer:
            continue
        states = final_hidden_states(model, prompt + answer).astype(mx.float32)
        # Position p predicts token p + 1: the states at P-1 .. P+k-2 predict the k answer tokens.
        rows = states[len(prompt) - 1 : len(prompt) - 1 + len(answer)]
        hidden.append(np.array(rows))
        targets.extend(t + vocab_size for t in answer)
        owners.extend([i] * len(answer))
    width = int(model.model.norm.weight.shape[0]) if not hidden else hidden[0].shape[1]
    return TokenTargets(
        hidden=np.concatenate(hidden, axis=0) if hidden else np.zeros((0, width), np.float32),
        targets=np.array(targets, dtype=np.int64),
        document_index=np.array(owners, dtype=np.int64),
    )


def eos_token_ids(tokenizer) -> set[int]:
    ids = set(getattr(tokenizer, "eos_token_ids", None) or [])
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def greedy_generate(model, tokenizer, head: Callable[[mx.array], mx.array], document: FinetuneDocument) -> str:
    """Greedy decoding from the joint heads (§ 15.5, q = e−2, d = 1, i.e. argmax mod |V|), up to
    ``max_generation_tokens``, an EOS token or the closing delimiter."""
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    states = final_hidden_states(model, prompt_ids(tokenizer, document.messages), cache=cache)
    stop = eos_token_ids(tokenizer)
    tokens: list[int] = []
    for _ in range(document.max_generation_tokens):
        token = int(mx.argmax(head(states[-1:]), axis=-1).item())
        if token in stop:
            break
        tokens.append(token)
        if DELIMITER in tokenizer.decode(tokens[-1:]):
            break
        states = final_hidden_states(model, [token], cache=cache)
    return tokenizer.decode(tokens)
