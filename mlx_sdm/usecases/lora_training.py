"""Stage 1 of ``mlx-sdm finetune --task``: supervised LoRA on the gold answers, with mlx-lm's tuner.

mlx-lm's pieces make it: ``linear_to_lora_layers`` makes the LoRA layers, ``ChatDataset`` with ``mask_prompt``
renders each row with the model's chat template and masks the loss to the answer's tokens, ``iterate_batches``
batches them in a seeded order (its length sort reads a ``CacheDataset``'s raw rows, one key each, so it sorts
nothing: a batch is padded to its longest row). The frozen blocks below the adapted ones run once per row, not
once per epoch (``lora_cached.py``: its loop is ``mlx_lm.tuner.trainer.train``'s, from the cached hidden states; a
model it does not recognise trains with ``train`` itself, as before). This module decides *how long* and *at what
rank*:

- an epoch is one pass over the training rows (``train(iters=batches per epoch)``, the batch order seeded
  by the epoch), after which the model answers the validation rows (greedy, as a turn answers) and its
  task accuracy is recorded;
- a rank's epochs stop when validation accuracy reaches :data:`SATURATED` or stops improving
  (``PATIENCE`` epochs), and its best epoch is kept;
- a larger rank is tried only when the best validation accuracy so far is below the target;
- every finished epoch is a checkpoint (adapters, Adam's state, the record), written atomically, so a run
  killed at any moment resumes at the next epoch with the same result.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map_with_path

from mlx_sdm.atomic import atomic_directory, atomic_write_text
from mlx_sdm.errors import DataError, OutputError
from mlx_sdm.progress import without_escape_codes
from mlx_sdm.lm.adapters import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, LoraSettings, adapter_weights, \
    add_lora_layers, lora_layer_names
from mlx_sdm.usecases.lora_cached import FrozenCache, train_cached_epoch

#: Adam's learning rate for the LoRA stage (mlx-lm's default is 1e-5 for long runs; a few hundred short rows
#: need a larger step: docs/finetuning.md, the choice measured).
DEFAULT_LEARNING_RATE = 2e-4
DEFAULT_BATCH_SIZE = 4
DEFAULT_MAX_EPOCHS = 3
#: Ranks tried in order; the next only when the best validation accuracy so far is below the target.
DEFAULT_RANKS = (8, 16)
DEFAULT_TARGET_ACCURACY = 0.9
#: Validation accuracy at which more epochs cannot help.
SATURATED = 0.99
#: Epochs without a better validation accuracy before a rank stops.
PATIENCE = 1
EPOCH_RECORD = "epoch.json"
OPTIMIZER_FILE = "optimizer.safetensors"


@dataclass(frozen=True)
class LoraRow:
    """One training row: the chat as a turn renders it (``system`` + the user's ``prompt``) and the gold answer."""

    id: str
    task: str
    prompt: str
    answer: str
    system: str | None = None

    def messages(self) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + [{"role": "user", "content": self.prompt}, {"role": "assistant", "content": self.answer}]


@dataclass(frozen=True)
class LoraPlan:
    ranks: tuple[int, ...] = DEFAULT_RANKS
    num_layers: int = 8
    max_epochs: int = DEFAULT_MAX_EPOCHS
    learning_rate: float = DEFAULT_LEARNING_RATE
    batch_size: int = DEFAULT_BATCH_SIZE
    seed: int = 0
    target_accuracy: float = DEFAULT_TARGET_ACCURACY


@dataclass(frozen=True)
class Validation:
    """The model's greedy answers to the validation rows: task accuracy overall and per task."""

    accuracy: float
    per_task: dict[str, float] = field(default_factory=dict)
    well_formed: float = 0.0


@dataclass(frozen=True)
class EpochRecord:
    rank: int
    epoch: int
    train_loss: float
    validation: Validation
    seconds: float
    trained_tokens: int  # answer tokens the loss read (mlx-lm's count)
    tokens_per_second: float  # mlx-lm's own figure, over its last report window
    peak_memory_gb: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EpochRecord":
        return cls(**{**data, "validation": Validation(**data["validation"])})


@dataclass(frozen=True)
class LoraResult:
    adapters: Path  # mlx-lm's adapter folder of the chosen rank and epoch
    rank: int
    epoch: int
    validation: Validation
    history: tuple[EpochRecord, ...]

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.history)

    @property
    def trained_tokens(self) -> int:
        return sum(r.trained_tokens for r in self.history)


