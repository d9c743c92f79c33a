#!/usr/bin/env python
"""Is our adaptor's shortfall against the logistic probe real or sampling noise? (not a test)

Refits our estimator (``mlx-sdm train``, the project defaults, one process per kind, as
``scripts/research/compare_reexpress_sdm.py`` fits "ours") on the spam and BBC splits of
``scripts/research/choose_defaults.py`` (or a suite task under SmolLM2's states, ``suite:TASK[:POOL]``, from the
feature cache as in that comparison), fits the probe of that comparison (logistic regression on the model's
own support rows, the paper's scalar normalisation), and prints for every evaluated row set both
accuracies, the rows only the adaptor gets right (b) and only the probe (c), the exact McNemar p
and the verdict (``mlx_sdm.calibration.paired_test``, docs/method.md § 19). No SDK is needed.
``--ulp-draws N`` scores the same adaptor and refits the probe on N copies of the rows with every
feature moved by a relative 2^-23 (about one float32 ulp, random sign), and prints the range of both
accuracies over them and the smallest McNemar p among the copies where the adaptor trails: how much
the comparison hangs on the last bits of the features.

    PYTHONPATH=$PWD .venv/bin/python scripts/research/probe_gaps.py --dataset spam --dataset bbc --work /tmp/gaps
    PYTHONPATH=$PWD .venv/bin/python scripts/research/probe_gaps.py --dataset suite:bbc_topic:800 --cache-dir DIR --work /tmp/gaps
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

import mlx_sdm  # noqa: F401  (BLAS preload before mlx)
from compare_reexpress_sdm import ROOT, load_sets, ours_train, support_probe, write_jsonl
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.paired_test import paired_comparison

KINDS = ("v1", "v2", "nested")


def one_ulp(sets: dict, seed: int) -> dict:
    """Every feature times (1 ± 2^-23), the sign drawn per entry (seeded)."""
    rng = np.random.default_rng(seed)
    return {k: dataclasses.replace(v, embeddings=v.embeddings * (1 + rng.choice([-1.0, 1.0], v.embeddings.shape)
                                                                 * 2.0 ** -23)) for k, v in sets.items()}


def ulp_columns(est, model: Path, sets: dict, ev: str, c: int, draws: int) -> str:
    """Adaptor and probe accuracy ranges and the smallest p where ours trails, over ``draws`` perturbed copies."""
    cmps = []
    for seed in range(1, draws + 1):
        moved = one_ulp(sets, seed)
        data = moved[ev]
        cmps.append(paired_comparison(data.labels, est.predict_arrays(data.embeddings)["prediction"],
                                      support_probe(model, moved, c)(data.embeddings)))
    trailing = [x.p_value for x in cmps if x.behind]
    ours, probe = [x.accuracy_a for x in cmps], [x.accuracy_b for x in cmps]
    return (f" {min(ours):.3f}–{max(ours):.3f} | {min(probe):.3f}–{max(probe):.3f} | "
            f"{f'{min(trailing):.3g}' if trailing else '—'} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", action="append", help="spam, bbc or suite:TASK[:POOL]; repeatable (default: spam, bbc)")
    p.add_argument("--kind", action="append", choices=KINDS, help="estimator kinds (default: all three)")
    p.add_argument("--work", type=Path, required=True, help="folder for the row files and models (reused)")
    p.add_argument("--cache-dir", type=Path, default=ROOT / "runs" / "features",
                   help="suite:TASK: the SmolLM2 feature cache (build-verifier's cache folder)")
    p.add_argument("--extract", action="store_true", help="suite:TASK: force-decode what is not cached (loads SmolLM2)")
    p.add_argument("--ulp-draws", type=int, default=0, metavar="N",
                   help="also refit the probe on N copies with each feature moved by about one float32 ulp")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    extra = " adaptor ±1 ulp | probe ±1 ulp | least p behind |" if args.ulp_draws else ""
    print("| data | rows | estimator | n | adaptor | probe | b | c | McNemar p | verdict |" + extra)
    print("|---|---|---|---|---|---|---|---|---|---|" + "---|" * extra.count("|"))
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
                      f"{cmp.b} | {cmp.c} | {cmp.p_value:.3g} | {cmp.verdict()} |"
                      + (ulp_columns(est, model, sets, ev, c, args.ulp_draws) if args.ulp_draws else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
