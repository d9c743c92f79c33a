"""Fine-tuning data: documents, next-token targets with cached hidden states, greedy joint
generation and the task-answer parser (docs/method.md § 14, § 15.5, § 15.8).

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
from mlx_sdm.jsonl import iter_jsonl_objects

#: Generation budget when a document does not say (the reference: longest task completion + 2).
DEFAULT_MAX_GENERATION_TOKENS = 16


@dataclass
class FinetuneDocument:
    """A verification document (docs/method.md § 14) as the fine-tuning loop needs it.

    ``prompt`` is the user message (or a list of chat messages), rendered with the model's chat
    template and ``system`` exactly as :func:`mlx_sdm.lm.prompt.render_prompt` does for
    generation and the verifier's features. ``parse`` reads the task answer out of a generated
    completion (default :func:`parse_task_answer`); it counts as correct when it equals ``task_label``.
    """

    id: str
    prompt: str | list[dict[str, str]]
    completion: str
    label: int  # verification label y: 1 = verified (correct answer), 0 = unverified
    task_label: Any = None
    system: str | None = None
    max_generation_tokens: int = DEFAULT_MAX_GENERATION_TOKENS
    parse: Callable[[str], Any] | None = field(default=None, repr=False, compare=False)

    def task_answer(self, text: str) -> Any:
        return (self.parse or parse_task_answer)(text)


def _as_prompt(prompt: Any, path: str, line: int) -> str | list[dict[str, str]]:
    if isinstance(prompt, str) and prompt.strip():
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]
    raise DataError("must be a non-empty string or a list of {role, content} messages", path=path, line=line, field="prompt")


def read_documents_jsonl(path: str | Path) -> list[FinetuneDocument]:
    """Read ``{"prompt", "completion", "label", "task_label"?, "system"?, "id"?, "max_generation_tokens"?}`` rows."""
    path = str(path)
    documents: list[FinetuneDocument] = []
    for number, row in iter_jsonl_objects(path, missing="file not found; pass a JSONL file of {prompt, completion, label} rows"):
        if "embedding" in row and "prompt" not in row:
            from mlx_sdm.network.encoding import EMBEDDING_ROW_HINT

            raise DataError(EMBEDDING_ROW_HINT, path=path, line=number, field="prompt")
        for key in ("prompt", "completion", "label"):
            if key not in row:
                raise DataError("missing; every row needs prompt, completion and label", path=path, line=number, field=key)
        if row["label"] not in (0, 1) or isinstance(row["label"], bool):
            raise DataError(f"must be 0 or 1, got {row['label']!r}", path=path, line=number, field="label")
        budget = row.get("max_generation_tokens", DEFAULT_MAX_GENERATION_TOKENS)
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise DataError(f"must be a positive integer, got {budget!r}", path=path, line=number, field="max_generation_tokens")
        documents.append(
            FinetuneDocument(
                id=str(row.get("id", f"{Path(path).name}:{number}")),
                prompt=_as_prompt(row["prompt"], path, number),
                completion=str(row["completion"]),
                label=int(row["label"]),
                task_label=row.get("task_label"),
                system=row.get("system"),
                max_generation_tokens=budget,
            )
        )
    if not documents:
        raise DataError("no rows; the file is empty", path=path)
    return documents


def documents_hash(documents: Sequence[FinetuneDocument]) -> str:
    """sha256 over the documents' content (ids, prompts, completions, labels): the manifest's data hash."""
    digest = hashlib.sha256()
    for doc in documents:
        digest.update(json.dumps([doc.id, doc.system, doc.prompt, doc.completion, doc.label, doc.task_label], sort_keys=True).encode())
    return digest.hexdigest()


def parse_task_answer(text: str) -> int | None:
    """The task prediction in a generated JSON answer (§ 14): the substring from the first ``{`` to
    the first ``}``, parsed as JSON; a boolean value → 1/0, ``"positive"``/``"negative"`` → 1/0.
    Anything else (no JSON, several keys, another value) → None, which counts as wrong."""
    from mlx_sdm.network.encoding import first_json_object

    value = first_json_object(text)
    if not isinstance(value, dict) or len(value) != 1:
        return None
    (answer,) = value.values()
    if isinstance(answer, bool):
        return int(answer)
    if answer in ("negative", "positive"):
        return int(answer == "positive")
    return None


def from_verification_documents(documents: Sequence[Any], tokenizer=None) -> list[FinetuneDocument]:
    """Convert :class:`mlx_sdm.network.encoding.VerificationDocument` s; the task answer is parsed
    with the task's own rule (``encoding.parse_answer``) and the generation budget is, as in the
    reference, the longest completion of the task in tokens + 2."""
    from mlx_sdm.network.encoding import TASK_FORMATS, parse_answer

    formats = {fmt.name: fmt for fmt in TASK_FORMATS.values()}
    budgets: dict[Any, int] = {}
    if tokenizer is not None:
        for doc in documents:
            n = len(tokenizer.encode(doc.completion, add_special_tokens=False)) + 2
            budgets[doc.task] = max(budgets.get(doc.task, 0), n)
    out = []
    for doc in documents:
        fmt = formats.get(doc.task)
        out.append(
            FinetuneDocument(
                id=doc.id,
                prompt=doc.prompt,
                completion=doc.completion,
                label=int(doc.label),
                task_label=doc.task_label,
                system=doc.system,
                max_generation_tokens=budgets.get(doc.task, DEFAULT_MAX_GENERATION_TOKENS),
                parse=(lambda text, fmt=fmt: parse_answer(text, fmt)) if fmt is not None else None,
            )
        )
    return out


def completion_target_ids(tokenizer, completion: str) -> list[int]:
    """The completion's tokens up to and including the one that closes the JSON unit (§ 15.8),
    found with the LM layer's delimiter rule; all of them when it never closes."""
    from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE, delimiter_index

    ids = [int(i) for i in tokenizer.encode(completion, add_special_tokens=False)]
    k = delimiter_index(tokenizer, ids, DELIMITER_JSON_CLOSE)
    return ids if k is None else ids[: k + 1]


