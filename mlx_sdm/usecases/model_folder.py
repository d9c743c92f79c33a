"""A fine-tuned model folder: what ``mlx-sdm finetune --task`` writes and ``--model DIR`` loads (format 2).

    DIR/mlx-sdm-model.json       the manifest: base model (spec + fingerprint) and, per task, its instruction and
                                 system prompt, adapters (path + sha256), head, verifier, held-out numbers
    DIR/adapters/<task>/         that task's LoRA adapters in mlx-lm's format
                                 (``mlx_lm.generate --adapter-path DIR/adapters/<task>``)
    DIR/heads/<task>/            its SDM-network positive head (Alg. 4), compact form; absent when not kept
    DIR/verifier/                the folder's document verifier: each task judged by its own member,
    DIR/verifier/members/<task>/ built on the answers of the model with that task's adapters
    DIR/reports/<task>/          its run's before/after report (report.md; report.json: the same numbers)
    DIR/.work/<task>/            its run (a one-task folder of format 1 with its resumable records)

Every task is trained on its own (``usecases/model_growth.py``), so a folder grows a task at a time and the
other tasks' files are never rewritten. The manifest is written last: a folder without one is a first run
still in progress (``finetune`` resumes it). Loading checks the base model's fingerprint (a folder refuses
another base, as heads and verifiers do), attaches each task's adapters for that task's turns only
(``lm/adapters.py``; every other turn is the base model's), and loads the verifier, whose member of each
task must read the states of that task's adapters.

Format 1 (one adapter set for all tasks: ``DIR/adapters``, ``DIR/head``, ``DIR/verifier``) still loads: its
one set serves all its tasks. It does not grow: ``finetune --out`` at it is refused, naming what to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mlx_sdm.atomic import atomic_write_text
from mlx_sdm.errors import ArtifactError, ModelMismatchError
from mlx_sdm.network.coverage import TaskInstruction, read_task_instructions

MODEL_MANIFEST = "mlx-sdm-model.json"
MODEL_FORMAT_VERSION = 2
#: Format 1: one adapter set, head and verifier for all of a folder's tasks (what a task's own run writes in
#: ``DIR/.work/<task>/``, and what mlx-sdm wrote before folders grew a task at a time).
RUN_FORMAT_VERSION = 1
ADAPTERS_DIR = "adapters"
HEAD_DIR = "head"
HEADS_DIR = "heads"
VERIFIER_DIR = "verifier"
MEMBERS_DIR = "members"
REPORTS_DIR = "reports"
REPORT_MD = "report.md"
REPORT_JSON = "report.json"
KIND = "mlx-sdm fine-tuned model"


@dataclass(frozen=True)
class FolderTask:
    """One task of a folder: how the chat routes to it, the files that answer and judge it (paths relative to the
    folder), and its run's numbers on its held-out rows (None: not recorded)."""

    instruction: TaskInstruction
    adapters: str
    adapters_sha256: str
    head: str | None = None
    verifier: str | None = None
    held_out_accuracy: float | None = None
    verified_share: float | None = None  # the held-out rows shown as verified (ŷ = 1 and admitted)
    info: dict[str, Any] = field(default_factory=dict)  # rank, epoch, seed, task_file, report

    @property
    def name(self) -> str:
        return str(self.instruction.name)

    def to_dict(self) -> dict[str, Any]:
        return {**self.instruction.to_dict(), "adapters": {"path": self.adapters, "sha256": self.adapters_sha256},
                "head": self.head, "verifier": self.verifier,
                "held_out": {"accuracy": self.held_out_accuracy, "verified_share": self.verified_share}, "info": self.info}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> "FolderTask":
        instruction = read_task_instructions([data], where=where)[0]  # type: ignore[index]
        if not instruction.name:
            raise ValueError(f"{where}: a task without 'name'")
        held = data.get("held_out") or {}
        return cls(instruction, str(data["adapters"]["path"]), str(data["adapters"]["sha256"]), data.get("head"),
                   data.get("verifier"), _number(held.get("accuracy")), _number(held.get("verified_share")),
                   dict(data.get("info") or {}))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ModelFolder:
    """The manifest of a fine-tuned model folder (format 2, or a format-1 folder read as its tasks sharing one
    adapter set, head and verifier)."""

    folder: Path
    base_model: str | None  # the spec the base loads from: None/"smollm2" (embedded), a folder, a hub id
    fingerprint: dict[str, Any]  # the base model's (lm/loading.py model_fingerprint)
    entries: tuple[FolderTask, ...]
    quantized: bool = False
    format_version: int = MODEL_FORMAT_VERSION
    info: dict[str, Any] = field(default_factory=dict)  # the base model's name; a format-1 folder's run settings

    @property
    def tasks(self) -> tuple[TaskInstruction, ...]:
        return tuple(e.instruction for e in self.entries)

    def entry(self, name: str) -> FolderTask | None:
        return next((e for e in self.entries if e.name == name), None)

    def path(self, relative: str | None) -> Path | None:
        return self.folder / relative if relative is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": MODEL_FORMAT_VERSION, "kind": KIND,
                "base_model": {"spec": self.base_model, **self.fingerprint}, "quantized": self.quantized,
                "tasks": [e.to_dict() for e in self.entries], "info": self.info}

    def save(self) -> None:
        """Write the manifest (last, atomically: the folder is complete, with these tasks, from this moment)."""
        atomic_write_text(self.folder / MODEL_MANIFEST, json.dumps(self.to_dict(), indent=2) + "\n")


