"""``mlx-sdm finetune --task FILE --plan``: what a run would do with these files, told before anything loads or
trains: every check that needs no model (the very ``prepare`` a run starts with, so a file the run would refuse
is refused here in the same words), then each task's rows per part, the minimum and why, its labels and counts,
and a time estimate from the rows' length. Nothing is written.

The estimate is from characters, not a model: rates measured on the two runs of docs/finetuning.md (the embedded
SmolLM2-135M on 2 busy cores: mail triage and compare counts, whose LoRA epochs agree at about
:data:`LORA_SECONDS_PER_CHAR` per character of a row with its chat template; the triage run without the head,
62 min, is projected at 62). The run itself measures two steps on
the machine before it trains and prints its own estimate; a larger model takes longer about in proportion to its
size."""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from mlx_sdm.usecases.finetune_plan import TaskFinetuneArgs, TaskSplit, minimum_rows, minimum_why
from mlx_sdm.usecases.finetune_report import RunEstimate, projection

#: Seconds of one LoRA epoch per character of a training row (its prompt and answer, plus TEMPLATE_CHARS).
LORA_SECONDS_PER_CHAR = 0.0077
#: Seconds of one greedy answer per character of its prompt (plus TEMPLATE_CHARS): prefill and a short JSON, and
#: the verifier's fits spread over them (mail triage without the head: 2,546 s for 820 rows, twice, at 448 characters).
ANSWER_SECONDS_PER_CHAR = 0.0035
#: Characters a row's chat template and the task's system prompt add.
TEMPLATE_CHARS = 150


@dataclass(frozen=True)
class TaskPreview:
    """One task as a run would use it."""

    name: str
    notes: tuple[str, ...]
    sizes: dict[str, int]
    rows: int  # rows not marked shifted, after repeats were dropped
    shifted: int
    labels: tuple[tuple[str, int], ...]  # (the answer's JSON value, rows), most first
    mean_chars: float


@dataclass(frozen=True)
class RunPreview:
    tasks: tuple[TaskPreview, ...]
    minimum: int
    why: str
    estimate: RunEstimate
    out: Path | None


def preview_run(args: TaskFinetuneArgs, *, has_out: bool = True) -> RunPreview:
    """The run's checks and numbers, no model loaded. ``has_out`` False: no ``--out`` was given, so the folder
    check runs on a path that is never made."""
    from mlx_sdm.usecases.task_finetune import prepare

    if not has_out:
        args = replace(args, out=Path(tempfile.gettempdir()) / f"mlx-sdm-plan-{os.getpid()}-never-written")
    prepared = prepare(args)
    tasks = tuple(task_preview(split) for split in prepared.splits)
    chars = {t.name: t.mean_chars + TEMPLATE_CHARS for t in tasks}
    epoch = sum(len(s.train) * chars[s.task.name] for s in prepared.splits) * LORA_SECONDS_PER_CHAR
    rows = sum(len(s.train) + len(s.verifier) + len(s.held_out) + len(s.shifted) for s in prepared.splits)
    per_answer = sum((len(s.train) + len(s.verifier) + len(s.held_out) + len(s.shifted)) * chars[s.task.name]
                     for s in prepared.splits) / max(1, rows) * ANSWER_SECONDS_PER_CHAR
    estimate = projection(prepared.splits, args, epoch, per_answer)
    return RunPreview(tasks, minimum_rows(args), minimum_why(args), estimate, args.out if has_out else None)


def task_preview(split: TaskSplit) -> TaskPreview:
    main, shifted = split.task.examples()
    labels = Counter(json.dumps(ex.gold) for ex in main + shifted)
    parts = (split.train, split.validation, split.verifier, split.held_out, split.shifted)
    chars = [len(i.prompt) + len(split.task.answer_format.completion(i.gold)) for part in parts for i in part]
    return TaskPreview(split.task.name, split.task.notes, split.sizes(), len(main), len(shifted),
                       tuple(labels.most_common()), sum(chars) / max(1, len(chars)))


def preview_text(preview: RunPreview) -> str:
    """What ``--plan`` prints."""
    lines = []
    for task in preview.tasks:
        n = task.sizes
        lines += list(task.notes)
        spare = task.rows - n["train"] - n["validation"] - n["calibration"] - n["held_out"]
        lines.append(f"{task.name}: {task.rows} rows{f' and {task.shifted} shifted' if task.shifted else ''}: "
                     f"{n['train']} train the model, {n['validation']} check it while it trains, {n['calibration']} "
                     f"calibrate the verifier, {n['held_out']} held-out and {n['shifted']} shifted rows test it"
                     + (f" ({spare} more are not used: --train-rows, --verifier-rows and --eval-rows take more)"
                        if spare > 0 else ""))
        lines.append(f"{task.name}: labels " + ", ".join(f"{value} {count}" for value, count in task.labels))
    lines.append(f"minimum: {preview.minimum} rows a task (not counting shifted ones): {preview.why}")
    lines.append(f"{preview.estimate.text} (from the rows' length: the embedded 135M model on 2 cores; the run measures "
                 "its own on this machine before it trains)")
    where = f" into {preview.out}" if preview.out is not None else " (give --out DIR)"
    lines.append(f"the file is ready: run the same command without --plan to train{where}; nothing was written")
    return "\n".join(lines)


def intake_lines(tasks: Sequence[TaskPreview]) -> list[str]:
    """How each file was read (a run prints these first)."""
    return [note for task in tasks for note in task.notes]