@dataclass
class TokenTargets:
    """Next-token training data of the y = 1 documents: one row per target token."""

    hidden: np.ndarray  # [N, D] float32, final-norm hidden state that predicts the target
    targets: np.ndarray  # [N] int64, target token id shifted by |V|
    document_index: np.ndarray  # [N] int64, index into the y = 1 document list

    def __len__(self) -> int:
        return int(self.targets.shape[0])


def final_hidden_states(model, ids: Sequence[int]) -> mx.array:
    """Output of the final norm (input to the LM head) for ``ids``: [T, D]."""
    return model.model(mx.array([list(ids)], dtype=mx.int32))[0]


def build_token_targets(
    lm,
    documents: Sequence[FinetuneDocument],
    vocab_size: int,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> TokenTargets:
    """Force-decode every document once and keep the states that predict its target tokens."""
    from mlx_sdm.lm.prompt import render_prompt

    hidden, targets, owners = [], [], []
    iterator = progress(range(len(documents))) if progress else range(len(documents))
    for i in iterator:
        doc = documents[i]
        prompt = render_prompt(lm.tokenizer, doc.prompt, doc.system)
        answer = completion_target_ids(lm.tokenizer, doc.completion)
        if not answer:
            continue
        states = final_hidden_states(lm.model, prompt + answer).astype(mx.float32)
        # Position p predicts token p + 1: the states at P-1 .. P+k-2 predict the k answer tokens.
        rows = states[len(prompt) - 1 : len(prompt) - 1 + len(answer)]
        hidden.append(np.array(rows))
        targets.extend(t + vocab_size for t in answer)
        owners.extend([i] * len(answer))
    width = hidden[0].shape[1] if hidden else int(lm.model.model.norm.weight.shape[0])
    return TokenTargets(
        hidden=np.concatenate(hidden, axis=0) if hidden else np.zeros((0, width), np.float32),
        targets=np.array(targets, dtype=np.int64),
        document_index=np.array(owners, dtype=np.int64),
    )