def write_run_manifest(folder: Path, base_model: str | None, fingerprint: dict[str, Any],
                       tasks: tuple[TaskInstruction, ...], adapters_sha256: str, quantized: bool, *, has_head: bool,
                       has_verifier: bool, info: dict[str, Any]) -> None:
    """The manifest of one run's folder (format 1: its one adapter set, head and verifier serve all its tasks),
    written last."""
    data = {"format_version": RUN_FORMAT_VERSION, "kind": KIND, "base_model": {"spec": base_model, **fingerprint},
            "quantized": quantized, "tasks": [t.to_dict() for t in tasks],
            "adapters": {"path": ADAPTERS_DIR, "sha256": adapters_sha256},
            "head": HEAD_DIR if has_head else None, "verifier": VERIFIER_DIR if has_verifier else None, "info": info}
    atomic_write_text(folder / MODEL_MANIFEST, json.dumps(data, indent=2) + "\n")


def is_model_folder(spec: str | Path | None) -> bool:
    return spec is not None and (Path(spec) / MODEL_MANIFEST).is_file()


def read_model_folder(folder: str | Path) -> ModelFolder:
    """The manifest of ``folder``; an ArtifactError naming the field and what to do when it cannot be used."""
    folder = Path(folder)
    path = folder / MODEL_MANIFEST
    if not path.is_file():
        raise ArtifactError(f"{folder}: no {MODEL_MANIFEST}; not a finished fine-tuned model folder (an unfinished "
                            "run resumes with the same `mlx-sdm finetune --task ... --out` command)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: corrupt ({exc.msg}); rerun `mlx-sdm finetune` with the same --out") from None
    version = data.get("format_version")
    if version not in (RUN_FORMAT_VERSION, MODEL_FORMAT_VERSION):
        raise ArtifactError(f"{path}: field 'format_version' is {version!r}; this mlx-sdm reads "
                            f"{RUN_FORMAT_VERSION} and {MODEL_FORMAT_VERSION}: rerun `mlx-sdm finetune` with this version")
    try:
        base = dict(data["base_model"])
        entries = _v1_entries(data, folder, str(path)) if version == RUN_FORMAT_VERSION else \
            tuple(FolderTask.from_dict(t, f"{path}: tasks[{i}]") for i, t in enumerate(data["tasks"]))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ArtifactError(f"{path}: missing or malformed field ({exc}); rerun `mlx-sdm finetune`") from None
    spec = base.pop("spec", None)
    return ModelFolder(folder, spec, base, entries, bool(data.get("quantized", False)), version,
                       dict(data.get("info") or {}))


