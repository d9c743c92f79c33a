"""When a turn pauses (mlx_sdm/monitor/forecast/policy.py, turn/escalation.py): on its own risks only (a degenerate
answer, a verdict confident it is wrong, AUQ's HIGH unless the verifier vouches for the answer), never on the
session's length; and the forecast threshold eval-monitor measures (evaluation/policy_choice.py) reproduces its
pause rate on the recorded sessions."""

from __future__ import annotations

import warnings

import numpy as np

import pytest

from mlx_sdm.monitor.online.auq_escalation import EscalationAction, UncertaintyLevel
from mlx_sdm.monitor.forecast.fused import FusedParams, OnlineFusedMonitor, datasets_dir
from mlx_sdm.monitor.forecast.policy import PausePolicy, apply_policy
from mlx_sdm.monitor.evaluation.policy_choice import choose_policy, corpus_signals, threshold_at
from mlx_sdm.monitor.online.reading import FusedReading, MonitorReading
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl
from mlx_sdm.monitor.forecast.signals import _turn_labels
from mlx_sdm.turn.escalation import REASON_DEGENERATE, plan_escalation

from tests.stored import judged
from mlx_sdm.turn.monitoring import MonitorConfig, SessionMonitor

pytestmark = pytest.mark.filterwarnings("ignore::mlx_sdm.monitor.online.tracer.MonitorWarning")

CORPUS = datasets_dir() / "session_corpus.jsonl.gz"
BROKEN = '" " " ""}"}"}"}"}{" " " " " "'  # the shipped head's answer to "Give me three tips for sleeping better."
LOW_EVERYWHERE = dict(low_threshold=1e-6, medium_threshold=5e-7, high_threshold=0.0)


def _monitor(**kw) -> SessionMonitor:
    return SessionMonitor("s", MonitorConfig(enable_p_true=False, **LOW_EVERYWHERE, **kw))


def _answer(m: SessionMonitor, text: str) -> MonitorReading:
    m.observe_user("Give me three tips for sleeping better.")
    return m.score_answer(answer=text, tokens=None, logprobs=None, tool_calls=[])


def _answer_judged(m: SessionMonitor, text: str, verdict) -> MonitorReading:
    m.observe_user("Classify the topic of this article.")
    return m.score_answer(answer=text, tokens=None, logprobs=None, tool_calls=[], verdict=verdict)


def _paused_by_auq_high(**kw) -> MonitorReading:
    """A reading AUQ put at HIGH (it pauses by its own ladder)."""
    return MonitorReading(level=UncertaintyLevel.HIGH, action=EscalationAction.PAUSE_FOR_HUMAN, cumulative_confidence=0.5,
                          inject_reflection=True, **kw)


def test_a_degenerate_answer_pauses_the_turn_with_its_reason():
    reading = _answer(_monitor(), BROKEN)
    assert reading.level is UncertaintyLevel.MEDIUM and reading.action is EscalationAction.PAUSE_FOR_HUMAN
    assert "quotes and braces" in reading.degenerate.reason
    assert MonitorReading.from_dict(reading.to_dict()).degenerate == reading.degenerate  # stored and reopened
    plan = plan_escalation(reading, [], DocumentVerdict.no_verifier())
    assert plan.action is EscalationAction.PAUSE_FOR_HUMAN and plan.escalated and not plan.reflect
    assert plan.message.startswith("Paused: the answer is mostly quotes and braces")
    assert REASON_DEGENERATE in plan.review_reasons


def test_an_ordinary_answer_stays_low():
    reading = _answer(_monitor(), "1. Keep a regular schedule.\n2. Keep the room dark.\n3. No screens.")
    assert reading.degenerate is None and reading.level is UncertaintyLevel.LOW
    assert plan_escalation(reading, [], DocumentVerdict.no_verifier()).action is EscalationAction.PROCEED


def test_a_long_session_of_ordinary_answers_never_pauses():
    """The fused forecast of the whole session falls with its length; no turn pauses on it (it stays a reading)."""
    m = _monitor()
    readings = [_answer(m, f"The answer is {i}.") for i in range(30)]
    assert readings[-1].fused_p < readings[0].fused_p  # the session forecast does fall with length ...
    assert all(r.action is EscalationAction.PROCEED for r in readings)  # ... and pauses nothing


def test_a_verdict_that_calls_the_answer_wrong_pauses_and_says_how_sure():
    wrong = judged(None, prediction=0, p_lower=0.997, admitted=True)
    reading = _answer_judged(_monitor(), "The topic is business.", wrong)
    assert reading.judged_wrong == pytest.approx(0.997) and reading.action is EscalationAction.PAUSE_FOR_HUMAN
    plan = plan_escalation(reading, [], wrong)
    assert plan.message == ("Paused: the verifier is confident this answer is wrong (calibrated lower probability 0.997 "
                            "that it is wrong). Give guidance to resume, or move on with a new message.")
    assert MonitorReading.from_dict(reading.to_dict()).judged_wrong == pytest.approx(0.997)
    # a verdict that only leans wrong, without reaching alpha', pauses nothing
    leaning = judged("below_threshold", prediction=0, p_lower=0.6)
    assert _answer_judged(_monitor(), "The topic is business.", leaning).action is EscalationAction.PROCEED


