"""``mlx-sdm finetune --task A B --out DIR``: one LoRA adapter set per task, and a folder that grows a task at a
time (docs/finetuning.md, "The folder"; the folder's format: ``model_folder.py``).

Each named task is its own run (``task_finetune.run_task_finetune``: LoRA, the head, the verifier, the report),
one after another, into ``DIR/.work/<task>/``, where it resumes on its own after ``kill -9``. A finished task is
then installed into the folder:

    DIR/.work/<task>/adapters   → DIR/adapters/<task>/          (byte copies)
    DIR/.work/<task>/head       → DIR/heads/<task>/             (where the run kept one)
    DIR/.work/<task>/verifier   → DIR/verifier/members/<task>/  (its open-question member left out: the folder's
                                                                 verifier holds one, for everyday questions)
    DIR/.work/<task>/report.*   → DIR/reports/<task>/

and the manifest is written again, listing the folder's other tasks as they were and this one. So every other
task's files are never rewritten (only the verifier's top level, which routes a question to its task's member, is
made again), ``--out`` at a finished folder adds the named tasks to it, and naming a task it has with other rows,
seed or settings retrains that task alone (with the same ones its finished run is kept: it would train the same
adapters). A run never drops a task: the manifest lists every task the folder had and every task installed.

``--out`` is refused, before anything is written, at a folder fine-tuned on another base model, at a format-1
folder (one adapter set for all its tasks: rebuild it), and at a folder that is not a model folder.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from mlx_sdm.errors import DataError, ModelMismatchError, OutputError
from mlx_sdm.resources import resolve_artifact
from mlx_sdm.usecases.finetune_plan import WORK_DIR, FinetuneRun, TaskFinetuneArgs
from mlx_sdm.usecases.model_folder import (
    ADAPTERS_DIR,
    HEAD_DIR,
    HEADS_DIR,
    MEMBERS_DIR,
    MODEL_MANIFEST,
    REPORT_JSON,
    REPORT_MD,
    REPORTS_DIR,
    RUN_FORMAT_VERSION,
    VERIFIER_DIR,
    FolderTask,
    ModelFolder,
    read_model_folder,
)


@dataclass(frozen=True)
class GrowthPlan:
    """A checked ``finetune --task ... --out DIR``: the folder as it is (None: a new one) and one run per task."""

    out: Path
    existing: ModelFolder | None
    runs: tuple[TaskFinetuneArgs, ...]  # each one task, its out DIR/.work/<task>

    def work(self, name: str) -> Path:
        return self.out / WORK_DIR / name


@dataclass(frozen=True)
class GrowthOutcome:
    """What a run made: the folder, its manifest, and each task's run as it finished (name -> FinetuneOutcome)."""

    folder: Path
    manifest: ModelFolder
    runs: dict[str, Any]


def plan_growth(args: TaskFinetuneArgs) -> GrowthPlan:
    """Every check that needs no model, before anything is written: what ``--out`` is (new, a model folder of this
    base to grow, an unfinished run of ours) and each task's own run, its instruction distinct from the folder's
    other tasks'."""
    from mlx_sdm.network.tasks.registry import load_tasks

    out = Path(args.out)
    existing = check_growth_folder(args, out)
    if not args.tasks:
        raise DataError("name at least one task: a .jsonl file of {\"prompt\", \"answer\": {field: value}} rows or a "
                        "shipped task", field="--task")
    tasks = load_tasks(list(args.tasks), args.columns)
    runs = tuple(replace(args, tasks=(t.path or t.name,), out=out / WORK_DIR / t.name) for t in tasks)
    check_instructions(tasks, existing)
    return GrowthPlan(out, existing, runs)


