"""The evidence behind a verdict as a person reads it: the nearest training exemplars, each by what tells
it apart (the question after the task's shared instruction, the answer, the label in words), with the
shared instruction said once. Used by ``generate``, the plain chat and the TUI's evidence view."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: A training exemplar's label in words (docs/method.md § 14: label 1 = the document's answer is correct), the one
#: rule the server and the TUI's evidence view both say it by.
EXEMPLAR_LABEL_WORDS = {1: "a correct answer to a similar question", 0: "an incorrect answer to a similar question"}


def exemplar_label_words(label: Any) -> str:
    """A training exemplar's label as a reader says it (any other label: "an example labelled <label>")."""
    try:
        return EXEMPLAR_LABEL_WORDS[int(label)]
    except (TypeError, ValueError, KeyError):
        return f"an example labelled {label}"


#: How a stored exemplar text joins its question and its answer (network/verifier.document_text).
ANSWER_SEPARATOR = " => "
#: A common opening shorter than this is not an instruction worth factoring out.
MIN_SHARED_CHARS = 24


@dataclass(frozen=True)
class EvidenceItem:
    rank: int
    id: str
    question: str  # the part after the shared instruction (e.g. the article's first words)
    answer: str
    label: int
    prediction: int
    distance: float

    @property
    def label_words(self) -> str:
        return exemplar_label_words(self.label)


@dataclass(frozen=True)
class Evidence:
    instruction: str | None  # the instruction every exemplar's question starts with, said once
    items: tuple[EvidenceItem, ...]


def _field(exemplar: Any, name: str, default: Any = None) -> Any:
    return exemplar.get(name, default) if isinstance(exemplar, Mapping) else getattr(exemplar, name, default)


def _split(text: str) -> tuple[str, str]:
    question, sep, answer = text.rpartition(ANSWER_SEPARATOR)
    return (question.strip(), answer.strip()) if sep else (text.strip(), "")


def shared_instruction(questions: Sequence[str], instructions: Sequence[str] = ()) -> str | None:
    """The task instruction all questions start with: a known one, else their common opening cut back to
    a sentence or word end (None when they share less than ``MIN_SHARED_CHARS``)."""
    if not questions:
        return None
    for instruction in instructions:
        if instruction and all(q.startswith(instruction) for q in questions):
            return instruction
    if len(questions) < 2:
        return None
    common = os.path.commonprefix(list(questions))
    cut = max(common.rfind(". ") + 1, common.rfind(": ") + 1) or common.rfind(" ")
    common = common[:cut].rstrip() if cut > 0 and len(common) < min(len(q) for q in questions) else common.rstrip()
    return common if len(common) >= MIN_SHARED_CHARS else None


def evidence_of(exemplars: Sequence[Any], instructions: Sequence[str] = ()) -> Evidence:
    """Exemplars (``Exemplar`` or their stored dicts) as :class:`Evidence`."""
    parts = [_split(str(_field(e, "text") or "")) for e in exemplars]
    instruction = shared_instruction([q for q, _ in parts if q], instructions)
    items = []
    for rank, (e, (question, answer)) in enumerate(zip(exemplars, parts), start=1):
        if instruction and question.startswith(instruction):
            question = question[len(instruction):].strip()
        items.append(EvidenceItem(rank, str(_field(e, "id", "")), question or "(no text stored)", answer,
                                  int(_field(e, "label", -1)), int(_field(e, "prediction", -1)),
                                  float(_field(e, "distance", 0.0))))
    return Evidence(instruction, tuple(items))
