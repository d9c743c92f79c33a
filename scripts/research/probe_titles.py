#!/usr/bin/env python
"""Why does v1's adaptor trail the logistic probe on the BBC titles? (not a test)

Refits our estimator in process (``SDMEstimator.fit``, the project defaults unless a variant says
otherwise) on the BBC row files ``scripts/research/probe_gaps.py`` leaves in ``--work`` (train, calibration,
test = held-out articles, shift = their titles) and records, after every epoch of every one of the
J iterations, the adaptor's prediction (arg max z′) on the titles and the test articles together with
both selection metrics: v1's balanced median q and v2's balanced calibration sdm loss. From that
trace it prints, against the logistic probe fitted on the same iteration's D_tr (the paper's scalar
normalisation, as ``probe_gaps.py``), the accuracy and the exact McNemar test (b, c, p) of

* the adaptor each selection rule picks (v1's, v2's) over the whole run, and within each iteration
  (which separates the split of the pool from the epoch chosen), and the last epoch of each iteration;
* the titles accuracy after every epoch of the chosen iteration (does the epoch count or the
  learning rate matter);
* over all J × epochs adaptors of a run: the range of the titles accuracy and how many trail their
  probe by a real gap (p < 0.05).

Variants (``--variant``, repeatable; default all): ``v1`` and ``v2`` (the saved fits; the refit must
reproduce them), ``v1-per-dimension`` (the adaptor's per-dimension input scaling), ``v1-lr1e-4`` and
``v1-lr1e-3`` (the learning rate), ``v1-seed1`` … ``v1-seed3`` and ``v2-seed1`` … ``v2-seed3``
(other splits and initialisations).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 PYTHONPATH=$PWD nice -n 15 .venv/bin/python \
        scripts/research/probe_titles.py --work /tmp/gaps
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import mlx_sdm  # noqa: F401  (BLAS preload before mlx)
from mlx_sdm.calibration import fitting, training
from mlx_sdm.calibration.adaptor import SCALING_PER_DIMENSION, forward_numpy_batches
from mlx_sdm.calibration.canonical import KIND_V1, KIND_V2, balanced_sdm_loss
from mlx_sdm.calibration.data import LabelledSet, read_embedding_jsonl
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.fitting import scalar_probe
from mlx_sdm.calibration.paired_test import SIGNIFICANCE, paired_comparison

EVALS = ("shift", "test")
VARIANTS = {
    "v1": FitConfig(estimator=KIND_V1),
    "v2": FitConfig(estimator=KIND_V2),
    "v1-per-dimension": FitConfig(estimator=KIND_V1, input_scaling=SCALING_PER_DIMENSION),
    "v1-lr1e-4": FitConfig(estimator=KIND_V1, learning_rate=1e-4),
    "v1-lr1e-3": FitConfig(estimator=KIND_V1, learning_rate=1e-3),
    **{f"{k}-seed{s}": FitConfig(estimator=k, seed=s) for k in (KIND_V1, KIND_V2) for s in (1, 2, 3)},
}


@dataclass
class Epoch:
    """One epoch's adaptor: both selection metrics (larger is better) and its predictions."""

    iteration: int
    epoch: int
    median_q: float  # v1's selection metric
    neg_sdm_loss: float  # v2's
    predictions: dict[str, np.ndarray]


def traced_fit(sets: dict[str, LabelledSet], config: FitConfig):
    """(estimator, the per-epoch trace, the J iterations' results) of one in-process fit."""
    original_reestimate, original_runs = training.reestimate, fitting.run_iterations
    trace: list[Epoch] = []
    results: list = []

    def reestimate(adaptor, h_tr, y_tr, h_ca, y_ca, num_classes, backend, kind=KIND_V1):
        r = original_reestimate(adaptor, h_tr, y_tr, h_ca, y_ca, num_classes, backend, kind)
        j, e = divmod(len(trace), config.epochs)
        preds = {ev: np.argmax(forward_numpy_batches(adaptor, sets[ev].embeddings)[0], 1) for ev in EVALS}
        trace.append(Epoch(j + 1, e + 1, r.balanced_median_q,
                           -balanced_sdm_loss(r.z_ca, y_ca, r.q_ca_raw, r.d_ca, num_classes), preds))
        return r

    def run_iterations(*args, **kwargs):
        out = original_runs(*args, **kwargs)
        results.extend(out[0])
        return out

    training.reestimate, fitting.run_iterations = reestimate, run_iterations
    try:
        est = SDMEstimator.fit(sets["train"], sets["calibration"], config)
    finally:
        training.reestimate, fitting.run_iterations = original_reestimate, original_runs
    return est, trace, results


def pick(trace: list[Epoch], metric: str) -> Epoch:
    """The adaptor a selection rule keeps: the largest metric, ties to the later epoch and iteration."""
    best = trace[0]
    for ep in trace:
        if getattr(ep, metric) >= getattr(best, metric):
            best = ep
    return best


