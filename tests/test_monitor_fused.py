"""The fused forecast online (chat): shipped parameters, the signal that moved it, the session monitor's reading."""

import json

import numpy as np
import pytest

from mlx_sdm.monitor.forecast.fused import (
    PARAMS_FILE,
    FusedParams,
    OnlineFusedMonitor,
    build_shipped_params,
    datasets_dir,
)
from mlx_sdm.monitor.forecast.fusion import FUSION_FEATURES
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.monitor.session_file.records import AUQOutput, TracerOutput

VERIFIED = {"p_lower": 0.99, "admitted": True, "prediction": 1, "reason": None, "q": 40, "d": 0.9}
OUT_OF_SCOPE = {"p_lower": None, "admitted": False, "prediction": 1, "reason": "out_of_distribution", "q": 0, "d": 0.0}


def test_shipped_parameters_are_the_fit_of_the_shipped_corpus():
    shipped = json.loads((datasets_dir() / PARAMS_FILE).read_text())
    rebuilt = build_shipped_params()
    assert shipped["tracer"] == rebuilt["tracer"] and shipped["stacker"]["names"] == list(FUSION_FEATURES)
    # a float64 fit (L-BFGS-B) of the corpus's float64 features, no float32 anywhere: another machine's BLAS
    # moves it by about 1e-15 (measured: objective and gradient perturbed by 1024 ulps at every evaluation move
    # every parameter by at most 3.5e-15; the file here differs from a rebuild by 4e-16). 1e-6 is far above
    # rounding and far below what a changed corpus or recipe moves.
    for key in ("coef", "mean", "std"):
        assert np.allclose(shipped["stacker"][key], rebuilt["stacker"][key], atol=1e-6)
    assert shipped["stacker"]["intercept"] == pytest.approx(rebuilt["stacker"]["intercept"], abs=1e-6)
    assert shipped["verdict_status_rate"] == pytest.approx(rebuilt["verdict_status_rate"])


def test_online_fused_forecast_names_the_signal_that_moved_it():
    monitor = OnlineFusedMonitor(FusedParams.shipped())
    auq = AUQOutput(propagated_confidence=0.7, p_true_confidence=0.8)
    calm = TracerOutput(U=0.3)
    readings = []
    for verdict in (VERIFIED, VERIFIED, OUT_OF_SCOPE):
        monitor.observe_user(TracerOutput(U=0.0, DoU=0.1))
        readings.append(monitor.observe_answer(calm, auq, DocumentVerdict.from_dict(verdict) or DocumentVerdict.no_verifier()))
    for r in readings:
        assert 0.0 < r.p < 1.0 and r.signal in FUSION_FEATURES
    assert readings[2].p < readings[1].p
    assert readings[2].signal == "verifier" and readings[2].delta < 0
    # turn 3 was out of scope: never judged, so not a turn the verifier "could not vouch for"
    assert readings[2].message == "turn 3 was outside what the verifier covers (not judged)"
    assert "could not vouch" not in readings[1].message  # turn 2 was verified
    assert readings[0].to_dict()["message"]
    assert " rose " not in readings[0].message and " fell " not in readings[0].message  # nothing came before turn 1


def test_the_first_answer_s_words_compare_with_the_usual_not_with_an_earlier_turn():
    """At turn 1 a signal's contribution is measured against the corpus average: TRACER's risk can be
    "below the usual", it cannot have "fallen"."""
    from mlx_sdm.monitor.forecast.fused import FIRST_ANSWER_WORDS, SIGNAL_WORDS

    for name, (low, high) in FIRST_ANSWER_WORDS.items():
        assert "usual" in low and "usual" in high and (low, high) != SIGNAL_WORDS[name]
    monitor = OnlineFusedMonitor(FusedParams.shipped())
    monitor.observe_user(TracerOutput(U=0.0, DoU=0.1))
    first = monitor.observe_answer(TracerOutput(U=0.0), None, DocumentVerdict.from_dict(OUT_OF_SCOPE))
    if first.signal in FIRST_ANSWER_WORDS:
        assert first.message in [w.format(turn=1) for w in FIRST_ANSWER_WORDS[first.signal]]


