"""The label formulation of a task's verifier (the paper's Table 1 estimator over the tuned model's states), beside
the answer formulation ``finetune`` fitted until now, and the marginal baselines the paper compares with.

Two ways to say whether an answer to a closed-set task (its answers are a few labels: a topic, spam or not, a
queue) can be trusted, each from the same document features ``[mean(h); h_delimiter]`` of the model's answer:

- **answer** (method § 14): an SDM estimator over y ∈ {wrong, right}, the model's own answers labelled against
  the gold. A model right on nearly every row gives it no wrong class, so wrong answers are constructed
  (``task_finetune.WrongAnswers``); the calibration set is then not the distribution the verifier meets.
- **label** (Table 1): an SDM estimator over y ∈ the task's answer values, fitted on the gold labels of the same
  answered rows. It predicts ŷ with ``p_lower``; the answer is *verified* when the estimator admits ŷ
  (``p_lower ≥ α′``) and ŷ is the model's answer, and *confidently wrong* when it admits a ŷ that differs. No
  constructed answer is needed: what it calibrates on is the model's own answers on rows nobody trained on.

Either is read in one answer-level view (:class:`AnswerJudgement`): y = the answer is right, ŷ = the formulation
says it is, ``admitted`` = it says so at α′. Table 1's strata of that view (``evaluation.table_row``, two classes)
are the promise a person relies on; the label estimator's own C-class strata are kept beside them.

The marginal baselines, over a logistic regression fitted on the same training rows (``calibration.training``):
the softmax threshold (admit where max softmax ≥ α′) and split-conformal APS (Romano et al. 2020) at level
1 − α′, calibrated on rows the regression never saw, verifying an answer when its prediction set is that answer
alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from mlx_sdm.calibration.constants import ALPHA_PRIME
from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.evaluation import Row, table_row
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.network.label_member import class_index

#: The answer-level view's classes: the answer is wrong (0) or right (1).
WRONG, RIGHT = 0, 1


@dataclass(frozen=True)
class ClassRows:
    """Answered rows of one task as the label formulation reads them."""

    ids: tuple[str, ...]
    features: np.ndarray  # [N, 2·hidden]
    gold: np.ndarray  # [N] index of the gold value in the task's answers
    answer: np.ndarray  # [N] index of the model's answer, NO_CLASS where it gave none of them
    texts: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def right(self) -> np.ndarray:
        return self.answer == self.gold

    def labelled(self) -> LabelledSet:
        """The rows with their gold labels, as the estimator fits them."""
        return LabelledSet(list(self.ids), self.features, self.gold, list(self.texts))

    def subset(self, index: np.ndarray) -> "ClassRows":
        index = np.asarray(index, dtype=np.int64)
        return ClassRows(tuple(self.ids[i] for i in index), self.features[index], self.gold[index],
                         self.answer[index], tuple(self.texts[i] for i in index))

    @staticmethod
    def concat(parts: Sequence["ClassRows"]) -> "ClassRows":
        parts = [p for p in parts if len(p)]
        return ClassRows(tuple(i for p in parts for i in p.ids), np.concatenate([p.features for p in parts]),
                         np.concatenate([p.gold for p in parts]), np.concatenate([p.answer for p in parts]),
                         tuple(t for p in parts for t in p.texts))


def class_rows(answered: Sequence[Any], answers: Sequence[Any]) -> ClassRows:
    """``AnsweredItem``s (network/tasks/answers.py) of one task as :class:`ClassRows`."""
    if not answered:
        return ClassRows((), np.zeros((0, 0), np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64), ())
    return ClassRows(tuple(a.item.id for a in answered), np.stack([a.features for a in answered]).astype(np.float32),
                     np.array([class_index(a.item.gold, answers) for a in answered], dtype=np.int64),
                     np.array([class_index(a.label.answer, answers) for a in answered], dtype=np.int64),
                     tuple(f"{a.item.prompt}\n{a.text}" for a in answered))


@dataclass(frozen=True)
class AnswerJudgement:
    """One formulation's reading of answered rows, in the answer-level view: ``right`` (y), ``says_right`` (ŷ),
    ``admitted`` (it says so at α′). Verified = admitted and says right."""

    right: np.ndarray
    says_right: np.ndarray
    admitted: np.ndarray
    #: the label estimator's own C-class reading (None for the answer formulation): gold, ŷ, admitted
    labels: tuple[np.ndarray, np.ndarray, int] | None = None

    @property
    def verified(self) -> np.ndarray:
        return self.admitted & self.says_right

    @property
    def verified_wrong(self) -> np.ndarray:
        return self.verified & ~self.right

    def row(self, name: str) -> Row:
        """Table 1's strata of the answer-level view (y=wrong/right, ŷ=wrong/right, marginal)."""
        return table_row(name, self.right.astype(int), self.says_right.astype(int), self.admitted, 2)

    def label_row(self, name: str) -> Row | None:
        """The label estimator's own C-class strata over the admitted rows (None: not a label formulation)."""
        if self.labels is None:
            return None
        gold, predicted, classes = self.labels
        return table_row(name, gold, predicted, self.admitted, classes)

    def holds(self, alpha: float = ALPHA_PRIME) -> bool:
        """Every admitted stratum of both views at least α′ (or nothing admitted)."""
        rows = [self.row("answer")] + ([self.label_row("label")] if self.labels is not None else [])
        return all(r.calibrated(alpha) for r in rows if r is not None)

    def subset(self, index: np.ndarray | slice) -> "AnswerJudgement":
        """The rows ``index`` selects (a boolean mask, indices or a slice: one source of a pooled set)."""
        labels = None if self.labels is None else (self.labels[0][index], self.labels[1][index], self.labels[2])
        return AnswerJudgement(self.right[index], self.says_right[index], self.admitted[index], labels)

    @staticmethod
    def concat(parts: Sequence["AnswerJudgement"]) -> "AnswerJudgement":
        labels = None
        if all(p.labels is not None for p in parts):
            labels = (np.concatenate([p.labels[0] for p in parts]), np.concatenate([p.labels[1] for p in parts]),
                      parts[0].labels[2])
        return AnswerJudgement(np.concatenate([p.right for p in parts]), np.concatenate([p.says_right for p in parts]),
                               np.concatenate([p.admitted for p in parts]), labels)


