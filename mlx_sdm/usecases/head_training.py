"""A fine-tuning run from a config: the YAML/flag layer of ``mlx-sdm finetune`` around Alg. 4
(:func:`mlx_sdm.network.trainer.train_positive_head`).

Keys follow mlx-lm's ``lora_config.yaml`` where the meaning is the same (``model``, ``data``,
``seed``, ``batch_size``, ``learning_rate``, ``steps_per_report``, ``adapter_path``,
``resume_adapter_file``); the SDM-network ones are named for what they hold. Unknown keys are an
error that names the key. The training keys are :class:`~mlx_sdm.network.trainer.FinetuneArgs`' own
fields (one set of defaults); :class:`FinetuneConfig` holds one and adds where the model, verifier,
data and head are.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from mlx_sdm.errors import DataError
from mlx_sdm.network.trainer import FinetuneArgs

DEFAULT_ADAPTER_PATH = "sdm-head"
#: ``data: package:fever``: a task shipped inside mlx-sdm (works from a wheel install, any folder).
PACKAGE_PREFIX = "package:"


@dataclass
class FinetuneConfig:
    model: str | None = field(default=None, metadata={"help": "model: 'smollm2' (embedded, default), a folder, a .gguf or a hub id"})
    quantized: bool = field(default=False, metadata={"help": "load the frozen base 4-bit"})
    verifier: str | None = field(default=None, metadata={"help": "document verifier folder (default: the shipped one for SmolLM2)"})
    data: str | None = field(default=None, metadata={"help": "folder with train.jsonl + valid.jsonl (calibration), a BIG-bench "
                                                     "task.json, package:fever (FEVER claims shipped with mlx-sdm), or a "
                                                     "verifier recipe (a recipe.json, or a verifier folder or shipped name "
                                                     "holding one)"})
    pool_size: int | None = field(default=None, metadata={"help": "with a task.json: train ∪ calibration pool (default: the verifier's)"})
    test_size: int | None = field(default=None, metadata={"help": "with a task.json: held-out documents after the pool (default: the verifier's)"})
    train_size: int | None = field(default=None, metadata={"help": "with a task.json: leading part of the pool's training half to use"})
    calibration_size: int | None = field(default=None, metadata={"help": "with a task.json: leading part of the pool's calibration half"})
    task_train_sizes: dict[str, int] | None = field(default=None, metadata={"help": "with a recipe: per task, the leading part of its D_tr to train on (train_size for the others)"})
    task_calibration_sizes: dict[str, int] | None = field(default=None, metadata={"help": "with a recipe: per task, the leading part of its D_ca (calibration_size for the others)"})
    adapter_path: str = field(default=DEFAULT_ADAPTER_PATH, metadata={"help": "output folder of the positive head"})
    resume_adapter_file: str | None = field(default=None, metadata={"help": "start from this trained head folder"})
    args: FinetuneArgs = field(default_factory=FinetuneArgs)  # epochs, batch_size, learning_rate, seed, beta, resume, ...

    @property
    def checkpoint_path(self) -> Path:
        path = Path(self.adapter_path)
        return path.with_name(path.name + ".checkpoint")


#: Run keys (FinetuneConfig's own) and training keys (FinetuneArgs'; the checkpoint follows adapter_path).
RUN_KEYS = tuple(f.name for f in dataclasses.fields(FinetuneConfig) if f.name != "args")
TRAINING_KEYS = tuple(f.name for f in dataclasses.fields(FinetuneArgs) if f.name != "checkpoint_path")
CONFIG_KEYS = RUN_KEYS + TRAINING_KEYS


def read_config_file(path: str | Path, known: Sequence[str] = CONFIG_KEYS) -> dict[str, Any]:
    """Read a YAML config (mlx-lm's loader, so ``1e-5`` is a float); a key not in ``known`` is a DataError."""
    import yaml
    from mlx_lm.lora import yaml_loader

    path = str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.load(handle, yaml_loader)
    except FileNotFoundError:
        raise DataError("no such config file", path=path) from None
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise DataError(f"not valid YAML ({getattr(exc, 'problem', exc)})", path=path, line=None if line is None else line + 1) from None
    raw = raw or {}
    if not isinstance(raw, dict):
        raise DataError("the config must be a mapping of key: value", path=path)
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key).replace("-", "_"), list(known), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise DataError(f"unknown key; {hint}known keys: {', '.join(known)}", path=path, field=str(key))
    return raw


def _checked(name: str, value: Any, default: Any, source: str) -> Any:
    """``value`` for a key whose default is ``default``, type-checked (a DataError names the key)."""
    kind = type(default) if default is not None else None
    if name in ("task_train_sizes", "task_calibration_sizes") and value is not None:
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                                                  and v >= 0 for k, v in value.items()):
            raise DataError(f"must map task names to whole numbers ≥ 0, got {value!r}", path=source, field=name)
        return dict(value)
    if name in ("train_size", "calibration_size", "pool_size", "test_size") and value is not None:
        kind = int
    if kind is bool and not isinstance(value, bool):
        raise DataError(f"must be true or false, got {value!r}", path=source, field=name)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise DataError(f"must be an integer, got {value!r}", path=source, field=name)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DataError(f"must be a number, got {value!r}", path=source, field=name)
        value = float(value)
    return value


