"""Reviews teach it, measured: after N = 10, 25, 50 reviewed answers of a task the untuned model gets wrong,
``mlx-sdm finetune --from-reviews`` and that task's held-out accuracy and verified fraction.

The person's situation it stands for: a task file with only a few training rows of its own (``--train-rows``,
default 4: one LoRA batch) besides the rows that calibrate and measure, and a chat in which they asked the model
N questions of that task and corrected its answers in the review screen. For each N the script

1. takes N questions from the task file's pool rows that no split of the run uses (so no calibration, held-out or
   shifted row is ever reviewed);
2. asks the untuned model each of them (what the chat would have answered) and writes a chat store in which each
   answer is queued for review and its decision is an edit to the gold JSON (``record_decision(label=1,
   completion=gold)``: the edit trains LoRA; the original, when it parses as the task's JSON, joins the verifier's
   D_tr as an answer known wrong);
3. runs ``mlx-sdm finetune --task FILE --train-rows T --from-reviews DB --out OUT/reviews-N --no-head`` (N = 0: no
   store, the task's own T rows alone) and reads the folder's report: held-out and shifted accuracy, answers in
   the JSON, verified (admitted ŷ = 1) and how many of those are right, and whether every admitted stratum is ≥ α′.

The untuned model's row comes from the first run's baselines. Each run resumes when rerun (finetune's own
checkpoints), so a killed measurement goes on where it stopped.

    .venv/bin/python scripts/bench/review_finetune.py --task examples/mail_triage.jsonl --out build/review-finetune
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import mlx_sdm  # noqa: F401  (the fast BLAS before mlx)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_STEPS = (0, 10, 25, 50)
DEFAULT_TRAIN_ROWS = 4


@dataclass(frozen=True)
class Measured:
    reviewed: int
    model: str
    split: str
    rows: int
    accuracy: float | None
    well_formed: float | None
    verified: int | None
    verified_right: int | None
    promise: bool
    seconds: float


def spare_items(task, train_rows: int, seed: int, eval_rows: int):
    """The task's pool rows no split of a ``--train-rows train_rows`` run uses (finetune's own ``split_task``), in
    the order that run shuffles its pool (the measurement in docs/finetuning.md reviewed them in this order)."""
    from mlx_sdm.usecases.finetune_plan import TaskFinetuneArgs, split_task

    args = TaskFinetuneArgs(tasks=(str(task.path),), out=Path("unused"), train_rows=train_rows, seed=seed,
                            eval_rows=eval_rows)
    split = split_task(task, args)
    used = {item.prompt.strip() for part in (split.train, split.validation, split.verifier, split.held_out,
                                             split.shifted) for item in part}
    pool = task.split("pool")
    return [pool[i] for i in np.random.default_rng(seed).permutation(len(pool)) if pool[i].prompt.strip() not in used]


def untuned_answers(task, items) -> list[str]:
    """What the plain embedded model answers (greedy, the task's system prompt and budget)."""
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.tasks.answers import AnswerSettings, answer_items
    from mlx_sdm.usecases.build_verifier import DEFAULT_MAX_TOKENS

    lm = load_model()
    return [a.text for a in answer_items(lm, task, items, AnswerSettings(DEFAULT_MAX_TOKENS).for_task(task))]


def write_reviews(db: Path, task, items, answers: list[str]) -> None:
    """A chat store with each question, the model's answer queued for review, and its edit to the gold JSON."""
    from mlx_sdm.network.verdict import DocumentVerdict
    from mlx_sdm.store.chat_store import ChatStore
    from mlx_sdm.turn.answer import GeneratedAnswer
    from mlx_sdm.turn.escalation import Escalation, TurnStatus
    from mlx_sdm.turn.values import TurnOutcome

    db.unlink(missing_ok=True)
    store = ChatStore(db)
    try:
        session = store.create_session("reviewed answers")
        for item, text in zip(items, answers):
            store.add_message(session.id, "user", item.prompt)
            outcome = TurnOutcome(TurnStatus.DONE, GeneratedAnswer(text), messages=[],
                                  task=task.name,
                                  verdict=DocumentVerdict.no_verifier(),
                                  escalation=Escalation(review_reasons=["below_threshold"]))
            store.add_turn(session.id, None, outcome)
        queued = sorted(store.review_queue.review_items(), key=lambda entry: entry.id)
        if len(queued) != len(items):
            raise SystemExit(f"{db}: {len(queued)} answers queued for review, expected {len(items)}")
        for entry, item in zip(queued, items):
            store.review_queue.record_decision(entry.id, 1, completion=task.answer_format.completion(item.gold))
    finally:
        store.close()


def run_finetune(task_path: Path, out: Path, train_rows: int, db: Path | None, *, baselines: bool,
                 extra: list[str]) -> float:
    command = [sys.executable, "-m", "mlx_sdm", "finetune", "--task", str(task_path), "--out", str(out),
               "--train-rows", str(train_rows), "--no-head", *extra]
    if db is not None:
        command += ["--from-reviews", str(db)]
    if not baselines:
        command.append("--no-baselines")
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - start


def read_scores(out: Path, reviewed: int, seconds: float, alpha: float = 0.95) -> list[Measured]:
    """The folder's report rows of the untuned model and the tuned one; the promise as the report judges it."""
    from mlx_sdm.usecases.finetune_report import SplitScore

    report = json.loads((out / "report.json").read_text())
    rows = []
    for s in report["scores"]:
        if s["model"] not in ("untuned", "LoRA"):
            continue
        score = SplitScore(**{**s, "strata": tuple(s["strata"]), "cells": tuple(s["cells"])})
        rows.append(Measured(reviewed, s["model"], s["split"], s["rows"], s["accuracy"], s["well_formed"],
                             s["verified"], s["verified_right"], not score.violations(alpha), seconds))
    return rows


def table(rows: list[Measured]) -> str:
    def pct(v):
        return "–" if v is None else f"{v:.2f}"

    lines = ["| reviewed answers | model | split | right | in the JSON | verified | verified right | promise | run (min) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verified = "–" if r.verified is None else f"{r.verified}/{r.rows} ({r.verified / r.rows:.0%})"
        right = "–" if r.verified_right is None else f"{r.verified_right}/{r.verified}"
        lines.append(f"| {r.reviewed} | {r.model} | {r.split} | {pct(r.accuracy)} | {pct(r.well_formed)} | "
                     f"{verified} | {right} | {'held' if r.promise else 'BROKEN'} | {r.seconds / 60:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default=str(ROOT / "examples" / "mail_triage.jsonl"), help="a task file (.jsonl)")
    parser.add_argument("--out", default=str(ROOT / "build" / "review-finetune"))
    parser.add_argument("--steps", type=int, nargs="+", default=list(DEFAULT_STEPS), help="reviewed answers per run")
    parser.add_argument("--train-rows", type=int, default=DEFAULT_TRAIN_ROWS, help="the task file's own LoRA rows")
    parser.add_argument("--eval-rows", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lora-ranks", nargs="+", default=["8"])
    args = parser.parse_args()

    from mlx_sdm.network.tasks.registry import load_task

    task_path, out = Path(args.task).resolve(), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    task = load_task(str(task_path))
    spare = spare_items(task, args.train_rows, args.seed, args.eval_rows)
    most = max(args.steps)
    if len(spare) < most:
        raise SystemExit(f"{task_path}: {len(spare)} rows are left for reviews after the run's splits; {most} needed")
    answers_file = out / "untuned_answers.json"
    if answers_file.is_file():
        answers = json.loads(answers_file.read_text())
    else:
        answers = untuned_answers(task, spare[:most])
        answers_file.write_text(json.dumps(answers))
    in_json = sum(task.answer_format.completion(i.gold).strip() == a.strip() for i, a in zip(spare[:most], answers))
    print(f"the untuned model answered {in_json} of the {most} questions to review exactly as the gold JSON")
    extra = ["--lora-ranks", *args.lora_ranks, "--eval-rows", str(args.eval_rows), "--seed", str(args.seed), "--quiet"]
    rows: list[Measured] = []
    for i, n in enumerate(sorted(args.steps)):
        db = None
        if n:
            db = out / f"reviews-{n}.db"
            write_reviews(db, task, spare[:n], answers[:n])
        folder = out / f"reviews-{n}"
        seconds = run_finetune(task_path, folder, args.train_rows, db, baselines=i == 0, extra=extra)
        rows += read_scores(folder, n, seconds)
        print(table(rows), flush=True)
    (out / "review_finetune.md").write_text(table(rows) + "\n")
    print(f"written {out / 'review_finetune.md'}")


if __name__ == "__main__":
    main()
