#!/usr/bin/env python
"""The review loop, measured: what labelling answers of a task the verifier has never seen does.

A verifier built without task T (e.g. `mlx-sdm build-verifier --tasks sentiment bbc_topic spam --out
build/loo`) starts out treating T's answers as out of distribution. Review decisions add labelled
answers to its support set with `SDMEstimator.add_support` (the function the review service calls;
no retraining). After N = 0, 10, 25, 50 reviewed answers of T, this reports on T's held-out answers
(never reviewed) the admitted fraction and every class- and prediction-conditional stratum (paper
Table 1 cells), and whether the promise holds (every admitted stratum ≥ α′, or nothing admitted).

Labels are kept per verifier AND task (the review service's rule): the reviewed answers join only the
support set the verifier judges their task with (for a multi-task verifier, the task its recipe routes
T's questions to; T never seen: unrouted questions). The script checks that every reviewed and
evaluated question routes to that one task and reports it.

It also measures the time from one review decision to the changed verdict of a re-verified answer:
add the answer's features with its label, then verify the same answer again (median and max over
--latency-decisions decisions, each on a freshly loaded verifier).

Its pieces, tested in tests/test_review_loop.py: :func:`review_steps` evaluates the held-out answers after each
number of reviewed answers; :func:`label_scope` checks that the labels join the one task's support set the
questions route to; :func:`decision_latency` times a review decision to the changed verdict.

    .venv/bin/python scripts/bench/review_loop.py --verifier build/loo --task sports_understanding
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlx_sdm.calibration.evaluation import Row, table_row

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE = ROOT / "build" / "suite-cache"
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verifier", required=True, type=Path, help="a verifier built WITHOUT --task")
    p.add_argument("--task", required=True, help="the never-seen task whose answers are reviewed")
    p.add_argument("--steps", type=int, nargs="+", default=list(DEFAULT_STEPS))
    p.add_argument("--held-out", type=int, default=64, help="held-out answers of the task to evaluate")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="answer/feature cache (build-verifier's)")
    p.add_argument("--latency-decisions", type=int, default=20)
    args = p.parse_args(argv)
    from mlx_sdm.usecases.build_verifier import DEFAULT_MAX_TOKENS
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.tasks.registry import load_task
    from mlx_sdm.network.tasks.answers import AnswerSettings, answer_items
    from mlx_sdm.network.verifier import DocumentVerifier

    verifier = DocumentVerifier.load(args.verifier)
    task = load_task(args.task)
    if task.name in {t.get("name") for t in verifier.tasks}:
        print(f"review_loop: {args.verifier} was built on {task.name}; give a verifier built without it", file=sys.stderr)
        return 2
    lm = load_model(verifier.model_fingerprint.get("name") or "smollm2")
    verifier.check_model(lm)
    settings = AnswerSettings(DEFAULT_MAX_TOKENS, delimiter=verifier.recipe.delimiter, cache_dir=args.cache_dir)
    reviewed = labelled(answer_items(lm, task, task.split("pool", size=max(args.steps)), settings))
    held = labelled(answer_items(lm, task, task.split("held_out", size=args.held_out), settings))
    shifted = labelled(answer_items(lm, task, task.split("shifted", size=args.held_out), settings))
    scope = label_scope(verifier, reviewed, held, shifted)
    alpha = verifier.estimator.alpha
    latency, changed = decision_latency(lambda: DocumentVerifier.load(args.verifier), held, args.latency_decisions)
    lines = [f"labels kept under {args.verifier}, task {scope or 'none (unrouted questions)'}: the support set "
             f"{task.name}'s answers are judged with, and no other task's", ""]
    for split, data in (("held-out", held), ("shifted", shifted)):
        fresh = DocumentVerifier.load(args.verifier)
        lines += format_steps(task.name, split, review_steps(fresh.estimator, reviewed, data, args.steps), alpha) + [""]
    ms = np.array(latency) * 1e3
    lines.append(f"review decision -> re-verified verdict: median {np.median(ms):.1f} ms, max {ms.max():.1f} ms over "
                 f"{len(ms)} decisions (support {verifier.estimator.support_size}); {changed} verdicts changed")
    print("\n".join(lines))
    return 0 if all("VIOLATED" not in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
