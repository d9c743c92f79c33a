#!/usr/bin/env python
"""Is our adaptor's shortfall against the logistic probe real or sampling noise? (not a test)

Refits our estimator (``mlx-sdm train``, the project defaults, one process per kind, as
``scripts/compare_reexpress_sdm.py`` fits "ours") on the spam and BBC splits of
``scripts/choose_defaults.py`` (or a suite task under SmolLM2's states, ``suite:TASK[:POOL]``, from the
feature cache as in that comparison), fits the probe of that comparison (logistic regression on the model's
own support rows, the paper's scalar normalisation), and prints for every evaluated row set both
accuracies, the rows only the adaptor gets right (b) and only the probe (c), the exact McNemar p
and the verdict (``mlx_sdm.calibration.paired_test``, docs/method.md § 19). No SDK is needed.

    PYTHONPATH=$PWD .venv/bin/python scripts/probe_gaps.py --dataset spam --dataset bbc --work /tmp/gaps
    PYTHONPATH=$PWD .venv/bin/python scripts/probe_gaps.py --dataset suite:bbc_topic:800 --cache-dir DIR --work /tmp/gaps
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import mlx_sdm  # noqa: F401  (BLAS preload before mlx)
from compare_reexpress_sdm import ROOT, load_sets, ours_train, support_probe, write_jsonl
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.paired_test import paired_comparison

KINDS = ("v1", "v2", "nested")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", action="append", help="spam, bbc or suite:TASK[:POOL]; repeatable (default: spam, bbc)")
    p.add_argument("--kind", action="append", choices=KINDS, help="estimator kinds (default: all three)")
    p.add_argument("--work", type=Path, required=True, help="folder for the row files and models (reused)")
    p.add_argument("--cache-dir", type=Path, default=ROOT / "runs" / "features",
                   help="suite:TASK: the SmolLM2 feature cache (build-verifier's cache folder)")
    p.add_argument("--extract", action="store_true", help="suite:TASK: force-decode what is not cached (loads SmolLM2)")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    print("| data | rows | estimator | n | adaptor | probe | b | c | McNemar p | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.dataset or ["spam", "bbc"]:
        sets = load_sets(name, args)
        c = int(sets["train"].labels.max()) + 1
        files = {k: write_jsonl(args.work / f"{name.replace(':', '_')}-{k}.jsonl", v) for k, v in sets.items()}
        for kind in args.kind or KINDS:
            model = args.work / f"{name.replace(':', '_')}-ours_{kind}"
            model = model.with_suffix(".sdmkitmodel") if kind == "nested" else model  # as the comparison writes it
            ours_train(files, model, ["--estimator", kind])
            est, probe = SDMEstimator.load(model), support_probe(model, sets, c)
            for ev in (k for k in sets if k not in ("train", "calibration")):
                data = sets[ev]
                cmp = paired_comparison(data.labels, est.predict_arrays(data.embeddings)["prediction"],
                                        probe(data.embeddings))
                print(f"| {name} | {ev} | ours {kind} | {cmp.n} | {cmp.accuracy_a:.3f} | {cmp.accuracy_b:.3f} | "
                      f"{cmp.b} | {cmp.c} | {cmp.p_value:.3g} | {cmp.verdict()} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
