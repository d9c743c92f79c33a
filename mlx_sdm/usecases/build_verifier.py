"""Use case: build a document verifier for any mlx-lm model over the task suite (``mlx-sdm build-verifier``).

1. The model answers each task's prompts itself (greedy, the task's system prompt, answers stop at the
   JSON unit's closing brace); the features ``[mean(h); h_delimiter]`` are taken in the same pass
   (docs/method.md § 15.3), and each answer is labelled against the gold with the § 14 parser: y = 1 iff the
   parsed answer is the gold one (a parse error is a wrong answer).
2. A task whose first ``EARLY_CHECK`` answers never parse is left out with one line saying so (there
   is nothing to learn about answers the model never gives).
3. The SDM estimator (Alg. 1–3) is fitted on the pools: each task's pool is halved into D_tr / D_ca.
4. Held-out and shifted answers of every task are reported in the paper's Table 1 layout (accuracy /
   admitted fraction per class- and prediction-conditional stratum) into ``DIR/report.md``,
   ``DIR/report.json`` and ``DIR/reliability.png``.

Answers and features are cached per chunk (``network/tasks/answers.py``): a killed build resumes.
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from mlx_sdm.calibration.data import MIN_PER_CLASS, LabelledSet
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.evaluation import NO_REFERENCE, Evaluation, evaluate, plot, table_row
from mlx_sdm.calibration.paired_test import PairedComparison
from mlx_sdm.errors import DataError
from mlx_sdm.network.lean import counts_of, measure_leans, save_leans
from mlx_sdm.network.tasks import Task, TaskItem
from mlx_sdm.network.tasks.registry import load_tasks
from mlx_sdm.network.tasks.answers import CACHE_CHUNK, AnsweredItem, AnswerSettings, SamplerFor, answer_items
from mlx_sdm.network.verifier import VERIFIER_MANIFEST, DocumentVerifier, FeatureRecipe, labelled_set

DEFAULT_PER_TASK = 300
DEFAULT_EVAL_SIZE = 100
DEFAULT_MAX_TOKENS = 16
#: Answers looked at before a task whose answers never parse is left out.
EARLY_CHECK = 48  # three cache chunks
MIN_PER_TASK = 2 * MIN_PER_CLASS
REPORT_MD = "report.md"
REPORT_JSON = "report.json"
REPORT_PLOT = "reliability.png"


@dataclass
class BuildVerifierArgs:
    out: Path
    model: str | None = None  # None: the embedded SmolLM2
    tasks: list[str] | None = None  # shipped names or JSONL paths; None: the whole suite
    per_task: int = DEFAULT_PER_TASK
    per_task_sizes: dict[str, int] = field(default_factory=dict)  # per-task overrides of per_task (by task name)
    eval_size: int = DEFAULT_EVAL_SIZE
    max_tokens: int = DEFAULT_MAX_TOKENS
    cache_dir: Path | None = None  # default: DIR.cache beside DIR
    quantized: bool = False
    seed: int = 0
    iterations: int | None = None
    epochs: int | None = None
    estimator: str | None = None  # FitConfig.estimator ("v1" the paper's, "v2" canonical); None: the default
    batch: int = CACHE_CHUNK  # answers generated together (and kept per cache file)
    plot: bool = True
    progress: bool = True
    #: answers drawn per question for a second-look member (app/second_look_build.py); None: no second look
    second_look: int | None = None
    #: at most this many questions in all (a second-look build's pool, held-out and shifted in proportion)
    limit: int | None = None

    def pool_size(self, task: str) -> int:
        return self.per_task_sizes.get(task, self.per_task)

    def resolved_cache_dir(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else Path(self.out).with_name(Path(self.out).name + ".cache")


@dataclass
class TaskOutcome:
    task: Task
    pool: list[AnsweredItem]
    held_out: list[AnsweredItem] = field(default_factory=list)
    shifted: list[AnsweredItem] = field(default_factory=list)
    left_out: str | None = None  # why the task is not in the verifier

    @property
    def well_formed(self) -> float:
        return float(np.mean([a.label.well_formed for a in self.pool])) if self.pool else 0.0

    @property
    def accuracy(self) -> float:
        return float(np.mean([a.label.correct for a in self.pool])) if self.pool else 0.0


@dataclass
class BuildResult:
    verifier: DocumentVerifier
    outcomes: list[TaskOutcome]
    report: str
    generated: int
    from_cache: int
    seconds: float


class _Progress:
    """One progress bar over every answer of the build (shows the time left); counts cached vs generated."""

    def __init__(self, total: int, enabled: bool):
        from mlx_sdm.progress import progress_bar

        self.bar = progress_bar(total=total, desc="answers", unit="answer", disable=not enabled)
        self.generated = self.cached = 0

    def __call__(self, from_cache: bool) -> None:
        self.cached += from_cache
        self.generated += not from_cache
        self.bar.update(1)

    def shrink(self, n: int) -> None:
        self.bar.total -= n
        self.bar.refresh()


def _answer_task(lm, task: Task, args: BuildVerifierArgs, settings: AnswerSettings, progress: _Progress) -> TaskOutcome:
    return answer_task_items(lm, task, task.split("pool", size=args.pool_size(task.name)),
                             task.split("held_out", size=args.eval_size), task.split("shifted", size=args.eval_size),
                             settings, progress)


def answer_task_items(lm, task: Task, pool_items: list[TaskItem], held_items: list[TaskItem],
                      shift_items: list[TaskItem], settings: AnswerSettings, progress: Callable[[bool], None], *,
                      head=None) -> TaskOutcome:
    """The model's answers to a task's pool, held-out and shifted items (``head``: a decoding head), each
    labelled against the gold; a task whose first ``EARLY_CHECK`` answers never parse is left out, and
    ``progress`` (a :class:`_Progress`, or any callable taking ``from_cache``) is told of every answer."""
    settings = settings.for_task(task)
    first = answer_items(lm, task, pool_items[:EARLY_CHECK], settings, on_item=progress, head=head)
    if not any(a.label.well_formed for a in first):
        field_name = task.answer_format.field
        if isinstance(progress, _Progress):
            progress.shrink(len(pool_items) - len(first) + len(held_items) + len(shift_items))
        return TaskOutcome(task, first, left_out=(
            f"task {task.name}: the model never answered in the expected JSON format ({{\"{field_name}\": ...}}) "
            f"in its first {len(first)} answers (e.g. {first[0].text[:60]!r}); left out of the verifier"))
    pool = first + answer_items(lm, task, pool_items[EARLY_CHECK:], settings, on_item=progress, head=head)
    outcome = TaskOutcome(task, pool)
    outcome.held_out = answer_items(lm, task, held_items, settings, on_item=progress, head=head)
    outcome.shifted = answer_items(lm, task, shift_items, settings, on_item=progress, head=head)
    return outcome


def _fit(lm, kept: list[TaskOutcome], args: BuildVerifierArgs) -> DocumentVerifier:
    """The answer verifier on the pools halved, then a label member for each closed-set task it judges worse
    (usecases/verifier_choice.py: the choice finetune makes, on the same D_ca halving)."""
    from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE
    from mlx_sdm.usecases.verifier_choice import with_label_members

    overrides = {"iterations": args.iterations, "epochs": args.epochs, "estimator": args.estimator}
    config = FitConfig(seed=args.seed, **{k: v for k, v in overrides.items() if v})
    verifier = fit_task_verifier(lm, kept, config, progress=args.progress)
    closed = [o for o in kept if o.task.delimiter == DELIMITER_JSON_CLOSE and len(o.task.answer_format.answers) >= 2]
    if not closed or args.estimator not in (None, "", "v1"):
        return verifier
    train, _ = pool_halves(kept)
    halves = [(o.task, o.pool[: len(o.pool) // 2], o.pool[len(o.pool) // 2:]) for o in closed]

    def answer_fit(firsts: dict[str, list]):
        calibration = [a for o in kept for a in (firsts[o.task.name] if o.task.name in firsts
                                                 else o.pool[len(o.pool) // 2:])]
        try:
            return fit_task_verifier(lm, kept, config, progress=False, halves=(train, calibration))
        except DataError:
            return None

    judges = with_label_members(lm, verifier, kept, halves, answer_fit, args)
    judges.verifier.info["formulations"] = {name: c.to_dict() for name, c in judges.choices.items()}
    return judges.verifier


def pool_halves(kept: list[TaskOutcome]) -> tuple[list[AnsweredItem], list[AnsweredItem]]:
    """(D_tr, D_ca): each task's pool halved (the pool is already a seeded shuffle)."""
    train: list[AnsweredItem] = []
    calibration: list[AnsweredItem] = []
    for outcome in kept:
        half = len(outcome.pool) // 2
        train += outcome.pool[:half]
        calibration += outcome.pool[half:]
    return train, calibration


