"""A fine-tuned model folder: what ``mlx-sdm finetune --task`` writes and ``--model DIR`` loads.

    DIR/mlx-sdm-model.json   the manifest: base model (spec + fingerprint), tasks, adapters, head, verifier
    DIR/adapters/            LoRA adapters in mlx-lm's format (``mlx_lm.generate --adapter-path DIR/adapters``)
    DIR/head/                the SDM-network positive head (Alg. 4), compact form; absent when not kept
    DIR/verifier/            the document verifier built on the adapted model's own answers
    DIR/report.md            the before/after report (report.json: the same numbers)

The manifest is written last, so a folder without one is a run still in progress (``finetune`` resumes it).
Loading checks the base model's fingerprint (a folder refuses another base, as heads and verifiers do), then
attaches the adapters for the tasks' turns only (``lm/adapters.py``): every other turn is the base model's.
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
MODEL_FORMAT_VERSION = 1
ADAPTERS_DIR = "adapters"
HEAD_DIR = "head"
VERIFIER_DIR = "verifier"
REPORT_MD = "report.md"
REPORT_JSON = "report.json"


@dataclass(frozen=True)
class ModelFolder:
    """The manifest of a fine-tuned model folder."""

    folder: Path
    base_model: str | None  # the spec the base loads from: None/"smollm2" (embedded), a folder, a hub id
    fingerprint: dict[str, Any]  # the base model's (lm/loading.py model_fingerprint)
    tasks: tuple[TaskInstruction, ...]  # the tasks the adapters (and head) were trained on
    adapters_sha256: str
    quantized: bool = False
    has_head: bool = False
    has_verifier: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # rank, epoch, seed, splits, timings (report.json has more)

    @property
    def adapters(self) -> Path:
        return self.folder / ADAPTERS_DIR

    @property
    def head(self) -> Path | None:
        return self.folder / HEAD_DIR if self.has_head else None

    @property
    def verifier(self) -> Path | None:
        return self.folder / VERIFIER_DIR if self.has_verifier else None

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": MODEL_FORMAT_VERSION, "kind": "mlx-sdm fine-tuned model",
                "base_model": {"spec": self.base_model, **self.fingerprint}, "quantized": self.quantized,
                "tasks": [t.to_dict() for t in self.tasks],
                "adapters": {"path": ADAPTERS_DIR, "sha256": self.adapters_sha256},
                "head": HEAD_DIR if self.has_head else None, "verifier": VERIFIER_DIR if self.has_verifier else None,
                "info": self.info}

    def save(self) -> None:
        """Write the manifest (last, atomically: the folder is complete from this moment)."""
        atomic_write_text(self.folder / MODEL_MANIFEST, json.dumps(self.to_dict(), indent=2) + "\n")


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
    if data.get("format_version") != MODEL_FORMAT_VERSION:
        raise ArtifactError(f"{path}: field 'format_version' is {data.get('format_version')!r}; this mlx-sdm reads "
                            f"{MODEL_FORMAT_VERSION}: rerun `mlx-sdm finetune` with this version")
    try:
        base = dict(data["base_model"])
        tasks = read_task_instructions(data["tasks"], where=str(path)) or ()
        sha = str(data["adapters"]["sha256"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"{path}: missing or malformed field ({exc}); rerun `mlx-sdm finetune`") from None
    spec = base.pop("spec", None)
    return ModelFolder(folder, spec, base, tasks, sha, bool(data.get("quantized", False)),
                       has_head=data.get("head") is not None and (folder / HEAD_DIR).is_dir(),
                       has_verifier=data.get("verifier") is not None and (folder / VERIFIER_DIR).is_dir(),
                       info=dict(data.get("info") or {}))


def task_specs(folder: ModelFolder) -> tuple[str, ...]:
    """The ``--task`` values that made this folder: each task's file where it was a user's, else its shipped name.
    A user's file that is no longer where the fine-tune read it is an error saying so."""
    files = dict(folder.info.get("task_files") or {})
    specs = []
    for task in folder.tasks:
        path = files.get(task.name)
        if path is not None and not Path(path).is_file():
            raise ArtifactError(f"{folder.folder}: its task {task.name} was read from {path}, which is gone; give the "
                                "task file again with --task FILE")
        specs.append(path or str(task.name))
    return tuple(specs)


@dataclass
class LoadedFolder:
    """A fine-tuned folder loaded: the base model with its adapters attached (off until a task's turn)."""

    manifest: ModelFolder
    lm: Any  # LoadedModel with ``adapters``


def load_model_folder(folder: str | Path, *, quantized: bool | None = None) -> LoadedFolder:
    """The base model the manifest names (refused when its fingerprint differs), with the folder's adapters."""
    from mlx_sdm.lm.adapters import attach_adapters, file_sha256, ADAPTER_WEIGHTS_FILE
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.verifier import check_fingerprint

    manifest = read_model_folder(folder)
    lm = load_model(manifest.base_model, quantized=manifest.quantized if quantized is None else quantized)
    check_fingerprint(dict(manifest.fingerprint), lm.fingerprint, where=str(manifest.folder))
    if file_sha256(manifest.adapters / ADAPTER_WEIGHTS_FILE) != manifest.adapters_sha256:
        raise ArtifactError(f"{manifest.adapters / ADAPTER_WEIGHTS_FILE}: does not match the sha256 "
                            f"{MODEL_MANIFEST} records (changed or truncated); rerun `mlx-sdm finetune`")
    adapters = attach_adapters(lm.model, manifest.adapters, instructions=tuple(t.instruction for t in manifest.tasks))
    return LoadedFolder(manifest, replace(lm, adapters=adapters))  # a view: the loaded model object is not changed


def check_reads_adapters(info: dict[str, Any], lm: Any, *, where: str) -> None:
    """A verifier built on an adapted model's states (``info["adapters"]``) judges only with those adapters."""
    wanted = (info.get("adapters") or {}).get("sha256")
    have = lm.adapters.sha256 if lm.adapters is not None else None
    if wanted != have:
        raise ModelMismatchError(
            f"{where}: this verifier reads the states of the model with adapters {str(wanted)[:12] or 'none'}, but the "
            f"loaded model has {str(have)[:12] if have else 'none'}; load it with its own model folder (--model DIR)")
