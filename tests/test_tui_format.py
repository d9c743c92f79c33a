"""The wording of verdicts, reasons, levels and monitor numbers on screen (tui/format.py)."""

from types import SimpleNamespace

from tui.format import (
    badge_text,
    decision_label,
    format_p,
    format_risk,
    level_label,
    reason_label,
    shorten,
    verdict_status,
)

VERIFIED = {"admitted": True, "prediction": 1, "p_lower": 0.97349, "reason": None, "q": 12, "d": 0.5}
BELOW = {"admitted": False, "prediction": 1, "p_lower": 0.41, "reason": "below_threshold", "q": 3, "d": 0.4}
OOD = {"admitted": False, "prediction": 0, "p_lower": None, "reason": "out_of_distribution", "q": 5, "d": 0.0}
NOT_A_TASK = {"status": "out_of_scope", "reason": "not_a_task", "q": None, "prediction": None}


def test_reasons_read_in_plain_words():
    assert reason_label("out_of_distribution") == "outside what it was built on"
    assert reason_label("below_threshold") == "not confident enough"
    assert reason_label("index_flipped") == "its evidence reverses its prediction"
    assert reason_label("not_a_task") == "not one of its tasks"
    assert reason_label("predicted_unacceptable") == "likely wrong"
    assert reason_label("below_threshold,escalated_high") == "not confident enough, escalated HIGH"
    assert reason_label("something_new") == "something new"
    assert reason_label(None) == "" and reason_label("") == ""


def test_three_states_by_the_one_rule():
    assert verdict_status(VERIFIED) == "verified"
    assert verdict_status(OOD) == "out_of_scope"
    assert verdict_status(BELOW) == "not_verified"
    assert verdict_status(None) == "no_verifier"
    assert verdict_status(None, "unverifiable") == "no_verifier"  # rows stored before "no_verifier"
    assert verdict_status(NOT_A_TASK) == "out_of_scope"
    # admitted but predicted unacceptable: in scope, not verified
    assert verdict_status({"admitted": True, "prediction": 0}) == "not_verified"
    assert verdict_status({"admitted": True, "prediction": 1}, "not_verified") == "not_verified"  # the engine's word wins


def test_badge_text():
    assert badge_text(VERIFIED) == "▸ ✔ verified · p_lower 0.973"
    assert badge_text(VERIFIED, expanded=True) == "▾ ✔ verified · p_lower 0.973"
    assert badge_text(BELOW) == "▸ ✘ not verified · not confident enough"
    # out of scope is neutral: no red cross
    assert badge_text(OOD) == "▸ ○ out of scope · unlike what it was built on"
    assert badge_text(NOT_A_TASK) == "▸ ○ out of scope · not one of the verifier's tasks"
    assert badge_text({"admitted": True, "prediction": 0, "p_lower": 0.99, "reason": "predicted_unacceptable"}) == (
        "▸ ✘ not verified · likely wrong")
    assert badge_text(None) == "· no verifier · no verifier fits this model"
    assert badge_text(None, reason="verification is off (--verifier none)") == (
        "· no verifier · verification is off (--verifier none)"
    )


def test_numbers_and_levels():
    assert format_p(None) == "—" and format_p(0.5) == "0.500" and format_p(1) == "1.000"
    assert format_risk(None) == "—" and format_risk(3.392) == "3.39"
    assert level_label("medium") == "MEDIUM" and level_label(None) == "—"


def test_shorten_and_decisions():
    assert shorten("a\nb   c", 10) == "a b c"
    assert shorten("abcdefghij", 5) == "abcd…"
    assert shorten(None, 5) == ""
    assert decision_label(None) == "·"
    assert decision_label(SimpleNamespace(label=1, note=None, completion=None)) == "acceptable"
    assert decision_label(SimpleNamespace(label=0, note="vague", completion=None)) == "unacceptable +note"
    assert decision_label(SimpleNamespace(label=1, note=None, completion="fixed")) == "edited"
