"""The plan and the labels of the session corpus, in plain Python (no MLX).

A session is a short conversation as people chat: everyday questions (greetings, arithmetic, how-to,
trivia, writing, translation; ``mlx_sdm/datasets/everyday_prompts.json``), task questions (items of
the task suite, ``mlx_sdm.network.tasks``) and follow-ups about the previous answer ("Are you sure?",
"Why did you pick that?"). The plan of every session is drawn from a seed up front, so a run is
deterministic and can be sharded and resumed (:mod:`corpus`).

Labels (:func:`label_turn`), one per answer:

- a task question, or "Are you sure?" after one: the task's own parser against the item's gold
  (``Task.label_answer``), as the corpus has always been labelled;
- an everyday question, or "Are you sure?" after one: the prompt's check (a number that must appear,
  words of which one must appear, or a least word count);
- "Why did you pick that?": at least :data:`MIN_WHY_WORDS` words;
- a degenerate answer (:func:`mlx_sdm.monitor.online.degenerate.degenerate_answer`) is wrong whatever else.

A session succeeds when the last answer to every question it asked is right (a follow-up answer to a
question replaces the earlier one) and every "why" answer is right.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from mlx_sdm.monitor.online.degenerate import degenerate_answer

EVERYDAY_FILE = "everyday_prompts.json"
EVERYDAY = "everyday"
ARE_YOU_SURE = "Are you sure?"
WHY = "Why did you pick that?"
MIN_WHY_WORDS = 3
TURNS_PER_SESSION = (2, 3, 4, 5)
TURNS_PER_SESSION_P = (0.3, 0.35, 0.2, 0.15)
#: What a new question is, and how often a turn after the first is a follow-up instead.
P_TASK_QUESTION = 0.45
P_FOLLOW_UP = 0.3
P_WHY = 0.5  # of follow-ups: "Why did you pick that?" (else "Are you sure?")
SURE_KIND, WHY_KIND = "sure", "why"
KINDS = ("everyday", "task", SURE_KIND, WHY_KIND)


@dataclass(frozen=True)
class EverydayPrompt:
    id: str
    kind: str  # greeting | arithmetic | howto | trivia | writing | translation
    prompt: str
    check: Mapping[str, Any]


@dataclass(frozen=True)
class PlannedTurn:
    kind: str  # one of KINDS
    task: str  # the task of the question (EVERYDAY for everyday prompts); follow-ups: their question's
    item_index: int  # into the task's split (or the everyday prompts)


@dataclass
class SessionPlan:
    session_id: str
    turns: list[PlannedTurn] = field(default_factory=list)


def everyday_prompts() -> list[EverydayPrompt]:
    from mlx_sdm.monitor.forecast.fused import datasets_dir

    rows = json.loads((datasets_dir() / EVERYDAY_FILE).read_text(encoding="utf-8"))["prompts"]
    return [EverydayPrompt(r["id"], r["kind"], r["prompt"], dict(r["check"])) for r in rows]


def plan_sessions(task_sizes: Mapping[str, int], n_everyday: int, n_sessions: int, seed: int) -> list[SessionPlan]:
    """Deterministic plan: 2-5 turns per session, each a new question (everyday or task, from shuffled
    queues) or a follow-up to the previous question."""
    rng = np.random.default_rng(seed)
    names = sorted(task_sizes)
    sizes = {**{t: task_sizes[t] for t in names}, EVERYDAY: n_everyday}
    queues = {t: [int(i) for i in rng.permutation(n)] for t, n in sizes.items()}
    cursor = {t: 0 for t in sizes}

    def take(task: str) -> int:
        idx = queues[task][cursor[task] % len(queues[task])]
        cursor[task] += 1
        return idx

    plans = []
    for s in range(n_sessions):
        plan = SessionPlan(f"corpus-{seed}-{s:04d}")
        for i in range(int(rng.choice(TURNS_PER_SESSION, p=TURNS_PER_SESSION_P))):
            if i > 0 and rng.random() < P_FOLLOW_UP:
                last = plan.turns[-1]
                plan.turns.append(PlannedTurn(WHY_KIND if rng.random() < P_WHY else SURE_KIND, last.task, last.item_index))
            elif names and rng.random() < P_TASK_QUESTION:
                task = names[int(rng.integers(len(names)))]
                plan.turns.append(PlannedTurn("task", task, take(task)))
            else:
                plan.turns.append(PlannedTurn("everyday", EVERYDAY, take(EVERYDAY)))
        plans.append(plan)
    return plans


def user_text(turn: PlannedTurn, question: str) -> str:
    """What the user types for this turn (``question``: the prompt of the turn's question)."""
    return {"sure": ARE_YOU_SURE, "why": WHY}.get(turn.kind, question)


# ----------------------------------------------------------------------------------------- labels


@dataclass(frozen=True)
class TurnLabel:
    correct: bool
    answer: Any  # what was read from the answer (the task's parsed field, the number found, ...)
    well_formed: bool
    why: str  # in words, e.g. "84 does not appear", "degenerate: the answer loops ..."


_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)?")


def check_everyday(check: Mapping[str, Any], text: str, question: str = "") -> TurnLabel:
    """An everyday answer against its prompt's check (module docstring). A number the answer only
    repeats from ``question`` ("144 divided by 12 is 1.44" for 12) does not count as the answer."""
    kind = check.get("type")
    if kind == "number":
        found = [float(n.replace(",", "")) for n in _NUMBER.findall(text)]
        value = float(check["value"])
        echoed = [float(n.replace(",", "")) for n in _NUMBER.findall(question)].count(value)
        ok = found.count(value) > echoed
        why = f"{check['value']} {'appears' if ok else 'does not appear'}" + \
            (" beyond the question's own" if echoed else "")
        return TurnLabel(ok, found, bool(found), why)
    if kind == "contains":
        hit = next((w for w in check["any"] if w.lower() in text.lower()), None)
        return TurnLabel(hit is not None, hit, True, f"{hit!r} appears" if hit else f"none of {list(check['any'])} appears")
    if kind == "words":
        n = len(text.split())
        return TurnLabel(n >= int(check["min"]), n, n > 0, f"{n} words (at least {check['min']} wanted)")
    raise ValueError(f"{EVERYDAY_FILE}: unknown check type {kind!r}; use number, contains or words")


def label_turn(turn: PlannedTurn, text: str, *, task: Any = None, gold: Any = None,
               check: Mapping[str, Any] | None = None, question: str = "") -> TurnLabel:
    """The label of one answer (module docstring): ``task``/``gold`` for task questions, ``check`` and the
    ``question`` asked for everyday ones."""
    degenerate = degenerate_answer(text)
    if degenerate is not None:
        return TurnLabel(False, None, False, f"degenerate: {degenerate.reason}")
    if turn.kind == WHY_KIND:
        n = len(text.split())
        return TurnLabel(n >= MIN_WHY_WORDS, n, n > 0, f"{n} words of explanation")
    if turn.task == EVERYDAY:
        return check_everyday(check or {}, text, question)
    label = task.label_answer(text, gold)
    return TurnLabel(bool(label.correct), label.answer, bool(label.well_formed),
                     "the answer matches the gold" if label.correct else "the answer does not match the gold")


def session_success(turns: Sequence[Mapping[str, Any]]) -> bool:
    """Every question's last answer right and every "why" answer right (``turns``: the stored labels)."""
    final: dict[Any, bool] = {}
    for i, t in enumerate(turns):
        key = ("why", i) if t["kind"] == WHY_KIND else (t["task"], t["item"])
        final[key] = bool(t["correct"])
    return all(final.values())
