"""Build the shipped default fine-tuned model folder (``weights/smollm2-tuned``) a task at a time, over as many
sittings as it needs: ``mlx-sdm finetune --task T`` on each suite task over the embedded SmolLM2, each its own
LoRA adapters and verifier member, a task shipped only where its adapters beat both the untuned model and the
majority answer on the held-out rows.

    .venv/bin/python scripts/build_default_model.py                  # every task not decided yet, in SUITE's order
    .venv/bin/python scripts/build_default_model.py --tasks spam     # one task
    .venv/bin/python scripts/build_default_model.py --minutes 100    # start no task after 100 minutes
    .venv/bin/python scripts/build_default_model.py --status         # what is shipped, decided, in progress

A task runs in ``build/default-model/<task>/`` (a model folder of its own, ignored by git; tasks may build side by
side). Its checkpoints (LoRA's
finished epochs with Adam's state, the run's records: a few MB) are copied to ``build-state/smollm2-tuned/<task>/``
and committed as each lands, so a sitting that ends mid-task continues in the next one, on another machine: a
task whose run folder is gone starts from its committed checkpoint. A finished task is judged against the bars
and, where it clears them, installed into ``weights/smollm2-tuned`` (every other task's files untouched) and
committed; either way the decision is kept in ``build-state/smollm2-tuned/decisions.json`` with its numbers, and
docs/finetuning.md's before/after table reads them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import mlx_sdm  # noqa: F401  (the fast BLAS before mlx)

ROOT = Path(__file__).resolve().parents[1]
#: The suite, the tasks a 135M model can learn first (topic, spam, sentiment), then those it stayed at chance on.
SUITE = ("bbc_topic", "spam", "sentiment", "truthful_qa", "strategyqa", "fever", "sports_understanding")
#: Each task's run: no Alg. 4 head (its stage costs as much as the verifier's on 2 cores, and the label verifier
#: does not need it), no untuned baseline stage (the untuned model's accuracy is read from the shipped head's
#: report instead); LoRA's ranks and epochs as finetune chooses them (rank 16 only below 0.9).
RUN_FLAGS = ("--no-head", "--no-baselines", "--quiet")
SHIPPED = ROOT / "weights" / "smollm2-tuned"
STATE = ROOT / "build-state" / "smollm2-tuned"
WORK = ROOT / "build" / "default-model"
DECISIONS = STATE / "decisions.json"
#: The shipped head's report: the untuned model's task accuracy on each task's held-out rows (its "untuned" rows).
UNTUNED_REPORT = ROOT / "weights" / "smollm2-suite-head" / "report.md"
#: How often the watcher looks for a new checkpoint to commit.
POLL_SECONDS = 30
#: The shipped verifier the default folder's verifier extends: it judges the tasks without adapters and everyday
#: questions as it does without the folder (resources.DEFAULT_VERIFIER_NAME).
BASE_VERIFIER = "smollm2-suite"
#: The run's records kept with a checkpoint (the answer cache is not: it is remade from the adapters).
KEPT = ("run.json", "clock.json", "lora.json", "lora")


def git(*args: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=False, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def tracked(path: Path) -> bool:
    return git("ls-files", "--error-unmatch", str(path.relative_to(ROOT)))


def commit(paths: list[Path], message: str, tries: int = 5) -> None:
    """Commit ``paths`` only (another build or a person may be committing too: a locked index is tried again)."""
    names = [str(p.relative_to(ROOT)) for p in paths if p.exists() or tracked(p)]
    for attempt in range(tries):
        if git("add", "-A", "--", *names) and git("commit", "-q", "-m", message, "--", *names):
            return
        if not git("diff", "--cached", "--quiet", "--", *names) or (ROOT / ".git" / "index.lock").exists():
            time.sleep(2 + attempt)
            continue
        return  # nothing to commit


def read_decisions() -> dict:
    return json.loads(DECISIONS.read_text(encoding="utf-8")) if DECISIONS.is_file() else {}


def write_decisions(decisions: dict) -> None:
    from mlx_sdm.atomic import atomic_write_text

    atomic_write_text(DECISIONS, json.dumps(decisions, indent=2, sort_keys=True) + "\n")


# ----------------------------------------------------------------------------------------- checkpoints
def out_dir(task: str) -> Path:
    """The task's own model folder in the build folder (one per task, so tasks may build side by side)."""
    return WORK / task


def run_dir(task: str) -> Path:
    """The task's run (``finetune --out DIR`` puts it at DIR/.work/<task>)."""
    return out_dir(task) / ".work" / task


