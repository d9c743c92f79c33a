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


class Scorer(Protocol):
    """Generates for documents with a decoding head and verifies the completions (this rank's share)."""

    def __call__(
        self, documents: Sequence[FinetuneDocument], head: Callable[[mx.array], mx.array], purpose: str = "calibration"
    ) -> list[Outcome]: ...


class LMScorer:
    """The default scorer (§ 15.5): greedy decoding over the joint heads through the LM layer's
    ``generate_with_features`` (argmax mod |V|, the document feature vector from the same pass),
    then the document verifier (``verify(features) -> Verdict``, e.g. ``DocumentVerifier.verify_features``).

    For training documents (``purpose="training"``) q and d come from ``training_qd(features) ->
    (ŷ, q, d)`` when given: q without self-exclusion and not flip-adjusted, d from the *training*
    distance eCDFs, as the reference does for the next-token loss (§ 15.5, § 20 item 13)."""

    def __init__(self, lm, verify: Callable[[Any], Any], *, training_qd: Callable[[Any], tuple[int, float, float]] | None = None,
                 delimiter: str = "json_close", system: str | None = None, progress=None):
        self.lm, self.verify, self.training_qd = lm, verify, training_qd
        self.delimiter, self.system, self.progress = delimiter, system, progress

    @classmethod
    def from_verifier(cls, lm, verifier, progress=None) -> "LMScorer":
        """Scorer for a :class:`~mlx_sdm.network.verifier.DocumentVerifier`; refuses one built on another model."""
        verifier.check_model(lm)

        def training_qd(features):
            vector = np.asarray(features.vector, dtype=np.float32)[None, :]
            qd = verifier.estimator.q_and_d(vector, distance_cdfs="training")
            return int(qd["prediction"][0]), float(qd["q"][0]), float(qd["d"][0])

        return cls(lm, lambda features: verifier.verify_features(features, explain=0), training_qd=training_qd,
                   delimiter=verifier.recipe.delimiter, system=verifier.recipe.system, progress=progress)

    def __call__(self, documents, head, purpose: str = "calibration"):
        from mlx_sdm.lm.generation import GenerationConfig, generate_with_features

        outcomes = []
        iterator = self.progress(documents) if self.progress else documents
        for doc in iterator:
            config = GenerationConfig(
                max_tokens=doc.max_generation_tokens,
                delimiter=self.delimiter,
                system=doc.system if doc.system is not None else self.system,
            )
            result = generate_with_features(self.lm, doc.prompt, config, head=head)
            answer = doc.task_answer(result.text)
            if purpose == "training" and self.training_qd is not None:
                prediction, q, d = self.training_qd(result.features)
                verdict = Outcome(prediction=prediction, admitted=False, q=q, d=d, correct=False)
            else:
                verdict = self.verify(result.features)
            outcomes.append(
                Outcome(
                    prediction=int(verdict.prediction),
                    admitted=bool(verdict.admitted),
                    q=float(verdict.q),
                    d=float(verdict.d),
                    correct=answer is not None and answer == doc.task_label,
                    text=result.text,
                )
            )
        return outcomes


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
