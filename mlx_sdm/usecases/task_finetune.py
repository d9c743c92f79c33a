"""``mlx-sdm finetune --task FILE --out DIR``: a person's labelled task to a model that answers it right and a
verifier that says which answers to trust (docs/finetuning.md, "Your task, one command").

The rows of each task (``build-verifier``'s task format, or a shipped task's name) are split, seeded:

    pool (shuffled with --seed) → LoRA training rows (also D_tr) │ validation rows │ verifier rows (D_ca)
    the task's held-out rows and its shifted rows    → the report only (never trained or calibrated on)

then three stages, each a typed step that resumes on its own after ``kill -9`` (its record in ``DIR/.work``):

1. **LoRA** (``lora_training.py``): mlx-lm's tuner on the training rows' gold answers, masked to the answer
   tokens; epochs and rank chosen on the validation rows' task accuracy.
2. **The head** (Alg. 4, ``network/trainer.py``): the positive head trained over the *adapted*, frozen base, with
   q and d from a verifier built on the adapted model's own answers (stage 3's code); kept for a task only where
   it adds admitted-and-right answers on D_ca and costs none of its accuracy (the plain model's bar, as now).
3. **The verifier** (``build_verifier.py``'s own steps): the final model answers the rows itself (adapters on;
   the head where kept). As in the paper's SDM network, D_tr is the set the model was trained on: its answers
   to the LoRA training rows → Alg. 1–2; the verifier rows, which neither LoRA nor Alg. 1–2 saw, are all D_ca →
   Alg. 3, so the promise is about the model that will answer, calibrated on rows it never learned from. Then
   the report (``finetune_report.py``) and the folder's manifest, last.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from mlx_sdm.errors import DataError
from mlx_sdm.network.coverage import TaskInstruction
from mlx_sdm.network.tasks import Task, TaskItem
from mlx_sdm.usecases.finetune_plan import (
    WORK_DIR,
    FinetuneRun,
    HeadDecode,
    StageClock,
    TaskFinetuneArgs,
    TaskSplit,
    Variant,
    fit_config,
    lora_rows,
    split_task,
    check_split,
    task_hash,
    task_instruction,
    validation_of,
    with_stage,
    read_clock,
    ReviewedRows,
    reviewed_rows,
    with_reviews,
)
from mlx_sdm.usecases.lora_training import LoraResult, chat_dataset

# ----------------------------------------------------------------------------------------- answers
def answer_splits(lm, splits: Sequence[TaskSplit], run: FinetuneRun, *, adapted: bool, decode: HeadDecode | None,
                  parts: Sequence[str] = ("train", "verifier", "held_out", "shifted")) -> tuple[dict[str, Any],
                                                                                           dict[str, list]]:
    """Each task's ``parts`` answered greedily by ``lm`` (adapters on when ``adapted``; ``decode``'s head for the
    tasks it decodes), labelled against the gold, cached per chunk in ``DIR/.work/answers`` (a killed run
    loses at most a chunk). Returns (task name -> TaskOutcome of the verifier, held-out and shifted rows, task
    name -> the answers to the LoRA training rows)."""
    from mlx_sdm.network.tasks.answers import AnswerSettings, answer_items
    from mlx_sdm.usecases.build_verifier import DEFAULT_MAX_TOKENS, _Progress, answer_task_items

    total = sum(len(getattr(s, p)) for s in splits for p in parts)
    progress = _Progress(total, run.args.progress)
    out: dict[str, Any] = {}
    trained: dict[str, list] = {}
    with adapters_on(lm, adapted):
        for split in splits:
            head = decode.head if decode is not None and split.task.name in decode.decodes else None
            settings = AnswerSettings(DEFAULT_MAX_TOKENS, cache_dir=run.work / "answers",
                                      head_tag=decode.sha256 if head is not None else "")
            pick = {p: list(getattr(split, p)) if p in parts else [] for p in ("verifier", "held_out", "shifted")}
            out[split.task.name] = answer_task_items(lm, split.task, pick["verifier"], pick["held_out"],
                                                     pick["shifted"], settings, progress, head=head)
            if "train" not in parts:
                continue
            if out[split.task.name].left_out:  # never answered in its JSON: no verifier to train
                progress.shrink(len(split.train))
            else:
                trained[split.task.name] = answer_items(lm, split.task, list(split.train), settings.for_task(split.task),
                                                        on_item=progress, head=head)
    progress.bar.close()
    return out, trained


def adapters_on(lm, adapted: bool):
    """The model as a variant answers: its adapters on (``adapted``) or off; a model without adapters is the base."""
    if lm.adapters is not None:
        return lm.adapters.use(adapted)
    if adapted:
        raise DataError("no adapters are attached to answer with", field="adapters")
    return contextlib.nullcontext()


def constructed_wrong(lm, task: Task, items: Sequence[TaskItem], seed: int, *, adapted: bool) -> list:
    """A wrong answer made for each of ``items``, in order (method § 14's encoding: another of the task's answer
    values in its JSON, by a seeded draw), read with the model's states as AnsweredItems labelled 0."""
    rng = np.random.default_rng(seed)
    values = list(task.answer_format.answers)
    wrong = [rng.choice(np.array([v for v in values if v != item.gold], dtype=object)) for item in items]
    return read_wrong_answers(lm, task, [(replace(item, id=f"{item.id}/constructed"), task.answer_format.completion(w))
                                         for item, w in zip(items, wrong)], adapted=adapted, why="constructed")