def test_session_monitor_reading_carries_the_fused_forecast():
    from mlx_sdm.calibration.row_verdict import Verdict
    from mlx_sdm.network.verdict import DocumentVerdict
    from mlx_sdm.turn.monitoring import MonitorConfig, SessionMonitor

    monitor = SessionMonitor("s", MonitorConfig(enable_p_true=False))
    monitor.observe_user("Classify this article.")
    judged = DocumentVerdict(Verdict(prediction=1, p_lower=None, admitted=False, q=0, d=0.0, q_bin=0,
                                     reason="out_of_distribution"))
    reading = monitor.score_answer(answer='{"topic": "tech"}', tokens=['{"', "topic"], logprobs=[-0.5, -1.0],
                                   tool_calls=[], verdict=judged)
    fused = reading.fused
    assert 0.0 < fused.p < 1.0 and fused.signal in FUSION_FEATURES and "turn 1" in fused.message
    assert reading.to_dict()["fused"] == fused.to_dict() and "fused" not in reading.extra
    assert MonitorReading.from_dict(reading.to_dict()).fused == fused


def test_a_reading_stored_with_the_forecast_under_extra_reads_back_typed():
    """Readings stored before the forecast had its own field kept it under ``extra["fused"]``."""
    from mlx_sdm.monitor.online.reading import FusedReading

    old = {"level": "medium", "action": "proceed_with_log", "extra": {"fused": {
        "p": 0.42, "signal": "verifier", "delta": -0.3, "message": "the verifier could not vouch for turn 2"},
        "other_monitor": {"x": 1}}}
    reading = MonitorReading.from_dict(old)
    assert reading.fused == FusedReading(0.42, "verifier", -0.3, "the verifier could not vouch for turn 2")
    assert reading.fused_p == 0.42 and reading.extra == {"other_monitor": {"x": 1}}


def test_the_live_forecast_reads_a_verdict_as_the_recorded_sessions_do():
    """The chat's monitor and the corpus replay (the fit and the pause threshold were chosen on it) see
    the same verdict status: an everyday question the verifier does not cover is out of scope for both
    (not "no verifier"), and a routed task's verdict keeps its route."""
    from mlx_sdm.calibration.row_verdict import Verdict
    from mlx_sdm.monitor.forecast.fused import FusedParams, OnlineFusedMonitor
    from mlx_sdm.network.verdict import REASON_NOT_A_TASK, VerdictStatus
    from mlx_sdm.turn.monitoring import MonitorConfig, SessionMonitor

    everyday = DocumentVerdict(None, task=None, unjudged=REASON_NOT_A_TASK)
    routed = DocumentVerdict(Verdict(prediction=1, p_lower=None, admitted=False, q=0, d=0.0, q_bin=0,
                                     reason="out_of_distribution"), task="bbc_topic")
    for verdict in (everyday, routed):
        recorded = {**verdict.to_dict(), "status": verdict.status.value, "task": verdict.task}  # scripts/corpus.py
        assert DocumentVerdict.from_dict(recorded) == verdict
    assert everyday.status is VerdictStatus.OUT_OF_SCOPE
    assert routed.status is VerdictStatus.NOT_VERIFIED  # a task's question the verifier did not place
    live = SessionMonitor("s", MonitorConfig(enable_p_true=False))
    replay = OnlineFusedMonitor(FusedParams.shipped())
    for text, verdict in (("What is the capital of Australia?", everyday), ("Classify this article.", routed)):
        live.observe_user(text)
        reading = live.score_answer(answer="An answer.", tokens=["An", " answer."], logprobs=[-0.5, -1.0],
                                    tool_calls=[], verdict=verdict)
        replay.observe_user(live.tracer.outputs[-2])
        expected = replay.observe_answer(live.tracer.outputs[-1], reading.auq.to_format(),
                                         DocumentVerdict.from_dict({**verdict.to_dict(), "status": verdict.status.value}))
        assert reading.fused_p == pytest.approx(expected.p)