def fit_task_verifier(lm, kept: list[TaskOutcome], config: FitConfig, *, progress: bool = True,
                      field_name: str = "--per-task",
                      halves: tuple[list[AnsweredItem], list[AnsweredItem]] | None = None) -> DocumentVerifier:
    """Alg. 1–3 on each task's pool halved into D_tr / D_ca (``halves``: those two sets made by the caller)."""
    train, calibration = halves if halves is not None else pool_halves(kept)
    for name, part in (("training", train), ("calibration", calibration)):
        counts = np.bincount([a.label.label for a in part], minlength=2)
        if counts.min() < MIN_PER_CLASS:
            raise DataError(f"the {name} half has {counts[1]} correct and {counts[0]} wrong answers; the estimator "
                            f"needs at least {MIN_PER_CLASS} of each: raise {field_name} or add tasks", field=field_name)
    systems = {o.task.system for o in kept}
    recipe = FeatureRecipe(delimiter=kept[0].task.delimiter,
                           system=next(iter(systems)) if len(systems) == 1 else None,
                           task_systems=tuple((o.task.prompt_prefix, o.task.system) for o in kept if o.task.prompt_prefix),
                           task_names=tuple(o.task.name for o in kept if o.task.prompt_prefix))
    source = {"kind": "task_suite", "tasks": [o.task.name for o in kept], "per_task": {o.task.name: len(o.pool) for o in kept},
              "labels": "the model's own answers, correct (1) or not (0) against the gold, § 14 parser",
              "model": lm.name}
    verifier = DocumentVerifier.fit_features(
        dict(lm.fingerprint, name=lm.name, source=getattr(lm, "source", None)),
        _labelled([a.document() for a in train], train), _labelled([a.document() for a in calibration], calibration),
        config, recipe=recipe, source=source, progress=progress)
    verifier.tasks = [o.task.summary() for o in kept]
    return verifier


