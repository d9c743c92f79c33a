"""Which formulation judges each task of a fine-tuned model (usecases/label_formulation.py says what the two are):
chosen per task on calibration rows alone, never the held-out ones, and said in the folder's report.

D_ca is halved by the same seeded draw ``task_finetune.choose_wrong_share`` halves it by. On the first half (with
the LoRA rows' answers) each formulation is fitted:

- answer: the verifier over right/wrong answers at the wrong-answer share already chosen (constructed answers in
  its halves, as the shipped one has);
- label: the Table 1 estimator over the gold labels of the model's own answers (no constructed answer);

and each judges the second half **as the model answered it** (no constructed answer there: that is the
distribution the verifier meets). The one that verifies more right answers there, with every admitted stratum of
both views at least α′, judges that task; a tie keeps the answer formulation (what finetune built before). The
final label member is then fitted on all of D_ca.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.errors import DataError
from mlx_sdm.network.label_member import LabelAnswers
from mlx_sdm.usecases.label_formulation import (AnswerJudgement, ClassRows, class_rows, fit_label_estimator,
                                                judge_answers, judge_labels)

ANSWER, LABEL = "answer", "label"


@dataclass(frozen=True)
class Tried:
    """One formulation on the held-back half of D_ca: right answers verified, verified and wrong, the promise."""

    verified_right: int
    verified_wrong: int
    holds: bool

    @property
    def score(self) -> int:
        """What the choice compares: right answers verified where the promise held, else none."""
        return self.verified_right if self.holds else 0

    @staticmethod
    def of(judged: AnswerJudgement) -> "Tried":
        return Tried(int((judged.verified & judged.right).sum()), int(judged.verified_wrong.sum()), judged.holds())


@dataclass(frozen=True)
class FormulationChoice:
    """The formulation that judges one task, and what each verified on the held-back half of D_ca (None: it
    could not be fitted there)."""

    task: str
    chosen: str
    rows: int
    answer: Tried | None = None
    label: Tried | None = None
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        def tried(t: Tried | None) -> dict[str, Any] | None:
            return None if t is None else {"verified_right": t.verified_right, "verified_wrong": t.verified_wrong,
                                           "holds": t.holds}
        return {"task": self.task, "chosen": self.chosen, "rows": self.rows, "answer": tried(self.answer),
                "label": tried(self.label), "why": self.why}


def pick(task: str, rows: int, answer: Tried | None, label: Tried | None) -> FormulationChoice:
    """The label formulation where it verifies more right answers with the promise held; else the answer one."""
    if label is not None and label.score > (answer.score if answer is not None else 0):
        return FormulationChoice(task, LABEL, rows, answer, label, "it verified more right answers on the held-back half")
    why = "the label estimator could not be fitted" if label is None else \
        "the label estimator verified no more right answers with the promise held"
    return FormulationChoice(task, ANSWER, rows, answer, label, why)


def held_back_halves(pool: Sequence[Any], seed: int) -> tuple[list[Any], list[Any]]:
    """D_ca's two halves, by ``choose_wrong_share``'s draw (the same rows judge every candidate)."""
    order = np.random.default_rng(seed + 2).permutation(len(pool))
    half = len(pool) // 2
    return [pool[i] for i in sorted(order[:half])], [pool[i] for i in sorted(order[half:])]


def choose_formulations(lm, kept: list, halves: list, answer_fit, args,
                        config: FitConfig | None = None) -> dict[str, FormulationChoice]:
    """Per task of ``kept`` (build_verifier.TaskOutcome), the formulation that judges it (module docstring).
    ``halves``: (task, LoRA rows' answers, D_ca answers) per task; ``answer_fit(first_halves)``: the answer
    verifier fitted on the LoRA rows and the given first halves at the chosen share (None: it cannot be)."""
    firsts, seconds = {}, {}
    for task, _trained, pool in halves:
        firsts[task.name], seconds[task.name] = held_back_halves(pool, args.seed)
    answer_verifier = answer_fit(firsts)
    out = {}
    for task, trained, _pool in halves:
        second = seconds[task.name]
        answer = None
        if answer_verifier is not None and second:
            est = answer_verifier.estimator_for(task.name if task.name in answer_verifier.members else None)
            rows = class_rows(second, task.answer_format.answers)
            answer = Tried.of(judge_answers(est, rows.features, rows.right))
        label = _label_tried(task, trained, firsts[task.name], second, config or FitConfig(seed=args.seed))
        out[task.name] = pick(task.name, len(second), answer, label)
    return out


#: Folds of the held-out figures when the held-out rows calibrate the shipped member (``held_out_calibrates``).
FOLDS = 5


@dataclass(frozen=True)
class Judges:
    """The verifier with its label members, each task's choice, and the held-out rows of each label task as folds
    judged them (calibrated on the other folds and D_ca; absent: the shipped verifier never saw them)."""

    verifier: Any
    choices: dict[str, FormulationChoice]
    held_out: dict[str, AnswerJudgement]


def with_label_members(lm, verifier, kept: list, halves: list, answer_fit, args, *,
                       held_out_calibrates: bool = False, config: FitConfig | None = None) -> Judges:
    """``verifier`` with each task that the label formulation judges better (:func:`choose_formulations`) judged by
    its label member, fitted on the LoRA rows' (or D_tr's) answers and all of D_ca: a verifier of one task becomes
    that member; of several, the member joins ``members`` under the task's name (the name a question routed to it
    carries). ``held_out_calibrates``: every row nobody trained on calibrates it, the held-out rows too, and their
    figures come from :data:`FOLDS` folds (each judged by a member fitted without it)."""
    config = config or FitConfig(seed=args.seed)  # Alg. 1's settings (the tests' tiny rows take fewer epochs)
    choices = choose_formulations(lm, kept, halves, answer_fit, args, config)
    chosen = [(task, trained, pool) for task, trained, pool in halves if choices[task.name].chosen == LABEL]
    if not chosen:
        return Judges(verifier, choices, {})
    held = {o.task.name: list(o.held_out) for o in kept} if held_out_calibrates else {}
    progress = getattr(args, "progress", False)
    members, judged = {}, {}
    for task, trained, pool in chosen:
        extra = held.get(task.name, [])
        members[task.name] = label_member(lm, task, trained, pool + extra, config, progress=progress)
        if extra:
            judged[task.name] = held_out_by_folds(task, trained, pool, extra, config)
    if len(halves) == 1 and len(kept) == 1:  # the verifier judges this task alone: the member is the verifier
        return Judges(members[halves[0][0].name], choices, judged)
    verifier.members.update(members)
    return Judges(verifier, choices, judged)


def held_out_by_folds(task, trained: list, pool: list, held: list, config: FitConfig) -> AnswerJudgement:
    """The held-out rows judged by folds: D_ca and the held-out rows cut in :data:`FOLDS`, each fold judged by a
    label estimator fitted on the LoRA rows' answers and the other folds (usecases/label_formulation.py)."""
    from mlx_sdm.usecases.label_formulation import cross_fitted, part

    answers = task.answer_format.answers
    rows = ClassRows.concat([class_rows(pool, answers), class_rows(held, answers)])
    crossed = cross_fitted(rows, len(answers), config, FOLDS, seed=config.seed, extra_train=class_rows(trained, answers))
    return part(crossed, len(pool), len(rows))


