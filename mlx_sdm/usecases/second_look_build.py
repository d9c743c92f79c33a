"""Use case: build a second-look member for any mlx-lm model (``mlx-sdm build-verifier --tasks open_questions
--second-look K``; docs/verifiers.md, "The second look").

1. For each question of the open-question task (pool, held out and shifted, interleaved in proportion, so a build
   stopped early or cut by ``--limit`` holds every split in its share): the model's greedy answer as the everyday
   chat gives it (chat template, no system prompt, the judged head) with its hidden-state features
   ``[mean(h); h_delimiter]`` from the same pass, and K answers drawn from the same prompt in one batch
   (``lm.sampling.sample_for_prompts``; the greedy answer is decoded along for its token log-probabilities).
   Every answer is labelled by ``label_open_answer``; y = 1 iff the greedy answer is right.
2. One JSON row per question is appended to ``DIR.cache/open_questions-second-look-<key>.jsonl`` (key: the model,
   the answer settings and the spec), flushed and synced per batch: a build stopped at any moment, even by
   kill -9, resumes where it stopped, and a larger build reuses a smaller one's rows.
3. The SDM estimator (Alg. 1–3, the build's fit) on the pool halved into D_tr / D_ca, its input
   ``second_look_inputs`` (the agreement features beside the states) scaled per dimension; the held-out and
   shifted answers in the paper's Table 1 layout into ``DIR/report.md`` and ``report.json``, and what the
   member's leans are worth into ``lean.json``. Where Alg. 3 finds no region the member is saved all the same
   and verifies nothing (as calibrated), and the report says so.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from mlx_sdm.usecases.build_verifier import REPORT_JSON, REPORT_MD, REPORT_PLOT, BuildVerifierArgs, accuracy_lines, \
    evaluation_rows
from mlx_sdm.calibration.data import MIN_PER_CLASS, LabelledSet
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.errors import DataError
from mlx_sdm.lm.sampling import SampledAnswers
from mlx_sdm.network.lean import counts_of, measure_leans, save_leans
from mlx_sdm.network.second_look import Embed, SecondLookSpec, second_look_inputs
from mlx_sdm.network.tasks import Task, TaskItem
from mlx_sdm.network.tasks.answers import SamplerFor
from mlx_sdm.network.verifier import VERIFIER_MANIFEST, DocumentVerifier, FeatureRecipe

ROWS_FORMAT = 1
SPLITS = ("pool", "held_out", "shifted")
#: The report's names of the evaluated splits (as the suite build's report names them).
SPLIT_NAMES = {"held_out": "held-out", "shifted": "shifted"}


@dataclass(frozen=True)
class LookRow:
    """One question answered: the greedy answer (its text, the log-probabilities of its first ``spec.max_tokens``
    tokens, its label and state features) and the K drawn answers with their labels."""

    id: str
    split: str
    question: str
    golds: tuple[str, ...]
    answer: str
    answer_logprobs: tuple[float, ...]
    label: int
    features: np.ndarray
    drawn: SampledAnswers
    drawn_labels: tuple[bool, ...]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "split": self.split, "question": self.question, "golds": list(self.golds),
                "answer": self.answer, "answer_logprobs": list(self.answer_logprobs), "label": self.label,
                # float32 bytes, base64: exact, so a resumed build fits on the very numbers of an unbroken one
                "features": base64.b64encode(np.asarray(self.features, "<f4").tobytes()).decode("ascii"),
                "drawn": list(self.drawn.texts), "drawn_tokens": [list(t) for t in self.drawn.token_ids],
                "drawn_logprobs": list(self.drawn.mean_logprobs), "drawn_labels": list(self.drawn_labels),
                "seconds": self.drawn.seconds}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "LookRow":
        drawn = SampledAnswers(tuple(raw["drawn"]), tuple(tuple(t) for t in raw["drawn_tokens"]),
                               tuple(float(v) for v in raw["drawn_logprobs"]), float(raw["seconds"]))
        return cls(str(raw["id"]), str(raw["split"]), str(raw["question"]), tuple(raw["golds"]), str(raw["answer"]),
                   tuple(float(v) for v in raw["answer_logprobs"]), int(raw["label"]),
                   np.frombuffer(base64.b64decode(raw["features"]), "<f4").astype(np.float32), drawn,
                   tuple(bool(v) for v in raw["drawn_labels"]))


@dataclass
class SecondLookResult:
    verifier: DocumentVerifier
    rows: list[LookRow]
    report: str
    generated: int  # questions answered and sampled by this run
    from_cache: int  # questions whose rows an earlier run wrote
    seconds: float  # the whole build
    answer_seconds: float  # answering and sampling the ``generated`` questions


def plan(task: Task, args: BuildVerifierArgs) -> list[tuple[str, TaskItem]]:
    """The questions of a build: each split's first items, interleaved in proportion (so a build cut by
    ``--limit`` or stopped early holds every split in its share), the first ``args.limit`` of them."""
    parts = [[(split, item) for item in task.split(split, size=args.pool_size(task.name) if split == "pool"
                                                    else args.eval_size)] for split in SPLITS]
    order = sorted(((i / len(part), s, pair) for s, part in enumerate(parts) for i, pair in enumerate(part)),
                   key=lambda t: (t[0], t[1]))
    items = [pair for _, _, pair in order]
    return items[: args.limit] if args.limit else items


def rows_path(cache_dir: Path, lm, task: Task, spec: SecondLookSpec, sampler_tag: str = "") -> Path:
    """The build's row file: one per model, answer settings and spec (any change starts a new one)."""
    key = hashlib.sha256(json.dumps([ROWS_FORMAT, lm.fingerprint.get("head_sha256"), lm.fingerprint.get("num_layers"),
                                     task.delimiter, task.max_tokens, task.system, spec.to_dict(), sampler_tag],
                                    sort_keys=True).encode()).hexdigest()[:24]
    return Path(cache_dir) / f"{task.name}-second-look-{key}.jsonl"