def _labelled(documents, answered: list[AnsweredItem]) -> LabelledSet:
    return labelled_set(documents, np.stack([a.features for a in answered]))


def build_verifier(args: BuildVerifierArgs, *, sampler_for: SamplerFor | None = None, sampler_tag: str = "",
                   log: Callable[[str], None] = print) -> BuildResult:
    """Answer, label, fit, save DIR (atomically) and write its report; see the module docstring."""
    from mlx_sdm.atomic import check_output_folder

    started = time.time()
    if min([args.per_task, *args.per_task_sizes.values()]) < MIN_PER_TASK:
        raise DataError(f"--per-task {args.per_task} is too small; give at least {MIN_PER_TASK}", field="--per-task")
    # Before any work: never over a file or a folder that is not a verifier (a verifier is rebuilt in place).
    check_output_folder(args.out, force=True, artifact_files=(VERIFIER_MANIFEST,))
    tasks = load_tasks(args.tasks)  # unknown names and bad JSONL fail here, before the model loads
    if len({t.delimiter for t in tasks}) > 1:
        raise DataError("open questions (free-text answers) and JSON tasks end their judged answers differently, so "
                        "one verifier cannot read both; build them apart (--tasks open_questions, then the others)",
                        field="--tasks")
    with _cache_kept_only_if_used(args.resolved_cache_dir()):
        return _build(args, tasks, started, sampler_for, sampler_tag, log)


@contextmanager
def _cache_kept_only_if_used(cache_dir: Path) -> Iterator[None]:
    """A build that fails leaves no cache folder it made and never filled (a filled one is kept: the
    next run picks up its answers)."""
    existed = cache_dir.exists()
    try:
        yield
    except BaseException:
        if not existed and cache_dir.is_dir() and not any(p.is_file() for p in cache_dir.rglob("*")):
            shutil.rmtree(cache_dir, ignore_errors=True)
        raise


