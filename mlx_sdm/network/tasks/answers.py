"""A model answers a task's prompts itself; each answer is labelled against the gold (docs/method.md § 14 parser) and
its document features are taken in the same generation pass (``lm.generation``), with an on-disk cache.

The cache holds one file per chunk of ``CACHE_CHUNK`` items, written atomically when the chunk is
done, keyed by the model (output-head hash), the generation settings and the exact prompts: a build
killed at any moment (even ``kill -9``) loses at most the chunk in progress and resumes from there.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from mlx_sdm.atomic import atomic_write_bytes
from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE
from mlx_sdm.network.encoding import VerificationDocument
from mlx_sdm.network.tasks import AnswerLabel, Task, TaskItem
from mlx_sdm.network.tasks.batched import generate_batch

#: Items per cache file.
CACHE_CHUNK = 16  # also the generation batch
CACHE_FORMAT = 1

#: A sampler factory for tests and scripted answers: item -> sampler (logprobs -> token), or None.
SamplerFor = Callable[[TaskItem], Callable[[Any], Any]]


@dataclass
class AnsweredItem:
    """One item answered by the model: its answer text, features [2·hidden], label against the gold."""

    item: TaskItem
    text: str
    features: np.ndarray
    finish_reason: str
    label: AnswerLabel
    system: str | None

    def document(self) -> VerificationDocument:
        """The answer as a verification document (y = 1 iff the answer is correct)."""
        return VerificationDocument(id=self.item.id, prompt=self.item.prompt, completion=self.text,
                                    label=self.label.label, system=self.system, task_label=self.item.gold,
                                    task=self.item.task, document=self.item.document)


@dataclass
class AnswerSettings:
    max_tokens: int
    delimiter: str = DELIMITER_JSON_CLOSE
    cache_dir: Path | None = None
    sampler_for: SamplerFor | None = None
    sampler_tag: str = ""  # part of the cache key when ``sampler_for`` scripts the answers
    chunk: int = CACHE_CHUNK  # items per cache file and generation batch
    head_tag: str = ""  # part of the cache key when the answers are decoded with an SDM-network head (its hash)

    def for_task(self, task: Task) -> "AnswerSettings":
        """These settings with the task's own answer unit and budget (open questions: ``answer_head``, 64)."""
        from dataclasses import replace

        return replace(self, delimiter=task.delimiter, max_tokens=task.max_tokens or self.max_tokens)


def _chunk_path(lm, task: Task, chunk: Sequence[TaskItem], settings: AnswerSettings) -> Path | None:
    if settings.cache_dir is None:
        return None
    key = hashlib.sha256(json.dumps([CACHE_FORMAT, lm.fingerprint.get("head_sha256"), lm.fingerprint.get("num_layers"),
                                     settings.delimiter, settings.max_tokens, settings.sampler_tag, task.system,
                                     *([lm.weights_tag] if lm.weights_tag else []),
                                     *([settings.head_tag] if settings.head_tag else [])]).encode())
    for item in chunk:
        key.update(json.dumps([item.id, item.prompt]).encode())
    return Path(settings.cache_dir) / f"{task.name}-{key.hexdigest()[:24]}.npz"


def _load_chunk(path: Path | None, n: int, width: int) -> tuple[list[str], list[str], np.ndarray] | None:
    if path is None or not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            texts = json.loads(str(data["texts"]))
            finish = json.loads(str(data["finish"]))
            features = np.asarray(data["features"], dtype=np.float32)
    except (OSError, ValueError, KeyError):
        return None  # a damaged file is regenerated
    if features.shape != (n, width) or len(texts) != n:
        return None
    return texts, finish, features


def _save_chunk(path: Path | None, texts: list[str], finish: list[str], features: np.ndarray) -> None:
    if path is None:
        return
    buffer = io.BytesIO()
    np.savez(buffer, texts=np.array(json.dumps(texts)), finish=np.array(json.dumps(finish)), features=features)
    atomic_write_bytes(path, buffer.getvalue())


def _generate_chunk(lm, task: Task, chunk: list[TaskItem], settings: AnswerSettings, head
                    ) -> tuple[list[str], list[str], np.ndarray]:
    """One batch (rows sorted by prompt length, so little padding), results in the chunk's order."""
    order = sorted(range(len(chunk)), key=lambda i: len(chunk[i].prompt))
    samplers = [settings.sampler_for(chunk[i]) for i in order] if settings.sampler_for else None
    answers = generate_batch(lm, [chunk[i].prompt for i in order], max_tokens=settings.max_tokens,
                             delimiter=settings.delimiter, system=task.system, head=head, samplers=samplers)
    texts, finish = [""] * len(chunk), [""] * len(chunk)
    features = np.zeros((len(chunk), 2 * lm.hidden_size), dtype=np.float32)
    for i, answer in zip(order, answers):
        texts[i], finish[i], features[i] = answer.text, answer.finish_reason, answer.features.vector
    return texts, finish, features


def answer_items(lm, task: Task, items: Sequence[TaskItem], settings: AnswerSettings, *, head=None,
                 on_item: Callable[[bool], None] | None = None) -> list[AnsweredItem]:
    """Greedy answers (or ``settings.sampler_for``) to ``items`` under ``task.system``, batched per cache chunk,
    with features from the same pass; ``on_item(from_cache)`` is called once per item (progress bars)."""
    width = 2 * lm.hidden_size
    out: list[AnsweredItem] = []
    for start in range(0, len(items), settings.chunk):
        chunk = list(items[start : start + settings.chunk])
        path = _chunk_path(lm, task, chunk, settings)
        cached = _load_chunk(path, len(chunk), width)
        if cached is None:
            texts, finish, features = _generate_chunk(lm, task, chunk, settings, head)
            for _ in chunk:
                if on_item:
                    on_item(False)
            _save_chunk(path, texts, finish, features)
        else:
            texts, finish, features = cached
            for _ in chunk:
                if on_item:
                    on_item(True)
        for item, text, reason, vector in zip(chunk, texts, finish, features):
            out.append(AnsweredItem(item, text, vector, reason, task.label_answer(text, item.gold), task.system))
    return out