# ----------------------------------------------------------------------------------------- the label estimator
def fit_label_estimator(train: ClassRows, calibration: ClassRows, num_classes: int, config: FitConfig | None = None,
                        *, source: dict | None = None, progress: Any = None):
    """Alg. 1–3 over the gold labels of answered rows (Table 1's formulation). Alg. 1 pools ``train`` and
    ``calibration`` and halves the pool per class in each of its J iterations (fitting.fit_state)."""
    from mlx_sdm.calibration.estimator import SDMEstimator

    del num_classes  # C is the largest label + 1; a class absent from either set is refused by check_fit_sets
    return SDMEstimator.fit(train.labelled(), calibration.labelled(), config, source=source, progress=progress)


def judge_labels(estimator, rows: ClassRows) -> AnswerJudgement:
    """The label estimator on answered rows: it says an answer is right when its ŷ is that answer."""
    a = estimator.predict_arrays(rows.features)
    predicted = np.asarray(a["prediction"], dtype=np.int64)
    return AnswerJudgement(rows.right, predicted == rows.answer, np.asarray(a["admitted"], dtype=bool),
                           (rows.gold, predicted, int(estimator.num_classes)))


def judge_answers(estimator, features: np.ndarray, right: np.ndarray) -> AnswerJudgement:
    """The answer formulation's estimator (y ∈ {wrong, right}) on the same rows' features."""
    a = estimator.predict_arrays(np.asarray(features, dtype=np.float32))
    return AnswerJudgement(np.asarray(right, bool), np.asarray(a["prediction"]) == RIGHT,
                           np.asarray(a["admitted"], dtype=bool))