def _build(args: BuildVerifierArgs, tasks: list[Task], started: float, sampler_for: SamplerFor | None,
           sampler_tag: str, log: Callable[[str], None]) -> BuildResult:
    from mlx_sdm.lm.loading import load_model

    lm = load_model(args.model, quantized=args.quantized)
    settings = AnswerSettings(args.max_tokens, cache_dir=args.resolved_cache_dir(), sampler_for=sampler_for,
                              sampler_tag=sampler_tag, chunk=args.batch)
    total = sum(len(t.split("pool", size=args.pool_size(t.name))) + len(t.split("held_out", size=args.eval_size))
                + len(t.split("shifted", size=args.eval_size)) for t in tasks)
    progress = _Progress(total, args.progress)
    outcomes = []
    for task in tasks:
        outcome = _answer_task(lm, task, args, settings, progress)
        if outcome.left_out:
            progress.bar.clear()  # the line gets its own row, not the bar's
            log(outcome.left_out)
            progress.bar.refresh()
        outcomes.append(outcome)
    progress.bar.close()
    kept = [o for o in outcomes if not o.left_out]
    if not kept:
        raise DataError("no task left: the model never answered any task in its expected JSON format, so there is "
                        "nothing to verify; try a larger model or your own tasks (--tasks my.jsonl)", field="--tasks")
    verifier = _fit(lm, kept, args)
    verifier.info = {**verifier.info, "built_by": "mlx-sdm build-verifier", "per_task": args.per_task, "eval_size": args.eval_size,
                     "max_tokens": kept[0].task.max_tokens or args.max_tokens, "seed": args.seed,
                     "left_out": [o.task.name for o in outcomes if o.left_out]}
    verifier.save(args.out)
    report, data = write_report(verifier, outcomes, Path(args.out), plot_png=args.plot)
    return BuildResult(verifier, outcomes, report, progress.generated, progress.cached, time.time() - started)


# ------------------------------------------------------------------------------------------ report
def _rows(verifier: DocumentVerifier, name: str, answered: list[AnsweredItem]) -> tuple[list[str], dict, Evaluation]:
    from mlx_sdm.usecases.label_formulation import AnswerView

    view = AnswerView(verifier, answered)
    return evaluation_rows(verifier, name, _labelled([a.document() for a in answered], answered),
                           estimator=view if view.reads_labels else None)


def evaluation_rows(verifier: DocumentVerifier, name: str, data: LabelledSet, *,
                    estimator=None) -> tuple[list[str], dict, Evaluation]:
    """One row set's Table 1 lines (no-reject and p̂ lower), its report.json record and its evaluation; ``estimator``:
    the rows' judge in the answer-level view (a label member's, label_formulation.answer_view_estimator), else the
    verifier's own."""
    ev = evaluate(estimator if estimator is not None else verifier.estimator, data, name)
    lines, record = [], {"name": name, "size": len(data.labels)}
    for label, mask in (("no-reject", np.ones(len(data.labels), bool)), ("p̂ lower", ev.admitted)):
        row = table_row(label, ev.labels, ev.predictions, mask, 2)
        lines.append(f"| {name} ({len(data.labels)}) | {label} | " + " | ".join(s.markdown() for s in row.strata()) + " |")
        record[label] = [{"accuracy": s.accuracy, "admitted": s.admitted, "total": s.total} for s in row.strata()]
    record["calibrated"] = table_row("p", ev.labels, ev.predictions, ev.admitted, 2).calibrated(verifier.estimator.alpha)
    record["adaptor_accuracy"], record["logistic_accuracy"] = ev.adaptor_accuracy, ev.logistic_regression_accuracy
    record.update(against_probe_record(ev.against_probe[0].comparison))
    return lines, record, ev


def against_probe_record(cmp: PairedComparison | None) -> dict:
    """The report.json keys of the adaptor against its logistic reference on one row set: the discordant
    rows (only the adaptor right, only the reference right), the exact McNemar p and the verdict."""
    if cmp is None:
        return {"adaptor_only_correct": None, "logistic_only_correct": None, "mcnemar_p": None,
                "verdict": NO_REFERENCE}
    return {"adaptor_only_correct": cmp.b, "logistic_only_correct": cmp.c, "mcnemar_p": cmp.p_value,
            "verdict": cmp.verdict()}


ACCURACY_HEAD = ["", "Adaptor against its logistic-regression reference on the same rows: b = rows only the "
                 "adaptor gets right, c = rows only the reference gets right; exact two-sided McNemar p; a shortfall "
                 "with p < 0.05 is a real gap.", "",
                 "| dataset | adaptor accuracy | logistic-regression reference | b | c | McNemar p | verdict |",
                 "|---|---|---|---|---|---|---|"]