def read_rows(path: Path) -> dict[str, LookRow]:
    """The rows already written, by question id. A last line cut by a kill is cut off the file (its question is
    answered again); any other line that does not read is skipped the same way."""
    if not path.is_file():
        return {}
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with path.open("r+b") as f:  # drop the partial row, so the next row starts on its own line
            f.truncate(end)
    rows: dict[str, LookRow] = {}
    for line in data[:end].decode("utf-8").splitlines():
        try:
            row = LookRow.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue
        rows[row.id] = row
    return rows


def answer_batch(lm, task: Task, chunk: Sequence[tuple[str, TaskItem]], spec: SecondLookSpec,
                 sampler_for: SamplerFor | None = None) -> list[LookRow]:
    """The greedy answers to one batch of questions (with their features) and K answers drawn for each."""
    from mlx_sdm.lm.prompt import fit_prompt
    from mlx_sdm.lm.sampling import sample_for_prompts
    from mlx_sdm.network.tasks.batched import generate_batch
    from mlx_sdm.network.tasks.open_label import label_open_answer

    prompts = [item.prompt for _, item in chunk]
    samplers = [sampler_for(item) for _, item in chunk] if sampler_for else None
    greedy = generate_batch(lm, prompts, max_tokens=task.max_tokens, delimiter=task.delimiter, system=task.system,
                            samplers=samplers)
    budget = getattr(lm, "max_context", 2048) - task.max_tokens  # the prompt exactly as generate_batch fitted it
    rendered = [list(fit_prompt(lm.tokenizer, p, budget, system=task.system).ids) for p in prompts]
    drawn = sample_for_prompts(lm, rendered, forced=[g.tokens[: spec.max_tokens] for g in greedy], **spec.sampling())
    rows = []
    for (split, item), answer, (samples, answer_lps) in zip(chunk, greedy, drawn):
        golds, question = tuple(item.gold.answers), item.gold.question
        rows.append(LookRow(item.id, split, question, golds, answer.text, tuple(answer_lps or ()),
                            int(label_open_answer(answer.text, golds, question)), answer.features.vector, samples,
                            tuple(label_open_answer(t, golds, question) for t in samples.texts)))
    return rows


def answer_all(lm, task: Task, items: list[tuple[str, TaskItem]], spec: SecondLookSpec, path: Path,
               args: BuildVerifierArgs, sampler_for: SamplerFor | None) -> tuple[list[LookRow], int, float]:
    """Every planned question's row (from ``path`` where an earlier run wrote it), in plan order; the number
    answered now and the seconds that took. Rows are appended, flushed and synced batch by batch."""
    from mlx_sdm.progress import progress_bar

    done = read_rows(path)
    todo = [pair for pair in items if pair[1].id not in done]
    bar = progress_bar(total=len(items), desc="questions", unit="question", disable=not args.progress)
    bar.update(len(items) - len(todo))
    path.parent.mkdir(parents=True, exist_ok=True)
    tic = time.perf_counter()
    with path.open("a", encoding="utf-8") as out:
        for start in range(0, len(todo), args.batch):
            for row in answer_batch(lm, task, todo[start:start + args.batch], spec, sampler_for):
                out.write(json.dumps(row.to_json()) + "\n")
                done[row.id] = row
            out.flush()
            os.fsync(out.fileno())
            bar.update(min(args.batch, len(todo) - start))
    bar.close()
    return [done[item.id] for _, item in items], len(todo), time.perf_counter() - tic


