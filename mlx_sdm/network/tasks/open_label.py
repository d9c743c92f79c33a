"""Is an answer to an open question right? The NQ-open convention (docs/verifiers.md, "Open questions"):
normalise the answer and each gold answer (lower case, punctuation and the articles a/an/the removed,
number words up to twenty written as digits, "1,000" as "1000"), then the answer is right when one
gold answer appears in it as a run of whole words, more often than in the question itself (so "8
minus 4 is 5" does not count 4 as the answer to "What is 8 minus 4?").

A gold answer is read as a person reads it (``person_forms``): a knowledge-base name that carries a type word
("Spanish Language", "Liverpool F.C.") also accepts the name without it ("Spanish", "Liverpool") when what is
left is a proper name (every word capitalised, so "sign language" keeps its type word), and a country's formal
name also accepts its everyday names ("United States of America": "United States", "USA", "U.S."). Bare
"America" and "US" are not among them: "South America" and the pronoun "us" would count.

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


#: Type words a knowledge base appends to a proper name (WebQuestions' Freebase answers): "Spanish Language".
TYPE_WORDS = (("language",), ("languages",), ("f", "c"))  # "F.C." normalises to "f c"
#: Formal country names and the everyday names a person accepts for them (not "America": "South America";
#: not "US": the pronoun "us").
COUNTRY_NAMES = {
    "united states of america": ("United States", "USA", "U.S.A.", "U.S."),
    "united states": ("USA", "U.S.A.", "U.S."),
    "united kingdom": ("UK", "U.K.", "Britain", "Great Britain"),
    "united kingdom of great britain and northern ireland": ("United Kingdom", "UK", "U.K.", "Britain"),
    "kingdom of great britain": ("Great Britain", "Britain"),
    "people s republic of china": ("China",),
    "republic of ireland": ("Ireland",),
    "russian federation": ("Russia",),
}


def person_forms(gold: str) -> tuple[str, ...]:
    """``gold`` and the forms of it a person accepts as the same answer (module docstring)."""
    forms = [gold] + list(COUNTRY_NAMES.get(" ".join(normalise_words(gold)), ()))
    raw = str(gold).split()
    words = normalise_words(gold)
    for suffix in TYPE_WORDS:
        n = len(suffix)
        if len(words) > n and tuple(words[-n:]) == suffix:
            # the words before the type word, as written; each must be capitalised (a proper name)
            head = raw[:-1] if n == 1 or raw[-1].lower() in ("f.c.", "fc") else raw[:-n]
            if head and all(w[:1].isupper() for w in head if w[:1].isalpha()):
                forms.append(" ".join(head))
    return tuple(dict.fromkeys(forms))


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
    """The label of an answer to an open question: right iff one of ``golds`` is in it (module docstring)."""
    return any(gold_in(text, form, question) for gold in golds for form in person_forms(gold))
