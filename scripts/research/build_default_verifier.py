#!/usr/bin/env python
"""Build a suite verifier of the embedded SmolLM2-135M-Instruct from the model's OWN answers.

This was the first attempt at the default verifier (its report is kept as
weights/smollm2-suite/report-own-answers.md); it admits nothing, because the 135M model is rarely right.
The shipped default is built the paper's way, from constructed documents: `mlx-sdm build-verifier --recipe weights/smollm2-suite/recipe.json`.
It is `mlx-sdm build-verifier` with these settings: the model answers each task's prompts itself, answers are labelled against the gold
(docs/method.md § 14), features come from the same pass, and the SDM estimator is fitted on every task whose answers
the model gives in the task's JSON format. Answers and features are cached in build/suite-cache
(outside git): a second run (e.g. after the estimator's training defaults change) only refits.

    .venv/bin/python scripts/research/build_default_verifier.py                  # ~30 min of answers on 2 busy cores, then the fit
    .venv/bin/python scripts/research/build_default_verifier.py --out build/try  # somewhere else
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import mlx_sdm  # noqa: F401  (BLAS before mlx)


#: Most useful first: a build cut short still has the tasks the 135M model answers in JSON.
SUITE_ORDER = ["sentiment", "bbc_topic", "sports_understanding", "spam", "fever", "strategyqa", "truthful_qa"]
DEFAULT_PER_TASK = 128
#: More answers where the 135M model answers in JSON and its states carry signal (measured: docs/verifiers.md).
PER_TASK_SIZES = {"sentiment": 512, "bbc_topic": 256, "sports_understanding": 256}
DEFAULT_EVAL_SIZE = 32
DEFAULT_OUT = ROOT / "build" / "smollm2-own-answers"  # not shipped: it admits nothing
DEFAULT_CACHE = ROOT / "build" / "suite-cache"
SIZE_BUDGET_MB = 12


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--per-task", type=int, default=DEFAULT_PER_TASK)
    p.add_argument("--eval-size", type=int, default=DEFAULT_EVAL_SIZE)
    p.add_argument("--tasks", nargs="+", default=SUITE_ORDER)
    args = p.parse_args(argv)
    from mlx_sdm.usecases.build_verifier import BuildVerifierArgs, build_verifier, describe

    result = build_verifier(BuildVerifierArgs(out=args.out, model="smollm2", tasks=args.tasks, per_task=args.per_task,
                                              per_task_sizes=PER_TASK_SIZES,
                                              eval_size=args.eval_size, cache_dir=args.cache_dir),
                            log=lambda line: print(line, file=sys.stderr))
    print(result.report)
    print(describe(result))
    size_mb = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file()) / 1e6
    print(f"saved {args.out} ({size_mb:.1f} MB; budget {SIZE_BUDGET_MB} MB)")
    return 1 if size_mb > SIZE_BUDGET_MB else 0


if __name__ == "__main__":
    sys.exit(main())
