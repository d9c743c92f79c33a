#!/usr/bin/env python
"""The exemplar adaptor's held-out accuracy beside logistic regression's, on the same split.

For each data set and each variant (an input transform and FitConfig overrides, one thing at a time)
it fits the estimator (J iterations, default 1) on train ∪ calibration and prints, per variant:
the adaptor's and the estimator's logistic reference's accuracy on M*'s calibration half and on the
held-out rows, a FIXED probe (logistic regression on the same support half with the paper's scalar
normalisation, so a variant cannot win by weakening its own reference), the epochs chosen, the
admitted count and wrong admissions on held-out (and shifted) rows, and the fit time.

Data sets: ``bbc`` and ``bbc-title`` (shipped MiniLM BBC News; test = held-out articles, shift =
their titles), ``spam`` (shipped MiniLM SpamAssassin, shift = the later collection), and
``suite:TASK[:POOL]`` (SmolLM2 [mean(h); h_delimiter] features of the task suite's § 14 documents,
from the feature cache (filled by ``--extract`` or ``mlx-sdm build-verifier``'s cache folder); the first
POOL pool documents: 3/8 train, 3/8 calibration, 1/4 held-out test; shift = the task's shifted
documents where cached); ``build:TASK``: that task's rows of the suite verifier's own build (its
D_tr, D_ca, held-out and shifted documents).

Variants: ``name:key=value,...`` with FitConfig fields (``scaling`` = input_scaling: per_dimension |
scalar | none; ``lr``, ``epochs``, ``iterations``, ``batch``, ``seed``, ``estimator``) and a harness-side
``transform`` applied first (none | robust | clip, with ``clip`` the bound).

    PYTHONPATH=$PWD .venv/bin/python scripts/research/adaptor_vs_probe.py --data bbc spam \\
        --variant scalar:scaling=scalar --variant per-dim:scaling=per_dimension --variant lr:lr=1e-3
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import mlx_sdm  # noqa: F401  (BLAS before mlx)
import numpy as np

from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.fitting import scalar_probe
from suite_features import cached_features, task_feature_sets  # beside this script

ROOT = Path(__file__).resolve().parents[2]
DATASETS = ROOT / "mlx_sdm" / "datasets"
KEYS = {"lr": ("learning_rate", float), "epochs": ("epochs", int), "iterations": ("iterations", int),
        "batch": ("batch_size", int), "scaling": ("input_scaling", str), "seed": ("seed", int),
        "estimator": ("estimator", str)}


def minilm_sets(name: str) -> dict[str, LabelledSet]:
    if name == "spam":
        from mlx_sdm.datasets.spam import spam_splits

        s = spam_splits(0)
        return {"train": s["train"], "calibration": s["calibration"], "test": s["test"], "shift": s["shift"]}
    from mlx_sdm.commands.demo import bbc_splits, load_bbc

    train, cal, test, shifted = bbc_splits(load_bbc(DATASETS / "bbc_minilm.npz"), seed=0)
    if name == "bbc-title":  # train and test on titles only: a weaker signal than whole articles
        data = load_bbc(DATASETS / "bbc_minilm.npz")
        train, cal, test, shifted = bbc_splits({**data, "full": data["title"]}, seed=0)
    return {"train": train, "calibration": cal, "test": test, "shift": shifted}


def suite_sets(task_name: str, pool_size: int, cache_dir: Path, test_size: int, split: int = 0
               ) -> dict[str, LabelledSet]:
    """Cached SmolLM2 features (``--extract``: computed where missing): see ``task_feature_sets``."""
    return task_feature_sets(task_name, pool_size, feature_reader(cache_dir), test_size=test_size, split=split)


def suite_build_sets(task_name: str, cache_dir: Path, test_size: int) -> dict[str, LabelledSet]:
    """One task's rows of the suite verifier's own build (the shipped recipe's pool sizes,
    seed 0): its D_tr and D_ca halves, read from the build's cache, and its held-out and shifted documents."""
    from mlx_sdm.usecases.suite_verifier import evaluation_documents, pool_halves
    from mlx_sdm.usecases.verifier_recipe import read_recipe
    from mlx_sdm.network.tasks.registry import load_tasks
    from mlx_sdm.network.verifier import labelled_set
    from mlx_sdm.resources import default_verifier_dir

    recipe = read_recipe(default_verifier_dir() / "recipe.json")
    halves = {t.name: pool_halves(t, recipe.pool_size(t.name), seed=0) for t in load_tasks(None)}
    out = {}
    for key, part in (("train", 0), ("calibration", 1)):
        docs = [d for pair in halves.values() for d in pair[part]]
        feats = cached_features_of(docs, cache_dir)
        keep = np.array([d.task == task_name for d in docs])
        out[key] = labelled_set([d for d, k in zip(docs, keep) if k], feats[keep])
    task = load_tasks([task_name])[0]
    for split, key in (("held_out", "test"), ("shifted", "shift")):
        docs = evaluation_documents(task, split, test_size, seed=0)
        out[key] = labelled_set(docs, cached_features_of(docs, cache_dir))
    return out


#: The LM features are computed with where not cached (--extract); None: the cache only.
FEATURE_LM: list = []


def feature_reader(cache_dir: Path):
    return cached_features(cache_dir, FEATURE_LM[0] if FEATURE_LM else None)