Validate = Callable[[], Validation]


def chat_dataset(rows: Sequence[LoraRow], tokenizer, max_length: int, where: dict[str, str]):
    """mlx-lm's ``ChatDataset`` (``mask_prompt``: the loss reads the answer's tokens only), cached; a row longer
    than the model's context is a DataError naming it and its task's file (``where``: task name -> file)."""
    from mlx_lm.tuner.datasets import CacheDataset, ChatDataset

    dataset = CacheDataset(ChatDataset([{"messages": r.messages()} for r in rows], tokenizer, mask_prompt=True))
    for index, row in enumerate(rows):
        tokens, offset = dataset[index]
        if len(tokens) > max_length:
            raise DataError(f"row {row.id!r} is {len(tokens)} tokens with its answer; the model reads at most "
                            f"{max_length}: shorten it or leave it out", path=where.get(row.task), field="prompt")
        if offset >= len(tokens):
            raise DataError(f"row {row.id!r} has an empty answer", path=where.get(row.task), field="answer")
    return dataset


class _Reports:
    """mlx-lm's ``TrainingCallback``: the last loss, throughput and peak memory it reported."""

    def __init__(self) -> None:
        self.loss, self.tokens_per_second, self.trained_tokens, self.peak_gb = float("nan"), 0.0, 0, 0.0

    def on_train_loss_report(self, info: dict[str, Any]) -> None:
        self.loss = float(info["train_loss"])
        self.tokens_per_second = float(info["tokens_per_second"])
        self.trained_tokens = int(info["trained_tokens"])
        self.peak_gb = max(self.peak_gb, float(info["peak_memory"]))

    def on_val_loss_report(self, info: dict[str, Any]) -> None:
        pass


def answer_batches(dataset, batch_size: int, max_seq_length: int, loop: bool = False, seed: int | None = None,
                   comm_group=None):
    """mlx-lm's ``iterate_batches`` (its padded batches in a seeded order), each with the answer
    window: the positions whose next token is an answer token, as [B, W] indices and a mask (W: the batch's
    longest answer). :func:`answer_loss` reads the vocabulary head at those positions only."""
    import numpy as np
    from mlx_lm.tuner.trainer import iterate_batches

    from mlx_sdm.usecases.lora_cached import answer_window

    for batch, lengths in iterate_batches(dataset, batch_size, max_seq_length, loop=loop, seed=seed,
                                          comm_group=comm_group):
        index, mask = answer_window(np.array(lengths.tolist(), dtype=np.int64))  # [offset, length] per row
        yield batch, mx.array(index), mx.array(mask)


def answer_loss(model, batch, index, mask):
    """The masked next-token cross-entropy of mlx-lm's ``default_loss`` over the answer tokens, with the
    vocabulary head applied at those positions only (on a 135M model with a 49k vocabulary the head is about a
    quarter of a step's work, and a prompt's positions are most of a row). mlx-lm's mask also counts one
    position past each row's end (a padding target); here only the answer's own tokens are targets
    (tests/test_lora_training.py checks the two agree on the same targets)."""
    from mlx_sdm.lm.generation import default_head

    inputs, targets = batch[:, :-1], batch[:, 1:]
    hidden = model.model(inputs)
    picked = mx.take_along_axis(hidden, index[:, :, None], axis=1)
    logits = default_head(model)(picked)
    wanted = mx.take_along_axis(targets, index, axis=1)
    ce = nn.losses.cross_entropy(logits, wanted) * mask
    ntoks = mask.sum()
    return ce.astype(mx.float32).sum() / ntoks, ntoks


