"""The second look: what K answers drawn from the same prompt say about the answer the chat gave.

A model that knows a fact repeats it when asked again at temperature 0.7 ("The capital of Japan is Tokyo."
six times); one that does not know it says something different each time. The features, each read off the
answer's first sentence (where a short answer states it) and those of the drawn answers:

- **lexical agreement**: the mean, over the K drawn answers, of the share of the answer's *new content
  words* (its words after the NQ-open normalisation, less function words and the question's own words) that
  the drawn answer repeats; 0 when the answer adds no content word to the question;
- **full agreement**: the share of drawn answers that repeat every one of those words;
- **embedding agreement**: the mean MiniLM cosine between the answer and each drawn answer;
- **spread**: the mean MiniLM cosine distance (1 − cosine) between pairs of drawn answers;
- **answer log-probability**: the mean token log-probability of the answer under the model;
- **drawn log-probability**: the mean, over the drawn answers, of their mean token log-probabilities.

:func:`agreement_features` turns them into the estimator's input vector (``FEATURE_NAMES`` order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from mlx_sdm.network.tasks.open_label import normalise_words

#: English function words and the verbs a short answer wraps its fact in ("The capital ... is Tokyo").
FUNCTION_WORDS = frozenset("""
a an the and or but if then than so of in on at by for to from with without into onto about as is are was were be
been being am do does did done have has had having it its it's this that these those there here which who whom whose
what when where why how i you he she we they me him her us them my your his our their not no yes can could will
would shall should may might must also just very more most some any all each every both either neither one s t
called known named approximately around located situated answer question
""".split())
#: Where a sentence ends: . ! ? followed by a space or the end (not a decimal point), or a line break.
_SENTENCE_END = re.compile(r"(?<!\d)[.!?](?=\s|$)|\n")

FEATURE_NAMES = ("lexical_agreement", "full_agreement", "embedding_agreement", "spread", "answer_logprob",
                 "drawn_logprob")

Embed = Callable[[list[str]], np.ndarray]  # unit-norm sentence embeddings, one row per text (MiniLM)


def first_sentence(text: str) -> str:
    """The text up to its first sentence end (module docstring); the whole text when it has none."""
    text = text.strip()
    m = _SENTENCE_END.search(text)
    return text[: m.start() + 1].strip() if m else text


def new_content_words(text: str, question: str) -> frozenset[str]:
    """The normalised words of ``text`` that are neither function words nor words of ``question``."""
    asked = set(normalise_words(question))
    return frozenset(w for w in normalise_words(text) if w not in FUNCTION_WORDS and w not in asked)


@dataclass(frozen=True)
class SecondLook:
    """The answer, the K drawn answers and the log-probabilities the features read."""

    question: str
    answer: str
    drawn: tuple[str, ...]
    answer_logprob: float  # mean token log-probability of the answer
    drawn_logprobs: tuple[float, ...]  # mean token log-probability of each drawn answer


def lexical_agreement(look: SecondLook) -> tuple[float, float]:
    """(lexical agreement, full agreement) of the answer's first sentence with the drawn answers' first
    sentences (module docstring)."""
    words = new_content_words(first_sentence(look.answer), look.question)
    if not words or not look.drawn:
        return 0.0, 0.0
    shares = [len(words & set(normalise_words(first_sentence(d)))) / len(words) for d in look.drawn]
    return float(np.mean(shares)), float(np.mean([s == 1.0 for s in shares]))


def embedding_agreement(look: SecondLook, embed: Embed) -> tuple[float, float]:
    """(mean cosine of the answer with each drawn answer, mean cosine distance between drawn answers)."""
    if not look.drawn:
        return 0.0, 0.0
    vectors = np.asarray(embed([first_sentence(look.answer)] + [first_sentence(d) for d in look.drawn]), np.float64)
    answer, drawn = vectors[0], vectors[1:]
    agreement = float(np.mean(drawn @ answer))  # unit vectors: the dot product is the cosine
    k = len(drawn)
    if k < 2:
        return agreement, 0.0
    gram = drawn @ drawn.T
    spread = float(np.mean(1.0 - gram[np.triu_indices(k, 1)]))  # mean over the k(k-1)/2 pairs
    return agreement, spread


def agreement_features(look: SecondLook, embed: Embed) -> np.ndarray:
    """The second look's feature vector, ``FEATURE_NAMES`` order, float32."""
    lexical, full = lexical_agreement(look)
    cosine, spread = embedding_agreement(look, embed)
    drawn = [v for v in look.drawn_logprobs if np.isfinite(v)]
    return np.array([lexical, full, cosine, spread, look.answer_logprob, float(np.mean(drawn)) if drawn else 0.0],
                    dtype=np.float32)


def agreement_matrix(looks: Sequence[SecondLook], embed: Embed) -> np.ndarray:
    """[N, len(FEATURE_NAMES)] for many answers, embedding every first sentence in one call."""
    texts: list[str] = []
    for look in looks:
        texts += [first_sentence(look.answer)] + [first_sentence(d) for d in look.drawn]
    table = np.asarray(embed(texts), np.float32) if texts else np.zeros((0, 1), np.float32)
    rows, at = [], 0
    for look in looks:
        n = 1 + len(look.drawn)
        block = table[at:at + n]
        at += n
        rows.append(agreement_features(look, lambda _texts, block=block: block))
    return np.stack(rows) if rows else np.zeros((0, len(FEATURE_NAMES)), np.float32)