def read_wrong_answers(lm, task: Task, pairs: Sequence[tuple[TaskItem, str]], *, adapted: bool,
                       why: str) -> list:
    """(question, answer) pairs known to be wrong, read with the model's states (adapters on when ``adapted``) as
    AnsweredItems labelled 0: constructed wrong answers, or answers a person rejected in review."""
    from mlx_sdm.lm.features import force_decode_batch
    from mlx_sdm.network.tasks import AnswerLabel
    from mlx_sdm.network.tasks.answers import AnsweredItem

    if not pairs:
        return []
    with adapters_on(lm, adapted):
        features = force_decode_batch(lm, [(item.prompt, text) for item, text in pairs], delimiter=task.delimiter,
                                      system=task.system)
    return [AnsweredItem(item, text, f.vector, why, AnswerLabel(task.label_answer(text, item.gold).answer, True, False),
                         task.system) for (item, text), f in zip(pairs, features)]


#: The shares of wrong answers tried for each verifier half, at least, largest first: where the model's own wrong
#: answers are fewer, some of its right answers in that half are replaced by constructed wrong answers to the same
#: questions (unpaired, as method § 14's encoding is), so the verifier learns what a wrong answer looks like and
#: Alg. 3 has both classes to calibrate (with one class absent it admits nothing). Which share is measured, on D_ca
#: only (:func:`choose_wrong_share`): too many constructed answers crowd the right ones out of the admitted region
#: (a run of mail triage verified 30 % of its held-out rows at a third and 48 % at a fifth), too few leave Alg. 3
#: without the wrong class (a tenth: nothing admitted).
WRONG_SHARES = (1 / 3, 1 / 4, 1 / 5)
#: The share of wrong answers in the held-back half of D_ca that judges every candidate share (the same rows for
#: each, so the counts compare).
JUDGING_SHARE = 1 / 3
#: The fewest D_ca rows of each task for the choice to be made: fewer, and a half holds too few wrong answers to
#: tell the shares apart (a third of 50 is 17), so the largest share is kept without trying the others.
CHOICE_MIN_ROWS = 100


@dataclass(frozen=True)
class ShareChoice:
    """The wrong-answer share the verifier was fitted at, and each candidate's count of right answers it verified
    on the held-back half of D_ca (None: that candidate could not be fitted, or admitted a stratum below α′)."""

    share: float
    tried: tuple[tuple[float, int | None], ...] = ()


