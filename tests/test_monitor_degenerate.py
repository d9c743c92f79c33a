"""The one rule that calls an answer degenerate (mlx_sdm/monitor/online/degenerate.py): the broken answers
the shipped head once gave trip it, ordinary answers do not."""

from __future__ import annotations

import pytest

from mlx_sdm.monitor.online.degenerate import DegenerateAnswer, degenerate_answer

#: The four broken answers once seen (the shipped head decoding everyday questions).
BROKEN = [
    '{"{" "{" " " " " " " " " " " " " " "',
    '" " " ""}"}"}"}"}{" " " " " "',
    '{"{" ""}',
    '{" " "{" " " " " " " " " " "',
]

LOOPS = [
    "The capital of Australia is Canberra. It is the capital. It is the capital. It is the capital. It is the capital.",
    "no no no no no no no no",
    "I am sorry I am sorry I am sorry I am sorry I am sorry",
    "Answer: ..............................................",
    'The answer is {"{" "{" "{" "{" "{" "{" "{"',
]

NORMAL = {
    "tips": "Here are three tips for sleeping better:\n1. Keep a regular schedule.\n2. Keep the bedroom dark and cool.\n"
            "3. Avoid screens for an hour before bed.",
    "json": '{"topic": "sports"}',
    "nested json": '{"user": {"name": "Ada", "tags": ["a", "b"]}, "ok": true}',
    "code": 'def f(x):\n    if x:\n        return {"a": [1, 2], "b": (3, 4)}\n    return {}\n\nprint(f(1)["a"])',
    "short": "72.",
    "one word": "Canberra",
    "empty json": "{}",
    "poem": "Row, row, row your boat,\nGently down the stream.\nMerrily, merrily, merrily, merrily,\nLife is but a dream.\n\n"
            "The river runs, the river sings,\nAnd home is where the heart is.\nThe river runs, the river sings,\n"
            "And home is where the heart is.",
    "summary": "The article reports that the central bank raised interest rates by a quarter point on Tuesday, citing "
               "persistent inflation in services. Analysts had expected the move, and markets rose slightly after the "
               "announcement. The bank said further increases would depend on wage data over the coming months, while "
               "the finance minister welcomed the decision as a sign of stability. Mortgage holders will see higher "
               "payments from next month; savers may benefit from better rates. The next meeting is in six weeks.",
    "markdown table": "| a | b | c | d | e | f |\n|---|---|---|---|---|---|\n| 1 | 2 | 3 | 4 | 5 | 6 |",
    "rule": "Title\n" + "-" * 60 + "\nBody text.",
    "laughter of three": "Ha ha ha, that is funny.",
}


@pytest.mark.parametrize("answer", BROKEN)
def test_the_broken_answers_of_issue_18_are_degenerate(answer):
    found = degenerate_answer(answer)
    assert isinstance(found, DegenerateAnswer)
    assert found.kind == "quotes_braces" and "quotes and braces" in found.reason


@pytest.mark.parametrize("answer", LOOPS)
def test_loops_and_repeated_tokens_are_degenerate(answer):
    found = degenerate_answer(answer)
    assert found is not None and found.reason


def test_the_reason_names_what_repeats():
    assert degenerate_answer("It is the capital. " * 4).reason == "the answer loops: 'It is the capital .' repeated 4 times in a row"
    found = degenerate_answer("no " * 8)
    assert (found.kind, found.reason) == ("repeated_word", "the answer repeats the word 'no' 8 times in a row")


@pytest.mark.parametrize("name", sorted(NORMAL))
def test_ordinary_answers_are_not_degenerate(name):
    assert degenerate_answer(NORMAL[name]) is None


def test_a_round_trip_through_a_dict():
    found = degenerate_answer(BROKEN[0])
    assert DegenerateAnswer.from_dict(found.to_dict()) == found
    assert DegenerateAnswer.from_dict(None) is None


def test_a_long_sentence_said_three_times_in_a_row_is_a_loop_and_a_refrain_once_more_is_not():
    """SmolLM2's looping poem (a 22-token sentence over and over) is a loop; a line said twice is a refrain."""
    sentence = "The ocean is a place where humanity's capacity for love can be seen as the greatest gift of all. "
    found = degenerate_answer("The sea is a place of endless beauty. " + sentence * 3)
    assert found is not None and found.kind == "loop"
    assert degenerate_answer("The sea is a place of endless beauty. " + sentence * 2) is None