def check_growth_folder(args: TaskFinetuneArgs, out: Path) -> ModelFolder | None:
    """The folder ``--out`` names, as this run may use it: None (new, or a first run of ours in progress) or the
    finished folder it grows; anything else is refused with one line naming what to do."""
    from mlx_sdm.atomic import check_output_folder

    check_output_folder(out, force=True, artifact_files=(MODEL_MANIFEST, WORK_DIR))
    if not (out / MODEL_MANIFEST).is_file():
        if (out / WORK_DIR / "run.json").is_file():
            raise OutputError(f"{out}: holds an unfinished run of an earlier mlx-sdm (one adapter set for all its "
                              "tasks); finish it with that version, or give another --out")
        return None
    folder = read_model_folder(out)
    if folder.format_version == RUN_FORMAT_VERSION:
        raise OutputError(f"{out}: is a format-1 model folder (one adapter set for all its tasks) and cannot grow; "
                          f"rebuild it with `mlx-sdm finetune --task {' '.join(folder_task_specs(folder))} --out "
                          "NEWDIR`, then add tasks to NEWDIR")
    if not same_base(folder.base_model, args.model) or folder.quantized != args.quantized:
        raise OutputError(f"{out}: was fine-tuned on {folder.base_model or 'the embedded SmolLM2'}"
                          f"{' (4-bit)' if folder.quantized else ''}, not on {args.model or 'the embedded SmolLM2'}"
                          f"{' (4-bit)' if args.quantized else ''}; give another --out, or --model "
                          f"{folder.base_model or 'smollm2'} to add tasks to it")
    return folder


def folder_task_specs(folder: ModelFolder) -> list[str]:
    return [str(e.info.get("task_file") or e.name) for e in folder.entries]


def same_base(a: str | None, b: str | None) -> bool:
    """Two ``--model`` spellings of one base: the embedded model's aliases, or the same folder."""
    from mlx_sdm.lm.loading import EMBEDDED_ALIASES

    embedded = set(EMBEDDED_ALIASES) | {None}
    if a in embedded or b in embedded:
        return a in embedded and b in embedded
    if Path(str(a)).exists() and Path(str(b)).exists():
        return Path(str(a)).resolve() == Path(str(b)).resolve()
    return a == b


def check_instructions(tasks: list, existing: ModelFolder | None) -> None:
    """Each task of the folder after this run starts its prompts with its own instruction (a question is routed to
    one task, and to its adapters, by that instruction)."""
    from mlx_sdm.usecases.finetune_plan import task_instruction

    named = {t.name for t in tasks}
    kept = [(e.name, e.instruction.instruction) for e in (existing.entries if existing else ()) if e.name not in named]
    ours = [(t.name, task_instruction(t, t.path or t.source).instruction) for t in tasks]
    seen: dict[str, str] = {}
    for name, instruction in kept + ours:
        other = seen.setdefault(instruction, name)
        if other != name:
            raise DataError(f"tasks {other} and {name} start their prompts with the same instruction, so a question "
                            "cannot be routed to one of them: give each task its own instruction", field="--task")


# ----------------------------------------------------------------------------------------- the runs
def run_growth(args: TaskFinetuneArgs, *, log: Callable[[str], None] = print) -> GrowthOutcome:
    """The whole command (module docstring): each task's run in turn, each installed into the folder when done."""
    from mlx_sdm.usecases.task_finetune import prepare, run_task_finetune

    plan = plan_growth(args)
    identities = [prepare(run).identity for run in plan.runs]  # every task's rows checked before the first trains
    manifest, outcomes = plan.existing, {}
    for run, identity in zip(plan.runs, identities):
        name = Path(run.out).name
        if not finished_work(plan, run, identity, log):
            log(f"task {name}: its own LoRA adapters, head and verifier ({run.out})")
            outcomes[name] = run_task_finetune(run, log=log)
        manifest = install_task(plan.out, manifest, name)
    assert manifest is not None
    return GrowthOutcome(plan.out, manifest, outcomes)