def cells(sets, ep: Epoch, probes) -> str:
    """Titles: ours, probe (same iteration's D_tr), b, c, p, verdict; test: ours, probe."""
    shift = paired_comparison(sets["shift"].labels, ep.predictions["shift"], probes[ep.iteration]["shift"])
    test = paired_comparison(sets["test"].labels, ep.predictions["test"], probes[ep.iteration]["test"])
    return (f"{ep.iteration}, {ep.epoch} | {shift.accuracy_a:.3f} | {shift.accuracy_b:.3f} | {shift.b} | {shift.c} | "
            f"{shift.p_value:.3g} | {shift.verdict()} | {test.accuracy_a:.3f} | {test.accuracy_b:.3f} |")


def split_probes(sets, results) -> dict[int, dict[str, np.ndarray]]:
    """Per iteration: the scalar-normalised logistic probe on its D_tr (pool order), its predictions."""
    pool = LabelledSet.concat(sets["train"], sets["calibration"])
    c = int(pool.labels.max()) + 1
    out = {}
    for res in results:
        probe = scalar_probe(pool.subset(np.sort(res.train_index)), c)
        out[res.iteration] = {ev: probe(sets[ev].embeddings) for ev in EVALS}
    return out


def report(name: str, sets, est, trace: list[Epoch], results, saved: Path | None) -> None:
    probes = split_probes(sets, results)
    labels = sets["shift"].labels
    chosen = {"v1's": pick(trace, "median_q"), "v2's": pick(trace, "neg_sdm_loss")}
    own = chosen["v1's" if est.kind == KIND_V1 else "v2's"]
    fitted = est.predict_arrays(sets["shift"].embeddings)["prediction"]
    note = f"the fit's own adaptor is iteration {own.iteration}, epoch {own.epoch}: " + \
        ("same titles predictions" if np.array_equal(fitted, own.predictions["shift"]) else "DIFFERENT predictions")
    if saved is not None and saved.exists():
        same = np.array_equal(fitted, SDMEstimator.load(saved).predict_arrays(sets["shift"].embeddings)["prediction"])
        note += f"; the saved {saved.name}: {'same' if same else 'DIFFERENT'} titles predictions"
    print(f"\n#### {name} ({note})\n")
    print("| selection | iteration, epoch | titles ours | probe | b | c | p | verdict | test ours | test probe |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rule, ep in chosen.items():
        print(f"| {rule} over the run | " + cells(sets, ep, probes))
    for j in sorted(probes):
        its = [ep for ep in trace if ep.iteration == j]
        for rule, ep in (("v1's", pick(its, "median_q")), ("v2's", pick(its, "neg_sdm_loss")), ("last epoch", its[-1])):
            print(f"| {rule} within iteration {j} | " + cells(sets, ep, probes))
    for j in sorted({own.iteration, chosen["v1's"].iteration, chosen["v2's"].iteration}):
        curve = [float(np.mean(ep.predictions["shift"] == labels)) for ep in trace if ep.iteration == j]
        print(f"\ntitles accuracy after each epoch, iteration {j}: " + " ".join(f"{a:.3f}" for a in curve))
    comps = [paired_comparison(labels, ep.predictions["shift"], probes[ep.iteration]["shift"]) for ep in trace]
    acc = [x.accuracy_a for x in comps]
    gaps = sum(1 for x in comps if x.behind and x.p_value < SIGNIFICANCE)
    print(f"\nall {len(trace)} adaptors of the run: titles {min(acc):.3f}–{max(acc):.3f} (median "
          f"{np.median(acc):.3f}); a real gap to their probe on {gaps}; probes "
          + ", ".join(f"{j}: {np.mean(p['shift'] == labels):.3f}" for j, p in probes.items()))
    real = {j: [ep.epoch for ep, x in zip(trace, comps) if ep.iteration == j and x.behind and x.p_value < SIGNIFICANCE]
            for j in probes}
    print("real gaps at (iteration: epochs): " + "; ".join(f"{j}: {e[0]}–{e[-1]} ({len(e)})" for j, e in real.items() if e))
    for ev in EVALS:
        means = [np.mean([np.mean(ep.predictions[ev] == sets[ev].labels) for ep in trace if ep.epoch == e])
                 for e in (1, 10, 20, 30, 40)]
        print(f"{ev} accuracy, mean over iterations at epochs 1, 10, 20, 30, 40: " + " ".join(f"{m:.3f}" for m in means))
    for rule, metric in (("v1's", "median_q"), ("v2's", "neg_sdm_loss")):
        by_epoch = [float(np.mean([getattr(ep, metric) for ep in trace if ep.epoch == e])) for e in (1, 10, 20, 30, 40)]
        print(f"{rule} metric, mean over iterations at epochs 1, 10, 20, 30, 40: " + " ".join(f"{m:.4g}" for m in by_epoch))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True, help="folder of the bbc-*.jsonl rows and saved fits")
    p.add_argument("--variant", action="append", choices=sorted(VARIANTS), help="fits to run (default: all)")
    args = p.parse_args(argv)
    sets = {k: read_embedding_jsonl(args.work / f"bbc-{k}.jsonl") for k in ("train", "calibration") + EVALS}
    for name in args.variant or VARIANTS:
        config = dataclasses.replace(VARIANTS[name])
        est, trace, results = traced_fit(sets, config)
        saved = args.work / f"bbc-ours_{name}" if name in ("v1", "v2") else None
        report(name, sets, est, trace, results, saved)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
