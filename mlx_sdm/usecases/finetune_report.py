"""What ``mlx-sdm finetune --task`` writes at its end: the verifier and head into the folder, the report (the
paper's Table 1 cells per task, split and model, Table 5's before/after rows, the classic baseline), and the
manifest, last; and the time estimate it prints before it starts."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mlx_sdm.errors import ArtifactError
from mlx_sdm.network.coverage import TaskInstruction
from mlx_sdm.usecases.finetune_advice import RunNumbers, SplitNumbers, summary
from mlx_sdm.usecases.lora_training import LoraResult
from mlx_sdm.usecases.model_folder import HEAD_DIR, REPORT_JSON, REPORT_MD, VERIFIER_DIR, write_run_manifest
from mlx_sdm.usecases.finetune_plan import FinetuneRun, HeadDecode, ReviewedRows, StageClock, TaskSplit, Variant

SPLITS = (("held_out", "held-out"), ("shifted", "shifted"))
STRATA = ("y=0", "y=1", "ŷ=0", "ŷ=1", "marginal")


@dataclass(frozen=True)
class SplitScore:
    """One model's answers to one task's held-out or shifted rows: task accuracy, answers in the JSON, what
    its verifier admits (the p̂ lower row of Table 1) and how many of the admitted ŷ = 1 answers are right."""

    model: str
    task: str
    split: str
    rows: int
    well_formed: float | None
    accuracy: float | None
    verified: int | None = None  # ŷ = 1 and admitted (what a person sees as verified); None: no verifier
    verified_right: int | None = None
    strata: tuple[dict[str, Any], ...] = ()  # {"accuracy", "admitted", "total"} for y=0, y=1, ŷ=0, ŷ=1, marginal
    cells: tuple[str, ...] = ()
    why: str | None = None

    def violations(self, alpha: float) -> list[str]:
        """Admitted strata whose accuracy is below α′ (the promise, broken)."""
        return [f"{self.model}, {self.task} {self.split}, {name}: {s['accuracy']:.3f} over {s['admitted']}"
                for name, s in zip(STRATA, self.strata)
                if s["admitted"] and s["accuracy"] is not None and s["accuracy"] < alpha]


def score_variant(variant: Variant) -> list[SplitScore]:
    """Every task and split of a variant, judged by the variant's verifier (Table 1's p̂ lower row)."""
    from mlx_sdm.calibration.evaluation import evaluate, table_row
    from mlx_sdm.usecases.build_verifier import _labelled
    from mlx_sdm.usecases.label_formulation import AnswerView

    out = []
    for name, outcome in variant.outcomes.items():
        for attr, split in SPLITS:
            answered = getattr(outcome, attr)
            if not answered:
                why = outcome.left_out or "no rows"
                out.append(SplitScore(variant.name, name, split, 0, None, None, why=why))
                continue
            well = float(np.mean([a.label.well_formed for a in answered]))
            accuracy = float(np.mean([a.label.correct for a in answered]))
            if variant.verifier is None or outcome.left_out:
                out.append(SplitScore(variant.name, name, split, len(answered), well, accuracy,
                                      why=variant.why or outcome.left_out))
                continue
            folds = variant.held_out_judged.get(name) if attr == "held_out" else None
            if folds is not None:  # these rows calibrate the shipped member: judged by the folds that did not see them
                labels, predictions, admitted = folds.right.astype(int), folds.says_right.astype(int), folds.admitted
            else:
                ev = evaluate(AnswerView(variant.verifier, answered),
                              _labelled([a.document() for a in answered], answered), split)
                labels, predictions, admitted = ev.labels, ev.predictions, ev.admitted
            row = table_row("p̂ lower", labels, predictions, admitted, 2)
            shown = admitted & (predictions == 1)
            out.append(SplitScore(variant.name, name, split, len(answered), well, accuracy, int(shown.sum()),
                                  int((shown & (labels == 1)).sum()),
                                  tuple({"accuracy": s.accuracy, "admitted": s.admitted, "total": s.total}
                                        for s in row.strata()), tuple(s.markdown() for s in row.strata())))
    return out


def minilm_probe(splits: Sequence[TaskSplit]) -> list[SplitScore]:
    """The classic baseline a user might pick instead: a logistic regression on MiniLM sentence embeddings of the
    same prompts, trained on the training and validation rows' gold answers (accuracy only: it has no verifier)."""
    from mlx_sdm.calibration.training import logistic_regression
    from mlx_sdm.lm.minilm import load_minilm

    embed = load_minilm().encode
    out = []
    for split in splits:
        values = [json.dumps(v) for v in split.task.answer_format.answers]
        train = list(split.train) + list(split.validation)
        w, b = logistic_regression(embed([i.prompt for i in train]), np.array([values.index(json.dumps(i.gold))
                                                                              for i in train]), len(values))
        for attr, name in SPLITS:
            items = getattr(split, attr)
            if not items:
                continue
            predicted = np.argmax(embed([i.prompt for i in items]) @ w + b, axis=1)
            gold = np.array([values.index(json.dumps(i.gold)) for i in items])
            out.append(SplitScore("MiniLM + logistic regression", split.task.name, name, len(items), None,
                                  float(np.mean(predicted == gold)), why="a classifier: no verifier"))
    return out