class WrongAnswers:
    """Constructed wrong answers, made once per question (by a seeded draw of another answer value) and reused by
    every candidate fit, so trying a share costs a fit, not another pass of the model."""

    def __init__(self, lm, *, adapted: bool, seed: int):
        self.lm, self.adapted, self.seed = lm, adapted, seed
        self._made: dict[tuple[str, str], Any] = {}

    def topped(self, task: Task, answered: list, share: float, seed: int) -> tuple[list, int]:
        """``answered`` with at least ``share`` wrong answers: right answers chosen by a seeded draw (a smaller
        share's choice is a prefix of a larger's) replaced by constructed wrong answers to the same questions.
        Returns (rows, how many were constructed)."""
        wrong = sum(1 for a in answered if not a.label.correct)
        needed = int(np.ceil(share * len(answered))) - wrong
        right = [i for i, a in enumerate(answered) if a.label.correct]
        if needed <= 0 or not right:
            return list(answered), 0
        chosen = np.random.default_rng(seed).permutation(right)[:needed].tolist()
        missing = [answered[i].item for i in chosen if (task.name, answered[i].item.id) not in self._made]
        for item, row in zip(missing, constructed_wrong(self.lm, task, missing, self.seed, adapted=self.adapted)):
            self._made[(task.name, item.id)] = row
        rows = list(answered)
        for i in chosen:
            rows[i] = self._made[(task.name, answered[i].item.id)]
        return rows, len(chosen)


def fit_variant(lm, variant: Variant, splits: Sequence[TaskSplit], args: TaskFinetuneArgs, *, adapted: bool,
                known_wrong: Sequence = (), labels: bool = True) -> Variant:
    """The verifier on this variant's own answers: D_tr its answers to the LoRA training rows (``variant.trained``)
    plus ``known_wrong`` (answers a person rejected) → Alg. 1–2; D_ca its answers to the verifier rows → Alg. 3.
    Each task's part of either set is topped up to the wrong-answer share :func:`choose_wrong_share` picks on D_ca.
    A task the model never answers in its JSON is left out, as build-verifier leaves it."""
    from mlx_sdm.usecases.build_verifier import fit_task_verifier

    kept = [o for o in variant.outcomes.values() if not o.left_out]
    if not kept:
        return replace(variant, verifier=None, why="the model never answered in the task's JSON format")
    tasks = {s.task.name: s.task for s in splits}
    halves = [(tasks[o.task.name], variant.trained.get(o.task.name, []), o.pool) for o in kept]
    bank = WrongAnswers(lm, adapted=adapted, seed=args.seed)
    choice = choose_wrong_share(lm, kept, halves, bank, args, known_wrong)
    constructed: dict[str, int] = {}
    train, calibration = list(known_wrong), []
    for task, trained, pool in halves:
        for half, (answered, into) in enumerate(((trained, train), (pool, calibration))):
            topped, made = bank.topped(task, answered, choice.share, args.seed + half)
            into.extend(topped)
            if made:
                constructed[f"{task.name} {'D_tr' if half == 0 else 'D_ca'}"] = made
    digest = hashlib.sha256(json.dumps([[[a.item.id, a.text, a.label.label] for a in half]
                                        for half in (train, calibration)], default=str).encode()).hexdigest()[:16]
    try:
        verifier = fit_task_verifier(lm, kept, fit_config(args), progress=args.progress, field_name="--verifier-rows",
                                     halves=(train, calibration))
    except DataError as exc:
        return replace(variant, verifier=None, why=exc.detail, constructed=constructed, digest=digest,
                       wrong_share=choice)
    if not labels:  # the answer formulation alone (scripts/bench/verifier_formulations.py compares the two)
        return replace(variant, verifier=verifier, why=None, constructed=constructed, digest=digest, wrong_share=choice)
    judges = with_label_members(lm, verifier, kept, halves, bank, choice.share, args, known_wrong)
    return replace(variant, verifier=judges.verifier, why=None, constructed=constructed, digest=digest,
                   wrong_share=choice, formulations=judges.choices, held_out_judged=judges.held_out)