def _v1_entries(data: dict[str, Any], folder: Path, where: str) -> tuple[FolderTask, ...]:
    """A format-1 folder's tasks: each served by the one adapter set, head and verifier."""
    tasks = read_task_instructions(data["tasks"], where=where) or ()
    sha = str(data["adapters"]["sha256"])
    head = HEAD_DIR if data.get("head") is not None and (folder / HEAD_DIR).is_dir() else None
    verifier = VERIFIER_DIR if data.get("verifier") is not None and (folder / VERIFIER_DIR).is_dir() else None
    info = dict(data.get("info") or {})
    files = dict(info.get("task_files") or {})
    return tuple(FolderTask(t, ADAPTERS_DIR, sha, head, verifier,
                            info={"task_file": files.get(t.name),
                                  **{k: info.get(k) for k in ("rank", "epoch", "seed", "table") if k in info}})
                 for t in tasks)


def task_specs(folder: ModelFolder) -> tuple[str, ...]:
    """The ``--task`` values that made this folder: each task's file where it was a user's, else its shipped name.
    A user's file that is no longer where the fine-tune read it is an error saying so."""
    specs = []
    for entry in folder.entries:
        path = entry.info.get("task_file")
        if path is not None and not Path(path).is_file():
            raise ArtifactError(f"{folder.folder}: its task {entry.name} was read from {path}, which is gone; give the "
                                "task file again with --task FILE")
        specs.append(path or entry.name)
    return tuple(specs)


@dataclass
class LoadedFolder:
    """A fine-tuned folder loaded: the base model with its adapters attached (off until a task's turn)."""

    manifest: ModelFolder
    lm: Any  # LoadedModel with ``adapters``


def load_model_folder(folder: str | Path, *, quantized: bool | None = None) -> LoadedFolder:
    """The base model the manifest names (refused when its fingerprint differs), with each task's adapters (a
    format-1 folder: its one set for all its tasks), each file checked against the sha256 the manifest records."""
    from mlx_sdm.lm.adapters import ADAPTER_WEIGHTS_FILE, AdapterSource, attach_adapters, file_sha256
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.verifier import check_fingerprint

    manifest = read_model_folder(folder)
    lm = load_model(manifest.base_model, quantized=manifest.quantized if quantized is None else quantized)
    check_fingerprint(dict(manifest.fingerprint), lm.fingerprint, where=str(manifest.folder))
    groups: dict[str, list[FolderTask]] = {}
    for entry in manifest.entries:
        groups.setdefault(entry.adapters, []).append(entry)
    sources = []
    for relative, entries in groups.items():
        weights = manifest.folder / relative / ADAPTER_WEIGHTS_FILE
        if not weights.is_file() or file_sha256(weights) != entries[0].adapters_sha256:
            raise ArtifactError(f"{weights}: missing or not the file whose sha256 {MODEL_MANIFEST} records (changed "
                                "or truncated); rerun `mlx-sdm finetune` with the same --task and --out")
        name = entries[0].name if len(entries) == 1 else Path(relative).name
        sources.append(AdapterSource(name, manifest.folder / relative, tuple(e.instruction.instruction for e in entries)))
    adapters = attach_adapters(lm.model, sources, folder=str(manifest.folder))
    return LoadedFolder(manifest, replace(lm, adapters=adapters))  # a view: the loaded model object is not changed


def check_reads_adapters(verifier: Any, lm: Any, *, where: str) -> None:
    """Each task's verifier judges only with its own task's adapters: the member that judges a task must record
    (``info["adapters"]``) the sha256 of the set that answers it, and one built on the base model's states
    (none recorded) may judge no task that adapters answer."""
    recipe = verifier.recipe
    for prefix, name in zip([p for p, _ in recipe.task_systems], recipe.task_names or [None] * len(recipe.task_systems)):
        judge = verifier.member_for(name) if len(recipe.task_systems) > 1 else verifier
        wanted = (judge.info.get("adapters") or {}).get("sha256")
        serving = lm.adapters.set_for(prefix) if lm.adapters is not None else None
        have = serving.sha256 if serving is not None else None
        if wanted != have:
            task = name or prefix[:40]
            raise ModelMismatchError(
                f"{where}: its verifier of task {task} reads the states of the model with adapters "
                f"{str(wanted)[:12] if wanted else 'none'}, but the loaded model answers it with "
                f"{str(have)[:12] if have else 'none'}; load it with its own model folder (--model DIR)")
