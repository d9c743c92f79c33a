"""The chat's measured escalation policy (mlx_sdm/monitor/forecast/policy.py, evaluation/policy_choice.py): a degenerate
answer always escalates with its reason; a turn whose fused forecast is below the threshold chosen on
the corpus pauses; the shipped threshold reproduces its pause rate on the recorded sessions."""

from __future__ import annotations

import warnings

import numpy as np

from mlx_sdm.monitor.forecast.verdict_monitor import TurnVerdict
import pytest

from mlx_sdm.monitor.online.auq_escalation import EscalationAction, UncertaintyLevel
from mlx_sdm.monitor.forecast.fused import FusedParams, OnlineFusedMonitor, datasets_dir
from mlx_sdm.monitor.forecast.policy import PausePolicy, apply_policy
from mlx_sdm.monitor.evaluation.policy_choice import choose_policy, corpus_signals, threshold_at
from mlx_sdm.monitor.online.reading import FusedReading, MonitorReading
from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl
from mlx_sdm.monitor.forecast.signals import _turn_labels
from mlx_sdm.turn.escalation import REASON_DEGENERATE, REASON_ESCALATED_FORECAST, plan_escalation
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


def test_a_degenerate_answer_is_raised_to_medium_and_logged_with_its_reason():
    reading = _answer(_monitor(forecast_pause=False), BROKEN)
    assert reading.level is UncertaintyLevel.MEDIUM and reading.action is EscalationAction.PROCEED_WITH_LOG
    assert "quotes and braces" in reading.degenerate.reason
    assert MonitorReading.from_dict(reading.to_dict()).degenerate == reading.degenerate  # stored and reopened
    plan = plan_escalation(reading, [], None)
    assert plan.action is EscalationAction.PROCEED_WITH_LOG and plan.escalated
    assert reading.degenerate.reason in plan.message and REASON_DEGENERATE in plan.review_reasons


def test_an_ordinary_answer_stays_low():
    reading = _answer(_monitor(forecast_pause=False), "1. Keep a regular schedule.\n2. Keep the room dark.\n3. No screens.")
    assert reading.degenerate is None and reading.level is UncertaintyLevel.LOW
    assert plan_escalation(reading, [], None).action is EscalationAction.PROCEED


def test_a_turn_below_the_forecast_threshold_pauses_and_says_why():
    m = _monitor()
    p = _answer(_monitor(forecast_pause=False), "Canberra.").fused_p
    m.pause_policy = PausePolicy(threshold=p + 1e-6, pause_rate=0.15, measured={"in_sample_paused": 0.101})
    reading = _answer(m, "Canberra.")
    assert reading.forecast_pause is not None and reading.action is EscalationAction.PAUSE_FOR_HUMAN
    assert reading.level is UncertaintyLevel.LOW  # AUQ's own level is kept; the policy acts on the forecast
    plan = plan_escalation(reading, [], None)
    assert plan.action is EscalationAction.PAUSE_FOR_HUMAN and REASON_ESCALATED_FORECAST in plan.review_reasons
    assert plan.message.startswith("Paused: the fused forecast") and "about 10% of the recorded turns" in plan.message
    m2 = _monitor()
    m2.pause_policy = PausePolicy(threshold=p - 1e-6, pause_rate=0.15)
    assert _answer(m2, "Canberra.").action is EscalationAction.PROCEED


def test_the_pause_sentence_is_true_of_its_numbers():
    """The forecast and the threshold are told apart ("2.1% is below 2.4%", never "2% is below 2%"),
    and the share paused is the one the threshold pauses on the recorded turns, not the rate asked for."""
    from mlx_sdm.monitor.online.reading import ForecastPause

    assert ForecastPause(0.0212, 0.0243, 0.101).reason == (
        "the fused forecast 2.1% is below the measured threshold 2.4% "
        "(a threshold that pauses about 10% of the recorded turns)")
    assert "forecast 1% is below the measured threshold 3%" in ForecastPause(0.01, 0.03, 0.15).reason
    assert "0.0172% is below the measured threshold 0.0173%" in ForecastPause(0.000172, 0.000173, 0.1).reason
    assert PausePolicy(0.02, 0.15, measured={"in_sample_paused": 0.101}).paused_share == 0.101
    assert PausePolicy(0.02, 0.15).paused_share == 0.15  # a policy stored without it says the rate it was chosen at


def test_the_policy_never_lowers_what_auq_decided():
    reading = MonitorReading(level=UncertaintyLevel.CRITICAL, action=EscalationAction.ABORT, fused=FusedReading(0.0, "verifier", -1.0, "the verifier could not vouch for turn 1"))
    apply_policy(reading, BROKEN, PausePolicy(0.5, 0.15))
    assert reading.action is EscalationAction.ABORT and reading.level is UncertaintyLevel.CRITICAL
    assert reading.degenerate is not None and reading.forecast_pause is not None
    assert "quotes and braces" in plan_escalation(reading, [], None).message


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
        out.append(online.observe_answer(step.tracer, step.auq, TurnVerdict.from_dict(verdict)).p)
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
