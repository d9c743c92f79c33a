"""What a verifier covers and where a turn's question goes: its tasks (from ``verifier.json``), the
one router (:func:`match_instruction`) that sends a question to the task whose instruction it starts
with, and the :class:`TaskRoute` it yields. No MLX here: the UI and the store read it freely.

A verifier folder's ``verifier.json`` may list what it covers::

    "tasks": [{"name": "bbc_topic", "description": "...", "example_prompt": "..."}]

:func:`read_coverage` reads it tolerantly (absent or malformed entries = coverage unknown); the
out-of-scope sentence names those tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Mapping, Sequence


#: A verifier's member verifiers, one folder per task it judges with its own features (``members/<task>/``):
#: the default's open-question verifier beside its JSON task suite.
MEMBERS_DIR = "members"


class RouteKind(str, Enum):
    """How a turn's question was routed (the verdict's sentence says which)."""

    INSTRUCTION = "instruction"  # it starts one of the verifier's task instructions
    MEANING = "meaning"  # the question router read it as one of the tasks, asked in a person's own words
    OPEN_QUESTION = "open_question"  # an everyday question with a short checkable answer
    NO_CHECKABLE_ANSWER = "no_checkable_answer"  # a greeting, a request for writing, a how-to: nothing to check
    NOT_COVERED = "not_covered"  # none of what the verifier covers


@dataclass(frozen=True)
class VerifierTask:
    """One task a verifier was built on, as its ``verifier.json`` lists it."""

    name: str
    description: str = ""
    example_prompt: str = ""


@dataclass(frozen=True)
class TaskRoute:
    """Where one turn's question goes under a verifier's feature recipe (or a head's task list): the
    system prompt to answer it under (so its features match the build), the task instruction it starts
    with (``instruction``; None = routed to no task) and, for a verifier built on several tasks, that
    task's name. ``task`` is None for a single-task verifier and for an unrouted question. Review labels
    are kept per (verifier, task)."""

    system: str | None = None
    task: str | None = None
    instruction: str | None = None
    kind: RouteKind | None = None  # None: as ``instruction`` says (INSTRUCTION when set, else NOT_COVERED)
    probability: float | None = None  # the question router's probability of ``kind`` (routes by meaning)
    #: the question as the model is asked it and the verifier reads it, when not as typed: a task asked in a
    #: person's words is asked as the task's own instruction with their payload (``network/task_asking.py``);
    #: a follow-up is read with the question it leans on (``question_router.follow_up_text``). None: as typed.
    asked: str | None = None

    @property
    def matched(self) -> bool:
        """The question is one of the verifier's tasks (by its instruction or by meaning): it is answered and
        judged as that task alone."""
        return self.instruction is not None

    @property
    def how(self) -> RouteKind:
        if self.kind is not None:
            return self.kind
        return RouteKind.INSTRUCTION if self.instruction is not None else RouteKind.NOT_COVERED

    @property
    def open_question(self) -> bool:
        """An everyday question the open-question verifier judges (answered as plain chat)."""
        return self.how is RouteKind.OPEN_QUESTION


def match_instruction(instructions: Sequence[str], question: Any) -> int | None:
    """The router: the index of the first task instruction the question (a user message, leading
    whitespace ignored) starts with, or None. The verifier's recipe and the SDM-network head both route
    a turn with it, so the head decodes exactly the turns the verifier judges as a task."""
    if not isinstance(question, str):
        return None
    text = question.strip()
    return next((i for i, prefix in enumerate(instructions) if prefix and text.startswith(prefix)), None)


@dataclass(frozen=True)
class VerifierCoverage:
    """What a verifier covers: its tasks (empty = not recorded) and, failing that, the name of the
    one task its manifest mentions (``info.task``)."""

    tasks: tuple[VerifierTask, ...] = ()
    built_on: str | None = None

    @property
    def known(self) -> bool:
        return bool(self.tasks) or bool(self.built_on)

    def sentence(self) -> str:
        """One sentence: what questions this verifier can judge."""
        if self.tasks:
            names = "; ".join(t.description or t.name for t in self.tasks)
            return f"It covers: {names}."
        if self.built_on:
            return f"It was built on the task {self.built_on!r} only."
        return "Its verifier.json does not record which tasks it covers."


def _task_from(entry: Any) -> VerifierTask | None:
    if isinstance(entry, str) and entry.strip():
        return VerifierTask(name=entry.strip())
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
        return None
    text = {key: entry.get(key) if isinstance(entry.get(key), str) else "" for key in ("description", "example_prompt")}
    return VerifierTask(name=entry["name"].strip(), **text)


def read_coverage(manifest: Mapping[str, Any] | None) -> VerifierCoverage:
    """Coverage from a parsed ``verifier.json`` (top-level ``tasks``, else ``info.tasks``); entries
    that are not ``{"name": str, ...}`` are skipped, never an error."""
    manifest = manifest or {}
    info = manifest.get("info") if isinstance(manifest.get("info"), Mapping) else {}
    raw = manifest.get("tasks", info.get("tasks"))
    tasks = tuple(t for t in (_task_from(e) for e in (raw if isinstance(raw, Sequence) and not isinstance(raw, str) else ()))
                  if t is not None)
    built_on = info.get("task") if isinstance(info.get("task"), str) else None
    return VerifierCoverage(tasks=tasks, built_on=built_on)




@dataclass(frozen=True)
class TaskInstruction:
    """One task a verifier or an SDM-network head routes to: the instruction its questions start with,
    the system prompt they are answered under, and the task's name (None where not recorded)."""

    instruction: str
    system: str | None = None
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "instruction": self.instruction, "system": self.system}


def read_task_instructions(entries: Any, *, where: str = "manifest") -> tuple[TaskInstruction, ...] | None:
    """The ``tasks`` list of a head manifest (``[{"name", "instruction", "system"}]``); None when absent
    (a head that names no tasks). A malformed entry is an error naming the field: routing on a guess
    could decode an everyday question with a task head."""
    if entries is None:
        return None
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        raise ValueError(f"{where}: field 'tasks' must be a list of {{name, instruction, system}} objects")
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("instruction"), str) or not entry["instruction"].strip():
            raise ValueError(f"{where}: field 'tasks[{i}].instruction' must be a non-empty string "
                             "(the instruction the task's questions start with)")
        system, name = entry.get("system"), entry.get("name")
        out.append(TaskInstruction(entry["instruction"].strip(), system if isinstance(system, str) else None,
                                   name if isinstance(name, str) else None))
    return tuple(out)