def build_config(file_values: dict[str, Any], overrides: dict[str, Any], *, source: str = "config") -> FinetuneConfig:
    """File values, then command-line overrides (those not None), onto the defaults; types checked."""
    values = {**file_values, **{k: v for k, v in overrides.items() if v is not None}}
    config = FinetuneConfig()
    for name in RUN_KEYS:
        if name in values:
            setattr(config, name, _checked(name, values[name], getattr(config, name), source))
    for name in TRAINING_KEYS:
        if name in values:
            setattr(config.args, name, _checked(name, values[name], getattr(config.args, name), source))
    for name in ("epochs", "batch_size"):
        if getattr(config.args, name) < 1:
            raise DataError(f"must be at least 1, got {getattr(config.args, name)}", path=source, field=name)
    if config.args.learning_rate < 0:
        raise DataError("must not be negative", path=source, field="learning_rate")
    config.args.checkpoint_path = str(config.checkpoint_path)
    return config


def load_documents(config: FinetuneConfig, tokenizer, verifier_info: dict[str, Any] | None = None) -> tuple[list, list]:
    """(train, calibration) FinetuneDocuments from ``config.data``."""
    from mlx_sdm.network.data import from_verification_documents, read_documents_jsonl

    if config.data is None:
        raise DataError("no data; set `data:` to a folder with train.jsonl and valid.jsonl, a BIG-bench task.json, "
                        "or package:fever", field="data")
    path = Path(config.data)
    recipe = recipe_path(config.data)
    if recipe is not None:
        return recipe_documents_for(config, recipe, tokenizer)
    if config.data.startswith(PACKAGE_PREFIX) or path.suffix == ".json":
        train, calibration = task_documents(config, verifier_info or {})
        return from_verification_documents(train, tokenizer), from_verification_documents(calibration, tokenizer)
    if path.is_dir():
        train_file, valid_file = path / "train.jsonl", path / "valid.jsonl"
        for file in (train_file, valid_file):
            if not file.is_file():
                raise DataError(
                    f"missing {file.name}; the data folder needs train.jsonl (training) and valid.jsonl (calibration), "
                    "rows {prompt, completion, label, task_label}",
                    path=str(path),
                    field="data",
                )
        return read_documents_jsonl(train_file), read_documents_jsonl(valid_file)
    raise DataError("expected a folder with train.jsonl + valid.jsonl, a BIG-bench task.json, or package:fever",
                    path=str(path), field="data")


def task_documents(config: FinetuneConfig, verifier_info: dict[str, Any]) -> tuple[list, list]:
    """(train, calibration) VerificationDocuments of a BIG-bench task: a task.json, or one shipped in the
    package (``package:NAME``, the same examples as its task.json, so the same documents)."""
    from mlx_sdm.network.encoding import encode_examples, encode_task, task_format_for

    data = str(config.data)
    if data.startswith(PACKAGE_PREFIX):
        from mlx_sdm.network.tasks.registry import packaged_bigbench_examples

        name, examples = packaged_bigbench_examples(data[len(PACKAGE_PREFIX):])
        documents = encode_examples(name, examples, task_format_for(name, examples), path=data)
    else:
        documents = encode_task(data)
    return split_task_documents(documents, config, data, verifier_info)


def recipe_path(data: str) -> Path | None:
    """The verifier recipe ``data`` names (a recipe.json, or a verifier folder or shipped name with one), or None."""
    from mlx_sdm.usecases.verifier_recipe import RECIPE_FILE
    from mlx_sdm.resources import resolve_artifact

    path = resolve_artifact(data)
    if path.is_dir() and (path / RECIPE_FILE).is_file():
        return path / RECIPE_FILE
    return path if path.name == RECIPE_FILE and path.is_file() else None


def recipe_documents_for(config: FinetuneConfig, recipe: Path, tokenizer) -> tuple[list, list]:
    """(train, calibration) on the recipe's pool halves: per task ``task_*_sizes`` or else ``*_size`` leading
    documents (all of a half when neither is set)."""
    from mlx_sdm.usecases.suite_verifier import recipe_finetune_documents
    from mlx_sdm.usecases.verifier_recipe import read_recipe

    read = read_recipe(recipe)
    def sizes(per_task: dict[str, int] | None, default: int | None) -> dict[str, int]:
        base = {name: default for name in read.tasks} if default is not None else {}
        return {**base, **(per_task or {})}

    return recipe_finetune_documents(read, sizes(config.task_train_sizes, config.train_size),
                                     sizes(config.task_calibration_sizes, config.calibration_size), tokenizer)