def labelled(rows: Sequence[LookRow], spec: SecondLookSpec, embed: Embed) -> LabelledSet:
    """The rows as the estimator reads them: :func:`second_look_inputs`, labels y = 1 iff the answer is right."""
    looks = [spec.look(r.question, r.answer, r.answer_logprobs, r.drawn) for r in rows]
    states = np.stack([r.features for r in rows]) if rows else np.zeros((0, 0), np.float32)
    return LabelledSet([r.id for r in rows], second_look_inputs(looks, states, embed), [r.label for r in rows],
                       [f"{r.question.strip()} => {r.answer.strip()}" for r in rows])


def halves(rows: list[LookRow]) -> dict[str, list[LookRow]]:
    """The pool rows halved in plan order into D_tr / D_ca (the pool is the task's seeded shuffle); a DataError
    when a half has fewer than ``MIN_PER_CLASS`` answers of a class."""
    pool = [r for r in rows if r.split == "pool"]
    out = {"training": pool[: len(pool) // 2], "calibration": pool[len(pool) // 2:]}
    for name, part in out.items():
        counts = np.bincount([r.label for r in part], minlength=2)
        if counts.min() < MIN_PER_CLASS:
            raise DataError(f"the {name} half has {counts[1]} right and {counts[0]} wrong answers; the estimator needs "
                            f"at least {MIN_PER_CLASS} of each: raise --limit or --per-task (the answered questions "
                            "are kept in the cache, and the larger build reuses them)", field="--limit")
    return out


def fit_member(lm, task: Task, rows: list[LookRow], spec: SecondLookSpec, args: BuildVerifierArgs,
               embed: Embed) -> DocumentVerifier:
    """Alg. 1–3 on the pool's halves (:func:`halves`), the input scaled as ``spec`` says."""
    parts = halves(rows)
    overrides = {"iterations": args.iterations, "epochs": args.epochs, "estimator": args.estimator}
    config = FitConfig(seed=args.seed, input_scaling=spec.input_scaling, **{k: v for k, v in overrides.items() if v})
    source = {"kind": "second_look", "tasks": [task.name], "model": lm.name,
              "per_task": {task.name: len(parts["training"]) + len(parts["calibration"])},
              "labels": "the model's greedy answers, right (1) or not (0) by label_open_answer",
              "second_look": spec.to_dict()}
    verifier = DocumentVerifier.fit_features(
        dict(lm.fingerprint, name=lm.name, source=getattr(lm, "source", None)),
        labelled(parts["training"], spec, embed), labelled(parts["calibration"], spec, embed), config,
        recipe=FeatureRecipe(delimiter=task.delimiter, system=task.system), source=source, progress=args.progress,
        second_look=spec)
    verifier.tasks = [task.summary()]
    return verifier


def build_second_look(args: BuildVerifierArgs, spec: SecondLookSpec, *, embed: Embed | None = None,
                      sampler_for: SamplerFor | None = None, sampler_tag: str = "",
                      log: Callable[[str], None] = print) -> SecondLookResult:
    """Answer, draw, label, fit, save DIR (atomically) and write its report; see the module docstring.
    ``embed``: unit-norm sentence embeddings (default: MiniLM, the embedder the chat judges with)."""
    from mlx_sdm.atomic import check_output_folder
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.tasks.registry import OPEN_TASK, load_tasks

    started = time.time()
    if list(args.tasks or [OPEN_TASK]) != [OPEN_TASK]:
        raise DataError(f"the second look judges everyday open questions only; give --tasks {OPEN_TASK} (build the "
                        "other tasks apart, without --second-look)", field="--tasks")
    check_output_folder(args.out, force=True, artifact_files=(VERIFIER_MANIFEST,))
    task = load_tasks([OPEN_TASK])[0]
    lm = load_model(args.model, quantized=args.quantized)
    items = plan(task, args)
    path = rows_path(args.resolved_cache_dir(), lm, task, spec, sampler_tag)
    rows, generated, answer_seconds = answer_all(lm, task, items, spec, path, args, sampler_for)
    if generated:
        log(f"answered {generated} questions with {spec.k} drawn answers each in {answer_seconds:.1f} s "
            f"({answer_seconds / generated:.2f} s per question); {len(rows) - generated} from {path}")
    else:
        log(f"all {len(rows)} questions from {path}")
    halves(rows)  # too few answers of a class: say so before MiniLM loads
    if embed is None:
        from mlx_sdm.lm.minilm import load_minilm

        embed = load_minilm().encode
    verifier = fit_member(lm, task, rows, spec, args, embed)
    verifier.info = {"built_by": "mlx-sdm build-verifier --second-look", "per_task": args.per_task,
                     "eval_size": args.eval_size, "limit": args.limit, "max_tokens": task.max_tokens, "seed": args.seed,
                     "left_out": [], "seconds_per_question": answer_seconds / generated if generated else None}
    verifier.save(args.out)
    report = write_report(verifier, task, rows, spec, embed, Path(args.out), plot_png=args.plot)
    return SecondLookResult(verifier, rows, report, generated, len(rows) - generated, time.time() - started,
                            answer_seconds)


def write_report(verifier: DocumentVerifier, task: Task, rows: list[LookRow], spec: SecondLookSpec, embed: Embed,
                 out: Path, *, plot_png: bool = True) -> str:
    """Table 1 for the held-out and shifted answers, the paired test against the probe, what the second look
    saw, and the leans (``lean.json``); markdown and JSON in ``out``."""
    from mlx_sdm.atomic import atomic_write_text
    from mlx_sdm.calibration.evaluation import plot

    lines = [f"Second-look verifier `{out.name}` for model {verifier.model_fingerprint.get('name')}; y = 1 when the "
             f"model's own answer is right. Cells: accuracy / admitted fraction (α′ = {verifier.estimator.alpha}).", "",
             "| dataset | estimator | y=0 | y=1 | ŷ=0 | ŷ=1 | marginal |", "|---|---|---|---|---|---|---|"]
    records, evaluations, splits = [], [], {}
    for split, name in SPLIT_NAMES.items():
        part = [r for r in rows if r.split == split]
        if part:
            table, record, ev = evaluation_rows(verifier, f"{task.name} {name}", labelled(part, spec, embed))
            lines += table
            records.append(record)
            evaluations.append(ev)
            splits[name] = counts_of(name, ev.labels, ev.predictions)
    lines += accuracy_lines(records) + [""] + facts(verifier, rows, spec)
    text = "\n".join(lines)
    data = {"rows": records, "second_look": spec.to_dict(),
            "sizes": {s: sum(r.split == s for r in rows) for s in SPLITS},
            "right": {s: sum(r.label for r in rows if r.split == s) for s in SPLITS},
            "admits_nothing": verifier.estimator.admits_nothing}
    atomic_write_text(out / REPORT_MD, text + "\n")
    atomic_write_text(out / REPORT_JSON, json.dumps(data, indent=2) + "\n")
    if splits:
        verifier.leans = {task.name: measure_leans(splits)}
        save_leans(out, verifier.leans, source="build-verifier --second-look: the model's own answers, held-out "
                                               "and shifted splits")
    if plot_png and evaluations:
        plot(evaluations, str(out / REPORT_PLOT))
    return text


def facts(verifier: DocumentVerifier, rows: list[LookRow], spec: SecondLookSpec) -> list[str]:
    """What the build saw, in words: sizes, base rates, the drawn answers, the calibration half, Alg. 3."""
    pool = [r for r in rows if r.split == "pool"]
    training = verifier.estimator.manifest.get("training", {})
    wrong = 1.0 - float(np.mean([r.label for r in pool[len(pool) // 2:]]))
    drawn_right = float(np.mean([np.mean(r.drawn_labels) for r in rows if r.drawn_labels])) if rows else float("nan")
    out = [f"Second look: {spec.k} answers drawn per question at temperature {spec.temperature}, at most "
           f"{spec.max_tokens} tokens each (seed {spec.seed}); input [agreement features; states] scaled "
           f"{spec.input_scaling.replace('_', ' ')}. Questions: "
           + ", ".join(f"{s.replace('_', ' ')} {sum(r.split == s for r in rows)} ({sum(r.label for r in rows if r.split == s)}"
                       " answered right)" for s in SPLITS)
           + f"; {100 * drawn_right:.0f} % of the drawn answers are right.",
           f"Calibration accuracy {training.get('calibration_accuracy', float('nan')):.3f} (logistic regression "
           f"{training.get('logistic_regression', {}).get('calibration_accuracy', float('nan')):.3f}; calling every "
           f"answer wrong {wrong:.3f}); threshold_succeeded={verifier.estimator.manifest.get('threshold_succeeded')}."]
    if verifier.estimator.admits_nothing:
        out.append(ADMITS_NOTHING)
    return out


#: The report's words when Alg. 3 finds no region (the member is saved and verifies nothing).
ADMITS_NOTHING = ("Alg. 3 found no region where the calibration answers are right at α′: this member admits no "
                  "answer, so it verifies nothing (as calibrated). Its drawn answers do not separate right from wrong "
                  "answers well enough on this model; a larger model, whose samples repeat the facts it knows, may "
                  "find one.")


def describe(result: SecondLookResult) -> str:
    """The summary line the command prints after the report."""
    return (f"built the second-look member in {result.seconds:.0f} s ({result.generated} questions answered and "
            f"sampled, {result.from_cache} from the cache)"
            + ("; it verifies nothing: Alg. 3 found no region" if result.verifier.estimator.admits_nothing else ""))