def _label_tried(task, trained: list, first: list, second: list, config: FitConfig) -> Tried | None:
    answers = task.answer_format.answers
    try:
        estimator = fit_label_estimator(class_rows(trained, answers), class_rows(first, answers), len(answers), config)
    except DataError:
        return None
    return Tried.of(judge_labels(estimator, class_rows(second, answers)))


def label_member(lm, task, trained: list, pool: list, config: FitConfig, *, progress: Any = None):
    """The task's label member (network/label_member.py): Alg. 1–3 over the gold labels of the LoRA rows' answers
    and ``pool`` (all of D_ca, and the held-out rows where they calibrate), as a DocumentVerifier that routes to
    this task alone."""
    from mlx_sdm.network.verifier import DocumentVerifier, FeatureRecipe

    answers = task.answer_format.answers
    train: ClassRows = class_rows(trained, answers)
    calibration = class_rows(pool, answers)
    source = {"kind": "task_labels", "tasks": [task.name], "formulation": LABEL,
              "labels": f"the gold value of {task.answer_format.field!r} ({len(answers)} classes) of the model's own "
                        "answers; an answer is verified when the admitted prediction is that answer",
              "model": lm.name}
    estimator = fit_label_estimator(train, calibration, len(answers), config, source=source, progress=progress)
    recipe = FeatureRecipe(delimiter=task.delimiter, system=task.system,
                           task_systems=((task.prompt_prefix, task.system),) if task.prompt_prefix else (),
                           task_names=(task.name,) if task.prompt_prefix else ())
    member = DocumentVerifier(estimator, dict(lm.fingerprint, name=lm.name, source=getattr(lm, "source", None)), recipe,
                              tasks=[task.summary()], labels=LabelAnswers(task.answer_format.field, tuple(answers)))
    return member
