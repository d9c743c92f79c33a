"""Routing by meaning: which kind of question a turn asks, before the model answers it.

A question is embedded with all-MiniLM-L6-v2 (``lm/minilm.py``, model-independent) and a multinomial
logistic regression over those embeddings gives the probability of each kind: one of the suite's tasks
(a news article to classify, an e-mail to judge, ...), an open question with a short checkable answer,
or a prompt with no checkable answer (a greeting, a poem, a how-to). The rule (docs/verifiers.md,
"Routing by meaning"), measured on held-out prompts by ``app/question_router.py``:

- a suite task is chosen only when its probability is at least ``task_threshold``, the smallest value
  at which at most ``MAX_TASK_FALSE_ROUTES`` of held-out prompts of the other kinds are taken for a task
  (a task turn is answered under the task's system prompt, so a false route would change an everyday
  answer);
- otherwise an open question when its probability is at least ``open_threshold``, the smallest value at
  which at most ``MAX_OPEN_FALSE_ROUTES`` of held-out prompts with no checkable answer are taken for open
  questions (a false open route gives a greeting a verdict); else no checkable answer.

A follow-up is read with the turn it leans on (:meth:`QuestionRouter.read`): a message that the rule leaves
with no checkable answer, but that refers back (:func:`leans_on_previous`: "When did HE write IT?", "And
Germany?") and asks for a fact (:func:`asks_for_a_fact`: not "Why is that important?"), is read again as the previous question followed by it (:func:`follow_up_text`, the form the
router was trained on); it goes to the open-question verifier when that reading is no task and its P(open)
is at least ``follow_up_threshold``, the smallest value at which at most ``MAX_OPEN_FALSE_ROUTES`` of held-out
follow-ups with no checkable answer would (measured on follow-ups apart from single messages, as the
previous question weighs on the reading); it stays where it was otherwise (a follow-up never becomes a task:
a task is asked with its own payload).

Folder: ``router.json`` (labels, threshold, how it was measured) + ``router.safetensors`` (weights).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mlx_sdm.errors import ArtifactError
from mlx_sdm.network.verdict import OPEN_QUESTIONS

ROUTER_MANIFEST = "router.json"
ROUTER_WEIGHTS = "router.safetensors"
ROUTER_FORMAT_VERSION = 1
#: The share of held-out open questions and prompts with no checkable answer the threshold may route to a task.
MAX_TASK_FALSE_ROUTES = 0.005
#: The share of held-out prompts with no checkable answer the open threshold may take for open questions.
MAX_OPEN_FALSE_ROUTES = 0.05
#: Questions whose reading a router keeps (a turn is planned at most a few times).
RECENT_GUESSES = 8
#: The two kinds that are not suite tasks (open_questions is the task name of open questions).
OPEN_KIND = OPEN_QUESTIONS
NO_ANSWER_KIND = "no_checkable_answer"
#: Words by which a message refers back to the turn before it ("When did he write it?").
REFERRING_WORDS = frozenset(("he", "she", "it", "they", "him", "her", "his", "hers", "its", "their", "theirs", "them",
                             "that", "this", "those", "these", "there", "then"))
#: How a message that continues the turn before it starts ("And Germany?", "What about Spain?").
CONTINUING_STARTS = ("and ", "what about ", "how about ")


#: The first word of a question that asks for a fact ("why" asks for an explanation, "can"/"could" for help).
FACT_QUESTION_WORDS = frozenset(("who", "whom", "whose", "what", "when", "where", "which", "how", "and"))
#: Words that may come before the question word ("In what year ...?", "On which day ...?").
LEADING_PREPOSITIONS = frozenset(("in", "on", "at", "for", "from", "by", "to", "of", "with", "during"))


def leans_on_previous(question: str) -> bool:
    """The message refers back to the turn before it: a referring word, or it continues that turn."""
    text = question.strip().lower()
    return any(w in REFERRING_WORDS for w in re.findall(r"[a-z]+", text)) or text.startswith(CONTINUING_STARTS)


def asks_for_a_fact(question: str) -> bool:
    """The message is a question that asks for a fact: it starts with a question word other than "why", or a
    preposition and one ("In what year did he invent it?"), or continues the previous question ("And China?")."""
    words = re.findall(r"[a-z]+", question.strip().lower())
    if words and words[0] in LEADING_PREPOSITIONS:
        words = words[1:]
    return bool(words) and words[0] in FACT_QUESTION_WORDS


def follow_up_text(previous: str, question: str) -> str:
    """The text a follow-up is read as: the question it leans on, then the follow-up (router_data trains on it)."""
    return f"{previous.strip()} {question.strip()}"


@dataclass(frozen=True)
class RouteGuess:
    """The router's reading of one question: the kind it goes to and the probability the rule compared (the
    task's for a task; for an open question or no checkable answer, the probability of an open question)."""

    kind: str
    probability: float
    read_as: str | None = None  # the text the reading was made on, when not the question alone (a follow-up)

    @property
    def is_task(self) -> bool:
        return self.kind not in (OPEN_KIND, NO_ANSWER_KIND)