# ----------------------------------------------------------------------------------------- the report
def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def score_line(s: SplitScore) -> str:
    verified = "-" if s.verified is None else f"{s.verified / s.rows:.3f} ({s.verified_right}/{s.verified} right)"
    cells = " | ".join(s.cells) if s.cells else " | ".join(["-"] * len(STRATA))
    note = f" {s.why}" if s.why and s.verified is None and s.accuracy is None else ""
    return (f"| {s.task} {s.split} ({s.rows}) | {s.model} | {_cell(s.well_formed)} | {_cell(s.accuracy)} | {verified} "
            f"| {cells} |{note}")


def share_words(share: float) -> str:
    """1/3 → "a third", 1/4 → "a quarter", 1/5 → "a fifth"; another share as a percentage."""
    named = {3: "a third", 4: "a quarter", 5: "a fifth"}
    n = round(1 / share) if share else 0
    return named[n] if n in named and abs(share - 1 / n) < 1e-9 else f"{share:.0%}"


def wrong_share_lines(v: Variant) -> list[str]:
    """What the report says of a variant's constructed wrong answers and of the share chosen for them."""
    choice = v.wrong_share
    share = choice.share if choice is not None else 1 / 3
    lines = []
    if v.constructed:
        lines.append(f"\n{v.name}: where fewer than {share_words(share)} of a verifier half's answers were wrong, "
                     "right answers were replaced by constructed wrong answers to the same questions (docs/method.md "
                     "§ 14's encoding), so the verifier learns what a wrong answer looks like: "
                     + ", ".join(f"{half} {n}" for half, n in v.constructed.items()) + ".")
    if choice is not None and len(choice.tried) > 1:
        lines.append(("" if lines else "\n") + f"{v.name}: the share of wrong answers was chosen on D_ca alone: "
                     "fitted on half of it at each share, judged on the other half (a third wrong), right answers "
                     "verified there: " + ", ".join(f"{share_words(s)} {'-' if n is None else n}" for s, n in choice.tried)
                     + f" ('-': not fitted, or an admitted stratum below α′); chosen: {share_words(share)}.")
    return lines