# ----------------------------------------------------------------------------------------- marginal baselines
@dataclass(frozen=True)
class ProbeBaselines:
    """A logistic regression on the training rows' features, and the split-conformal APS threshold of its
    softmax on calibration rows it never saw (level 1 − α′)."""

    weight: np.ndarray
    bias: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    aps_threshold: float
    alpha: float = ALPHA_PRIME

    def softmax(self, features: np.ndarray) -> np.ndarray:
        z = ((np.asarray(features, np.float64) - self.mean) / self.scale) @ self.weight + self.bias
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)

    def softmax_threshold(self, rows: ClassRows) -> AnswerJudgement:
        """Admit where the largest softmax probability is at least α′ (the paper's marginal baseline)."""
        p = self.softmax(rows.features)
        predicted = p.argmax(axis=1)
        return AnswerJudgement(rows.right, predicted == rows.answer, p.max(axis=1) >= self.alpha,
                               (rows.gold, predicted, p.shape[1]))

    def conformal(self, rows: ClassRows) -> AnswerJudgement:
        """APS prediction sets: classes by falling probability until their mass reaches the threshold; an answer
        is verified when the set is that answer alone (admitted: a set of one class)."""
        p = self.softmax(rows.features)
        order = np.argsort(-p, axis=1, kind="stable")
        mass = np.cumsum(np.take_along_axis(p, order, axis=1), axis=1)
        size = 1 + np.sum(mass < self.aps_threshold, axis=1)  # the class that reaches the threshold is in the set
        predicted = order[:, 0]
        return AnswerJudgement(rows.right, predicted == rows.answer, size == 1, (rows.gold, predicted, p.shape[1]))


def fit_probe_baselines(train: ClassRows, calibration: ClassRows, num_classes: int,
                        alpha: float = ALPHA_PRIME) -> ProbeBaselines:
    """The logistic regression (``calibration.training.logistic_regression``, standardised inputs) on ``train``;
    the APS threshold: the ⌈(n+1)(1−ε)⌉-th smallest calibration score, ε = 1 − α′, where a row's score is the
    softmax mass of the classes at least as probable as its gold class (no randomisation: conservative)."""
    from mlx_sdm.calibration.training import logistic_regression

    mean = train.features.mean(axis=0).astype(np.float64)
    scale = train.features.std(axis=0).astype(np.float64) + 1e-6
    w, b = logistic_regression(((train.features - mean) / scale).astype(np.float32), train.gold, num_classes)
    probe = ProbeBaselines(np.asarray(w, np.float64), np.asarray(b, np.float64), mean, scale, 1.0, alpha)
    p = probe.softmax(calibration.features)
    gold_p = p[np.arange(len(p)), calibration.gold]
    scores = np.sum(np.where(p >= gold_p[:, None], p, 0.0), axis=1)
    n = len(scores)
    rank = int(np.ceil((n + 1) * alpha))
    threshold = float(np.sort(scores)[rank - 1]) if rank <= n else 1.0 + 1e-9
    return ProbeBaselines(probe.weight, probe.bias, mean, scale, threshold, alpha)


# ----------------------------------------------------------------------------------------- cross-fitting
def fold_index(n: int, folds: int, seed: int) -> np.ndarray:
    """Each of ``n`` rows' fold (0..folds−1), by a seeded permutation, as even as the count allows."""
    order = np.random.default_rng(seed).permutation(n)
    fold = np.empty(n, dtype=np.int64)
    fold[order] = np.arange(n) % folds
    return fold


