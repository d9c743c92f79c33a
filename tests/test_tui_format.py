"""The wording of verdicts, reasons, levels and monitor numbers on screen (tui/format.py)."""

from types import SimpleNamespace

from mlx_sdm.monitor.online.auq_escalation import EscalationAction, UncertaintyLevel
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus
from mlx_sdm.network.verdict_words import verdict_words
from tui.format import (
    badge_text,
    decision_label,
    format_p,
    format_risk,
    level_label,
    monitor_summary,
    reason_label,
    shorten,
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


def words(stored, reason=None):
    """The words of a verdict as the store reads it back (a stored dict -> DocumentVerdict, the SQLite edge; None:
    no verifier judged it, ``reason`` says why)."""
    return verdict_words(DocumentVerdict.from_dict(stored) or DocumentVerdict.no_verifier(reason))


def test_three_states_by_the_one_rule():
    assert words(VERIFIED).status is VerdictStatus.VERIFIED
    assert words(OOD).status is VerdictStatus.OUT_OF_SCOPE
    assert words(BELOW).status is VerdictStatus.NOT_VERIFIED
    assert words(None).status is VerdictStatus.NO_VERIFIER
    assert words({"status": "unverifiable"}).status is VerdictStatus.NO_VERIFIER  # rows stored before "no_verifier"
    assert words(NOT_A_TASK).status is VerdictStatus.OUT_OF_SCOPE
    # admitted but predicted unacceptable: in scope, not verified
    assert words({"admitted": True, "prediction": 0, "p_lower": 0.99}).status is VerdictStatus.NOT_VERIFIED


def test_badge_text():
    """The badge holds no numbers; a lean is a word on it only where a person acting on it is right at least 4 times
    in 5 (network/lean.py: the lowest split's lower bound at least 0.80); a lean that only beats the base rate (the
    shipped open-question member's 60 % "leans right") stays in the evidence."""
    assert badge_text(words(VERIFIED)) == "▸ ✔ verified"
    assert badge_text(words(VERIFIED), expanded=True) == "▾ ✔ verified"
    assert badge_text(words(BELOW)) == "▸ ? not verified · cannot tell"  # no measured lean: it cannot tell
    measured = {**BELOW, "lean": {"judged": BELOW.get("prediction", 1), "informative": True, "precision": 0.6,
                                  "base_rate": 0.22, "lower": 0.49, "leaned": 60, "min_lower": 0.16}}
    assert badge_text(words(measured)) == "▸ ? not verified · cannot tell"
    assert "60 % of the 60 held-out answers" in words(measured).sentence  # the evidence keeps the measurement
    strong = {**BELOW, "lean": {**measured["lean"], "precision": 0.95, "lower": 0.86, "min_lower": 0.82}}
    assert badge_text(words(strong)) == "▸ ? not verified · leans right"
    assert words(strong).line.startswith("Not verified, but likely right:")
    # out of scope is neutral: no red cross
    assert badge_text(words(OOD)) == "▸ ○ out of scope · unlike what it was built on"
    assert badge_text(words(NOT_A_TASK)) == "▸ ○ out of scope · not one of the verifier's tasks"
    assert badge_text(words({"admitted": True, "prediction": 0, "p_lower": 0.99, "reason": "predicted_unacceptable"})) == (
        "▸ ✘ not verified · likely wrong")
    assert badge_text(words(None)) == "· no verifier · no verifier fits this model"
    assert badge_text(words(None, reason="verification is off (--verifier none)")) == (
        "· no verifier · verification is off (--verifier none)"
    )


def test_monitor_summary():
    reading = MonitorReading(level=UncertaintyLevel.MEDIUM, action=EscalationAction.PROCEED_WITH_LOG,
                             cumulative_confidence=0.6123, tracer_risk=1.234)
    assert monitor_summary(reading) == "AUQ MEDIUM · P 0.612 · TRACER 1.23"
    assert monitor_summary(MonitorReading()) == "AUQ LOW · P — · TRACER —"


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