def formulation_lines(v: Variant) -> list[str]:
    """Which formulation judges each task of a variant and what each verified on the held-back half of D_ca
    (usecases/verifier_choice.py)."""
    def tried(t) -> str:
        if t is None:
            return "could not be fitted"
        held = "every admitted stratum ≥ α′" if t.holds else "an admitted stratum below α′"
        return f"{t.verified_right} right answers verified, {t.verified_wrong} wrong ones ({held})"

    lines = []
    for name, c in v.formulations.items():
        which = "the label estimator (Table 1: it predicts the answer from the model's states; verified when its " \
                "admitted prediction is the model's answer)" if c.chosen == "label" else \
            "the answer verifier (right or wrong answers, with constructed wrong ones)"
        lines.append(f"\n{v.name}, {name}: judged by {which}. On the held-back half of D_ca ({c.rows} answers, as the "
                     f"model gave them): label estimator {tried(c.label)}; answer verifier {tried(c.answer)}; "
                     f"{c.why}." + (" Every row no training saw calibrates it, the held-out rows too: their figures "
                                   "below come from 5 folds, each judged by a member fitted without it."
                                   if name in v.held_out_judged else ""))
    return lines


def report_text(lm, splits: Sequence[TaskSplit], lora: LoraResult, decode: HeadDecode | None,
                scores: list[SplitScore], run: FinetuneRun, clock: StageClock, alpha: float,
                variants: Sequence[Variant], reviewed: dict[str, ReviewedRows], final: Variant | None = None) -> str:
    """report.md: the run, the plain summary of ``final`` (the model the folder keeps) against the untuned model,
    its splits and stages, then one table row per task, split and model."""
    args = run.args
    plain = summary(run_numbers(scores, final, splits, run.out)) if final is not None else []
    lines = [f"# mlx-sdm finetune: {', '.join(s.task.name for s in splits)} on {lm.name}", "",
             *[f"- {line}" for line in plain], "" if plain else None,
             f"Seed {args.seed}. LoRA rank {lora.rank}, epoch {lora.epoch} (chosen on validation: accuracy "
             f"{lora.validation.accuracy:.3f}); head {'kept for ' + ', '.join(decode.decodes) if decode else 'not kept'}.",
             *[f"Reviewed answers of {name}: {len(r.gold)} joined the LoRA training rows (edits, accepted answers and "
               f"the other value of rejected yes/no answers), {len(r.wrong)} rejected ones the verifier's D_tr."
               for name, r in reviewed.items() if r.count],
             "", "| task | training (LoRA; the verifier's D_tr) | validation | D_ca | held-out | shifted |",
             "|---|---|---|---|---|---|"]
    for split in splits:
        n = split.sizes()
        lines.append(f"| {split.task.name} | {n['train']} | {n['validation']} | {n['calibration']} | {n['held_out']} | "
                     f"{n['shifted']} |")
    lines += ["", "| stage | seconds | peak memory (GB) |", "|---|---|---|"]
    lines += [f"| {name} | {clock.seconds[name]:.0f} | {clock.peak_gb.get(name, 0):.2f} |" for name in clock.seconds]
    lines += estimate_lines(run.read_record("estimate"), clock, len(lora.history))
    lines += ["", "LoRA epochs (validation task accuracy after each):", "", "| rank | epoch | loss | validation | "
              "seconds | answer tokens/s |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.rank} | {r.epoch} | {r.train_loss:.3f} | {r.validation.accuracy:.3f} | {r.seconds:.0f} | "
              f"{r.tokens_per_second:.0f} |" for r in lora.history]
    for v in variants:
        lines += wrong_share_lines(v) + formulation_lines(v)
    lines += ["", f"Cells: task accuracy / fraction of the rows; strata are the p̂ lower row of Table 1 (admitted: "
                  f"p_lower ≥ α′ = {alpha}); verified = shown to a person as verified (ŷ = 1 and admitted).", "",
              "| task, split (rows) | model | JSON | task accuracy | verified (right) | " + " | ".join(STRATA) + " |",
              "|---|---|---|---|---|" + "---|" * len(STRATA)]
    lines += [score_line(s) for s in sorted(scores, key=lambda s: (s.task, s.split != "held-out"))]
    broken = [v for s in scores for v in s.violations(alpha)]
    admitted = any(stratum["admitted"] for s in scores for stratum in s.strata)
    lines += ["", "Admitted strata below α′: " + "; ".join(broken) if broken else
              "Every admitted stratum is at least α′." if admitted else "Nothing was admitted, so no stratum is claimed."]
    return "\n".join(line for line in lines if line is not None) + "\n"