def finished_work(plan: GrowthPlan, run: TaskFinetuneArgs, identity: dict[str, Any],
                  log: Callable[[str], None]) -> bool:
    """Whether a task's work folder holds its finished run with these rows and settings (True: installed as it is,
    not trained again: the same command after a stop goes on with the next task, and a retrain with the same rows,
    seed and settings would make the same adapters). An unfinished run with them resumes; a run with other rows or
    settings (the task retrained with them) is cleared, so the task trains anew."""
    work, name = Path(run.out), Path(run.out).name
    if not work.is_dir():
        return False
    stored = FinetuneRun(run).read_record("run") or {}
    if stored.get("identity") == json.loads(json.dumps(identity, default=str)):
        finished = (work / MODEL_MANIFEST).is_file()
        if finished:
            log(f"task {name}: its run with these rows and settings is finished ({work}); kept as it is")
        return finished
    installed = plan.existing is not None and plan.existing.entry(name) is not None
    log(f"task {name}: {'retrained with other' if installed else 'its earlier unfinished run had other'} rows or "
        "settings; its work folder starts again")
    shutil.rmtree(work)
    return False


# ----------------------------------------------------------------------------------------- installing a task
def install_task(out: Path, manifest: ModelFolder | None, name: str) -> ModelFolder:
    """Task ``name``'s finished run copied into the folder (module docstring), then the manifest written: the
    folder's other tasks as they were, this one added (or in its place when retrained)."""
    from mlx_sdm.atomic import atomic_directory

    run = read_model_folder(out / WORK_DIR / name)
    if manifest is not None and run.fingerprint != manifest.fingerprint:
        raise ModelMismatchError(f"{out}: its tasks were fine-tuned on another base model than task {name} was; give "
                                 "another --out")
    for source, target in ((run.folder / ADAPTERS_DIR, out / ADAPTERS_DIR / name),
                           (run.folder / HEAD_DIR, out / HEADS_DIR / name)):
        if source.is_dir():
            with atomic_directory(target) as tmp:
                shutil.copytree(source, tmp, dirs_exist_ok=True)
        elif target.exists():
            shutil.rmtree(target)  # retrained without a head: the old one is not this task's any more
    with atomic_directory(out / REPORTS_DIR / name) as tmp:
        for file in (REPORT_MD, REPORT_JSON):
            shutil.copy2(run.folder / file, tmp / file)
    entry = task_entry(run, name)
    entries = [e for e in (manifest.entries if manifest else ()) if e.name != name]
    position = next((i for i, e in enumerate(manifest.entries) if e.name == name), len(entries)) if manifest else 0
    entries.insert(position, entry)
    write_verifier(out, entries, run)
    folder = ModelFolder(out, run.base_model, dict(run.fingerprint), tuple(entries), run.quantized,
                         info={"name": run.info.get("name")})
    folder.save()
    return folder


def task_entry(run: ModelFolder, name: str) -> FolderTask:
    """The manifest's entry of a task from its run's folder: its instruction, files, run settings and the final
    model's held-out task accuracy and verified share (its report's numbers)."""
    from mlx_sdm.usecases.finetune_report import SplitScore

    entry = run.entries[0]
    final = "LoRA + head" if entry.head is not None else "LoRA"
    scores = [SplitScore(**s) for s in json.loads((run.folder / REPORT_JSON).read_text(encoding="utf-8")).get("scores", [])]
    held = next((s for s in scores if s.model == final and s.task == name and s.split == "held-out"), None)
    accuracy = held.accuracy if held is not None else None
    share = held.verified / held.rows if held is not None and held.verified is not None and held.rows else None
    return FolderTask(entry.instruction, f"{ADAPTERS_DIR}/{name}", entry.adapters_sha256,
                      f"{HEADS_DIR}/{name}" if entry.head is not None else None,
                      f"{VERIFIER_DIR}/{MEMBERS_DIR}/{name}" if entry.verifier is not None else None,
                      accuracy, share,
                      {**entry.info, "report": f"{REPORTS_DIR}/{name}/{REPORT_MD}"})


