"""The verifier formulations side by side, on the same rows and states of one fine-tuned task (issue: right, and
verified). Reads a finished ``mlx-sdm finetune --task T --out RUN`` folder (its adapters and its cached answers:
nothing is answered twice), then fits on the same D_tr / D_ca and judges the same held-out and shifted rows:

- answer, constructed wrong answers (what finetune fitted until now: ``task_finetune.fit_variant``);
- label (Table 1) v1, its pool the LoRA rows' answers + D_ca (as finetune's D_tr / D_ca), and over unseen rows
  only (D_ca + the validation rows; the LoRA rows left out of the estimator);
- label v2 (the canonical estimator) and nested, over unseen rows;
- softmax ≥ α′ and conformal APS over a logistic regression (the paper's marginal baselines);
- label v1 cross-fitted: D_ca + validation + held-out in folds, each judged by an estimator calibrated on the
  others (the figures of the shipped estimator, which calibrates on all of them).

    .venv/bin/python scripts/bench/verifier_formulations.py --task bbc_topic --run build/runs/bbc_topic \\
        --out build/formulations/bbc_topic.json

Prints one markdown table (verified share, verified-and-wrong, whether every admitted stratum is ≥ α′) and
writes every stratum to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path


import mlx_sdm  # noqa: F401  (the fast BLAS before mlx)

FORMULATION_NAMES = ("answer, constructed", "label v1, LoRA rows + D_ca", "label v1, unseen rows",
                     "label v2, unseen rows", "label nested, unseen rows", "softmax ≥ α′ (probe)",
                     "conformal APS (probe)")


def load_run(task: str, run: Path, args: argparse.Namespace):
    """The run's splits, the model with its adapters, and every cached answer (train, D_ca, held-out, shifted),
    plus the validation rows answered (40 rows, not cached by the run)."""
    from mlx_sdm.lm.adapters import attach_adapters
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.tasks.answers import AnswerSettings, answer_items
    from mlx_sdm.usecases.build_verifier import DEFAULT_MAX_TOKENS
    from mlx_sdm.usecases.finetune_plan import FinetuneRun, TaskFinetuneArgs
    from mlx_sdm.usecases.task_finetune import adapters_on, answer_splits, prepare

    targs = TaskFinetuneArgs(tasks=(task,), out=run, head=False, baselines=False, progress=False, seed=args.seed)
    prepared = prepare(targs)
    lm = load_model(None)
    adapters = attach_adapters(lm.model, run / "adapters", instructions=tuple(i.instruction for i in prepared.instructions))
    lm = replace(lm, adapters=adapters)
    frun = FinetuneRun(targs, log=lambda _: None)
    outcomes, trained = answer_splits(lm, prepared.splits, frun, adapted=True, decode=None)
    split = prepared.splits[0]
    with adapters_on(lm, True):
        settings = AnswerSettings(DEFAULT_MAX_TOKENS, cache_dir=frun.work / "answers").for_task(split.task)
        validation = answer_items(lm, split.task, list(split.validation), settings)
    return lm, targs, prepared.splits, outcomes, trained, validation


def sources(rows) -> dict[str, "np.ndarray"]:
    """Each source of a split's rows (the id before its "/": ``spam-hard-ham-1``, ``spam-spam-2``) as a mask."""
    import numpy as np

    names = np.array([i.split("/")[0] for i in rows.ids])
    return {str(n): names == n for n in sorted(set(names))}


def describe(judged, alpha: float) -> dict:
    row = judged.row("answer")
    label = judged.label_row("label")
    return {"rows": int(len(judged.right)), "right": int(judged.right.sum()), "verified": int(judged.verified.sum()),
            "verified_wrong": int(judged.verified_wrong.sum()), "holds": bool(judged.holds(alpha)),
            "answer_strata": [s.markdown() for s in row.strata()],
            "label_strata": None if label is None else [s.markdown() for s in label.strata()]}