def test_a_verified_answer_is_not_paused_by_the_auq_level_alone():
    verified = judged(None, p_lower=0.998, admitted=True)
    reading = apply_policy(_paused_by_auq_high(), '{"topic": "sports"}', verified)
    assert reading.action is EscalationAction.PROCEED_WITH_LOG and reading.auq_pause_lifted and not reading.inject_reflection
    assert "but the verifier vouches for this answer" in plan_escalation(reading, [], verified).message
    # not verified: AUQ's HIGH pauses, as its ladder says, and the message names the level
    reading = apply_policy(_paused_by_auq_high(), "Maybe.", judged())
    plan = plan_escalation(reading, [], judged())
    assert plan.action is EscalationAction.PAUSE_FOR_HUMAN and plan.reflect
    assert plan.message.startswith("Paused: the session's cumulative confidence 0.500 is HIGH uncertainty")
    # a degenerate answer pauses even when verified
    assert apply_policy(_paused_by_auq_high(), BROKEN, verified).action is EscalationAction.PAUSE_FOR_HUMAN


def test_the_ladder_is_said_in_one_place():
    from mlx_sdm.turn.escalation import LADDER_LINES, ladder_words

    words = ladder_words()
    assert all(line in words for line in LADDER_LINES)
    for level in ("LOW", "MEDIUM", "HIGH", "CRITICAL"):
        assert level in words
    assert "never pauses a turn by itself" in words and "confident it is wrong" in words
    # F1, chat --help and chat --plain's /help all say these words
    from mlx_sdm.commands.chat import PLAIN_HELP, build_parser
    from tui.screens.help import HELP_TEXT

    assert words in HELP_TEXT and words in PLAIN_HELP and words in " ".join(build_parser().description.split())


def test_the_policy_never_lowers_what_auq_decided():
    reading = MonitorReading(level=UncertaintyLevel.CRITICAL, action=EscalationAction.ABORT,
                             fused=FusedReading(0.0, "verifier", -1.0, "the verifier could not vouch for turn 1"))
    apply_policy(reading, BROKEN, None)
    assert reading.action is EscalationAction.ABORT and reading.level is UncertaintyLevel.CRITICAL
    assert reading.degenerate is not None
    assert "quotes and braces" in plan_escalation(reading, [], DocumentVerdict.no_verifier()).message


def test_threshold_at_pauses_at_most_the_rate():
    p = np.array([0.5, 0.1, 0.3, 0.2, 0.4, 0.1, 0.9, 0.7, 0.6, 0.8])
    for rate in (0.1, 0.25, 0.5):
        t = threshold_at(p, rate)
        assert np.mean(p < t) <= rate
    assert threshold_at(p, 0.3) == 0.3  # pauses 0.1, 0.1, 0.2
    assert threshold_at(np.array([0.1, 0.1, 0.1, 0.5]), 0.5) == 0.1  # a tie that would overshoot pauses none of it
    with pytest.raises(ValueError, match="pause rate"):
        threshold_at(p, 0.0)


def _replayed_forecasts(session, params: FusedParams) -> list[float]:
    """The chat's online fused forecast of each answer of a recorded session, fed step by step."""
    online, labels, out = OnlineFusedMonitor(params), _turn_labels(session), []
    for step in session.steps:
        if step.actor == "user":
            online.observe_user(step.tracer)
            continue
        verdict = labels.get(step.step_id, {}).get("verdict") or (step.verifier.to_dict() if step.verifier else None)
        out.append(online.observe_answer(step.tracer, step.auq, DocumentVerdict.from_dict(verdict) or DocumentVerdict.no_verifier()).p)
    return out


def test_the_shipped_policy_reproduces_its_pause_rate_on_the_recorded_sessions():
    policy, params = PausePolicy.shipped(), FusedParams.shipped()
    assert policy is not None and 0.10 <= policy.pause_rate <= 0.20
    assert policy.chosen_on["file"] == CORPUS.name and policy.chosen_on["sessions"] == 400
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sessions = read_sessions_jsonl(CORPUS)
    p = np.concatenate([_replayed_forecasts(s, params) for s in sessions if s.success is not None])
    paused = np.mean([policy.pauses(x) for x in p])
    # what the chat says it pauses ("pauses about 10% of the recorded turns") is what it pauses
    assert abs(paused - policy.paused_share) <= 0.01, f"the shipped threshold pauses {paused:.3f} of the corpus's turns"
    assert paused <= policy.pause_rate + 1e-9  # never more than the rate it was chosen at
    held_out = policy.measured["paused"]
    assert held_out["low"] <= policy.pause_rate <= held_out["high"]  # cross-fitted, the rate holds out of sample


def test_the_shipped_threshold_is_the_choice_on_the_shipped_corpus():
    policy = PausePolicy.shipped()
    _, signals = corpus_signals(CORPUS)
    choice = choose_policy(signals, policy.pause_rate, n_boot=20)
    # the threshold is one of the corpus's float64 forecasts (an order statistic of the float64 stacker, stable
    # to about 1e-15 across machines: tests/test_monitor_fused.py), the measures are ratios of counts
    assert choice.threshold == pytest.approx(policy.threshold, rel=1e-6)
    for key in ("paused", "failures_caught", "failed_sessions_paused"):
        assert choice.measured[key].value == pytest.approx(policy.measured[key]["value"], abs=1e-6)


def test_risk_coverage_of_a_constant_forecast_is_flat_and_of_a_perfect_one_starts_at_zero():
    from types import SimpleNamespace

    from mlx_sdm.monitor.evaluation.plots import risk_coverage

    signals = [SimpleNamespace(success=y) for y in (1, 0, 1, 0, 0)]
    constant = SimpleNamespace(forecasts=[{"m": np.array([0.3])}] * 5, signals=signals)
    coverage, risk = risk_coverage(constant, "m")
    assert np.allclose(coverage, [0.2, 0.4, 0.6, 0.8, 1.0]) and np.allclose(risk, 0.6)
    perfect = SimpleNamespace(forecasts=[{"m": np.array([0.9 if s.success else 0.1])} for s in signals], signals=signals)
    assert np.allclose(risk_coverage(perfect, "m")[1], [0, 0, 1 / 3, 0.5, 0.6])
