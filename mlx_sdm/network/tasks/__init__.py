"""The task suite: tasks in the universal verification encoding (docs/method.md § 14) that a model answers itself.

A :class:`Task` is a name, a plain-words description, an example prompt a user can send, the answer
format (one JSON field, :class:`~mlx_sdm.network.encoding.TaskFormat`), an optional system prompt,
and its items with their gold answers. :meth:`Task.label_answer` labels a model's answer against the
gold with the § 14 parser (first ``{`` to first ``}``; a parse error counts as a wrong answer).

Each task has three deterministic splits of its items (seeded, disjoint by source item):

- ``pool``: for training and calibration (``build-verifier`` takes its first ``--per-task`` items);
- ``held_out``: in-distribution items never in the pool;
- ``shifted``: a distribution shift of the task (its ``shift`` says which: the held-out items in
  another form, or items from another collection of the same task).

    from mlx_sdm.network.tasks.registry import load_tasks
    for task in load_tasks(["bbc_topic", "my_task.jsonl"]):
        items = task.split("pool", size=200)
        label = task.label_answer(model_answer_text, items[0].gold)   # AnswerLabel(answer, well_formed, correct)

Shipped tasks read small converted files vendored in ``tasks/data`` (made by
``scripts/vendor_task_data.py``; sources and licences in ``tasks/data/README.md``); nothing is
downloaded at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE
from mlx_sdm.network.encoding import TaskFormat, parse_answer

#: Seed of every split (the paper's encoding seed).
SPLIT_SEED = 0
#: In-distribution items held out per task (at most this many, and at most HELD_OUT_FRACTION of them).
HELD_OUT_SIZE = 300
HELD_OUT_FRACTION = 0.2
SPLITS = ("pool", "held_out", "shifted")
#: Shortest shared prompt start that routes a user's prompt to a task's system prompt.
MIN_PROMPT_PREFIX = 16
#: The suite's system prompt: SmolLM2-135M answers in JSON only when told to (the paper's generic
#: "You are a helpful AI assistant." alone gets prose), and one verifier's features need one prompt.
SUITE_SYSTEM_PROMPT = ("You are a helpful AI assistant. When a message asks for JSON, reply with only that JSON "
                       "object and nothing else.")


@dataclass(frozen=True)
class SourceExample:
    """One source item before it becomes a prompt: its id, text and gold answer (+ task extras)."""

    id: str
    text: str
    gold: Any
    extra: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class TaskItem:
    """One prompt of a task: ``prompt`` is the user message, ``gold`` the correct answer value."""

    id: str
    task: str
    prompt: str
    gold: Any
    document: str
    split: str


@dataclass(frozen=True)
class AnswerLabel:
    """A model answer labelled against the gold: ``answer`` is the parsed value (None when the answer
    is not in the task's JSON format), ``correct`` the verification label y."""

    answer: Any
    well_formed: bool
    correct: bool

    @property
    def label(self) -> int:
        return int(self.correct)


@dataclass
class Task:
    """A task of the suite (see the module docstring)."""

    name: str
    description: str
    answer_format: TaskFormat
    source: str  # origin and licence, one line
    shift: str  # what the shifted split is
    read_examples: Callable[[], tuple[list[SourceExample], list[SourceExample]]]  # (main, other collection)
    render: Callable[[SourceExample, str], str]  # (example, view "main" | "shifted") -> user message
    system: str | None = SUITE_SYSTEM_PROMPT
    shift_by_view: bool = True  # shifted = held-out items rendered in the "shifted" view; else the other collection
    #: where the judged unit of an answer ends (``lm.features``): the JSON unit's closing brace for the suite
    delimiter: str = DELIMITER_JSON_CLOSE
    #: the answer tokens a build generates for this task (None: ``build-verifier --max-tokens``)
    max_tokens: int | None = None
    #: the user's JSONL file the task was read from (None: a shipped task)
    path: str | None = None
    #: what reading the user's file found, to show before a run: the form it was read in, repeated rows dropped
    notes: tuple[str, ...] = ()
    _cache: tuple | None = field(default=None, repr=False)

    # ------------------------------------------------------------------------------------ items
    def examples(self) -> tuple[list[SourceExample], list[SourceExample]]:
        """(the main collection, the other one), read once."""
        if self._cache is None:
            self._cache = self.read_examples()
        return self._cache

    def _order(self) -> tuple[list[SourceExample], list[SourceExample]]:
        """(pool examples, held-out examples): one seeded shuffle of the main collection."""
        main, _ = self.examples()
        order = np.random.default_rng(SPLIT_SEED).permutation(len(main))
        n_held = min(HELD_OUT_SIZE, int(HELD_OUT_FRACTION * len(main)))
        return [main[i] for i in order[n_held:]], [main[i] for i in order[:n_held]]

    def split(self, name: str, *, size: int | None = None) -> list[TaskItem]:
        """The items of split ``name`` ("pool", "held_out", "shifted"), the first ``size`` of them."""
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; expected one of {SPLITS}")
        pool, held = self._order()
        view = "main"
        if name == "pool":
            chosen = pool
        elif name == "held_out":
            chosen = held
        elif self.shift_by_view:
            chosen, view = held, "shifted"
        else:
            other = self.examples()[1]
            order = np.random.default_rng(SPLIT_SEED).permutation(len(other))
            chosen = [other[i] for i in order[:HELD_OUT_SIZE]]
        chosen = chosen[:size] if size is not None else chosen
        return [TaskItem(id=f"{ex.id}" if view == "main" else f"{ex.id}/shifted", task=self.name,
                         prompt=self.render(ex, view),
                         gold=ex.extra.get("shifted_gold", ex.gold) if view == "shifted" else ex.gold, document=ex.text, split=name) for ex in chosen]

    @property
    def example_prompt(self) -> str:
        """A prompt a user can send to try this task (the first held-out item)."""
        return self.split("held_out", size=1)[0].prompt

    # --------------------------------------------------------------------------------- labelling
    def label_answer(self, text: str, gold: Any) -> AnswerLabel:
        """§ 14: parse the first JSON object of ``text``; correct iff its field equals ``gold``."""
        answer = parse_answer(text, self.answer_format)
        return AnswerLabel(answer=answer, well_formed=answer is not None, correct=answer is not None and answer == gold)

    @property
    def prompt_prefix(self) -> str:
        """The text every prompt of this task starts with (its instruction), for routing a user's prompt
        to this task's system prompt; "" when the prompts share no such prefix."""
        if self.answer_format.instruction:
            return self.answer_format.instruction
        prompts = [i.prompt for i in self.split("pool", size=200)]
        prefix = prompts[0] if prompts else ""
        for prompt in prompts[1:]:
            while not prompt.startswith(prefix):
                prefix = prefix[:-1]
        return prefix if len(prefix.strip()) >= MIN_PROMPT_PREFIX else ""

    def summary(self) -> dict[str, str]:
        """What ``verifier.json`` records under ``"tasks"`` (read by the UI and ``generate --list-tasks``)."""
        return {"name": self.name, "description": self.description, "example_prompt": self.example_prompt}

