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

    .venv/bin/python scripts/review_loop.py --verifier build/loo --task sports_understanding
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from mlx_sdm.app.review_loop import DEFAULT_STEPS, decision_latency, format_steps, label_scope, labelled, review_steps

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = ROOT / "build" / "suite-cache"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verifier", required=True, type=Path, help="a verifier built WITHOUT --task")
    p.add_argument("--task", required=True, help="the never-seen task whose answers are reviewed")
    p.add_argument("--steps", type=int, nargs="+", default=list(DEFAULT_STEPS))
    p.add_argument("--held-out", type=int, default=64, help="held-out answers of the task to evaluate")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="answer/feature cache (build-verifier's)")
    p.add_argument("--latency-decisions", type=int, default=20)
    args = p.parse_args(argv)
    from mlx_sdm.app.build_verifier import DEFAULT_MAX_TOKENS
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