def save_checkpoint(task: str) -> bool:
    """The run's records and LoRA checkpoints into build-state (True: something new was copied)."""
    source, target = run_dir(task) / ".work", STATE / task
    if not source.is_dir():
        return False
    changed = False
    for name in KEPT:
        path = source / name
        if not path.exists():
            continue
        dest = target / name
        if path.is_dir():
            for file in path.rglob("*"):
                if file.is_file() and not (dest / file.relative_to(path)).is_file():
                    (dest / file.relative_to(path)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(file, dest / file.relative_to(path))
                    changed = True
        elif not dest.is_file() or dest.read_bytes() != path.read_bytes():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
            changed = True
    return changed


def restore_checkpoint(task: str) -> None:
    """A committed checkpoint back into a run folder that lacks it (a new machine, or a removed build/)."""
    source, target = STATE / task, run_dir(task) / ".work"
    if not source.is_dir() or (target / "run.json").is_file():
        return
    shutil.copytree(source, target, dirs_exist_ok=True)
    print(f"{task}: resumed from the committed checkpoint in {source.relative_to(ROOT)}")


def watch(task: str, done: threading.Event) -> None:
    """Commit each new checkpoint of the running task until ``done``."""
    while not done.wait(POLL_SECONDS):
        if save_checkpoint(task):
            commit([STATE / task], f"default model build: {task} checkpoint")


# ----------------------------------------------------------------------------------------- judging a task
def untuned_accuracy(task: str) -> float | None:
    """The untuned model's task accuracy on the task's held-out rows, as the shipped head's report measured it
    (its table's ``| TASK held_out (N) | untuned | ... | task accuracy | verified |`` rows; None: not there)."""
    if not UNTUNED_REPORT.is_file():
        return None
    for line in UNTUNED_REPORT.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 3 and cells[0].startswith(f"{task} held_out") and cells[1] == "untuned":
            return float(cells[-2])
    return None


def majority_share(task: str, eval_rows: int = 100) -> float:
    """The share of the held-out rows whose gold answer is the most common one (a constant answer's accuracy)."""
    from collections import Counter

    from mlx_sdm.network.tasks.registry import load_task

    gold = [json.dumps(i.gold) for i in load_task(task).split("held_out", size=eval_rows)]
    return max(Counter(gold).values()) / len(gold)


def judge(task: str) -> dict:
    """The finished run's held-out and shifted numbers against the bars."""
    report = json.loads((run_dir(task) / "report.json").read_text(encoding="utf-8"))
    scores = {s["split"]: s for s in report.get("scores", []) if s["model"] == "LoRA" and s["task"] == task}
    held = scores.get("held-out", {})
    accuracy = held.get("accuracy") or 0.0
    untuned, majority = untuned_accuracy(task), majority_share(task)
    ships = accuracy > max(untuned or 0.0, majority)
    return {"ships": ships, "held_out_accuracy": accuracy, "untuned_accuracy": untuned, "majority_share": majority,
            "held_out": {k: held.get(k) for k in ("rows", "verified", "verified_right")},
            "shifted": {k: scores.get("shifted", {}).get(k) for k in ("rows", "accuracy", "verified", "verified_right")},
            "why": (f"held-out accuracy {accuracy:.2f} beats the untuned model ({untuned if untuned is not None else '?'}) "
                    f"and the majority answer ({majority:.2f})") if ships else
                   (f"held-out accuracy {accuracy:.2f} does not beat both the untuned model "
                    f"({untuned if untuned is not None else '?'}) and the majority answer ({majority:.2f}): no adapter")}


def install(task: str) -> None:
    """The finished task's files into the shipped folder, every other task's files as they were: the shipped folder
    staged in the build folder, the task installed into it (``model_growth.install_task``), then shipped."""
    from mlx_sdm.usecases.model_folder import MODEL_MANIFEST, read_model_folder
    from mlx_sdm.usecases.model_growth import install_task

    stage = WORK.parent / "default-model-shipped"
    shutil.rmtree(stage, ignore_errors=True)
    if (SHIPPED / MODEL_MANIFEST).is_file():
        shutil.copytree(SHIPPED, stage)
    shutil.copytree(run_dir(task), stage / ".work" / task, ignore=shutil.ignore_patterns(".work"))
    manifest = read_model_folder(stage) if (stage / MODEL_MANIFEST).is_file() else None
    install_task(stage, manifest, task)
    ship(stage, SHIPPED)


def ship(run: Path, out: Path, base: str | None = BASE_VERIFIER) -> None:
    """A finished folder as it ships (format 2: adapters/<task>/, heads/<task>/, reports/<task>/): no .work, and a
    verifier that extends the shipped verifier ``base`` (by reference, one copy; the suite verifier
    ``weights/smollm2-suite``): each tuned task's member, as its run wrote it, judges that task's answers (read with
    its adapters), and the base's estimator and open-question member judge every other question as the plain
    model answers it, as they do without this folder (None: the run's own verifier, copied)."""
    from mlx_sdm.atomic import atomic_directory
    from mlx_sdm.network.verifier import DocumentVerifier
    from mlx_sdm.resources import resolve_artifact
    from mlx_sdm.usecases.model_folder import (ADAPTERS_DIR, HEADS_DIR, MEMBERS_DIR, MODEL_MANIFEST, REPORTS_DIR,
                                               VERIFIER_DIR, read_model_folder)

    folder = read_model_folder(run)  # a finished folder only
    judged = [e.name for e in folder.entries if e.verifier]
    with atomic_directory(out) as tmp:
        for name in (ADAPTERS_DIR, HEADS_DIR, REPORTS_DIR):
            if (run / name).is_dir():
                shutil.copytree(run / name, tmp / name)
        shutil.copy2(run / MODEL_MANIFEST, tmp / MODEL_MANIFEST)
        if judged and base is None:
            shutil.copytree(run / VERIFIER_DIR, tmp / VERIFIER_DIR)
        elif judged:
            info = {"built_by": "scripts/build_default_model.py", "tasks": judged}
            DocumentVerifier.load(resolve_artifact(base)).extending(base, {}, info).save(tmp / VERIFIER_DIR)
            for name in judged:  # each task's member as its run wrote it
                shutil.copytree(run / VERIFIER_DIR / MEMBERS_DIR / name, tmp / VERIFIER_DIR / MEMBERS_DIR / name)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"shipped {out} ({size / 1e6:.1f} MB)")