def train_one_epoch(model, optimizer, dataset, plan: LoraPlan, epoch_seed: int, scratch: Path, *,
                    show: bool = True, cache: FrozenCache | None = None, steps_per_report: int | None = None) -> _Reports:
    """One pass over ``dataset`` (its batches ordered by ``epoch_seed``): from ``cache``'s hidden states through the
    adapted blocks only (lora_cached.py), or, without one, mlx-lm's ``train`` on the whole model."""
    from mlx_lm.tuner.trainer import TrainingArgs, train

    batches = len(dataset) // plan.batch_size
    if batches < 1:
        raise DataError(f"{len(dataset)} training rows are fewer than one batch of {plan.batch_size}",
                        field="batch_size")
    reports = _Reports()
    every = steps_per_report or max(1, min(10, batches))
    quiet = without_escape_codes() if show else contextlib.redirect_stdout(io.StringIO())  # mlx-lm's colours
    made = cache.get() if cache is not None else None
    if made is not None:
        with quiet:
            train_cached_epoch(model, optimizer, dataset, made[1], made[0], batch_size=plan.batch_size,
                               seed=epoch_seed, reports=reports, steps_per_report=every, show=show)
        return reports
    scratch.mkdir(parents=True, exist_ok=True)
    args = TrainingArgs(batch_size=plan.batch_size, iters=batches, steps_per_report=every,
                        steps_per_eval=batches + 1, steps_per_save=batches + 1,
                        adapter_file=str(scratch / ADAPTER_WEIGHTS_FILE), max_seq_length=1 << 20)
    with quiet:
        train(model, optimizer, dataset, None, args, loss=answer_loss,
              iterate_batches=partial(answer_batches, seed=epoch_seed), training_callback=reports)  # type: ignore[arg-type]
    return reports


def _epoch_dir(work: Path, rank: int, epoch: int) -> Path:
    return work / f"rank-{rank}" / f"epoch-{epoch}"


def _save_epoch(folder: Path, model, optimizer, settings: LoraSettings, record: EpochRecord) -> None:
    """The epoch's checkpoint, whole or not at all (a full disk leaves the previous epochs' as they were)."""
    try:
        with atomic_directory(folder) as tmp:
            mx.save_safetensors(str(tmp / ADAPTER_WEIGHTS_FILE), adapter_weights(model))
            mx.save_safetensors(str(tmp / OPTIMIZER_FILE), dict(tree_flatten(optimizer.state)))
            (tmp / ADAPTER_CONFIG_FILE).write_text(json.dumps(settings.adapter_config(), indent=2))
            (tmp / EPOCH_RECORD).write_text(json.dumps(record.to_dict(), indent=2))
    except (OSError, RuntimeError) as exc:  # MLX reports a failed write as a RuntimeError
        raise OutputError(f"{folder}: cannot write epoch {record.epoch}'s checkpoint ({exc}); free some space and "
                          "rerun the same command: it continues from the last epoch written") from None


def _read_epoch(folder: Path) -> EpochRecord | None:
    path = folder / EPOCH_RECORD
    if not path.is_file():
        return None
    try:
        return EpochRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, TypeError, KeyError):
        return None  # a damaged record: that epoch runs again


def _restore_epoch(folder: Path, model, optimizer) -> None:
    """The adapters and Adam's state (its moments, step and rate) as the epoch left them."""
    model.load_weights(list(mx.load(str(folder / ADAPTER_WEIGHTS_FILE)).items()), strict=False)
    saved = mx.load(str(folder / OPTIMIZER_FILE))
    optimizer.init(model.trainable_parameters())
    optimizer.state = tree_map_with_path(lambda path, value: saved.get(path, value), optimizer.state)
    mx.eval(model.parameters(), optimizer.state)


def _stops(history: list[EpochRecord]) -> bool:
    """This rank's epochs end: validation is saturated, or ``PATIENCE`` epochs brought nothing better."""
    best = max(r.validation.accuracy for r in history)
    if best >= SATURATED:
        return True
    since_best = len(history) - 1 - max(i for i, r in enumerate(history) if r.validation.accuracy == best)
    return since_best >= PATIENCE


def best_epoch(history: Sequence[EpochRecord]) -> EpochRecord:
    """The highest validation accuracy; ties go to the smaller rank, then the earlier epoch."""
    return max(history, key=lambda r: (r.validation.accuracy, -r.rank, -r.epoch))