def cached_features_of(docs, cache_dir: Path) -> np.ndarray:
    return feature_reader(cache_dir)(docs)


def transform(kind: str, fit_on: np.ndarray, clip: float):
    """A harness-side transform x → x' fitted on ``fit_on``, applied before the estimator's own
    input scaling (``none``: identity; ``robust``: per-dimension median/IQR clipped to ±clip;
    ``clip``: per-dimension standardised then clipped to ±clip)."""
    if kind == "none":
        return None
    mu, sd = fit_on.mean(0), fit_on.std(0) + 1e-6
    med = np.median(fit_on, 0)
    iqr = np.subtract(*np.percentile(fit_on, [75, 25], axis=0)) + 1e-6
    table = {"robust": lambda x: np.clip((x - med) / iqr, -clip, clip),
             "clip": lambda x: np.clip((x - mu) / sd, -clip, clip)}
    return table[kind]


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, rest = text.partition(":")
    opts = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
    return name or "base", opts


def run_variant(sets: dict[str, LabelledSet], opts: dict, iterations: int) -> dict:
    kind = opts.get("transform", "none")
    fit_on = np.concatenate([sets["train"].embeddings, sets["calibration"].embeddings])
    fn = transform(kind, fit_on, float(opts.get("clip", 5.0)))
    view = {k: (replace(s, embeddings=fn(s.embeddings)) if fn else s) for k, s in sets.items()}
    config = FitConfig(iterations=iterations)
    for key, value in opts.items():
        if key in KEYS:
            config = replace(config, **{KEYS[key][0]: KEYS[key][1](value)})
    started = time.time()
    est = SDMEstimator.fit(view["train"], view["calibration"], config)
    seconds = time.time() - started
    t = est.manifest["training"]
    out = {"cal": t["calibration_accuracy"], "lr_cal": t["logistic_regression"]["calibration_accuracy"],
           "epochs": t["epochs_chosen"], "seconds": seconds}
    support = set(est.support_ids)
    pool = LabelledSet.concat(sets["train"], sets["calibration"])
    sup_idx = np.array([i for i, rid in enumerate(pool.ids) if rid in support])
    probe = scalar_probe(pool.subset(sup_idx), int(pool.labels.max()) + 1)
    for key in ("test", "shift"):
        if key not in view:
            continue
        a = est.predict_arrays(view[key].embeddings)
        y = view[key].labels
        out[key] = float(np.mean(a["prediction"] == y))
        out[f"lr_{key}"] = float(np.mean(est.logistic_regression_predict(view[key].embeddings) == y))
        out[f"probe_{key}"] = float(np.mean(probe(sets[key].embeddings) == y))
        out[f"adm_{key}"] = (int(a["admitted"].sum()), int((a["admitted"] & (a["prediction"] != y)).sum()), len(y))
    return out


def line(dataset: str, name: str, r: dict) -> str:
    def adm(key):
        return "{}/{}/{}".format(*r[f"adm_{key}"]) if f"adm_{key}" in r else "-"

    shift = f"{r['shift']:.3f} {r['lr_shift']:.3f} {r['probe_shift']:.3f}" if "shift" in r else "-"
    return (f"| {dataset} | {name} | {r['cal']:.3f} | {r['lr_cal']:.3f} | {r['test']:.3f} | {r['lr_test']:.3f} | "
            f"{r['probe_test']:.3f} | {shift} | {adm('test')} | {adm('shift')} | {r['epochs']} | {r['seconds']:.1f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", default=["bbc", "spam"], help="bbc, bbc-title, spam, suite:TASK[:POOL]")
    p.add_argument("--variant", action="append", default=None, help="name:key=value,... (repeatable)")
    p.add_argument("--iterations", type=int, default=1, help="J (Alg. 1 iterations) of every fit")
    p.add_argument("--cache-dir", type=Path, default=ROOT / "runs" / "features")
    p.add_argument("--test-size", type=int, default=40, help="suite tasks: shifted documents")
    p.add_argument("--splits", type=int, default=1, help="suite:TASK: random partitions of the pool (0 = in order)")
    p.add_argument("--extract", action="store_true", help="suite tasks: force-decode what is not cached (slow)")
    args = p.parse_args(argv)
    if args.extract:
        from mlx_sdm.lm.loading import load_model

        FEATURE_LM.append(load_model())
    variants = [parse_variant(v) for v in (args.variant or ["base:"])]
    print("| data | variant | adaptor cal | LR ref cal | adaptor test | LR ref test | probe test | "
          "shift: adaptor LR probe | admitted/wrong/n test | admitted/wrong/n shift | epochs chosen | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for dataset in args.data:
        if dataset.startswith("build:"):
            sets = suite_build_sets(dataset.split(":")[1], args.cache_dir, args.test_size)
        elif dataset.startswith("suite:"):
            _, task, *size = dataset.split(":")
            for split in range(args.splits):
                sets = suite_sets(task, int(size[0]) if size else 400, args.cache_dir, args.test_size, split)
                for name, opts in variants:
                    print(line(f"{dataset} split {split}", name, run_variant(sets, opts, args.iterations)), flush=True)
            continue
        else:
            sets = minilm_sets(dataset)
        for name, opts in variants:
            print(line(dataset, name, run_variant(sets, opts, args.iterations)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