def accuracy_cells(record: dict) -> str:
    """``adaptor | reference | b | c | p | verdict |`` of one record (``-`` where there is no reference)."""
    num = lambda v, f: "-" if v is None or v != v else format(v, f)  # noqa: E731  (None or NaN)
    return (f"{num(record['adaptor_accuracy'], '.3f')} | {num(record['logistic_accuracy'], '.3f')} | "
            f"{num(record['adaptor_only_correct'], 'd')} | {num(record['logistic_only_correct'], 'd')} | "
            f"{num(record['mcnemar_p'], '.3g')} | {record['verdict']} |")


def accuracy_lines(records: list[dict]) -> list[str]:
    """The adaptor's accuracy beside the logistic-regression reference's on each row set, with the paired
    test that says whether a shortfall is real (the adaptor should learn at least what a
    linear probe learns from the same features, or the row says why not)."""
    return ACCURACY_HEAD + [f"| {r['name']} ({r['size']}) | {accuracy_cells(r)}" for r in records]


def write_report(verifier: DocumentVerifier, outcomes: list[TaskOutcome], out: Path, *, plot_png: bool = True
                 ) -> tuple[str, dict]:
    """Table 1 per task (held-out, shifted) and over all tasks; markdown, JSON and a reliability plot in ``out``."""
    from mlx_sdm.atomic import atomic_write_text

    kept = [o for o in outcomes if not o.left_out]
    lines = [f"Verifier `{out.name}` for model {verifier.model_fingerprint.get('name')}; y = 1 when the model's own "
             f"answer is correct. Cells: accuracy / admitted fraction (α′ = {verifier.estimator.alpha}).", "",
             "| dataset | estimator | y=0 | y=1 | ŷ=0 | ŷ=1 | marginal |", "|---|---|---|---|---|---|---|"]
    records, evaluations, leans = [], [], {}
    for o in kept:
        splits = {}
        for split, answered in (("held-out", o.held_out), ("shifted", o.shifted)):
            if answered:
                rows, record, ev = _rows(verifier, f"{o.task.name} {split}", answered)
                lines += rows
                records.append(record)
                splits[split] = counts_of(split, ev.labels, ev.predictions)
        if splits:
            leans[o.task.name] = measure_leans(splits)
    for split in ("held-out", "shifted"):
        everything = [a for o in kept for a in (o.held_out if split == "held-out" else o.shifted)]
        if everything:
            rows, record, ev = _rows(verifier, f"all tasks {split}", everything)
            lines += rows
            records.append(record)
            evaluations.append(ev)
    lines += accuracy_lines(records)
    lines += ["", "| task | answers in the expected JSON (pool) | model accuracy (pool) | in the verifier |",
              "|---|---|---|---|"]
    for o in outcomes:
        lines.append(f"| {o.task.name} | {o.well_formed:.3f} | {o.accuracy:.3f} | "
                     f"{'no: never answered in its JSON format' if o.left_out else 'yes'} |")
    training = verifier.estimator.manifest.get("training", {})
    lines += ["", f"Calibration accuracy {training.get('calibration_accuracy', float('nan')):.3f} (logistic regression "
              f"{training.get('logistic_regression', {}).get('calibration_accuracy', float('nan')):.3f}); "
              f"threshold_succeeded={verifier.estimator.manifest.get('threshold_succeeded')}."]
    text = "\n".join(lines)
    data = {"rows": records, "tasks": [{"name": o.task.name, "well_formed": o.well_formed, "accuracy": o.accuracy,
                                        "left_out": o.left_out} for o in outcomes]}
    atomic_write_text(out / REPORT_MD, text + "\n")
    atomic_write_text(out / REPORT_JSON, json.dumps(data, indent=2) + "\n")
    save_leans(out, leans, source="build-verifier: the model's own answers, held-out and shifted splits")
    verifier.leans = leans
    if plot_png and evaluations:
        plot(evaluations, str(out / REPORT_PLOT))
    return text, data


def describe(result: BuildResult) -> str:
    """The summary line the command prints after the report."""
    kept = sum(not o.left_out for o in result.outcomes)
    return (f"built {kept} of {len(result.outcomes)} tasks in {result.seconds:.0f} s ({result.generated} answers "
            f"generated, {result.from_cache} from the cache)")
