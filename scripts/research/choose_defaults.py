#!/usr/bin/env python
"""Choose the estimator's defaults on several datasets and shifts, all in one run (not a test).

Datasets (shipped, see mlx_sdm/datasets/README.md):
  * spam: SpamAssassin, MiniLM; train/calibration 200+200 per class and a 100+100 held-out test from
    the first collection (easy-ham-1, spam-1); shift = the later collection (easy-ham-2, spam-2, 500+500);
  * bbc: BBC News, MiniLM; the demo's split (held-out articles); shift = the titles of those articles.

For each configuration it prints, per dataset and view, the admitted count and every class- and
prediction-conditional stratum (accuracy/count), whether every admitted stratum is >= 0.95, ψ,
q̃*_min, robust q̃_min and the per-iteration q̃_min.

    .venv/bin/python scripts/research/choose_defaults.py                       # the current defaults
    .venv/bin/python scripts/research/choose_defaults.py --config paper --config default
    .venv/bin/python scripts/research/choose_defaults.py --config lr=1e-4,epochs=60,iterations=5
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

import mlx_sdm  # noqa: F401  (BLAS preload before mlx)

from mlx_sdm.calibration import constants as K
from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.evaluation import evaluate
from mlx_sdm.datasets.spam import spam_splits

DATASETS = ROOT / "mlx_sdm" / "datasets"
KEYS = {"lr": "learning_rate", "epochs": "epochs", "iterations": "iterations", "batch": "batch_size",
        "rlr": "rescaler_learning_rate", "rbatch": "rescaler_batch_size", "estimator": "estimator"}


def bbc_sets(seed: int = 0) -> dict[str, LabelledSet]:
    from mlx_sdm.commands.demo import bbc_splits, load_bbc

    train, cal, test, shifted = bbc_splits(load_bbc(DATASETS / "bbc_minilm.npz"), seed=seed)
    return {"train": train, "calibration": cal, "test": test, "shift": shifted}


LOADERS = {"spam": spam_splits, "bbc": bbc_sets}


def parse_config(text: str) -> tuple[str, dict]:
    if text == "default":
        return text, {}
    if text == "paper":
        return text, {"learning_rate": K.PAPER_LEARNING_RATE, "epochs": K.PAPER_EPOCHS, "iterations": K.PAPER_ITERATIONS,
                      "rescaler_learning_rate": K.PAPER_RESCALER_LEARNING_RATE,
                      "rescaler_batch_size": K.PAPER_RESCALER_BATCH_SIZE}
    out = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        name = KEYS[key.strip()]
        out[name] = value if name == "estimator" else (float(value) if "." in value or "e" in value else int(value))
    return text, out


def stratum_text(s) -> str:
    return "N/A" if s.accuracy is None else f"{s.accuracy:.3f}/{s.admitted}"


def run(dataset: str, sets: dict[str, LabelledSet], name: str, overrides: dict, seed: int) -> list[dict]:
    start = time.time()
    config = FitConfig(seed=seed, **overrides)
    est = SDMEstimator.fit(sets["train"], sets["calibration"], config)
    seconds = time.time() - start
    m = est.manifest
    per_iter = [it["q_tilde_min"] for it in m["training"]["iterations"]]
    print(f"\n[{dataset}] config {name}: fit {seconds:.0f} s; psi {np.round(m['psi'], 6).tolist()}; q̃*_min "
          f"{m['q_tilde_min_star']}; robust {m['q_tilde_min_robust']}; per iteration "
          f"{[None if x is None else round(x, 3) for x in per_iter]}; epochs {m['training']['epochs_chosen']}", flush=True)
    rows = []
    for view in ("test", "shift"):
        ev = evaluate(est, sets[view], view)
        for r in ev.rows:
            cells = " ".join(stratum_text(s) for s in r.strata())
            ok = "ok" if r.calibrated(0.95) else "BROKEN"
            print(f"  {view:<6} {r.name:<14} admitted {r.marginal.admitted:>4}/{len(ev.labels)} "
                  f"({r.marginal.fraction:.1%})  strata(y..., ŷ..., all) {cells}  {ok}", flush=True)
            rows.append({"dataset": dataset, "config": name, "view": view, "row": r.name,
                         "admitted": r.marginal.admitted, "n": len(ev.labels), "calibrated": r.calibrated(0.95)})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", help="'default', 'paper' or key=value,... (keys: "
                   + ", ".join(KEYS) + "); repeatable")
    p.add_argument("--dataset", action="append", choices=sorted(LOADERS), help="repeatable (default: all)")
    p.add_argument("--seed", type=int, action="append", help="fit seeds (repeatable, default 0)")
    args = p.parse_args(argv)
    configs = [parse_config(c) for c in (args.config or ["default"])]
    summary = []
    for dataset in args.dataset or sorted(LOADERS):
        sets = LOADERS[dataset]()
        for name, overrides in configs:
            for seed in args.seed or [0]:
                summary += run(dataset, sets, name if seed == 0 else f"{name} seed {seed}", overrides, seed)
    print("\nsummary: dataset config view -> sdm p_lower admitted (calibrated?)")
    for r in summary:
        if r["row"].startswith("sdm"):
            print(f"  {r['dataset']:<5} {r['config']:<40} {r['view']:<6} {r['admitted']:>4}/{r['n']} "
                  f"{'ok' if r['calibrated'] else 'BROKEN'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