def main() -> None:
    from mlx_sdm.calibration.fit_config import FitConfig
    from mlx_sdm.usecases.finetune_plan import Variant
    from mlx_sdm.usecases.label_formulation import (ClassRows, class_rows, cross_fitted, fit_label_estimator,
                                                    fit_on_rows, fit_probe_baselines, halves, judge_answers,
                                                    judge_labels, part)
    from mlx_sdm.usecases.task_finetune import fit_variant

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--run", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    lm, targs, splits, outcomes, trained, validation = load_run(args.task, args.run, args)
    task = splits[0].task
    answers = task.answer_format.answers
    outcome = outcomes[task.name]
    lora = class_rows(trained[task.name], answers)
    d_ca = class_rows(outcome.pool, answers)
    val = class_rows(validation, answers)
    held = class_rows(outcome.held_out, answers)
    shifted = class_rows(outcome.shifted, answers)
    unseen = ClassRows.concat([d_ca, val])
    c = len(answers)
    alpha = 0.95
    print(f"{task.name}: LoRA rows {len(lora)} ({lora.right.mean():.2f} right), D_ca {len(d_ca)} "
          f"({d_ca.right.mean():.2f}), validation {len(val)}, held-out {len(held)} ({held.right.mean():.2f}), "
          f"shifted {len(shifted)} ({shifted.right.mean() if len(shifted) else float('nan'):.2f})")

    judged: dict[str, dict] = {}
    seconds: dict[str, float] = {}

    def record(name, fit):
        started = time.perf_counter()
        try:
            held_j, shifted_j = fit()
        except Exception as exc:  # a formulation that cannot be fitted on these rows is a result too
            judged[name] = {"error": f"{type(exc).__name__}: {exc}"}
            return
        seconds[name] = time.perf_counter() - started
        judged[name] = {"held_out": describe(held_j, alpha),
                        "shifted": describe(shifted_j, alpha) if len(shifted) else None,
                        "shifted_by_source": {source: describe(shifted_j.subset(mask), alpha)
                                              for source, mask in sources(shifted).items()} if len(shifted) else {}}
        h = judged[name]["held_out"]
        print(f"{name}: held-out {h['verified']}/{h['rows']} verified, {h['verified_wrong']} wrong "
              f"({'holds' if h['holds'] else 'BROKEN'}); {seconds[name]:.0f} s", flush=True)

    def answer_formulation():
        variant = fit_variant(lm, Variant("LoRA", outcomes, trained=trained), splits, targs, adapted=True, labels=False)
        est = variant.verifier.estimator
        return (judge_answers(est, held.features, held.right),
                judge_answers(est, shifted.features, shifted.right) if len(shifted) else None)

    def label(train, calibration, kind="v1"):
        def fit():
            est = fit_label_estimator(train, calibration, c, FitConfig(seed=args.seed, estimator=kind))
            return judge_labels(est, held), judge_labels(est, shifted) if len(shifted) else None
        return fit

    def probe(which):
        def fit():
            base = fit_probe_baselines(lora, unseen, c)
            judge = base.softmax_threshold if which == "softmax" else base.conformal
            return judge(held), judge(shifted) if len(shifted) else None
        return fit

    record(FORMULATION_NAMES[0], answer_formulation)
    record(FORMULATION_NAMES[1], label(lora, d_ca))
    first, second = halves(unseen, args.seed)
    record(FORMULATION_NAMES[2], label(first, second))
    record(FORMULATION_NAMES[3], label(first, second, "v2"))
    record(FORMULATION_NAMES[4], label(first, second, "nested"))
    record(FORMULATION_NAMES[5], probe("softmax"))
    record(FORMULATION_NAMES[6], probe("aps"))

    name = f"label v1, cross-fitted ({args.folds} folds over D_ca + validation + held-out)"
    started = time.perf_counter()
    pool = ClassRows.concat([d_ca, val, held])
    config = FitConfig(seed=args.seed)
    try:
        crossed = cross_fitted(pool, c, config, args.folds, seed=args.seed)
        full = fit_on_rows(pool, c, config)
        judged[name] = {"pool": describe(crossed, alpha),
                        "held_out": describe(part(crossed, len(d_ca) + len(val), len(pool)), alpha),
                        "shifted": describe(judge_labels(full, shifted), alpha) if len(shifted) else None}
        seconds[name] = time.perf_counter() - started
    except Exception as exc:
        judged[name] = {"error": f"{type(exc).__name__}: {exc}"}

    if len(shifted) and "error" not in judged[name]:
        judged["reviews of shifted answers"] = reviews_raise_coverage(full, shifted, alpha, seed=args.seed)

    print(f"\n| formulation | held-out verified | verified & wrong | promise | shifted verified | verified & wrong | "
          f"promise | fit s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in judged.items():
        if name == "reviews of shifted answers":
            continue
        if "error" in r:
            print(f"| {name} | {r['error'][:80]} |||||||")
            continue
        h = r["held_out"]
        s = r.get("shifted")
        cells = [f"{h['verified']}/{h['rows']} ({h['right']} right)", str(h["verified_wrong"]),
                 "holds" if h["holds"] else "BROKEN"]
        cells += ([f"{s['verified']}/{s['rows']} ({s['right']} right)", str(s["verified_wrong"]),
                   "holds" if s["holds"] else "BROKEN"] if s else ["–", "–", "–"])
        print(f"| {name} | " + " | ".join(cells) + f" | {seconds.get(name, 0):.0f} |")
    by_source = {name: r["shifted_by_source"] for name, r in judged.items() if r.get("shifted_by_source")}
    if any(len(v) > 1 for v in by_source.values()):  # the shifted rows come from several sources: each apart
        names = sorted({source for v in by_source.values() for source in v})
        print("\n| formulation | " + " | ".join(f"{n}: verified | wrong" for n in names) + " |")
        print("|---|" + "---|---|" * len(names))
        for name, v in by_source.items():
            print(f"| {name} | " + " | ".join(f"{v[n]['verified']}/{v[n]['rows']} ({v[n]['right']} right) | "
                                             f"{v[n]['verified_wrong']}" for n in names) + " |")
    reviews = judged.get("reviews of shifted answers") or {}
    if reviews:
        print("\n| shifted answers reviewed (joined the support set) | the other shifted: verified | verified & wrong | "
              "promise |\n|---|---|---|---|")
        for n, r in reviews.items():
            print(f"| {n} | {r['verified']}/{r['rows']} ({r['right']} right) | {r['verified_wrong']} | "
                  f"{'holds' if r['holds'] else 'BROKEN'} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"task": task.name, "formulations": judged, "seconds": seconds}, indent=2))


def reviews_raise_coverage(estimator, shifted, alpha: float, *, seed: int, counts=(10, 30, 100)) -> dict:
    """What N reviewed shifted answers change: each review (a person accepts a right answer or corrects a wrong one
    to the gold value) joins the label estimator's support set with the gold value, as ``mlx-sdm review`` does; the
    shifted answers not reviewed are judged again. Reviews are drawn by a seeded shuffle; N above the rows is
    skipped."""
    from mlx_sdm.usecases.label_formulation import judge_labels

    import numpy as np

    order = np.random.default_rng(seed + 7).permutation(len(shifted))
    out = {}
    for n in (0,) + tuple(counts):
        if n >= len(shifted):
            continue
        reviewed, rest = shifted.subset(order[:n]), shifted.subset(order[n:])
        est = copy_estimator(estimator)
        if n:
            est.add_support([f"review-{i}" for i in reviewed.ids], reviewed.features, reviewed.gold, list(reviewed.texts))
        out[str(n)] = describe(judge_labels(est, rest), alpha)
    return out


def copy_estimator(estimator):
    """A copy whose support set can grow without changing the original (saved and loaded back)."""
    import tempfile

    from mlx_sdm.calibration.estimator import SDMEstimator

    with tempfile.TemporaryDirectory() as tmp:
        estimator.save(f"{tmp}/est")
        return SDMEstimator.load(f"{tmp}/est")


if __name__ == "__main__":
    main()