def run_numbers(scores: Sequence[SplitScore], final: Variant, splits: Sequence[TaskSplit], folder: Path) -> RunNumbers:
    """The plain summary's numbers: each split summed over the tasks, the final model's against the untuned one's."""
    def split_numbers(split: str, attr: str) -> SplitNumbers:
        mine = [s for s in scores if s.model == final.name and s.split == split and s.rows]
        untuned = [s for s in scores if s.model == "untuned" and s.split == split]  # left out (no JSON): none right
        golds = [json.dumps(i.gold) for sp in splits for i in getattr(sp, attr)]
        majority = max(Counter(golds).values()) / len(golds) if golds else 0.0
        has_verifier = bool(mine) and all(s.verified is not None for s in mine)
        return SplitNumbers(split, sum(s.rows for s in mine), sum(round((s.accuracy or 0) * s.rows) for s in mine),
                            sum(round((s.accuracy or 0) * s.rows) for s in untuned) if untuned else None,
                            sum(s.verified for s in mine) if has_verifier else None,
                            sum(s.verified - s.verified_right for s in mine) if has_verifier else None, majority)

    instruction = splits[0].task.prompt_prefix.strip() if splits else ""
    shifted = split_numbers("shifted", "shifted")
    return RunNumbers(split_numbers("held-out", "held_out"), shifted if shifted.rows else None, str(folder),
                      instruction, final.why)


def summary_lines(report: str) -> list[str]:
    """The plain summary at the top of a report.md (:func:`report_text`): what a run prints last."""
    lines = report.splitlines()[2:]
    return [line[2:] for line in lines[: lines.index("")] if line.startswith("- ")] if "" in lines else []