def split_task_documents(documents: Sequence, config: FinetuneConfig, where: str, verifier_info: dict[str, Any]) -> tuple[list, list]:
    """The verifier builder's split (``encoding.benchmark_splits``): a seeded pool, halved into
    training and calibration documents (Alg. 4 fine-tunes on the verifier's own D_tr and picks the
    epoch on its D_ca), and a held-out test part that is never used here. ``pool_size`` and
    ``test_size`` default to the verifier's (its manifest ``info``); ``train_size`` and
    ``calibration_size`` take leading subsets of the two halves."""
    from mlx_sdm.network.encoding import benchmark_splits

    pool_size = config.pool_size if config.pool_size is not None else int(verifier_info.get("pool_size", len(documents)))
    test_size = config.test_size if config.test_size is not None else int(verifier_info.get("test_size", 0))
    if pool_size + test_size > len(documents):
        raise DataError(f"asked for a pool of {pool_size} and {test_size} held out but the task has {len(documents)}",
                        path=where, field="pool_size")
    pool, _ = benchmark_splits(documents, pool_size=pool_size, test_size=test_size, seed=int(verifier_info.get("seed", 0)))
    half = len(pool) // 2
    train, calibration = pool[:half], pool[half:]
    if config.train_size is not None:
        train = train[: config.train_size]
    if config.calibration_size is not None:
        calibration = calibration[: config.calibration_size]
    return train, calibration


def check_run_outputs(config: FinetuneConfig) -> None:
    """Before any model work: the head and checkpoint folders can be written (not a file, not someone's
    folder, not read-only), and ``resume`` has a checkpoint to continue from."""
    from mlx_sdm.atomic import check_output_folder
    from mlx_sdm.network.checkpoint import STATE_FILE, read_checkpoint_state
    from mlx_sdm.network.heads import HEAD_MANIFEST_FILE

    check_output_folder(config.adapter_path, force=True, artifact_files=(HEAD_MANIFEST_FILE,))
    check_output_folder(config.checkpoint_path, force=True, artifact_files=(STATE_FILE,))
    if config.args.resume and read_checkpoint_state(config.checkpoint_path) is None:
        raise DataError(f"nothing to resume: no checkpoint at {config.checkpoint_path} (a run writes one after each "
                        "epoch there); to start a new run, drop --resume (resume: false in the config), or give the "
                        "--adapter-path of the run to continue", field="resume")


def run_finetune(config: FinetuneConfig):
    """Load the model and verifier, fine-tune (Alg. 4), save the head; returns (FinetuneResult, head path)."""
    import mlx.core as mx

    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.heads import HeadManifest, VocabularyHeads, load_head, save_head
    from mlx_sdm.network.finetune_scoring import LMScorer
    from mlx_sdm.network.trainer import train_positive_head
    from mlx_sdm.network.verifier import DEFAULT_VERIFIER_DIR, DocumentVerifier
    from mlx_sdm.progress import progress_bar
    from mlx_sdm.resources import resolve_artifact

    check_run_outputs(config)
    group = mx.distributed.init()
    lm = load_model(config.model, quantized=config.quantized)
    verifier_dir = resolve_artifact(config.verifier) if config.verifier else DEFAULT_VERIFIER_DIR
    verifier = DocumentVerifier.load(verifier_dir, expect_fingerprint=lm.fingerprint)
    train, calibration = load_documents(config, lm.tokenizer, verifier.info)
    heads = None
    if config.resume_adapter_file:
        heads = load_head(config.resume_adapter_file, lm.model, lm.fingerprint)
    else:
        heads = VocabularyHeads.from_model(lm.model)
    show = config.args.progress and group.rank() == 0
    progress = (lambda items: progress_bar(items, desc="generate", unit="doc", leave=False)) if show else None
    scorer = LMScorer.from_verifier(lm, verifier, progress=progress)
    args = dataclasses.replace(config.args, checkpoint_path=str(config.checkpoint_path))
    verifier_info = {"path": str(verifier_dir), "model_fingerprint": verifier.model_fingerprint, "feature": verifier.manifest()["feature"]}
    result = train_positive_head(
        lm,
        train,
        calibration,
        scorer,
        args,
        heads=heads,
        group=group,
        run_identity={"model": lm.fingerprint, "verifier": str(verifier_dir), "start_head": config.resume_adapter_file},
    )
    if group.rank() == 0:
        manifest = HeadManifest(
            base_model=dict(lm.fingerprint, name=lm.name),
            verifier=verifier_info,
            tasks=[t.to_dict() for t in verifier.recipe.task_instructions()],
            data_hash=result.data_hash,
            epochs=result.epochs_run,
            best_epoch=result.best_epoch,
            metrics={
                "calibration_admitted_untuned": result.initial_metric,
                "calibration_admitted_best": result.best_metric,
                "history": result.history,
                "train_documents": len(train),
                "calibration_documents": len(calibration),
                "config": dataclasses.asdict(config),
            },
        )
        save_head(config.adapter_path, result.heads, manifest)
    return result, Path(config.adapter_path)