@dataclass
class QuestionRouter:
    labels: tuple[str, ...]
    weights: np.ndarray  # [384, C]
    bias: np.ndarray  # [C]
    task_threshold: float
    open_threshold: float = 0.5
    follow_up_threshold: float = 0.5  # P(open) a follow-up read with the previous question needs (module docstring)
    measured: dict[str, Any] = field(default_factory=dict)  # the held-out measurement behind the threshold
    _embedder: Any = field(default=None, repr=False)
    _recent: dict[str, RouteGuess] = field(default_factory=dict, repr=False)

    def probabilities(self, embeddings: np.ndarray) -> np.ndarray:
        z = np.asarray(embeddings, dtype=np.float32) @ self.weights + self.bias
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)

    def decide(self, probabilities: np.ndarray) -> list[RouteGuess]:
        """The rule of the module docstring, for rows of class probabilities."""
        out = []
        is_open = self.labels.index(OPEN_KIND)
        for row in probabilities:
            top = int(np.argmax(row))
            if self.labels[top] in (OPEN_KIND, NO_ANSWER_KIND) or row[top] < self.task_threshold:
                # not a task: open or not, read off the one number the rule compares (P(open question))
                out.append(RouteGuess(OPEN_KIND if row[is_open] >= self.open_threshold else NO_ANSWER_KIND,
                                      float(row[is_open])))
                continue
            out.append(RouteGuess(self.labels[top], float(row[top])))
        return out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._embedder is None:
            from mlx_sdm.lm.minilm import load_minilm

            self._embedder = load_minilm()
        return self._embedder.encode(list(texts))

    def forget(self) -> None:
        """Drop the kept readings (a benchmark times the embedding every round)."""
        self._recent.clear()

    def guess(self, question: str) -> RouteGuess:
        """The reading of one question; the last few are kept, so planning a turn twice (the server checks the
        prompt's length, then runs it) embeds it once."""
        if question not in self._recent:
            if len(self._recent) >= RECENT_GUESSES:
                self._recent.pop(next(iter(self._recent)))
            self._recent[question] = self.decide(self.probabilities(self.embed([question])))[0]
        return self._recent[question]

    def read(self, question: str, previous: str | None = None) -> RouteGuess:
        """The reading of this turn's question, a follow-up read with the question before it (``previous``, the
        conversation's previous user message; the module docstring's rule)."""
        guess = self.guess(question)
        if guess.kind != NO_ANSWER_KIND or not previous or not previous.strip() or not leans_on_previous(question) \
                or not asks_for_a_fact(question):
            return guess
        text = follow_up_text(previous, question)
        combined = self.guess(text)
        if combined.is_task or combined.probability < self.follow_up_threshold:
            return guess
        return RouteGuess(OPEN_KIND, combined.probability, text)

    # ------------------------------------------------------------------------------- save/load
    def save(self, directory: str | Path) -> None:
        from safetensors.numpy import save_file

        from mlx_sdm.atomic import atomic_directory

        with atomic_directory(directory) as tmp:
            save_file({"weights": self.weights.astype(np.float32), "bias": self.bias.astype(np.float32)},
                      str(tmp / ROUTER_WEIGHTS))
            manifest = {"format_version": ROUTER_FORMAT_VERSION, "labels": list(self.labels),
                        "task_threshold": self.task_threshold, "open_threshold": self.open_threshold,
                        "follow_up_threshold": self.follow_up_threshold, "embedder": "all-MiniLM-L6-v2", "measured": self.measured}
            (tmp / ROUTER_MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
            tmp.chmod(0o755)
            for path in tmp.iterdir():
                path.chmod(0o644)

    @classmethod
    def load(cls, directory: str | Path) -> "QuestionRouter":
        from safetensors.numpy import load_file

        directory = Path(directory)
        path = directory / ROUTER_MANIFEST
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            tensors = load_file(str(directory / ROUTER_WEIGHTS))
        except (OSError, json.JSONDecodeError) as exc:
            raise ArtifactError(f"{path}: not a readable question router ({exc}); reinstall mlx-sdm") from exc
        if manifest.get("format_version") != ROUTER_FORMAT_VERSION:
            raise ArtifactError(f"{path}: format_version {manifest.get('format_version')!r}; this mlx-sdm reads "
                                f"{ROUTER_FORMAT_VERSION}")
        labels = tuple(manifest["labels"])
        if tensors["weights"].shape[1] != len(labels) or OPEN_KIND not in labels or NO_ANSWER_KIND not in labels:
            raise ArtifactError(f"{path}: field 'labels' does not match the weights; reinstall mlx-sdm")
        return cls(labels, tensors["weights"], tensors["bias"], float(manifest["task_threshold"]),
                   float(manifest["open_threshold"]),
                   float(manifest.get("follow_up_threshold", manifest["open_threshold"])), manifest.get("measured", {}))
