#!/usr/bin/env python
"""Train (Alg. 4) and report the SDM-network positive head of the embedded SmolLM2 over the task suite.

The head is fine-tuned against the suite verifier (default: the shipped default verifier) on the
same docs/method.md § 14 constructed documents that verifier was built from (its recipe's seeded pool
halves, mlx_sdm.usecases.suite_verifier.pool_halves: D_tr gives the training documents, D_ca the calibration ones), a leading subset
per task because the machine has 2 cores. Each training document's q and d come from the verifier
applied to the model's own greedy answer (§ 15.5); after every epoch the model answers the
calibration prompts and Alg. 4 keeps the epoch with the most answers that are admitted (ŷ = 1,
p_lower ≥ α′) *and* correct, starting from the untuned model's count.

Then both models (untuned, and the kept head in the form that ships) answer every task's
``held_out`` and ``shifted`` prompts, and the verifier judges each answer: per task and split, the
paper's Table 1 layout with y = 1 when the model's own answer is correct (cells: accuracy of the
verifier's ŷ within the stratum among admitted answers / admitted fraction), plus the task accuracy
of the answers and the fraction a user sees as "verified" (ŷ = 1 and admitted).

The training run alone is `mlx-sdm finetune --config weights/smollm2-suite-head/finetune.yaml` (the same
documents and settings; tests/test_head_recipe.py checks the data hash). With ``--ship NAME`` the kept head is also written, compressed to a low-rank change of the model's
own head (``--rank``), to weights/NAME, and the "after" rows are measured with that compressed head.

    nice -n 5 .venv/bin/python scripts/build_default_head.py --ship smollm2-suite-head > build/head.log 2>&1 &
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import mlx_sdm  # noqa: F401  (BLAS before mlx)

import numpy as np

from mlx_sdm.resources import default_verifier_dir, resolve_artifact, source_weights_dir

#: The training run's settings (documents, sizes, epochs, learning rate): the recipe kept with the head.
DEFAULT_CONFIG = source_weights_dir() / "smollm2-suite-head" / "finetune.yaml"
DEFAULT_TEST_PER_TASK = 30
DEFAULT_RANK = 64


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="finetune YAML (default: the shipped head's recipe)")
    p.add_argument("--verifier", default=None, help="suite verifier (default: the config's)")
    p.add_argument("--out", type=Path, default=None, help="full-precision head folder (default: the config's adapter_path)")
    p.add_argument("--ship", metavar="NAME", default=None, help="also write the compressed head to weights/NAME")
    p.add_argument("--rank", type=int, default=DEFAULT_RANK, help="rank of the shipped head's change (--ship)")
    p.add_argument("--test-per-task", type=int, default=DEFAULT_TEST_PER_TASK, help="held-out and shifted prompts per task")
    p.add_argument("--epochs", type=int, default=None, help="override the config's epochs")
    p.add_argument("--resume", action="store_true", help="continue a killed run from its checkpoint")
    p.add_argument("--report-only", action="store_true", help="skip training; report the head in --out against the untuned model")
    p.add_argument("--report-tasks", nargs="*", default=None, help="report only these tasks (default: every task)")
    return p


def suite_sets(lm, config, verifier_info: dict, test_per_task: int) -> tuple[list, list, list]:
    """(training, calibration, [(task, split, documents)]): the config's documents (the verifier's own pool
    halves) and every task's held-out and shifted documents, constructed as the verifier's were."""
    from mlx_sdm.usecases.head_training import load_documents, recipe_path
    from mlx_sdm.usecases.suite_verifier import evaluation_documents, finetune_documents
    from mlx_sdm.usecases.verifier_recipe import read_recipe
    from mlx_sdm.network.tasks.registry import load_tasks

    train, calibration = load_documents(config, lm.tokenizer, verifier_info)
    recipe = read_recipe(recipe_path(config.data))
    tests = [(task, split, finetune_documents(task, evaluation_documents(task, split, test_per_task, seed=recipe.seed),
                                              lm.tokenizer))
             for task in load_tasks(list(recipe.tasks)) for split in ("held_out", "shifted")]
    return train, calibration, tests


def table(scorer, tests, models) -> tuple[list[str], list[dict]]:
    """Table 1 rows (own answers, y = 1 when correct) per task, split and model."""
    from mlx_sdm.progress import progress_bar

    from mlx_sdm.calibration.evaluation import markdown_rows

    lines = ["| task, split | model | estimator | y=0 | y=1 | ŷ=0 | ŷ=1 | marginal | task accuracy | verified |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    records = []
    for task, split, docs in tests:
        for model_name, heads in models:
            outcomes = scorer(list(progress_bar(docs, desc=f"{task.name} {split} {model_name}"[:30], leave=False)),
                              heads.vocab_logits)
            labels = np.array([int(o.correct) for o in outcomes])
            predictions = np.array([o.prediction for o in outcomes])
            admitted = np.array([o.admitted for o in outcomes], dtype=bool)
            verified = admitted & (predictions == 1)
            extra = f" {labels.mean():.3f} | {verified.mean():.3f} ({int((verified & (labels == 1)).sum())}/{int(verified.sum())} right) |"
            for row in markdown_rows(f"{task.name} {split} ({len(docs)})", labels, predictions, admitted):
                lines.append(_with_model(row, model_name) + extra)
            records.append({"task": task.name, "split": split, "model": model_name, "n": len(docs),
                            "task_accuracy": float(labels.mean()), "admitted": int(admitted.sum()),
                            "admitted_right": int((admitted & (predictions == labels)).sum()),
                            "verified": int(verified.sum()), "verified_right": int((verified & (labels == 1)).sum()),
                            "examples": [o.text for o in outcomes[:2]]})
    return lines, records


def _with_model(row: str, model_name: str) -> str:
    """``| name | estimator | cells |`` -> ``| name | model | estimator | cells |`` (without the closing bar)."""
    first, rest = row[2:].split(" | ", 1)
    return f"| {first} | {model_name} | {rest.rstrip(' |')} |"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlx_sdm.progress import progress_bar

    from mlx_sdm.usecases.head_training import build_config, read_config_file
    from mlx_sdm.atomic import atomic_write_text
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.heads import HeadManifest, VocabularyHeads, load_head, save_head, tasks_the_head_improves
    from mlx_sdm.network.finetune_scoring import LMScorer
    from mlx_sdm.network.trainer import train_positive_head
    from mlx_sdm.network.verifier import DocumentVerifier

    started = time.time()
    overrides = {"verifier": args.verifier, "adapter_path": str(args.out) if args.out else None, "epochs": args.epochs,
                 "resume": True if args.resume else None}
    config = build_config(read_config_file(args.config), overrides, source=str(args.config))
    out = Path(config.adapter_path)
    lm = load_model(config.model, quantized=config.quantized)
    verifier_dir = resolve_artifact(config.verifier) if config.verifier else default_verifier_dir()
    verifier = DocumentVerifier.load(verifier_dir, expect_fingerprint=lm.fingerprint)
    train, calibration, tests = suite_sets(lm, config, verifier.info, args.test_per_task)
    if args.report_tasks:
        tests = [t for t in tests if t[0].name in args.report_tasks]
    print(f"train {len(train)} ({sum(d.label for d in train)} verified), calibration {len(calibration)}, "
          f"evaluation {sum(len(d) for *_, d in tests)} prompts", flush=True)
    scorer = LMScorer.from_verifier(lm, verifier, progress=lambda docs: progress_bar(docs, desc="generate", unit="doc", leave=False))
    untuned = VocabularyHeads.from_model(lm.model)
    report: dict = {"verifier": str(verifier_dir), "config": str(args.config), "args": {k: str(v) for k, v in vars(args).items()}}
    if args.report_only:
        trained, best_epoch = load_head(out, lm.model, lm.fingerprint), None
    else:
        tic = time.time()
        result = train_positive_head(lm, train, calibration, scorer, config.args, run_identity={"verifier": str(verifier_dir)})
        report.update(train_seconds=round(time.time() - tic, 1), history=result.history, best_epoch=result.best_epoch,
                      calibration_admitted_untuned=result.initial_metric, calibration_admitted_best=result.best_metric)
        # the verifier by folder name (a shipped head must not carry this machine's absolute path)
        manifest = HeadManifest(base_model=dict(lm.fingerprint, name=lm.name), verifier={"name": verifier_dir.name},
                                tasks=[t.to_dict() for t in verifier.recipe.task_instructions()], data_hash=result.data_hash, epochs=result.epochs_run, best_epoch=result.best_epoch,
                                metrics={"history": result.history, "calibration_admitted_untuned": result.initial_metric,
                                         "calibration_admitted_best": result.best_metric})
        save_head(out, result.heads, manifest)
        trained, best_epoch = result.heads, result.best_epoch
        print(f"Alg. 4: calibration admitted & correct untuned {result.initial_metric}, per epoch "
              f"{[h['calibration_admitted'] for h in result.history[1:]]}; kept epoch {result.best_epoch}", flush=True)
    after_name = "+ sdm head"
    if args.ship and (best_epoch is None or best_epoch > 0):
        from mlx_sdm.network.heads import compress_head

        shipped_dir = source_weights_dir() / args.ship
        low_rank = compress_head(out, shipped_dir, args.rank, model=lm.model, force=True)["low_rank"]
        trained = load_head(shipped_dir, lm.model, lm.fingerprint)
        report["low_rank"] = low_rank
        print(f"shipped {shipped_dir}: rank {args.rank}, relative error of the change {low_rank['relative_error']:.3f}, "
              f"of the head {low_rank['relative_error_of_head']:.4f}", flush=True)
        after_name = f"+ sdm head (shipped, rank {args.rank})"
        report["shipped"] = str(shipped_dir)
    models = [("untuned", untuned)] + ([(after_name, trained)] if best_epoch is None or best_epoch > 0 else [])
    lines, records = table(scorer, tests, models)
    report["rows"] = records
    text = "\n".join([
        f"SmolLM2-135M-Instruct answering each task itself, judged by verifier `{verifier_dir.name}` (α′ = "
        f"{verifier.estimator.alpha}); y = 1 when the answer is correct. Cells: accuracy of ŷ / admitted fraction; "
        "'verified' = ŷ = 1 and admitted (what the chat shows as verified).", "", *lines, "",
        f"Alg. 4: {len(train)} training documents, {len(calibration)} calibration, {config.args.epochs} epochs, lr "
        f"{config.args.learning_rate:g}; calibration admitted & correct untuned {report.get('calibration_admitted_untuned')}, "
        f"per epoch {[h['calibration_admitted'] for h in report.get('history', [])[1:]]}, kept epoch {best_epoch}. "
        f"Total {(time.time() - started) / 60:.1f} min.",
        f"Reproduce: `.venv/bin/python scripts/build_default_head.py{' --ship ' + args.ship if args.ship else ''}`"])
    print(text)
    stem = "head_suite_report" + ("_" + "_".join(args.report_tasks) if args.report_tasks else "")
    atomic_write_text(ROOT / "build" / f"{stem}.md", text + "\n")
    atomic_write_text(ROOT / "build" / f"{stem}.json", json.dumps(report, indent=1, default=str) + "\n")
    if args.ship and "shipped" in report:
        atomic_write_text(Path(report["shipped"]) / "report.md", text + "\n")
        # the head decodes only the tasks it was measured to improve (network/heads.tasks_the_head_improves)
        decodes = tasks_the_head_improves((r["task"], r["split"], r["model"] != "untuned", r["task_accuracy"])
                                          for r in records)
        manifest_path = Path(report["shipped"]) / "manifest.json"
        shipped_manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        shipped_manifest["decodes"] = decodes
        atomic_write_text(manifest_path, json.dumps(shipped_manifest, indent=2, sort_keys=True) + "\n")
        print(f"the shipped head decodes {decodes}; the model answers the other tasks itself", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