def train_rank(model, dataset, rank: int, plan: LoraPlan, work: Path, validate: Validate, *, show: bool,
               log: Callable[[str], None], cache: FrozenCache | None = None) -> list[EpochRecord]:
    """One rank's epochs from fresh LoRA layers (seeded), resuming after the last checkpointed epoch."""
    import mlx.optimizers as optim
    from mlx_lm.tuner.utils import remove_lora_layers

    if lora_layer_names(model):
        remove_lora_layers(model)
    settings = LoraSettings(rank, plan.num_layers)
    mx.random.seed(plan.seed * 1000 + rank)  # the LoRA layers' initial A (B starts at zero)
    model.freeze()
    add_lora_layers(model, settings)
    optimizer = optim.Adam(learning_rate=plan.learning_rate)
    history: list[EpochRecord] = []
    for epoch in range(1, plan.max_epochs + 1):
        folder = _epoch_dir(work, rank, epoch)
        record = _read_epoch(folder)
        if record is not None:  # done before a restart: its state, then the next epoch
            _restore_epoch(folder, model, optimizer)
            log(f"rank {rank} epoch {epoch}: from the checkpoint (validation accuracy {record.validation.accuracy:.3f})")
        else:
            record = _run_epoch(model, optimizer, dataset, plan, settings, epoch, folder, validate, show=show,
                                cache=cache)
            log(f"rank {rank} epoch {epoch}: loss {record.train_loss:.3f}, validation accuracy "
                f"{record.validation.accuracy:.3f} ({record.seconds:.0f} s, {record.tokens_per_second:.0f} answer tokens/s)")
        history.append(record)
        if _stops(history):
            break
    return history


def _run_epoch(model, optimizer, dataset, plan: LoraPlan, settings: LoraSettings, epoch: int, folder: Path,
               validate: Validate, *, show: bool, cache: FrozenCache | None = None) -> EpochRecord:
    started = time.perf_counter()
    model.train()
    reports = train_one_epoch(model, optimizer, dataset, plan, plan.seed * 1000 + settings.rank * 10 + epoch,
                              folder.parent, show=show, cache=cache)
    model.eval()
    validation = validate()
    record = EpochRecord(settings.rank, epoch, reports.loss, validation, time.perf_counter() - started,
                         reports.trained_tokens, reports.tokens_per_second, reports.peak_gb)
    _save_epoch(folder, model, optimizer, settings, record)
    return record


def train_lora(lm, dataset, plan: LoraPlan, work: Path, validate: Validate, out: Path, *,
               show: bool = True, log: Callable[[str], None] = print, cached: bool = True) -> LoraResult:
    """Stage 1 (module docstring) on ``dataset`` (:func:`chat_dataset`): the chosen rank's best epoch written to
    ``out`` as mlx-lm's adapter folder (``cached``: the frozen blocks run once per row, lora_cached.py); the model is returned without LoRA layers (the folder's adapters are
    attached for the tasks' turns by :func:`mlx_sdm.lm.adapters.attach_adapters`)."""
    from mlx_lm.tuner.utils import remove_lora_layers

    history: list[EpochRecord] = []
    cache = FrozenCache(lm.model, dataset, plan.num_layers, work, log) if cached else None
    try:
        for rank in plan.ranks:
            history += train_rank(lm.model, dataset, rank, plan, work, validate, show=show, log=log, cache=cache)
            if best_epoch(history).validation.accuracy >= plan.target_accuracy:
                break
    finally:
        if cache is not None:
            cache.close()
    remove_lora_layers(lm.model)
    chosen = best_epoch(history)
    source = _epoch_dir(work, chosen.rank, chosen.epoch)
    with atomic_directory(out) as tmp:
        shutil.copy2(source / ADAPTER_WEIGHTS_FILE, tmp / ADAPTER_WEIGHTS_FILE)
        settings = LoraSettings(chosen.rank, plan.num_layers)
        (tmp / ADAPTER_CONFIG_FILE).write_text(json.dumps(settings.adapter_config(
            chosen_by="mlx-sdm finetune: validation accuracy", rank=chosen.rank, epoch=chosen.epoch), indent=2))
    return LoraResult(out, chosen.rank, chosen.epoch, chosen.validation, tuple(history))


def write_result(path: Path, result: LoraResult) -> None:
    atomic_write_text(path, json.dumps({"adapters": str(result.adapters), "rank": result.rank, "epoch": result.epoch,
                                        "validation": asdict(result.validation),
                                        "history": [r.to_dict() for r in result.history]}, indent=2))


def read_result(path: Path) -> LoraResult | None:
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return LoraResult(Path(data["adapters"]), int(data["rank"]), int(data["epoch"]), Validation(**data["validation"]),
                      tuple(EpochRecord.from_dict(r) for r in data["history"]))
