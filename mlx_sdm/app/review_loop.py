"""The review loop, measured: what labelling answers of a task the verifier has never seen does.

Review decisions add labelled answers to a verifier's support set with ``SDMEstimator.add_support``
(the function the review service calls; no retraining). :func:`review_steps` evaluates a task's
held-out answers after each number of reviewed answers (the paper's Table 1 cells, and whether the
promise holds: every admitted stratum >= alpha', or nothing admitted); :func:`label_scope` checks that
the labels join the one task's support set the questions route to; :func:`decision_latency` times a
review decision to the changed verdict. ``scripts/review_loop.py`` is the command line over it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from mlx_sdm.calibration.evaluation import Row, table_row

DEFAULT_STEPS = (0, 10, 25, 50)


@dataclass
class Labelled:
    """Answers with their features and verification labels (1 = the answer is correct)."""

    ids: list[str]
    features: np.ndarray
    labels: np.ndarray
    texts: list[str]
    prompts: list[str] = field(default_factory=list)  # the questions (user messages) the answers reply to


@dataclass
class Step:
    reviewed: int
    support_size: int
    row: Row  # the admitted set's strata on the held-out answers (p̂ lower)
    verified: int  # admitted with ŷ = 1

    def promise_holds(self, alpha: float) -> bool:
        return self.row.calibrated(alpha)


def label_scope(verifier, *answer_sets: Labelled) -> str | None:
    """The task of ``verifier`` whose support set the reviewed labels join (None: unrouted questions, or a
    single-task verifier). Every question of the run must route there: the held-out answers are judged
    with that task's support set, never another task's."""
    tasks = {verifier.route(prompt).task for answers in answer_sets for prompt in answers.prompts}
    if len(tasks) > 1:
        raise ValueError(f"the questions route to several tasks of the verifier ({sorted(map(str, tasks))}); "
                         "review labels are kept per task, so measure one task at a time")
    return tasks.pop() if tasks else None


def review_steps(estimator, reviewed: Labelled, held_out: Labelled, steps=DEFAULT_STEPS) -> list[Step]:
    """Add ``reviewed`` answers in order (``add_support``) up to each step and evaluate ``held_out``."""
    out, added = [], 0
    for n in sorted(steps):
        n = min(n, len(reviewed.ids))
        if n > added:
            estimator.add_support(reviewed.ids[added:n], reviewed.features[added:n], reviewed.labels[added:n],
                                  reviewed.texts[added:n])
            added = n
        arrays = estimator.predict_arrays(held_out.features)
        row = table_row(f"after {n} reviews", held_out.labels, arrays["prediction"], arrays["admitted"],
                        estimator.num_classes)
        verified = int(np.sum(arrays["admitted"] & (arrays["prediction"] == 1)))
        out.append(Step(n, estimator.support_size, row, verified))
    return out


def decision_latency(load_verifier, answers: Labelled, decisions: int) -> tuple[list[float], int]:
    """Seconds from a review decision (add_support of one answer) to its re-verified verdict, per decision
    (each on a freshly loaded verifier), and how many verdicts changed."""
    seconds, changed = [], 0
    for i in range(min(decisions, len(answers.ids))):
        fresh = load_verifier()
        x = answers.features[i]
        before = fresh.verify_features(x, explain=0)
        tic = time.perf_counter()
        fresh.estimator.add_support([f"review-{answers.ids[i]}"], x[None, :], [int(answers.labels[i])],
                                    [answers.texts[i]])
        after = fresh.verify_features(x, explain=3)
        seconds.append(time.perf_counter() - tic)
        changed += (before.admitted, before.prediction, before.p_lower) != (after.admitted, after.prediction, after.p_lower)
    return seconds, changed


def format_steps(task: str, split: str, steps: list[Step], alpha: float) -> list[str]:
    lines = [f"| {task} {split} ({steps[0].row.marginal.total}) | reviewed | support | y=0 | y=1 | ŷ=0 | ŷ=1 | marginal "
             "| verified | promise |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in steps:
        cells = " | ".join(x.markdown() for x in s.row.strata())
        lines.append(f"| | {s.reviewed} | {s.support_size} | {cells} | {s.verified} | "
                     f"{'holds' if s.promise_holds(alpha) else 'VIOLATED'} |")
    return lines


def labelled(answered) -> Labelled:
    """``Labelled`` of the task answers ``answer_items`` returns."""
    return Labelled([a.item.id for a in answered], np.stack([a.features for a in answered]),
                    np.array([a.label.label for a in answered], dtype=np.int64),
                    [f"{a.item.document.strip()} => {a.text.strip()}" for a in answered], [a.item.prompt for a in answered])
