"""The plan of a ``mlx-sdm finetune --task`` run: its arguments, each task's rows by use (the splits and
their checks), the run's folder and records, and the values its stages hand on (``task_finetune.py`` runs
the stages; ``finetune_report.py`` writes what they made)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from mlx_sdm.calibration.data import MIN_PER_CLASS
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.errors import DataError
from mlx_sdm.network.coverage import TaskInstruction
from mlx_sdm.network.tasks import HELD_OUT_FRACTION, HELD_OUT_SIZE, Task, TaskItem
from mlx_sdm.network.tasks.task_files import TableColumns
from mlx_sdm.usecases.lora_training import LoraPlan, LoraRow, Validation

DEFAULT_TRAIN_ROWS = 320
DEFAULT_VALIDATION_ROWS = 40
DEFAULT_VERIFIER_ROWS = 300
DEFAULT_EVAL_ROWS = 100
#: Alg. 4 over the adapted base: the shipped head's settings (docs/finetuning.md): 2 epochs at lr 1e-2.
DEFAULT_HEAD_EPOCHS = 2
DEFAULT_HEAD_LEARNING_RATE = 1e-2
#: Rank of the compact head written into the folder (``mlx-sdm compress-head``'s form).
DEFAULT_HEAD_RANK = 64
#: Alg. 4 regenerates every document's answer before each epoch: it reads at most this many rows of each half
#: per task (the shipped head was trained on 200 documents and chosen on 132).
DEFAULT_HEAD_ROWS = 60
IDENTITY_KEYS = ("tasks", "model", "quantized", "seed", "lora", "train_rows", "validation_rows", "verifier_rows")
#: Verifier rows a task needs: each half must be able to hold MIN_PER_CLASS answers of each label.
MIN_VERIFIER_ROWS = 4 * MIN_PER_CLASS
WORK_DIR = ".work"


@dataclass(frozen=True)
class TaskFinetuneArgs:
    tasks: tuple[str, ...]
    out: Path
    model: str | None = None
    quantized: bool = False
    seed: int = 0
    lora: LoraPlan = LoraPlan()
    train_rows: int = DEFAULT_TRAIN_ROWS  # per task, at most (the pool's first half at most)
    validation_rows: int = DEFAULT_VALIDATION_ROWS
    verifier_rows: int = DEFAULT_VERIFIER_ROWS
    eval_rows: int = DEFAULT_EVAL_ROWS  # held-out and shifted rows per task in the report
    head: bool = True
    head_epochs: int = DEFAULT_HEAD_EPOCHS
    head_learning_rate: float = DEFAULT_HEAD_LEARNING_RATE
    head_rank: int = DEFAULT_HEAD_RANK
    head_rows: int = DEFAULT_HEAD_ROWS  # per task, of D_tr (Alg. 4's targets) and of D_ca (its epoch choice)
    baselines: bool = True  # the untuned model and the head alone (today's Alg. 4) in the report
    progress: bool = True
    #: keep ``DIR/.work`` (checkpoints, cached answers) after a finished run; else only its run.json stays
    keep_work: bool = False
    #: a chat store whose review decisions on these tasks' answers join the rows (``--from-reviews``)
    reviews: str | None = None
    #: a table's columns and how its prompts are written (``--text-column``, ``--label-column``, ``--instruction``,
    #: ``--field``; None: ``TableColumns``' defaults). The prompts written are in the task's hash, so not here.
    text_column: str | None = None
    label_column: str | None = None
    instruction: str | None = None
    answer_field: str | None = None

    @property
    def columns(self) -> TableColumns:
        chosen = {"text": self.text_column, "label": self.label_column, "instruction": self.instruction,
                  "field": self.answer_field}
        return TableColumns(**{key: value for key, value in chosen.items() if value is not None})

    def identity(self, task_hashes: dict[str, str]) -> dict[str, Any]:
        """What makes two runs the same run, so a resumed run must match it: the rows and how they are split, the
        base model and the LoRA stage (the head's settings are its own stage's: a change reruns that stage)."""
        data = {key: value for key, value in asdict(self).items() if key in IDENTITY_KEYS}
        data["tasks"] = [[name, task_hashes.get(name, "")] for name in self.tasks]
        return data

    def head_identity(self, verifier_digest: str = "") -> dict[str, Any]:
        """What a head stage depends on besides the rows: its settings and the verifier that gives it q and d."""
        keys = ("head_epochs", "head_learning_rate", "head_rank", "head_rows")
        return {**{key: getattr(self, key) for key in keys}, "verifier": verifier_digest}


@dataclass(frozen=True)
class TaskSplit:
    """One task's rows, by what they are used for."""

    task: Task
    train: tuple[TaskItem, ...]
    validation: tuple[TaskItem, ...]
    verifier: tuple[TaskItem, ...]  # D_ca (Alg. 3); D_tr (Alg. 1–2) is the model's answers to ``train``
    held_out: tuple[TaskItem, ...]
    shifted: tuple[TaskItem, ...]

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "validation": len(self.validation), "calibration": len(self.verifier),
                "held_out": len(self.held_out), "shifted": len(self.shifted)}

    @property
    def calibration(self) -> tuple[TaskItem, ...]:
        return self.verifier