def estimate(lm, splits: Sequence[TaskSplit], args, dataset, *, lora_done: bool = False) -> RunEstimate:
    """The run's time, projected before it starts from two measured steps on this machine: a batch of answers
    (the untuned model, greedy) and a forward pass over one training batch (a training step is about three).
    ``lora_done``: a resumed run whose LoRA stage is finished (the estimate is of what is left)."""
    import mlx.core as mx

    from mlx_sdm.network.tasks.batched import generate_batch

    split = splits[0]
    probe = list(split.validation)[:8]
    started = time.perf_counter()
    generate_batch(lm, [i.prompt for i in probe], max_tokens=12, delimiter=split.task.delimiter, system=split.task.system)
    per_answer = (time.perf_counter() - started) / max(1, len(probe))
    width = max(len(dataset[i][0]) for i in range(min(len(dataset), args.lora.batch_size)))
    batch = mx.zeros((args.lora.batch_size, width), dtype=mx.int32)
    started = time.perf_counter()
    mx.eval(lm.model(batch))
    step = 3 * (time.perf_counter() - started)
    return projection(splits, args, len(dataset) // args.lora.batch_size * step, per_answer, lora_done=lora_done)


@dataclass(frozen=True)
class RunEstimate:
    """A run's time projected before it starts: one LoRA epoch (the frozen blocks' cache included) and the stages
    after LoRA, from two measured steps (:func:`estimate`) or from the rows' lengths (``finetune --plan``)."""

    epoch_seconds: float
    rest_seconds: float
    rows: int  # LoRA's training rows
    max_epochs: int
    ranks: int
    later: str  # what comes after LoRA, in words
    lora_done: bool = False

    @property
    def low_seconds(self) -> float:
        """One epoch (a rank stops after its first when the validation rows are all but all right) and the rest."""
        return (0.0 if self.lora_done else self.epoch_seconds) + self.rest_seconds

    @property
    def high_seconds(self) -> float:
        """Every epoch of every rank, and the rest."""
        return (0.0 if self.lora_done else self.epoch_seconds * self.max_epochs * self.ranks) + self.rest_seconds

    @property
    def text(self) -> str:
        if self.lora_done:
            return f"estimate: LoRA is done (this run's checkpoint); {self.later} about {self.rest_seconds / 60:.0f} min"
        return (f"estimate: LoRA about {self.epoch_seconds / 60:.0f} min an epoch over {self.rows} rows (at most "
                f"{self.max_epochs} epoch{'s' if self.max_epochs > 1 else ''}{' per rank' if self.ranks > 1 else ''}); "
                f"{self.later} about {self.rest_seconds / 60:.0f} min; in all about {self.low_seconds / 60:.0f}–"
                f"{self.high_seconds / 60:.0f} min")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def projection(splits: Sequence[TaskSplit], args, epoch: float, per_answer: float, *,
               lora_done: bool = False) -> RunEstimate:
    """The estimate from the seconds of one LoRA epoch and of one answer: LoRA's epochs (at least one: a rank stops
    after its first when the validation rows are all but all right; at most every epoch of every rank), every
    variant's answers to every row, the head's passes."""
    later = "answers, verifiers and the head" if args.head else "answers and verifiers"
    answers = sum(len(s.train) + len(s.verifier) + len(s.held_out) + len(s.shifted) for s in splits)
    variants = (2 if args.head else 1) * (2 if args.baselines else 1)  # tuned (+ head), and untuned (+ head alone)
    head = (2 if args.baselines else 1) * args.head_epochs * 2 * sum(len(s.verifier) for s in splits) if args.head else 0
    return RunEstimate(epoch, (answers * variants + head) * per_answer, sum(len(s.train) for s in splits),
                       args.lora.max_epochs, len(args.lora.ranks), later, lora_done)


def estimate_lines(recorded: dict[str, Any] | None, clock: StageClock, epochs: int) -> list[str]:
    """The estimate printed before the run started beside what the run took (the report's stage table), each
    part's error in percent (``epochs``: the LoRA epochs the run made); none when the run kept no estimate (one
    resumed after LoRA)."""
    if not recorded or recorded.get("lora_done") or "1 LoRA" not in clock.seconds or epochs < 1:
        return []
    guess = RunEstimate(**recorded)
    epoch = clock.seconds["1 LoRA"] / epochs
    rest = sum(v for k, v in clock.seconds.items() if k != "1 LoRA")
    whole = clock.seconds["1 LoRA"] + rest
    said = guess.epoch_seconds * epochs + guess.rest_seconds  # the estimate, for the epochs the run made

    def off(estimated: float, measured: float) -> str:
        return f"{(estimated - measured) / measured:+.0%}" if measured > 0 else "-"

    return ["", f"Estimated before it started: {guess.text.removeprefix('estimate: ')}. It took {whole / 60:.0f} min: "
                f"LoRA {epoch / 60:.1f} min an epoch over {epochs} epoch{'s' if epochs > 1 else ''} (estimated "
                f"{guess.epoch_seconds / 60:.1f}, {off(guess.epoch_seconds, epoch)}), {guess.later} {rest / 60:.1f} min "
                f"(estimated {guess.rest_seconds / 60:.1f}, {off(guess.rest_seconds, rest)}); for the epochs it made, "
                f"the estimate was {said / 60:.0f} min ({off(said, whole)})."]


# ----------------------------------------------------------------------------------------- the folder
def save_verifier(lm, final: Variant, decode: HeadDecode | None, run: FinetuneRun, lora: LoraResult) -> bool:
    """The final verifier into DIR/verifier: what it reads (the adapters' states, the head's answers), the base
    model's open-question member when the base has one (everyday questions are answered by the base, so that
    member still judges them), its own Table 1 report and leans. False: no verifier could be built."""
    from mlx_sdm.network.verdict import OPEN_QUESTIONS
    from mlx_sdm.network.verifier import DocumentVerifier
    from mlx_sdm.resources import default_verifier_dir
    from mlx_sdm.usecases.build_verifier import write_report

    verifier = final.verifier
    if verifier is None:
        return False
    verifier.info = {"built_by": "mlx-sdm finetune", "seed": run.args.seed,
                     "adapters": {"sha256": lm.adapters.only.sha256, "rank": lora.rank, "epoch": lora.epoch},
                     "head": {"sha256": decode.sha256, "decodes": list(decode.decodes)} if decode else None,
                     "constructed_wrong_answers": dict(final.constructed),
                     "wrong_share": None if final.wrong_share is None else {
                         "share": final.wrong_share.share, "tried": [list(t) for t in final.wrong_share.tried]},
                     "formulations": {name: c.to_dict() for name, c in final.formulations.items()}}
    try:
        base = DocumentVerifier.load(default_verifier_dir(), expect_fingerprint=lm.fingerprint)
    except ArtifactError:
        base = None
    if base is not None and OPEN_QUESTIONS in base.members:
        verifier.members[OPEN_QUESTIONS] = base.members[OPEN_QUESTIONS]
    folder = run.out / VERIFIER_DIR
    verifier.save(folder)
    outcomes = [replace(o, held_out=[]) if o.task.name in final.held_out_judged else o  # rows it calibrated on
                for o in final.outcomes.values()]
    write_report(verifier, outcomes, folder, plot_png=True)
    return True


def copy_head(decode: HeadDecode | None, run: FinetuneRun) -> None:
    from mlx_sdm.atomic import atomic_directory

    if decode is None:
        return
    with atomic_directory(run.out / HEAD_DIR) as tmp:
        for path in decode.path.iterdir():
            shutil.copy2(path, tmp / path.name)


def table_flags(args) -> dict[str, str]:
    """The flags that turned a table's rows into prompts (``--text-column`` ...), under their task-run keys: kept in
    the folder, so ``--from-reviews --model DIR`` reads its table files the same way again."""
    chosen = {"text_column": args.text_column, "label_column": args.label_column, "instruction": args.instruction,
              "field": args.answer_field}
    return {key: value for key, value in chosen.items() if value is not None}


def write_folder(lm, splits: Sequence[TaskSplit], instructions: Sequence[TaskInstruction], lora: LoraResult,
                 final: Variant, decode: HeadDecode | None, others: Sequence[Variant], run: FinetuneRun,
                 clock: StageClock, reviewed: dict[str, ReviewedRows]) -> str:
    """The verifier, the head, the report, then the manifest (last: from then on the folder is complete)."""
    from mlx_sdm.atomic import atomic_write_text

    has_verifier = save_verifier(lm, final, decode, run, lora)
    copy_head(decode, run)
    variants = list(others) + ([final] if final not in others else [])
    scores = [s for v in variants for s in score_variant(v)] + minilm_probe(splits)
    alpha = final.verifier.estimator.alpha if final.verifier is not None else 0.95
    text = report_text(lm, splits, lora, decode, scores, run, clock, alpha, variants, reviewed, final)
    atomic_write_text(run.out / REPORT_MD, text)
    atomic_write_text(run.out / REPORT_JSON, json.dumps({
        "seed": run.args.seed, "splits": {s.task.name: s.sizes() for s in splits},
        "lora": {"rank": lora.rank, "epoch": lora.epoch, "history": [r.to_dict() for r in lora.history]},
        "head": {"decodes": list(decode.decodes)} if decode else None,
        "reviewed": {name: {"gold": len(r.gold), "wrong": len(r.wrong)} for name, r in reviewed.items()},
        "stages": {"seconds": clock.seconds, "peak_gb": clock.peak_gb},
        "scores": [asdict(s) for s in scores]}, indent=2, default=str) + "\n")
    write_run_manifest(run.out, run.args.model, {k: v for k, v in lm.fingerprint.items()}, tuple(instructions),
                       lm.adapters.only.sha256, run.args.quantized, has_head=decode is not None, has_verifier=has_verifier,
                       info={"rank": lora.rank, "epoch": lora.epoch, "seed": run.args.seed, "name": lm.name,
                             "tasks": [s.task.name for s in splits],
                             "task_files": {s.task.name: str(Path(s.task.path).resolve()) for s in splits
                                            if s.task.path},
                             "table": table_flags(run.args)})
    return text
