"""A task's verifier member in the label formulation (Table 1 of arXiv 2502.20167): its estimator predicts which
of the task's answer values is right from the answer's states, and an answer is judged by whether the admitted
prediction is that answer (usecases/label_formulation.py fits it and measures it beside the answer formulation).

The estimator's per-row :class:`Verdict` is over the task's C values; :meth:`LabelAnswers.answer_view` turns it into
the answer-level verdict every other member gives (prediction 1: the answer is right, 0: it is wrong), so the
verdict's rule, words and store are the same for every member:

- ŷ is the answer's value → prediction 1; admitted at α′ → verified;
- ŷ is another value → prediction 0; admitted → the verifier is confident the answer is wrong;
- an answer that is none of the values (not in the task's JSON) → prediction 0 and not admitted.

Each nearest exemplar is read the same way: that known row's question with this answer, ``label`` 1 where its gold
value is this answer's value (this answer would have been right there), 0 where it is another.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from mlx_sdm.calibration.row_verdict import Exemplar, Verdict
from mlx_sdm.errors import ArtifactError
from mlx_sdm.network.encoding import first_json_object
from mlx_sdm.network.evidence import ANSWER_SEPARATOR

#: verifier.json key of a label member.
LABEL_ANSWERS_KEY = "label_answers"
#: An answer that is none of the task's values.
NO_CLASS = -1


def class_index(value: Any, answers: tuple[Any, ...]) -> int:
    """The index of ``value`` among a task's answer values (NO_CLASS for None or any other value). Booleans match
    booleans only (``True == 1`` in Python: a JSON 1 is not the answer true)."""
    for i, candidate in enumerate(answers):
        if type(candidate) is type(value) and candidate == value:
            return i
    return NO_CLASS


@dataclass(frozen=True)
class LabelAnswers:
    """The task's JSON field and its answer values, in the order of the estimator's classes."""

    field: str
    answers: tuple[Any, ...]

    def index_of(self, text: str | None) -> int:
        """The class of an answer text (§ 14's parsing rule: the first JSON object's field), NO_CLASS for none."""
        obj = first_json_object(text or "")
        if not isinstance(obj, dict) or self.field not in obj:
            return NO_CLASS
        return class_index(obj[self.field], self.answers)

    def answer_view(self, verdict: Verdict, answer: str | None) -> Verdict:
        """The estimator's C-class verdict as the verdict on this answer (module docstring)."""
        mine = self.index_of(answer)
        if mine == NO_CLASS:
            return replace(verdict, prediction=0, admitted=False, p_lower=None, reason="out_of_distribution",
                           exemplars=[self._exemplar(e, mine) for e in verdict.exemplars])
        agrees = int(verdict.prediction == mine)
        return replace(verdict, prediction=agrees, exemplars=[self._exemplar(e, mine) for e in verdict.exemplars])

    def answer_text(self, index: int) -> str:
        """The task's JSON answer of value ``index`` (as the model is asked to give it)."""
        return json.dumps({self.field: self.answers[index]})

    def support_class(self, right: int, text: str | None) -> int | None:
        """The class a reviewed answer joins the support set with: an answer a person accepted or corrected
        (``right`` 1) is its own value; a rejected one (0) is the other value of a yes/no task, and of a task with
        more values says only what the right one is not (None: it joins nothing)."""
        mine = self.index_of(text)
        if mine == NO_CLASS:
            return None
        if right:
            return mine
        return 1 - mine if len(self.answers) == 2 else None

    def _exemplar(self, exemplar: Exemplar, mine: int) -> Exemplar:
        """A known row (its question and gold value) as the answer view reads it: its question with this answer,
        right there or not (an answer of no value: the row as it is)."""
        text = exemplar.text
        if mine != NO_CLASS and text is not None and ANSWER_SEPARATOR not in text:
            text = f"{text}{ANSWER_SEPARATOR}{self.answer_text(mine)}"
        return replace(exemplar, text=text, label=int(exemplar.label == mine), prediction=int(exemplar.prediction == mine))

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "answers": list(self.answers)}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> "LabelAnswers":
        try:
            answers = tuple(data["answers"])
            field = str(data["field"])
        except (KeyError, TypeError) as exc:
            raise ArtifactError(f"{where}: {LABEL_ANSWERS_KEY} needs 'field' and 'answers' ({exc!r}); rebuild the "
                                "verifier") from None
        if len(answers) < 2:
            raise ArtifactError(f"{where}: {LABEL_ANSWERS_KEY} lists {len(answers)} answer value(s); a label member needs "
                                "at least two: rebuild the verifier")
        return cls(field, answers)
