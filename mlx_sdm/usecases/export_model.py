"""``mlx-sdm export DIR --out OUT``: a fine-tuned folder's adapters fused into its base model, written as one plain
mlx-lm model folder (``mlx_lm.generate --model OUT`` loads it; no adapters, no mlx-sdm needed), and with ``gguf``
a GGUF file beside it (mlx-lm's own export, for the architectures it supports: llama, mistral, mixtral).

The fuse is mlx-lm's (``mlx_lm fuse``'s steps): its ``load_adapters`` puts the LoRA layers on the base, each
layer's ``fuse()`` folds ``scale · B·A`` into the weight, ``save_model``/``save_config`` and the tokenizer's
``save_pretrained`` write the folder. The verifier does not travel with it: the folder's verifier reads the adapted
model's states through mlx-sdm, so an exported model's answers are unverified wherever it runs.

A folder holds one adapter set for all its tasks (``DIR/adapters/``) or one a task (``DIR/adapters/<task>/``);
:func:`adapter_folder_for` is the one place that tells them apart."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mlx_sdm.errors import DataError

#: The architectures mlx-lm's GGUF export writes (mlx_lm.fuse's own list).
GGUF_ARCHITECTURES = ("llama", "mistral", "mixtral")
GGUF_FILE = "model.gguf"
#: What the export writes beside the weights: where it came from, and that it carries no verifier.
EXPORT_NOTE = "mlx-sdm-export.json"
NO_VERIFIER = ("the verifier does not travel with an exported model: its answers are unverified wherever it runs "
               "(use the fine-tuned folder with `mlx-sdm chat/serve --model DIR` for verified answers)")


@dataclass(frozen=True)
class ExportResult:
    out: Path
    adapters: Path
    task: str | None
    architecture: str
    gguf: Path | None


def adapter_folder_for(folder: Path, task: str | None, tasks: Sequence[str]) -> Path:
    """The adapter set that answers ``task`` (None: the folder's only one): ``DIR/adapters/<task>/`` when the
    folder keeps one set a task, else ``DIR/adapters/`` (one set for every task of ``tasks``). A DataError names
    the tasks there are when none fits."""
    from mlx_sdm.lm.adapters import ADAPTER_WEIGHTS_FILE
    from mlx_sdm.usecases.model_folder import ADAPTERS_DIR

    root = Path(folder) / ADAPTERS_DIR
    per_task = sorted(p.name for p in root.iterdir() if (p / ADAPTER_WEIGHTS_FILE).is_file()) if root.is_dir() else []
    if task is not None and task in per_task:
        return root / task
    if (root / ADAPTER_WEIGHTS_FILE).is_file() and (task is None or task in tasks):
        return root
    if task is None and len(per_task) == 1:
        return root / per_task[0]
    known = per_task or list(tasks)
    if task is None and known:
        raise DataError(f"this folder has adapters for several tasks: name one with --task ({', '.join(known)})",
                        path=str(folder), field="--task")
    raise DataError(f"no adapters for task {task!r} here; its tasks: {', '.join(known) or 'none'}", path=str(folder),
                    field="--task")


def export_folder(folder: str | Path, out: str | Path, *, task: str | None = None, gguf: bool = False) -> ExportResult:
    """The folder's base model with ``task``'s adapters fused in, saved at ``out`` (module docstring)."""
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.tuner.utils import load_adapters
    from mlx_lm.utils import dequantize_model, save_config, save_model

    from mlx_sdm.atomic import atomic_directory, check_output_folder
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.verifier import check_fingerprint
    from mlx_sdm.lm.adapters import ADAPTER_WEIGHTS_FILE, file_sha256
    from mlx_sdm.usecases.model_folder import read_model_folder

    manifest = read_model_folder(folder)
    adapters = adapter_folder_for(manifest.folder, task, [t.name for t in manifest.tasks])
    out = check_output_folder(out)
    architecture = str(manifest.fingerprint.get("architecture", "unknown"))
    if gguf and architecture not in GGUF_ARCHITECTURES:  # refused before the model loads
        raise DataError(f"mlx-lm writes GGUF for {', '.join(GGUF_ARCHITECTURES)} models; this one is {architecture}: "
                        "export without --gguf", path=str(folder), field="--gguf")
    lm = load_model(manifest.base_model, quantized=manifest.quantized)
    check_fingerprint(dict(manifest.fingerprint), lm.fingerprint, where=str(manifest.folder))
    config = dict(lm.config)
    model = lm.model
    load_adapters(model, str(adapters))
    fused = [(name, module.fuse(dequantize=gguf)) for name, module in model.named_modules() if hasattr(module, "fuse")]
    model.update_modules(tree_unflatten(fused))
    if gguf and "quantization" in config:  # mlx-lm's GGUF export reads float weights only
        model = dequantize_model(model)
        config.pop("quantization", None)
        config.pop("quantization_config", None)
    with atomic_directory(out) as tmp:
        save_model(tmp, model, donate_model=False)
        save_config(config, config_path=tmp / "config.json")
        lm.tokenizer.save_pretrained(str(tmp))
        if gguf:
            from mlx_lm.gguf import convert_to_gguf

            convert_to_gguf(tmp, dict(tree_flatten(model.parameters())), config, str(tmp / GGUF_FILE))
        (tmp / EXPORT_NOTE).write_text(json.dumps({
            "exported_from": str(Path(folder).resolve()), "base_model": manifest.base_model, "task": task,
            "adapters": str(adapters.relative_to(manifest.folder)), "adapters_sha256": file_sha256(adapters / ADAPTER_WEIGHTS_FILE),
            "tasks": [t.to_dict() for t in manifest.tasks],  # each task's instruction and system prompt, to ask it so
            "verifier": None, "note": NO_VERIFIER}, indent=2) + "\n", encoding="utf-8")
    return ExportResult(out, adapters, task, architecture, out / GGUF_FILE if gguf else None)
