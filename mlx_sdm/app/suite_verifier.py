"""The task-suite verifier built the paper's way (docs/method.md § 14): constructed documents.

For every task of the suite the items of its ``pool`` split become constructed documents: the task's
own prompt and system prompt (the text the chat routes to that task) with the gold answer as the
completion (y = 1) or, by a seeded Bernoulli(0.5) draw, another answer of the task's format (y = 0).
Each task's pool is halved into D_tr / D_ca; its ``held_out`` and ``shifted`` splits, constructed the
same way with the next seed, are the report's test sets. The SDM-network head of the suite is trained
on the same halves (:func:`pool_halves`).
"""

from __future__ import annotations

import numpy as np

from mlx_sdm.network.encoding import NEGATIVE_PROBABILITY, VerificationDocument

#: truthful_qa shows at most 4 options (registry.MAX_CHOICES): a wrong answer is drawn among those.
MAX_SHOWN_LETTERS = 4


def constructed_documents(task, items, *, seed: int) -> list[VerificationDocument]:
    """Gold completion (y = 1) or, by Bernoulli(0.5), another answer of the task's format (y = 0)."""
    fmt = task.answer_format
    answers = fmt.answers[:MAX_SHOWN_LETTERS] if task.name == "truthful_qa" else fmt.answers
    rng = np.random.default_rng([seed, sum(map(ord, task.name))])
    documents = []
    for item in items:
        negative = bool(rng.random() < NEGATIVE_PROBABILITY)  # construct_negative ~ Bernoulli(0.5)
        others = [a for a in answers if a != item.gold]
        given = others[int(rng.integers(len(others)))] if negative else item.gold
        documents.append(VerificationDocument(
            id=f"{task.name}-{item.id}", prompt=item.prompt, completion=fmt.completion(given),
            label=0 if negative else 1, system=task.system, task_label=item.gold, construct_negative=negative,
            task=task.name, document=None))
    return documents


def pool_halves(task, size: int | None, *, seed: int) -> tuple[list, list]:
    """The task's constructed pool documents split as the verifier is fitted on them: (D_tr, D_ca)."""
    pool = constructed_documents(task, task.split("pool", size=size), seed=seed)
    half = len(pool) // 2
    return pool[:half], pool[half:]


def evaluation_documents(task, split: str, size: int, *, seed: int) -> list:
    """The task's ``held_out`` or ``shifted`` documents, constructed with their own seed (seed + 1)."""
    return constructed_documents(task, task.split(split, size=size), seed=seed + 1)