def with_label_members(lm, verifier, kept: list, halves: list, bank: WrongAnswers, share: float,
                       args: TaskFinetuneArgs, known_wrong: Sequence = ()):
    """The verifier with its label members where they judge a task better (``verifier_choice``), every row nobody
    trained on calibrating them (the held-out rows too: their figures come from folds); the answer formulation it is
    compared with is fitted at the chosen wrong-answer share, as the shipped one is."""
    from mlx_sdm.usecases.build_verifier import fit_task_verifier
    from mlx_sdm.usecases import verifier_choice

    def answer_fit(firsts: dict[str, list]):
        train, first = list(known_wrong), []
        for task, trained, _pool in halves:
            train += bank.topped(task, trained, share, args.seed)[0]
            first += bank.topped(task, firsts[task.name], share, args.seed + 1)[0]
        try:
            return fit_task_verifier(lm, kept, fit_config(args), progress=False, field_name="--verifier-rows",
                                     halves=(train, first))
        except DataError:
            return None

    return verifier_choice.with_label_members(lm, verifier, kept, halves, answer_fit, args, held_out_calibrates=True)


def choose_wrong_share(lm, kept: list, halves: list, bank: WrongAnswers, args: TaskFinetuneArgs,
                       known_wrong: Sequence = ()) -> ShareChoice:
    """The wrong-answer share, chosen on calibration rows only (never the held-out ones): each task's D_ca is
    halved by a seeded draw; for each share of :data:`WRONG_SHARES` a verifier fitted on D_tr and the first half
    (both at that share) judges the second half (at :data:`JUDGING_SHARE`, the same rows for every share). The
    share that verifies the most right answers there, with every admitted stratum of Table 1 at least α′, is
    chosen (:func:`pick_share`). With fewer than :data:`CHOICE_MIN_ROWS` D_ca rows in a task, the largest."""
    from mlx_sdm.calibration.evaluation import evaluate, table_row
    from mlx_sdm.usecases.build_verifier import _labelled, fit_task_verifier

    if min(len(pool) for _, _, pool in halves) < CHOICE_MIN_ROWS:
        return ShareChoice(WRONG_SHARES[0])
    tried: list[tuple[float, int | None]] = []
    for share in WRONG_SHARES:
        train, first, second = list(known_wrong), [], []
        for task, trained, pool in halves:
            order = np.random.default_rng(args.seed + 2).permutation(len(pool))
            a, b = [pool[i] for i in sorted(order[: len(pool) // 2])], [pool[i] for i in sorted(order[len(pool) // 2:])]
            train += bank.topped(task, trained, share, args.seed)[0]
            first += bank.topped(task, a, share, args.seed + 1)[0]
            second += bank.topped(task, b, JUDGING_SHARE, args.seed + 3)[0]
        try:
            verifier = fit_task_verifier(lm, kept, fit_config(args), progress=False, field_name="--verifier-rows",
                                         halves=(train, first))
        except DataError:
            tried.append((share, None))
            continue
        ev = evaluate(verifier.estimator, _labelled([a.document() for a in second], second), "D_ca, held back")
        kept_promise = table_row("p̂ lower", ev.labels, ev.predictions, ev.admitted, 2).calibrated(
            verifier.estimator.alpha)
        shown = ev.admitted & (ev.predictions == 1) & (ev.labels == 1)
        tried.append((share, int(shown.sum()) if kept_promise else None))
    return pick_share(tried)


def pick_share(tried: Sequence[tuple[float, int | None]]) -> ShareChoice:
    """The share whose verifier verified the most right answers on the held-back half (None: not fitted, or a
    stratum admitted below α′, counts as none); a tie goes to the larger share, and none verifying any keeps
    :data:`WRONG_SHARES`' first (the largest)."""
    best = max(tried, key=lambda t: (t[1] or 0, t[0]))
    return ShareChoice(best[0] if best[1] else WRONG_SHARES[0], tuple(tried))


# ----------------------------------------------------------------------------------------- stage 2: the head
def head_documents(lm, splits: Sequence[TaskSplit], part: str, rows: int) -> list:
    """FinetuneDocuments of each task's first ``rows`` ``part`` rows ("train" or "calibration"): the gold
    answer as the completion (y = 1: its tokens are Alg. 4's targets), the task's system prompt and its parser."""
    from mlx_sdm.network.data import FinetuneDocument
    from mlx_sdm.network.encoding import parse_answer

    docs = []
    for split in splits:
        task, fmt = split.task, split.task.answer_format
        budget = max(len(lm.tokenizer.encode(fmt.completion(v), add_special_tokens=False)) for v in fmt.answers) + 4
        for item in getattr(split, part)[:rows]:
            docs.append(FinetuneDocument(id=item.id, prompt=item.prompt, completion=fmt.completion(item.gold), label=1,
                                         task_label=item.gold, system=task.system, max_generation_tokens=budget,
                                         parse=lambda text, fmt=fmt: parse_answer(text, fmt)))
    return docs


def train_head(lm, splits: Sequence[TaskSplit], variant: Variant, run: FinetuneRun, *, adapted: bool,
               tag: str) -> HeadDecode | None:
    """Alg. 4 over the (adapted when ``adapted``) frozen base with this variant's verifier; then, per task, the
    head is kept where it adds admitted-and-right answers on D_ca and loses no accuracy there. None: not kept."""
    import mlx.core as mx

    from mlx_sdm.network.finetune_scoring import LMScorer
    from mlx_sdm.network.trainer import FinetuneArgs, train_positive_head

    args = run.args
    if variant.verifier is None:
        return None
    checkpoint = run.work / f"head-{tag}-{variant.digest}.checkpoint"  # one per verifier: another's is stale
    for stale in run.work.glob(f"head-{tag}-*.checkpoint"):
        if stale != checkpoint:
            shutil.rmtree(stale, ignore_errors=True)
    finetune_args = FinetuneArgs(epochs=args.head_epochs, learning_rate=args.head_learning_rate, seed=args.seed,
                                 checkpoint_path=str(checkpoint), resume=checkpoint.is_dir(), progress=args.progress)
    train = head_documents(lm, splits, "train", args.head_rows)
    calibration = head_documents(lm, splits, "calibration", args.head_rows)
    scorer = LMScorer.from_verifier(lm, variant.verifier)
    with adapters_on(lm, adapted):
        result = train_positive_head(lm, train, calibration, scorer, finetune_args, group=mx.distributed.init(),
                                     run_identity={"model": lm.fingerprint, "adapters": lm.weights_tag, "tag": tag})
        names = [s.task.name for s in splits for _ in s.calibration[: args.head_rows]]
        decodes = _tasks_the_head_helps(scorer, names, calibration, result.heads.vocab_logits) \
            if result.best_epoch > 0 else ()
    run.write_record(f"head-{tag}-choice", {"best_epoch": result.best_epoch, "history": result.history,
                                             "initial": result.initial_metric, "best": result.best_metric,
                                             "decodes": list(decodes)})
    if not decodes:
        return None
    return _save_head(lm, splits, result, decodes, run, tag)


def _tasks_the_head_helps(scorer, names: list[str], calibration: list, head) -> tuple[str, ...]:
    """The tasks (``names``: each calibration document's) whose D_ca answers the head makes admitted-and-right
    more often, with no lower accuracy."""
    from mlx_sdm.network.finetune_scoring import admitted_count

    with_head, without = scorer(calibration, head), scorer(calibration, None)
    out = []
    for name in dict.fromkeys(names):
        pick = [i for i, n in enumerate(names) if n == name]
        a, b = [with_head[i] for i in pick], [without[i] for i in pick]
        if admitted_count(a) > admitted_count(b) and sum(o.correct for o in a) >= sum(o.correct for o in b):
            out.append(name)
    return tuple(out)


def _save_head(lm, splits: Sequence[TaskSplit], result, decodes: tuple[str, ...], run: FinetuneRun,
               tag: str) -> HeadDecode:
    """The kept head, full in ``.work`` and compact (``compress-head``'s form) where the folder keeps it."""
    from mlx_sdm.network.heads import HeadManifest, compress_head, head_sha256, load_head, save_head

    full = run.work / f"head-{tag}-full"
    manifest = HeadManifest(
        base_model=dict(lm.fingerprint, name=lm.name), verifier={"adapters": lm.weights_tag, "built_by": "mlx-sdm finetune"},
        tasks=[task_instruction(s.task, s.task.path or s.task.source).to_dict() for s in splits], decodes=list(decodes),
        data_hash=result.data_hash, epochs=result.epochs_run, best_epoch=result.best_epoch,
        metrics={"calibration_admitted_untuned": result.initial_metric,
                 "calibration_admitted_best": result.best_metric, "history": result.history})
    save_head(full, result.heads, manifest)
    compact = run.work / f"head-{tag}"
    compress_head(full, compact, run.args.head_rank, model=lm.model, force=True)
    heads = load_head(compact, lm.model, lm.fingerprint)
    return HeadDecode(heads.vocab_logits, decodes, head_sha256(heads.positive), compact)


def head_stage(lm, splits: Sequence[TaskSplit], variant: Variant, run: FinetuneRun, *, adapted: bool,
               tag: str) -> HeadDecode | None:
    """:func:`train_head`, or its result read back when this run already made it (the stage's record)."""
    from mlx_sdm.network.heads import head_sha256, load_head

    record = run.read_record(f"head-{tag}")
    settings = run.args.head_identity(variant.digest)
    if record is not None and record.get("settings") != settings:
        record = None  # made with other settings or over another verifier: made again
    if record is None:
        decode = train_head(lm, splits, variant, run, adapted=adapted, tag=tag)
        run.write_record(f"head-{tag}", {"kept": decode is not None, "settings": settings,
                                          **({"decodes": list(decode.decodes), "path": str(decode.path)} if decode else {})})
        return decode
    if not record.get("kept"):
        return None
    heads = load_head(record["path"], lm.model, lm.fingerprint)
    return HeadDecode(heads.vocab_logits, tuple(record["decodes"]), head_sha256(heads.positive), Path(record["path"]))


# ----------------------------------------------------------------------------------------- the run, in order
@dataclass
class FinetuneOutcome:
    """What a run made: the folder and the numbers its report holds."""

    folder: Path
    lora: LoraResult
    final: Variant
    decode: HeadDecode | None
    baselines: list[Variant]
    report: str
    clock: StageClock


def prepare(args: TaskFinetuneArgs) -> Prepared:
    """Every check that needs no model: the tasks load, split and route; reviewed rows are read; the folder can be
    written."""
    from mlx_sdm.atomic import check_output_folder
    from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE
    from mlx_sdm.network.tasks.registry import load_tasks
    from mlx_sdm.usecases.model_folder import MODEL_MANIFEST

    if not args.tasks:
        raise DataError("name at least one task: a .jsonl file of {\"prompt\", \"answer\": {field: value}} rows or a "
                        "shipped task", field="--task")
    tasks = load_tasks(list(args.tasks), args.columns)
    for task in tasks:
        if task.delimiter != DELIMITER_JSON_CLOSE:
            raise DataError(f"task {task.name} has free-text answers; fine-tuning teaches tasks answered in one JSON "
                            "field", field="--task")
    reviewed = read_reviews(args.reviews, tasks) if args.reviews else {}
    splits = [check_split(with_reviews(split_task(task, args), reviewed.get(task.name))) for task in tasks]
    instructions = [task_instruction(s.task, s.task.path or s.task.source) for s in splits]
    if len({i.instruction for i in instructions}) < len(instructions):
        raise DataError("two tasks start their prompts with the same instruction, so a question cannot be routed to "
                        "one of them: give each task its own instruction", field="--task")
    check_output_folder(args.out, force=True, artifact_files=(MODEL_MANIFEST, WORK_DIR))
    hashes = {s.task.name: task_hash(s.task, reviewed.get(s.task.name)) for s in splits}
    return Prepared(splits, instructions, reviewed, args.identity(hashes))


@dataclass(frozen=True)
class Prepared:
    """A run's checked inputs: each task's split, how the chat routes to it, its reviewed rows, the run's identity."""

    splits: list[TaskSplit]
    instructions: list[TaskInstruction]
    reviewed: dict[str, ReviewedRows]
    identity: dict[str, Any]


def read_reviews(db: str, tasks: Sequence[Task]) -> dict[str, ReviewedRows]:
    """The review decisions of a chat store on these tasks' answers (``--from-reviews``)."""
    from mlx_sdm.store.chat_store import ChatStore

    if not Path(db).is_file():
        raise DataError("no chat store here; `mlx-sdm chat` writes one (or name it: --from-reviews PATH)", path=db,
                        field="--from-reviews")
    store = ChatStore(db)
    try:
        rows = store.review_queue.training_rows()
    finally:
        store.close()
    found = reviewed_rows(rows, tasks)
    if not any(r.count for r in found.values()):
        raise DataError(f"none of the {len(rows)} reviewed answers is an answer to "
                        f"{', '.join(t.name for t in tasks)} in its JSON: review some in the chat (ctrl+r) first",
                        path=db, field="--from-reviews")
    return found


def run_task_finetune(args: TaskFinetuneArgs, *, log: Callable[[str], None] = print) -> FinetuneOutcome:
    """The whole command (module docstring); a rerun with the same arguments resumes where it stopped."""
    from mlx_sdm.lm.adapters import attach_adapters
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.usecases.finetune_report import estimate, write_folder

    prepared = prepare(args)
    splits, instructions = prepared.splits, prepared.instructions
    run = FinetuneRun(args, log=log)
    run.check_identity(prepared.identity)
    lm = load_model(args.model, quantized=args.quantized)
    clock = read_clock(run)
    dataset = chat_dataset(lora_rows(splits), lm.tokenizer, lm.max_context,
                           {s.task.name: s.task.path or s.task.source for s in splits})  # every row fits, or one error
    projected = estimate(lm, splits, args, dataset, lora_done=run.read_record("lora") is not None)
    log(projected.text)
    if run.read_record("estimate") is None:  # the first sitting's, which the report sets beside what the run took
        run.write_record("estimate", projected.to_dict())
    lora = with_stage(run, clock, "1 LoRA", lambda: lora_stage(lm, splits, run, dataset))
    adapters = attach_adapters(lm.model, lora.adapters, instructions=tuple(i.instruction for i in instructions))
    lm = replace(lm, adapters=adapters)
    reviewed = prepared.reviewed
    tuned = with_stage(run, clock, "2 head: its verifier", lambda: variant_stage(lm, splits, run, "LoRA", adapted=True,
                                                                                  reviewed=reviewed))
    decode = None
    if args.head:
        decode = with_stage(run, clock, "2 head: Alg. 4", lambda: head_stage(lm, splits, tuned, run, adapted=True,
                                                                              tag="lora"))
    final = tuned
    if decode is not None:
        final = with_stage(run, clock, "3 verifier", lambda: variant_stage(lm, splits, run, "LoRA + head",
                                                                            adapted=True, decode=decode, reviewed=reviewed))
    baselines = with_stage(run, clock, "baselines", lambda: baseline_stage(lm, splits, run, reviewed)) \
        if args.baselines else []
    report = write_folder(lm, splits, instructions, lora, final, decode, [tuned] + baselines, run, clock, reviewed)
    if not args.keep_work:
        run.clean()
    return FinetuneOutcome(Path(args.out), lora, final, decode, baselines, report, clock)


def lora_stage(lm, splits: Sequence[TaskSplit], run: FinetuneRun, dataset) -> LoraResult:
    """Stage 1, or its result when this run already made it."""
    from mlx_sdm.usecases.lora_training import read_result, train_lora, write_result

    done = read_result(run.record_path("lora"))
    if done is not None and (done.adapters / "adapters.safetensors").is_file():
        run.log(f"LoRA: from this run's record (rank {done.rank}, epoch {done.epoch}, validation accuracy "
                f"{done.validation.accuracy:.3f})")
        return done

    result = train_lora(lm, dataset, run.args.lora, run.work / "lora",
                        lambda: validation_of(_validation_answers(lm, splits, run)), run.out / "adapters",
                        show=run.args.progress, log=run.log)
    write_result(run.record_path("lora"), result)
    return result


def _validation_answers(lm, splits: Sequence[TaskSplit], run: FinetuneRun) -> dict[str, list]:
    """The validation rows answered by the model as it is now (its LoRA layers in place, mid-training): greedy,
    the task's system prompt, not cached (the weights change every epoch)."""
    from mlx_sdm.network.tasks.answers import AnswerSettings, answer_items
    from mlx_sdm.usecases.build_verifier import DEFAULT_MAX_TOKENS

    out = {}
    for split in splits:
        settings = AnswerSettings(DEFAULT_MAX_TOKENS).for_task(split.task)
        out[split.task.name] = answer_items(lm, split.task, list(split.validation), settings)
    return out


def variant_stage(lm, splits: Sequence[TaskSplit], run: FinetuneRun, name: str, *, adapted: bool,
                  decode: HeadDecode | None = None, reviewed: dict[str, ReviewedRows] | None = None) -> Variant:
    """A variant's answers (cached) and the verifier on them (answers a person rejected in review among its D_tr)."""
    outcomes, trained = answer_splits(lm, splits, run, adapted=adapted, decode=decode)
    wrong = [a for s in splits for a in read_wrong_answers(lm, s.task, (reviewed or {}).get(
        s.task.name, ReviewedRows()).wrong, adapted=adapted, why="rejected in review")]
    return fit_variant(lm, Variant(name, outcomes, trained=trained), splits, run.args, adapted=adapted,
                       known_wrong=wrong)


def baseline_stage(lm, splits: Sequence[TaskSplit], run: FinetuneRun,
                   reviewed: dict[str, ReviewedRows] | None = None) -> list[Variant]:
    """What a user has without this command: the untuned model with a verifier built on its own answers (what
    ``build-verifier --tasks FILE`` gives) and, over it, the head alone (Alg. 4 on the frozen untuned base)."""
    untuned = variant_stage(lm, splits, run, "untuned", adapted=False, reviewed=reviewed)
    out = [untuned]
    if run.args.head and untuned.verifier is not None:
        decode = head_stage(lm, splits, untuned, run, adapted=False, tag="untuned")
        if decode is not None:
            alone, _ = answer_splits(lm, splits, run, adapted=False, decode=decode, parts=("held_out", "shifted"))
            out.append(Variant("head only", alone, untuned.verifier, None))
        else:
            out.append(Variant("head only", untuned.outcomes, untuned.verifier,
                               "Alg. 4 kept the untuned head: the head added no admitted-and-right answer on D_ca"))
    return out