# ----------------------------------------------------------------------------------------- the build
def build_task(task: str, extra: list[str]) -> dict:
    restore_checkpoint(task)
    done = threading.Event()
    watcher = threading.Thread(target=watch, args=(task, done), daemon=True)
    watcher.start()
    started = time.time()
    try:
        subprocess.run([sys.executable, "-m", "mlx_sdm", "finetune", "--task", task, "--out", str(out_dir(task)),
                        "--keep-work", *RUN_FLAGS, *extra], check=True)
    finally:
        done.set()
        watcher.join()
    if save_checkpoint(task):
        commit([STATE / task], f"default model build: {task} checkpoint")
    decision = {**judge(task), "minutes": round((time.time() - started) / 60, 1)}
    with installing():
        if decision["ships"]:
            install(task)
        decisions = read_decisions()
        decisions[task] = decision
        write_decisions(decisions)
        shutil.rmtree(STATE / task, ignore_errors=True)  # decided: its checkpoints are history, not needed to go on
        commit([SHIPPED, DECISIONS, STATE / task], f"default model build: {task} "
                                                   f"{'shipped' if decision['ships'] else 'not shipped'} ({decision['why']})")
    return decision


@contextmanager
def installing():
    """One installer at a time (tasks may build side by side; the shipped folder and the decisions are shared)."""
    import fcntl

    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / "install.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def status() -> None:
    decisions = read_decisions()
    for task in SUITE:
        if task in decisions:
            d = decisions[task]
            print(f"{task}: {'shipped' if d['ships'] else 'not shipped'}: {d['why']}")
        elif (STATE / task).is_dir():
            epochs = sorted(p.name for p in (STATE / task).rglob("epoch-*"))
            print(f"{task}: in progress ({', '.join(epochs) or 'no epoch finished'})")
        else:
            print(f"{task}: not started")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(SUITE), help="the tasks to build (default: the suite)")
    parser.add_argument("--minutes", type=float, default=120.0,
                        help="start no task after this many minutes of this sitting (default 120)")
    parser.add_argument("--again", action="store_true", help="build tasks already decided again")
    parser.add_argument("--status", action="store_true", help="print what is shipped, decided and in progress")
    args, extra = parser.parse_known_args()
    if args.status:
        status()
        return
    started = time.time()
    for task in args.tasks:
        if task in read_decisions() and not args.again:
            continue
        if (time.time() - started) / 60 > args.minutes:
            print(f"stopping before {task}: this sitting's {args.minutes:.0f} minutes are spent; run again to go on")
            break
        decision = build_task(task, extra)
        print(f"{task}: {'shipped' if decision['ships'] else 'not shipped'}: {decision['why']}")


if __name__ == "__main__":
    main()