def write_verifier(out: Path, entries: list[FolderTask], run: ModelFolder) -> None:
    """DIR/verifier made again: each task's member a byte copy (the new task's from its run, the others' from the
    folder's verifier as it was), the open-question member of the base model where one fits, and a top level
    that routes each task's questions to its member (one task: the top level judges as that member does)."""
    from mlx_sdm.atomic import atomic_directory
    from mlx_sdm.network.verifier import DocumentVerifier

    name = run.entries[0].name
    judged = [e for e in entries if e.verifier is not None]
    if not judged:
        shutil.rmtree(out / VERIFIER_DIR, ignore_errors=True)
        return
    sources = {e.name: (run.folder / VERIFIER_DIR if e.name == name else out / e.verifier) for e in judged}
    staging = out / WORK_DIR / "verifier-top"
    base = extended_base(out)
    if base is not None:  # the folder's verifier extends a shipped one: kept, its members copied in below
        top = DocumentVerifier.load(resolve_artifact(base)).extending(
            base, {}, {"built_by": "mlx-sdm finetune", "tasks": [e.name for e in judged]})
    else:
        top = joined_verifier({n: DocumentVerifier.load(path) for n, path in sources.items()}, open_member(run))
    top.save(staging)
    with atomic_directory(out / VERIFIER_DIR) as tmp:
        shutil.copytree(staging, tmp, dirs_exist_ok=True)
        for member, path in sources.items():
            shutil.copytree(path, tmp / MEMBERS_DIR / member, ignore=shutil.ignore_patterns(MEMBERS_DIR)
                            if path == run.folder / VERIFIER_DIR else None)
    shutil.rmtree(staging, ignore_errors=True)


def extended_base(out: Path) -> str | None:
    """The shipped verifier the folder's verifier extends (``DocumentVerifier.base_ref``; the shipped default
    folder's extends the suite verifier, which judges the plain model's answers on the tasks it has no adapters
    for), None: it extends none, or the folder has no verifier yet."""
    from mlx_sdm.network.verifier import BASE_REF_KEY, VERIFIER_MANIFEST

    path = out / VERIFIER_DIR / VERIFIER_MANIFEST
    if not path.is_file():
        return None
    ref = json.loads(path.read_text(encoding="utf-8")).get(BASE_REF_KEY)
    return str(ref) if ref else None


def open_member(run: ModelFolder) -> Any | None:
    """The open-question member the task's run put beside its verifier (the base model's, where one fits)."""
    from mlx_sdm.network.verdict import OPEN_QUESTIONS
    from mlx_sdm.network.verifier import VERIFIER_MANIFEST, DocumentVerifier

    path = run.folder / VERIFIER_DIR / MEMBERS_DIR / OPEN_QUESTIONS
    return DocumentVerifier.load(path) if (path / VERIFIER_MANIFEST).is_file() else None


def joined_verifier(members: dict[str, Any], open_questions: Any | None) -> Any:
    """The verifier's top level: every task's instruction routed to its member (by its name); with one task, that
    task's own estimator, leans and label answers (a single task's route names no member). Only the open-question member is
    saved with it: the tasks' members are copied in as they are."""
    from mlx_sdm.network.verdict import OPEN_QUESTIONS
    from mlx_sdm.network.verifier import DocumentVerifier, FeatureRecipe

    first = next(iter(members.values()))
    recipe = FeatureRecipe(delimiter=first.recipe.delimiter, system=first.recipe.system if len(members) == 1 else None,
                           task_systems=tuple(p for m in members.values() for p in m.recipe.task_systems),
                           task_names=tuple(n for m in members.values() for n in (m.recipe.task_names or ())))
    info = {**first.info, "built_by": "mlx-sdm finetune", "tasks": list(members)} if len(members) == 1 else \
        {"built_by": "mlx-sdm finetune", "tasks": list(members)}
    return DocumentVerifier(first.estimator, first.model_fingerprint, recipe, info,
                            [t for m in members.values() for t in m.tasks],
                            {OPEN_QUESTIONS: open_questions} if open_questions is not None else {},
                            leans=first.leans if len(members) == 1 else {},
                            labels=first.labels if len(members) == 1 else None)