# ----------------------------------------------------------------------------------------- the splits
def split_sizes(n_main: int, args: TaskFinetuneArgs) -> dict[str, int]:
    """How many of a task's ``n_main`` rows (those not marked shifted) go to each part: the held-out fifth (at most
    HELD_OUT_SIZE; ``Task.split``'s rule), then of the rest (the pool) half at most to training, a tenth to
    validation, the remainder to calibrating the verifier (each at most its ``*_rows``)."""
    held = min(HELD_OUT_SIZE, int(HELD_OUT_FRACTION * n_main))
    pool = n_main - held
    n_train = min(args.train_rows, pool // 2)
    n_validation = min(args.validation_rows, max(1, pool // 10))
    return {"train": n_train, "validation": n_validation, "verifier": min(args.verifier_rows, pool - n_train - n_validation),
            "held_out": min(held, args.eval_rows), "pool": pool}


def enough_rows(sizes: dict[str, int], args: TaskFinetuneArgs) -> bool:
    return sizes["verifier"] >= MIN_VERIFIER_ROWS and sizes["train"] >= args.lora.batch_size


def minimum_rows(args: TaskFinetuneArgs) -> int:
    """The fewest rows (not marked shifted) a task's file needs under these settings: the smallest count whose
    split (:func:`split_sizes`) trains on a batch at least and calibrates the verifier on MIN_VERIFIER_ROWS."""
    n = 1
    while not enough_rows(split_sizes(n, args), args):
        n += 1
    return n


def minimum_why(args: TaskFinetuneArgs) -> str:
    """Why that minimum, in plain words."""
    return (f"a fifth is held out to test on; of the rest, half trains the model (a batch of {args.lora.batch_size} "
            f"at least), a tenth checks it while it trains, and the remainder ({MIN_VERIFIER_ROWS} at least) "
            "calibrates the verifier")


def split_task(task: Task, args: TaskFinetuneArgs) -> TaskSplit:
    """The pool shuffled with ``args.seed``, cut into training, validation and verifier rows (at most the
    ``*_rows`` each; half the pool at most for training), and the task's own held-out and shifted rows. Too few
    rows is one error giving the minimum count of rows the file needs (:func:`minimum_rows`)."""
    pool = task.split("pool")
    order = np.random.default_rng(args.seed).permutation(len(pool))
    pool = [pool[i] for i in order]
    n_main = len(task.examples()[0])
    sizes = split_sizes(n_main, args)
    where = task.path or task.source
    if not enough_rows(sizes, args):
        least = minimum_rows(args)
        rows = "rows" + (" not marked shifted" if task.examples()[1] else "")
        raise DataError(f"task {task.name} has {n_main} {rows}; it needs at least {least} ({minimum_why(args)}): add "
                        f"{least - n_main} rows", path=where)
    n_train, n_validation, n_verifier = sizes["train"], sizes["validation"], sizes["verifier"]
    cut = n_train + n_validation
    return TaskSplit(task, tuple(pool[:n_train]), tuple(pool[n_train:cut]), tuple(pool[cut:cut + n_verifier]),
                     tuple(task.split("held_out", size=args.eval_rows)), tuple(task.split("shifted", size=args.eval_rows)))


#: The split name of a row a person's review made (``--from-reviews``).
REVIEWED = "reviewed"
#: The parts of a split, the most protected first: a prompt in two parts stays only in the first of them.
PARTS = ("held_out", "shifted", "verifier", "validation", "train")


def check_split(split: TaskSplit) -> TaskSplit:
    """Bad input the model would learn from silently: one answer value only (an error), the same prompt in two
    parts (a user's file: an error naming both rows, though reading the file keeps a repeated row once and refuses
    two answers to one prompt by their lines first, ``task_files.without_repeats``; a shipped task's data, whose
    sources repeat some texts: the copy in the less protected part is left out, so a held-out or calibration row is
    never trained on)."""
    task, where = split.task, split.task.path or split.task.source
    values = {json.dumps(item.gold) for item in split.train + split.verifier}
    if len(values) < 2:
        raise DataError(f"every row of task {task.name} has the same answer ({values.pop() if values else 'none'}); a "
                        "task needs at least two answer values to learn and to check", path=where, field="answer")
    seen: dict[str, tuple[str, str, bool]] = {}
    kept: dict[str, list[TaskItem]] = {}
    for part in PARTS:
        kept[part] = []
        for item in getattr(split, part):
            reviewed = item.split == REVIEWED
            first = seen.setdefault(item.prompt.strip(), (part, item.id, reviewed))
            if first[:2] == (part, item.id):
                kept[part].append(item)
            elif task.path is not None and not reviewed and not first[2]:  # two rows of the user's own file
                raise DataError(f"rows {first[1]!r} ({first[0]}) and {item.id!r} ({part}) of task {task.name} have "
                                "the same prompt; a held-out or calibration row must be unseen in training: remove one",
                                path=where, field="prompt")
    return replace(split, **{part: tuple(items) for part, items in kept.items()})


def lora_rows(splits: Sequence[TaskSplit]) -> list[LoraRow]:
    """The training rows of every task, with the gold answer as the task's JSON."""
    return [LoraRow(item.id, split.task.name, item.prompt, split.task.answer_format.completion(item.gold),
                    split.task.system) for split in splits for item in split.train]


def task_instruction(task: Task, where: str) -> TaskInstruction:
    """How the chat routes a question to this task: the instruction its prompts start with."""
    prefix = task.prompt_prefix
    if not prefix:
        raise DataError(f"the prompts of task {task.name} share no instruction at their start (16 characters at "
                        "least), so the chat cannot tell a question of this task from any other: begin every prompt "
                        "with the same instruction, as the shipped tasks do", path=where, field="prompt")
    return TaskInstruction(prefix.strip(), task.system, task.name)


def task_hash(task: Task, reviewed: "ReviewedRows | None" = None) -> str:
    """A task's rows, reviewed rows and settings, hashed: a resumed run must be about the same rows."""
    digest = hashlib.sha256(json.dumps([task.name, task.system, task.answer_format.field]).encode())
    if reviewed is not None:
        digest.update(json.dumps([[i.prompt, i.gold] for i in reviewed.gold] + [[i.prompt, t] for i, t in reviewed.wrong],
                                 default=str).encode())
    for part in task.examples():
        for ex in part:
            digest.update(json.dumps([ex.id, ex.text, ex.gold], default=str).encode())
    return digest.hexdigest()[:16]


# ----------------------------------------------------------------------------------------- the run
@dataclass
class StageClock:
    """Seconds and peak memory of each stage, kept in the run's records."""

    seconds: dict[str, float] = field(default_factory=dict)
    peak_gb: dict[str, float] = field(default_factory=dict)


class FinetuneRun:
    """One ``finetune --task`` run over ``DIR`` (module docstring); the stages in order, each resumable."""

    def __init__(self, args: TaskFinetuneArgs, *, log: Callable[[str], None] = print):
        self.args, self.log = args, log
        self.out = Path(args.out)
        self.work = self.out / WORK_DIR

    def record_path(self, stage: str) -> Path:
        return self.work / f"{stage}.json"

    def read_record(self, stage: str) -> dict[str, Any] | None:
        path = self.record_path(stage)
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None  # a damaged record: the stage runs again

    def write_record(self, stage: str, data: dict[str, Any]) -> None:
        from mlx_sdm.atomic import atomic_write_text

        atomic_write_text(self.record_path(stage), json.dumps(data, indent=2, default=str) + "\n")

    def clean(self) -> None:
        """A finished run's work folder emptied: its checkpoints and cached answers go; its run.json (the run's
        identity, a few hundred bytes) stays, so the folder still refuses another run's settings."""
        import shutil

        if not self.work.is_dir():
            return
        for path in self.work.iterdir():
            if path == self.record_path("run"):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def check_identity(self, identity: dict[str, Any]) -> None:
        """A folder holds one run: resuming one with other settings or rows is refused, naming what to do."""
        stored = self.read_record("run")
        if stored is None:
            self.write_record("run", {"identity": identity})
            return
        wanted = json.loads(json.dumps(identity, default=str))
        if any(stored.get("identity", {}).get(key) != value for key, value in wanted.items()):
            raise DataError("this folder holds a run with other tasks, rows or settings; give another --out, or "
                            "delete the folder to start this one there", path=str(self.out), field="--out")


def validation_of(answered_by_task: dict[str, list]) -> Validation:
    """Task accuracy (and JSON well-formed rate) over the answered validation rows of every task."""
    rows = [a for answered in answered_by_task.values() for a in answered]
    if not rows:
        return Validation(0.0)
    return Validation(float(np.mean([a.label.correct for a in rows])),
                      {name: float(np.mean([a.label.correct for a in answered])) for name, answered in
                       answered_by_task.items() if answered},
                      float(np.mean([a.label.well_formed for a in rows])))


def fit_config(args: TaskFinetuneArgs) -> FitConfig:
    return FitConfig(seed=args.seed)


def with_stage(run: FinetuneRun, clock: StageClock, name: str, step: Callable[[], Any]) -> Any:
    """Run one stage, timing it and reading MLX's peak memory over it; the clock is kept in the run's records, so
    a resumed run reports the time its stages took across every start."""
    import mlx.core as mx

    mx.reset_peak_memory()
    started = time.perf_counter()
    result = step()
    clock.seconds[name] = clock.seconds.get(name, 0.0) + time.perf_counter() - started
    clock.peak_gb[name] = max(clock.peak_gb.get(name, 0.0), mx.get_peak_memory() / 1e9)
    run.write_record("clock", asdict(clock))
    return result


def read_clock(run: FinetuneRun) -> StageClock:
    """The stages' time and memory so far (a new run: none)."""
    stored = run.read_record("clock") or {}
    return StageClock(dict(stored.get("seconds", {})), dict(stored.get("peak_gb", {})))


# ----------------------------------------------------------------------------------------- values
@dataclass
class Variant:
    """One model variant's answers to every task's verifier, held-out and shifted rows, and the verifier
    built on them (None, with ``why``, when it cannot be built)."""

    name: str  # "untuned", "head only", "LoRA", "LoRA + head"
    outcomes: dict[str, Any]  # task name -> build_verifier.TaskOutcome (pool = the verifier rows: D_ca)
    trained: dict[str, list] = field(default_factory=dict)  # task name -> answers to the LoRA training rows: D_tr
    verifier: Any | None = None  # DocumentVerifier
    why: str | None = None
    constructed: dict[str, int] = field(default_factory=dict)  # per task and half, constructed wrong answers
    wrong_share: Any | None = None  # task_finetune.ShareChoice: the share of wrong answers the verifier was fitted at
    #: task name -> verifier_choice.FormulationChoice: the formulation that judges it (answer or label) and why
    formulations: dict[str, Any] = field(default_factory=dict)
    #: task name -> label_formulation.AnswerJudgement of its held-out rows by folds, where they calibrate the shipped
    #: label member (the report reads these, not the member's own judgement of rows it calibrated on)
    held_out_judged: dict[str, Any] = field(default_factory=dict)
    #: the verifier's rows and labels, hashed: a stage built on this verifier (the head) is rebuilt when they change
    digest: str = ""


@dataclass(frozen=True)
class HeadDecode:
    """An Alg. 4 head kept for some tasks: the decoding hook and the tasks it decodes."""

    head: Any  # hidden -> vocabulary logits (VocabularyHeads.vocab_logits)
    decodes: tuple[str, ...]
    sha256: str
    path: Path


# ----------------------------------------------------------------------------------------- from flags and YAML
#: The keys of a task run, in the command line's and the YAML's one spelling (``--lora-ranks 8 16`` is
#: ``lora_ranks: [8, 16]``); ``epochs`` and ``learning_rate`` are Alg. 4's, as in a head-only config.
TASK_KEYS = {
    "task": "tasks", "out": "out", "model": "model", "quantized": "quantized", "seed": "seed",
    "lora_ranks": "ranks", "lora_layers": "num_layers", "lora_epochs": "max_epochs",
    "lora_learning_rate": "learning_rate", "lora_batch_size": "batch_size", "target_accuracy": "target_accuracy",
    "train_rows": "train_rows", "validation_rows": "validation_rows", "verifier_rows": "verifier_rows",
    "eval_rows": "eval_rows", "head": "head", "epochs": "head_epochs", "learning_rate": "head_learning_rate",
    "head_rank": "head_rank", "head_rows": "head_rows", "baselines": "baselines", "progress": "progress",
    "from_reviews": "reviews", "text_column": "text_column", "label_column": "label_column",
    "instruction": "instruction", "field": "answer_field", "keep_work": "keep_work",
}
_LORA_FIELDS = ("ranks", "num_layers", "max_epochs", "learning_rate", "batch_size", "target_accuracy")


def _typed(key: str, value: Any, default: Any, source: str) -> Any:
    """``value`` checked against the type of ``default`` (a DataError names the key)."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise DataError(f"must be true or false, got {value!r}", path=source, field=key)
        return value
    if isinstance(default, int):
        least = 0 if key == "seed" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise DataError(f"must be a whole number of at least {least}, got {value!r}", path=source, field=key)
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= (1 if key ==
                                                                                              "target_accuracy" else 10):
            raise DataError(f"must be a positive number, got {value!r}", path=source, field=key)
        return float(value)
    if isinstance(default, tuple):
        items = value if isinstance(value, (list, tuple)) else [value]
        if key == "lora_ranks":
            return tuple(_typed(key, v, 1, source) for v in items)
        if not all(isinstance(v, str) and v for v in items):
            raise DataError("must name task files or shipped tasks", path=source, field=key)
        return tuple(items)
    return value if value is None else str(value)


def task_args_from(values: dict[str, Any], source: str) -> TaskFinetuneArgs:
    """A task run's arguments from the YAML's values with the flags over them (``None`` flags left out). A
    fine-tuned folder as ``model`` stands for its base model, and its tasks are the run's unless ``task`` names
    others (``--from-reviews --model DIR``: the same tasks again, with what the reviews taught)."""
    from mlx_sdm.resources import default_model_dir
    from mlx_sdm.usecases.model_folder import is_model_folder, read_model_folder, task_specs

    if values.get("from_reviews") and not values.get("model") and not values.get("task"):
        values = {**values, "model": default_model_dir()}  # the model the chat loads by default
        if not is_model_folder(values["model"]):
            raise DataError("name the fine-tuned model folder whose answers were reviewed (--model DIR), or its "
                            "tasks (--task FILE ...)", path=source, field="from_reviews")
    if is_model_folder(values.get("model")):
        folder = read_model_folder(str(values["model"]))
        values = {**values, "model": folder.base_model, "quantized": values.get("quantized", folder.quantized)}
        values.setdefault("task", task_specs(folder))
        for entry in folder.entries:  # how its table files became prompts
            for key, value in dict(entry.info.get("table") or {}).items():
                values.setdefault(key, value)
    unknown = [k for k in values if k not in TASK_KEYS]
    if unknown:
        raise DataError(f"not a key of a task run; known keys: {', '.join(TASK_KEYS)}", path=source, field=unknown[0])
    if not values.get("out"):
        raise DataError("where to write the model folder: --out DIR (out: DIR in the YAML)", path=source, field="out")
    plain: dict[str, Any] = {}
    lora: dict[str, Any] = {}
    defaults = TaskFinetuneArgs(tasks=(), out=Path("."))
    for key, value in values.items():
        name = TASK_KEYS[key]
        if name in _LORA_FIELDS:
            lora[name] = _typed(key, value, getattr(defaults.lora, name), source)
        elif name == "out":
            plain[name] = Path(str(value))
        else:
            plain[name] = _typed(key, value, getattr(defaults, name), source)
    return TaskFinetuneArgs(**{"tasks": (), **plain, "lora": LoraPlan(**lora)})


# ----------------------------------------------------------------------------------------- reviews teach it
@dataclass(frozen=True)
class ReviewedRows:
    """What a task's reviewed answers teach: ``gold`` rows (an edit, an accepted answer, or a rejected yes/no
    answer's other value) join the LoRA training rows; ``wrong`` (question, answer) pairs a person rejected join the
    verifier's D_tr as answers known wrong. Calibration and the held-out rows never take a reviewed answer."""

    gold: tuple[TaskItem, ...] = ()
    wrong: tuple[tuple[TaskItem, str], ...] = ()

    @property
    def count(self) -> int:
        return len(self.gold) + len(self.wrong)


def reviewed_rows(rows: Sequence[dict[str, Any]], tasks: Sequence[Task]) -> dict[str, ReviewedRows]:
    """The review queue's training rows (``ReviewQueue.training_rows``: prompt, completion, label) of these tasks: a
    row belongs to the task whose instruction its question starts with, and its completion must parse as that
    task's JSON answer (what it says then is the row's answer); other rows are not about these tasks."""
    from mlx_sdm.network.coverage import match_instruction
    from mlx_sdm.network.encoding import parse_answer

    prefixes = [task.prompt_prefix.strip() for task in tasks]
    gold: dict[str, list[TaskItem]] = {t.name: [] for t in tasks}
    wrong: dict[str, list[tuple[TaskItem, str]]] = {t.name: [] for t in tasks}
    for number, row in enumerate(rows, start=1):
        index = match_instruction(prefixes, row["prompt"])
        if index is None:
            continue
        task = tasks[index]
        value = parse_answer(str(row["completion"]), task.answer_format)
        if value is None or value not in task.answer_format.answers:
            continue
        item = TaskItem(f"review-{number}", task.name, row["prompt"], value, row["prompt"], REVIEWED)
        if row["label"] == 1:
            gold[task.name].append(item)
            continue
        wrong[task.name].append((item, str(row["completion"])))
        if task.answer_format.boolean:  # a rejected yes/no answer says what the right one is
            gold[task.name].append(replace(item, gold=not value))
    return {name: ReviewedRows(_one_per_question(gold[name]), tuple(wrong[name])) for name in gold}


def _one_per_question(items: list[TaskItem]) -> tuple[TaskItem, ...]:
    """One gold row per question: the latest (an edit and its rejected original say the same thing twice)."""
    latest = {item.prompt.strip(): item for item in items}
    return tuple(latest.values())


def with_reviews(split: TaskSplit, reviewed: ReviewedRows | None) -> TaskSplit:
    """The split with its task's reviewed gold rows added to the training rows (before the duplicate check, so a
    reviewed question that is a held-out or calibration row stays there and leaves the training rows)."""
    if reviewed is None or not reviewed.gold:
        return split
    return replace(split, train=split.train + reviewed.gold)
