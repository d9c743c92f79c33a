"""Is an answer degenerate? One rule, in plain Python, used by the chat's monitor.

A degenerate answer is text no reader can use, whatever the model's confidence in its tokens:

- **quotes and braces**: the answer is mostly quote and bracket characters (``{"{" ""}``), or holds a
  long run of them with only spaces between (``" " ""}"}"}"}"}{" "``);
- **a loop**: the same group of words repeated back to back (``It is the capital. It is the capital.
  It is the capital.``);
- **the same word over and over** (``no no no no no no``);
- **the same character over and over** (``..............................``), except the characters
  Markdown draws rules and tables with.

Ordinary answers do not trip it: JSON (``{"topic": "sports"}``), code with braces, a numbered list, a
one-word or one-number answer, a poem whose refrain comes back between verses, a long summary. The
thresholds below are chosen so the broken answers the shipped head once gave to everyday questions trip and those do not (tests in
``tests/test_monitor_degenerate.py``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Mapping

#: Characters of the quote-and-brace runs a broken head produces.
QUOTE_BRACE = "\"'`{}[]()"
#: The answer is degenerate when at least this many of its non-space characters are quotes/braces ...
MIN_QUOTE_BRACE_CHARS = 6
#: ... and they are at least this share of its non-space characters.
QUOTE_BRACE_SHARE = 0.7
#: Or when it holds a run of at least this many quote/brace characters with only spaces between.
QUOTE_BRACE_RUN = 12
#: A loop: an n-gram (n <= MAX_NGRAM words and punctuation) repeated back to back at least
#: MIN_REPEATS times, covering at least MIN_LOOP_TOKENS tokens; one word needs MIN_WORD_REPEATS. MAX_NGRAM holds a
#: long sentence: SmolLM2's looping poems repeat a 22-token sentence ("The ocean is a place where humanity's
#: capacity for love can be seen as the greatest gift of all."), which a 12-token bound let through.
MAX_NGRAM = 48
MIN_REPEATS = 3
MIN_LOOP_TOKENS = 10
MIN_WORD_REPEATS = 6
#: The same character this many times in a row (Markdown's rule and table characters excepted).
CHAR_RUN = 30
RULE_CHARS = "-=_*#~|+ "

_TOKEN = re.compile(r"\w+|[^\w\s]+")
_QUOTE_BRACE_RUN = re.compile(r"(?:[" + re.escape(QUOTE_BRACE) + r"]\s*){%d,}" % QUOTE_BRACE_RUN)


@dataclass(frozen=True)
class DegenerateAnswer:
    """Why an answer is degenerate: the rule that tripped (``kind``) and a reason in words."""

    kind: str  # "quotes_braces" | "loop" | "repeated_word" | "repeated_char"
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "DegenerateAnswer | None":
        if not data:
            return None
        return cls(str(data.get("kind", "")), str(data.get("reason", "")))


def degenerate_answer(text: str) -> DegenerateAnswer | None:
    """The reason ``text`` is degenerate, or None for a usable answer (module docstring)."""
    return _quote_brace(text) or _loop(text) or _char_run(text)


def _quote_brace(text: str) -> DegenerateAnswer | None:
    visible = [c for c in text if not c.isspace()]
    marks = sum(c in QUOTE_BRACE for c in visible)
    if marks >= MIN_QUOTE_BRACE_CHARS and marks >= QUOTE_BRACE_SHARE * len(visible):
        return DegenerateAnswer("quotes_braces", f"the answer is mostly quotes and braces ({marks} of its "
                                                 f"{len(visible)} characters)")
    run = _QUOTE_BRACE_RUN.search(text)
    if run is not None:
        shown = _clip(run.group(0).strip())
        return DegenerateAnswer("quotes_braces", f"the answer holds a run of quotes and braces: {shown}")
    return None


def _loop(text: str) -> DegenerateAnswer | None:
    """The longest back-to-back repetition of an n-gram that holds at least one word."""
    tokens = [t.lower() for t in _TOKEN.findall(text)]
    best: tuple[int, int, int] | None = None  # (covered tokens, n, start)
    for n in range(1, MAX_NGRAM + 1):
        i = 0
        while i + 2 * n <= len(tokens):
            gram = tokens[i:i + n]
            repeats = 1
            while tokens[i + repeats * n:i + (repeats + 1) * n] == gram:
                repeats += 1
            if _is_loop(gram, repeats) and (best is None or repeats * n > best[0]):
                best = (repeats * n, n, i)
            i += max(1, (repeats - 1) * n) if repeats > 1 else 1
    if best is None:
        return None
    covered, n, start = best
    gram = _TOKEN.findall(text)[start:start + n]
    phrase = _clip(" ".join(gram))
    if n == 1:
        return DegenerateAnswer("repeated_word", f"the answer repeats the word {phrase!r} {covered} times in a row")
    return DegenerateAnswer("loop", f"the answer loops: {phrase!r} repeated {covered // n} times in a row")


def _is_loop(gram: list[str], repeats: int) -> bool:
    if not any(t[0].isalnum() or t[0] == "_" for t in gram):
        return False  # punctuation-only repeats (Markdown tables, rules) are left to the other rules
    if len(gram) == 1:
        return repeats >= MIN_WORD_REPEATS
    return repeats >= MIN_REPEATS and repeats * len(gram) >= MIN_LOOP_TOKENS


def _char_run(text: str) -> DegenerateAnswer | None:
    for match in re.finditer(r"(.)\1{%d,}" % (CHAR_RUN - 1), text, flags=re.DOTALL):
        char = match.group(1)
        if char not in RULE_CHARS and not char.isspace():
            return DegenerateAnswer("repeated_char", f"the answer repeats {char!r} {len(match.group(0))} times in a row")
    return None


def _clip(s: str, limit: int = 40) -> str:
    return s if len(s) <= limit else s[: limit - 1] + "…"
