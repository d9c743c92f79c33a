"""Scoring for Alg. 4 (docs/method.md § 15.5): the outcome of one generated completion, the scorer that
generates with a decoding head and verifies (:class:`LMScorer`), and the admitted-count metric."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import mlx.core as mx
import numpy as np

from mlx_sdm.network.data import FinetuneDocument
from mlx_sdm.network.distributed import shard, unshard_rows


@dataclass
class Outcome:
    """What Alg. 4 needs from one generated completion."""

    prediction: int  # verifier ŷ
    admitted: bool  # p_lower ≥ α′ (Eq. 28)
    q: float
    d: float
    correct: bool  # the task answer parsed from the generated JSON equals the task label
    text: str = ""


#: Documents answered together (as ``build-verifier`` batches its answers).
SCORE_BATCH = 16


class Scorer(Protocol):
    """Generates for documents with a decoding head and verifies the completions (this rank's share)."""

    def __call__(
        self, documents: Sequence[FinetuneDocument], head: Callable[[mx.array], mx.array], purpose: str = "calibration"
    ) -> list[Outcome]: ...


class LMScorer:
    """The default scorer (§ 15.5): greedy decoding over the joint heads, batched (``generate_batch``: argmax
    mod |V|, the document feature vector from the same pass, equal to ``generate_with_features``'s),
    then the document verifier (``verify(features, text) -> Verdict``: ``DocumentVerifier.verify_features`` with the
    answer's text, which a label member reads).

    For training documents (``purpose="training"``) q and d come from ``training_qd(features) ->
    (ŷ, q, d)`` when given: q without self-exclusion and not flip-adjusted, d from the *training*
    distance eCDFs, as the reference does for the next-token loss (§ 15.5, § 20 item 13)."""

    def __init__(self, lm, verify: Callable[[Any, str], Any], *, training_qd: Callable[[Any], tuple[int, float, float]] | None = None,
                 delimiter: str = "json_close", system: str | None = None, progress=None, batch: int = SCORE_BATCH):
        self.lm, self.verify, self.training_qd = lm, verify, training_qd
        self.delimiter, self.system, self.progress, self.batch = delimiter, system, progress, batch

    @classmethod
    def from_verifier(cls, lm, verifier, progress=None) -> "LMScorer":
        """Scorer for a :class:`~mlx_sdm.network.verifier.DocumentVerifier`; refuses one built on another model."""
        verifier.check_model(lm)

        def training_qd(features):
            vector = np.asarray(features.vector, dtype=np.float32)[None, :]
            qd = verifier.estimator.q_and_d(vector, distance_cdfs="training")
            return int(qd["prediction"][0]), float(qd["q"][0]), float(qd["d"][0])

        return cls(lm, lambda features, text: verifier.verify_features(features, explain=0, answer=text),
                   training_qd=training_qd,
                   delimiter=verifier.recipe.delimiter, system=verifier.recipe.system, progress=progress)

    def __call__(self, documents, head, purpose: str = "calibration"):
        """Greedy answers in batches of ``batch`` documents that share a system prompt and a token budget (a small
        model's decoding step costs little more for B rows than for one: ``network/tasks/batched.py``), each
        verified; outcomes in the documents' order."""
        from mlx_sdm.network.tasks.batched import generate_batch

        groups: dict[tuple[str | None, int], list[int]] = {}
        for i, doc in enumerate(documents):
            system = doc.system if doc.system is not None else self.system
            groups.setdefault((system, doc.max_generation_tokens), []).append(i)
        outcomes: list[Outcome | None] = [None] * len(documents)
        bar = self.progress(range(len(documents))) if self.progress else None
        ticks = iter(bar) if bar is not None else None
        for (system, budget), index in groups.items():
            index = sorted(index, key=lambda i: len(str(documents[i].prompt)))  # similar lengths: little padding
            for start in range(0, len(index), self.batch):
                part = index[start : start + self.batch]
                answers = generate_batch(self.lm, [documents[i].prompt for i in part], max_tokens=budget,
                                         delimiter=self.delimiter, system=system, head=head)
                for i, answer in zip(part, answers):
                    outcomes[i] = self._outcome(documents[i], answer.text, answer.features, purpose)
                    if ticks is not None:
                        next(ticks, None)
        for _ in ticks or ():  # the bar's end
            pass
        return [o for o in outcomes if o is not None]

    def _outcome(self, doc: FinetuneDocument, text: str, features, purpose: str) -> Outcome:
        answer = doc.task_answer(text)
        if purpose == "training" and self.training_qd is not None:
            prediction, q, d = self.training_qd(features)
            verdict: Any = Outcome(prediction=prediction, admitted=False, q=q, d=d, correct=False)
        else:
            verdict = self.verify(features, text)
        return Outcome(prediction=int(verdict.prediction), admitted=bool(verdict.admitted), q=float(verdict.q),
                       d=float(verdict.d), correct=answer is not None and answer == doc.task_label, text=text)


def admitted_count(outcomes: Sequence[Outcome]) -> int:
    """Alg. 4's metric: ŷ = 1, admitted, and the parsed task answer equals the task label."""
    return sum(1 for out in outcomes if out.prediction == 1 and out.admitted and out.correct)


def score_all(scorer: Scorer, documents: Sequence[FinetuneDocument], head, group, purpose: str = "calibration") -> np.ndarray:
    """Score the documents sharded over the ranks; rows [prediction, admitted, q, d, correct]."""
    outcomes = scorer(shard(documents, group), head, purpose)
    local = np.array(
        [[o.prediction, float(o.admitted), o.q, o.d, float(o.correct)] for o in outcomes],
        dtype=np.float32,
    ).reshape(-1, 5)
    return unshard_rows(local, len(documents), group)


def outcomes_from_rows(rows: np.ndarray) -> list[Outcome]:
    return [
        Outcome(prediction=int(r[0]), admitted=bool(r[1]), q=float(r[2]), d=float(r[3]), correct=bool(r[4]))
        for r in rows
    ]
