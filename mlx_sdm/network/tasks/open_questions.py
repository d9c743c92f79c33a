"""The open-question task: everyday questions as people type them, answered by the model exactly as
the chat answers them (its chat template, no system prompt of ours), each answer labelled against the
gold answers by the NQ-open convention (``open_label.py``).

Sources (``data/README.md``): the main collection is 1,000 NQ-open questions (real search-engine
questions) and the questions with exact answers made in code (``exact_questions.py``: arithmetic, unit
conversions, counting facts, capitals, other well-known facts); the shifted collection is WebQuestions,
a source held out entirely. The everyday check (``data/everyday_check_40.json``) is never among them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from mlx_sdm.lm.features import ANSWER_HEAD_TOKENS, DELIMITER_ANSWER_HEAD
from mlx_sdm.network.encoding import TaskFormat
from mlx_sdm.network.tasks import AnswerLabel, SourceExample, Task
from mlx_sdm.network.tasks.exact_questions import exact_questions
from mlx_sdm.network.tasks.open_label import label_open_answer, normalise_words
from mlx_sdm.network.tasks.vendored import DATA_DIR, read_vendored
from mlx_sdm.network.verdict import OPEN_QUESTIONS


EVERYDAY_CHECK_FILE = "everyday_check_40.json"
#: The question router's held-out factual questions and follow-ups (scripts/bench/factual_routing.py).
FACTUAL_CHECK_FILE = "factual_check.json"
#: The answer format of open questions: free text (no JSON field; the label is ``label_open_answer``).
OPEN_FORMAT = TaskFormat(name="open", field="", instruction="", document_label="", answers=())


@dataclass(frozen=True)
class OpenGold:
    """The gold of one open question: the question as asked (a number it repeats is not its answer) and
    the accepted answers."""

    question: str
    answers: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"question": self.question, "answers": list(self.answers)}


@dataclass(frozen=True)
class EverydayCheck:
    """The checked-in everyday questions (with their checks) and the prompts with no checkable answer."""

    questions: tuple[dict, ...]
    no_checkable_answer: tuple[dict, ...]


@lru_cache(maxsize=1)
def everyday_check() -> EverydayCheck:
    data = json.loads((DATA_DIR / EVERYDAY_CHECK_FILE).read_text(encoding="utf-8"))
    return EverydayCheck(tuple(data["questions"]), tuple(data["no_checkable_answer"]))


@dataclass(frozen=True)
class FactualCheck:
    """The checked-in factual questions, follow-ups that ask a checkable answer and follow-ups with none
    (rows: ``{"id", "prompt"}``, follow-ups also ``"previous"``, the question they lean on)."""

    questions: tuple[dict, ...]
    follow_ups: tuple[dict, ...]
    no_checkable_follow_ups: tuple[dict, ...]


@lru_cache(maxsize=1)
def factual_check() -> FactualCheck:
    data = json.loads((DATA_DIR / FACTUAL_CHECK_FILE).read_text(encoding="utf-8"))
    return FactualCheck(tuple(data["questions"]), tuple(data["follow_ups"]), tuple(data["no_checkable_follow_ups"]))


def _key(question: str) -> tuple[str, ...]:
    return tuple(normalise_words(question))


def _examples() -> tuple[list[SourceExample], list[SourceExample]]:
    held_back = {_key(q["prompt"]) for q in everyday_check().questions}
    nq, webquestions = read_vendored(OPEN_QUESTIONS)
    made = [SourceExample(q.id, q.question, q.answers, {"family": q.family}) for q in exact_questions()]
    main = [SourceExample(ex.id, ex.text, OpenGold(ex.text, tuple(ex.gold)), {"family": ex.extra.get("family", "nq")})
            for ex in nq + made if _key(ex.text) not in held_back]
    shift = [SourceExample(ex.id, ex.text, OpenGold(ex.text, tuple(ex.gold)), {"family": "webquestions"})
             for ex in webquestions]
    return main, shift


class OpenQuestionTask(Task):
    """A task whose answers are free text, labelled by :func:`label_open_answer`."""

    def label_answer(self, text: str, gold: Any) -> AnswerLabel:
        right = label_open_answer(text, gold.answers, gold.question)
        return AnswerLabel(answer=text.strip() or None, well_formed=bool(text.strip()), correct=right)

    @property
    def prompt_prefix(self) -> str:
        return ""  # open questions share no instruction: they are routed by meaning, not by prefix


def open_question_task() -> OpenQuestionTask:
    return OpenQuestionTask(
        name=OPEN_QUESTIONS,
        description="everyday questions with a short factual answer (facts, arithmetic, units, capitals)",
        answer_format=OPEN_FORMAT,
        source="NQ-open (CC BY-SA 3.0), WebQuestions (CC BY 4.0), questions made in code",
        shift="WebQuestions: questions typed into a search box, a source held out entirely",
        read_examples=_examples,
        render=lambda ex, view: ex.text,
        system=None,
        shift_by_view=False,
        delimiter=DELIMITER_ANSWER_HEAD,
        max_tokens=ANSWER_HEAD_TOKENS,
    )