def halves(rows: ClassRows, seed: int) -> tuple[ClassRows, ClassRows]:
    """A seeded cut of rows in two halves, each class split evenly (Alg. 1 pools both and re-halves them per class
    in every iteration, so the cut matters only for ``check_fit_sets``: every class in both)."""
    first, second = [], []
    rng = np.random.default_rng(seed)
    for c in np.unique(rows.gold):
        members = rng.permutation(np.flatnonzero(rows.gold == c))
        first.append(members[: len(members) // 2])
        second.append(members[len(members) // 2:])
    return rows.subset(np.sort(np.concatenate(first))), rows.subset(np.sort(np.concatenate(second)))


def fit_on_rows(rows: ClassRows, num_classes: int, config: FitConfig, *, extra_train: ClassRows | None = None):
    """The label estimator over ``rows`` (and ``extra_train``'s rows on the training side)."""
    train, calibration = halves(rows, config.seed)
    if extra_train is not None and len(extra_train):
        train = ClassRows.concat([extra_train, train])
    return fit_label_estimator(train, calibration, num_classes, config)


def cross_fitted(pool: ClassRows, num_classes: int, config: FitConfig, folds: int, *, seed: int,
                 extra_train: ClassRows | None = None) -> AnswerJudgement:
    """Every row of ``pool`` judged by a label estimator fitted on the other folds (Alg. 1 over them): the figures
    of rows no estimator saw, while the shipped estimator is fitted on all of them. In ``pool``'s order."""
    where = fold_index(len(pool), folds, seed)
    parts = []
    for k in range(folds):
        estimator = fit_on_rows(pool.subset(np.flatnonzero(where != k)), num_classes, config, extra_train=extra_train)
        parts.append(judge_labels(estimator, pool.subset(np.flatnonzero(where == k))))
    joined = AnswerJudgement.concat(parts)
    order = np.concatenate([np.flatnonzero(where == k) for k in range(folds)])
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    labels = joined.labels
    return AnswerJudgement(joined.right[back], joined.says_right[back], joined.admitted[back],
                           None if labels is None else (labels[0][back], labels[1][back], labels[2]))


def part(judged: AnswerJudgement, start: int, stop: int) -> AnswerJudgement:
    """Rows ``start:stop`` of a judgement (one source of a pooled set)."""
    return judged.subset(slice(start, stop))


# ----------------------------------------------------------------------------------------- reports
class LabelAnswerView:
    """A label member's estimator read in the answer-level view over given answered rows, with the interface
    ``calibration.evaluation.evaluate`` reads (two classes: the answer wrong or right), so every Table 1 report
    prints either formulation the same way. Bound to the answers of the rows it is asked about, in order."""

    has_logistic_reference = False
    num_classes = 2

    def __init__(self, estimator, answer: np.ndarray):
        self.estimator, self.answer = estimator, np.asarray(answer, dtype=np.int64)
        self.alpha = estimator.alpha
        self.kind = estimator.kind

    def predict_arrays(self, embeddings: np.ndarray) -> dict[str, np.ndarray]:
        a = dict(self.estimator.predict_arrays(embeddings))
        if len(self.answer) != len(a["prediction"]):
            raise ValueError("a LabelAnswerView judges exactly the rows it was made for")
        softmax = np.asarray(a["softmax"])
        mine = np.where(self.answer >= 0, softmax[np.arange(len(softmax)), np.maximum(self.answer, 0)], 0.0)
        agrees = np.asarray(a["prediction"]) == self.answer
        a["prediction"] = agrees.astype(np.int64)
        a["admitted"] = np.asarray(a["admitted"], bool) & (self.answer >= 0)
        a["softmax"] = np.stack([1.0 - mine, mine], axis=1)
        return a


#: The per-row arrays an answer-level view returns (what ``evaluate`` and the reports read).
VIEW_KEYS = ("prediction", "admitted", "p_lower", "q_bin", "softmax")


class AnswerView:
    """Answered rows of one or more tasks, each judged by its task's member in the answer-level view (a label
    member through :class:`LabelAnswerView`), with the interface ``evaluate`` reads; bound to those rows, in order."""

    has_logistic_reference = False
    num_classes = 2

    def __init__(self, verifier, answered: Sequence[Any]):
        self.groups: list[tuple[np.ndarray, Any]] = []
        tasks = [a.item.task for a in answered]
        for name in dict.fromkeys(tasks):
            index = np.array([i for i, t in enumerate(tasks) if t == name], dtype=np.int64)
            member = verifier.member_for(name) if name in verifier.members else verifier
            judge = member.estimator if member.labels is None else \
                LabelAnswerView(member.estimator, np.array([member.labels.index_of(answered[i].text) for i in index]))
            self.groups.append((index, judge))
        self.size = len(answered)
        first = self.groups[0][1] if self.groups else verifier.estimator
        self.alpha, self.kind = first.alpha, first.kind

    @property
    def reads_labels(self) -> bool:
        """A label member judges some of the rows (else the verifier's own estimator reads them all as is)."""
        return any(isinstance(judge, LabelAnswerView) for _, judge in self.groups)

    def predict_arrays(self, embeddings: np.ndarray) -> dict[str, np.ndarray]:
        embeddings = np.asarray(embeddings, dtype=np.float32)
        if len(embeddings) != self.size:
            raise ValueError("an AnswerView judges exactly the rows it was made for")
        out: dict[str, np.ndarray] = {}
        for index, judge in self.groups:
            a = judge.predict_arrays(embeddings[index])
            for key in VIEW_KEYS:
                value = np.asarray(a[key])
                if key not in out:
                    out[key] = np.zeros((self.size,) + value.shape[1:], dtype=value.dtype)
                out[key][index] = value
        return out
