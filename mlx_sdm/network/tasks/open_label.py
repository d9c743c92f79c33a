"""Is an answer to an open question right? The NQ-open convention (docs/verifiers.md, "Open questions"):
normalise the answer and each gold answer (lower case, punctuation and the articles a/an/the removed,
number words up to twenty written as digits, "1,000" as "1000"), then the answer is right when one
gold answer appears in it as a run of whole words, more often than in the question itself (so "8
minus 4 is 5" does not count 4 as the answer to "What is 8 minus 4?").

    label_open_answer("The capital of Japan is Tokyo.", ["Tokyo"], "What is the capital of Japan?")  # True

Tested on the graded answers of NQ-open's EfficientQA test file (tests/test_open_questions.py).
"""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Sequence

#: Number words a small model writes instead of digits (and the gold may use either).
NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                "sixteen seventeen eighteen nineteen twenty").split()
_ARTICLES = {"a", "an", "the"}
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_PUNCTUATION = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—…"})


def normalise_words(text: str) -> list[str]:
    """The words of ``text`` after the NQ-open normalisation (module docstring)."""
    text = unicodedata.normalize("NFKC", str(text)).lower()
    text = _THOUSANDS.sub("", text)
    text = re.sub(r"(?<=\d)\.(?=\d)", "qqpointqq", text)  # keep decimals whole: "1.5" stays one word
    words = text.translate(_PUNCTUATION).replace("qqpointqq", ".").split()
    out = []
    for word in words:
        if word in _ARTICLES:
            continue
        out.append(str(NUMBER_WORDS.index(word)) if word in NUMBER_WORDS else word)
    return out


def _count_runs(words: list[str], run: list[str]) -> int:
    n = len(run)
    return sum(words[i:i + n] == run for i in range(len(words) - n + 1)) if n else 0


def gold_in(text: str, gold: str, question: str = "") -> bool:
    """One gold answer appears in ``text`` as whole words, more often than in ``question``."""
    run = normalise_words(gold)
    if not run:
        return False
    return _count_runs(normalise_words(text), run) > _count_runs(normalise_words(question), run)


def label_open_answer(text: str, golds: Sequence[str], question: str = "") -> bool:
    """THE label of an answer to an open question: right iff one of ``golds`` is in it (module docstring)."""
    return any(gold_in(text, gold, question) for gold in golds)
