"""Verdict monitor, cross-fitted fusion and the held-out report (docs/monitoring.md, Platt recalibration, docs/monitoring.md, combining with the verifier, the v2 fusion)."""

import numpy as np
import pytest

from mlx_sdm.monitor.forecast.fusion import (
    FUSION_FEATURES,
    MONITORS,
    crossfit,
    crossfit_monitors,
    fit_stacker,
    session_folds,
    strongest_signal,
)
from mlx_sdm.monitor.evaluation.heldout import format_heldout, heldout_report, heldout_to_dict
from mlx_sdm.monitor.forecast.signals import session_signals
from mlx_sdm.monitor.forecast.verdict_monitor import (
    VerdictMonitorParams,
    fit_verdict_params,
    verdict_forecasts,
)
from mlx_sdm.network.verdict import DocumentVerdict, VerdictStatus
from mlx_sdm.monitor.session_file.records import AUQOutput, Session, SessionStep, TracerOutput, VerifierOutput


def make_sessions(n: int = 60, seed: int = 0) -> list[Session]:
    """Synthetic logged sessions: a verified answer is usually right, an out-of-scope one usually wrong;
    AUQ and TRACER carry weak signal. Session success = every answer right."""
    rng = np.random.default_rng(seed)
    sessions = []
    for i in range(n):
        steps, turns = [], []
        for t in range(int(rng.integers(1, 4))):
            verified = rng.random() < 0.5
            correct = bool(rng.random() < (0.9 if verified else 0.3))
            steps.append(SessionStep(f"user_{len(steps)}", "user", None, f"question {i} {t}", turn_index=t,
                                     tracer=TracerOutput(U=0.0, DoU=float(rng.random() * 0.2))))
            verifier = (VerifierOutput(p_lower=0.9, admitted=True, reason=None, prediction=1) if verified
                        else VerifierOutput(p_lower=None, admitted=False, reason="out_of_distribution", prediction=1))
            conf = float(np.clip(0.6 + 0.2 * correct + rng.normal(0, 0.15), 0.01, 0.99))
            step = SessionStep(f"llm_{len(steps)}", "agent", "llm_call", f"answer {i} {t}", turn_index=t, verifier=verifier,
                               auq=AUQOutput(p_true_confidence=conf, propagated_confidence=conf),
                               tracer=TracerOutput(U=float(rng.random() + (0 if correct else 0.5)), Da=float(rng.random() * 0.3)))
            steps.append(step)
            turns.append({"step_id": step.step_id, "correct": correct})
        success = all(t["correct"] for t in turns)
        sessions.append(Session(f"s{i:03d}", steps=steps, outcome="success" if success else "failure",
                                termination="complete", metadata={"turns": turns}))
    return sessions


# ---------------------------------------------------------------------------------------- folds


def test_session_folds_stratified_and_disjoint():
    ids = [f"s{i}" for i in range(23)]
    y = [i % 3 == 0 for i in range(23)]
    fold = session_folds(ids, y, 5)
    for f in range(5):
        members = [yy for yy, ff in zip(y, fold) if ff == f]
        assert 1 <= sum(members) <= 2  # 8 successes dealt over 5 folds
    assert set(fold) == set(range(5))
    with pytest.raises(ValueError):
        session_folds(ids, y, 1)


def test_crossfit_never_sees_the_fold_it_scores():
    """A fit that memorises its training labels: with honest cross-fitting every score is the 0.5 it
    returns for unseen sessions; a leak (fitting on the scored fold) would return the labels themselves."""
    ids = [f"s{i:02d}" for i in range(30)]
    y = [int(i % 4 == 0) for i in range(30)]
    seen: list[set[str]] = []

    def fit(train):
        seen.append({sid for sid, _ in train})
        return {sid: label for sid, label in train}

    def apply(memory, item):
        return [float(memory.get(item[0], 0.5))]

    out = crossfit(list(zip(ids, y)), ids, y, fit, apply, k=5)
    assert [o[0] for o in out] == [0.5] * 30
    fold = session_folds(ids, y, 5)
    for f, train_ids in enumerate(seen):
        assert train_ids.isdisjoint({ids[i] for i in np.flatnonzero(fold == f)})
        assert len(train_ids) == int((fold != f).sum())


def test_crossfit_monitors_with_label_leaking_signal_is_not_perfect_out_of_fold():
    """The fitted monitors memorise nothing per session: a signal equal to the label stays informative
    out of fold, but the base rate row is the training folds' rate, never the session's own label."""
    sessions = make_sessions(40, seed=1)
    signals = [session_signals(s) for s in sessions]
    forecasts = crossfit_monitors(signals, k=4)
    for f, s in zip(forecasts, signals):
        assert set(f) == set(MONITORS)
        assert 0.0 < f["base_rate"][0] < 1.0 and f["base_rate"][0] != s.success
        for m in MONITORS:
            assert f[m].shape == (s.n_agent,) and np.all((f[m] >= 0) & (f[m] <= 1))
        assert np.all((f["fused"] > 0) & (f["fused"] < 1))


# ---------------------------------------------------------------------------------------- stacker


def test_stacker_non_negative_slopes_and_fallback():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 2))
    y = (x[:, 0] + 0.3 * rng.normal(size=400) > 0).astype(float)
    st = fit_stacker(np.column_stack([x[:, 0], -x[:, 0]]), y, np.ones(400), ("good", "reversed"), lam=1 / 400)
    assert st.coef[0] > 0.5 and st.coef[1] == 0.0 and not st.fallback
    p = st.apply(np.column_stack([x[:, 0], -x[:, 0]]))
    assert np.all((p > 0) & (p < 1))
    reversed_only = fit_stacker(-x[:, :1], y, np.ones(400), ("reversed",), lam=1 / 400)
    assert reversed_only.fallback and reversed_only.coef[0] == 0.0
    assert reversed_only.apply(x[:3, :1]) == pytest.approx(np.full(3, y.mean()), abs=1e-9)


def test_strongest_signal_names_the_feature_that_moved():
    st = fit_stacker(np.eye(5) * 2 - 1, np.array([1, 1, 0, 1, 0.0]), np.ones(5), FUSION_FEATURES, lam=0.01)
    before = np.zeros((1, 5))
    after = before.copy()
    j = int(np.argmax(st.coef))
    after[0, j] = -3.0
    name, delta = strongest_signal(st, after, before)
    assert name == FUSION_FEATURES[j] and delta < 0


# ---------------------------------------------------------------------------------------- verdicts


def read(data) -> DocumentVerdict:
    """A recorded verdict as the monitor reads it (nothing recorded: no verifier judged the step)."""
    return DocumentVerdict.from_dict(data) or DocumentVerdict.no_verifier()


def test_verdict_status_and_forecast():
    def status(admitted, prediction, reason):
        return read({"admitted": admitted, "prediction": prediction, "reason": reason}).status

    assert status(True, 1, None) is VerdictStatus.VERIFIED
    assert status(True, 0, None) is VerdictStatus.NOT_VERIFIED
    assert status(False, 1, "below_threshold") is VerdictStatus.NOT_VERIFIED
    assert status(False, 1, "out_of_distribution") is VerdictStatus.OUT_OF_SCOPE
    assert read(None).status is VerdictStatus.NO_VERIFIER and read({"p_lower": None}).status is VerdictStatus.NO_VERIFIER
    verified = read({"p_lower": 0.96, "admitted": True, "prediction": 1, "q": 30, "d": 0.8})
    rejected = read({"p_lower": 0.9, "admitted": True, "prediction": 0})
    oos = read({"status": "out_of_scope", "admitted": False})
    params = VerdictMonitorParams({"verified": 0.5, "not_verified": 0.5, "out_of_scope": 0.2, "none": 0.5})
    assert verdict_forecasts([verified, rejected, oos], params) == pytest.approx([0.96, 0.96 * 0.1, 0.96 * 0.1 * 0.2])
    assert verdict_forecasts([read({"p_lower": 0.96, "admitted": True, "prediction": 1})], params) == \
        pytest.approx([0.96])
    fitted = fit_verdict_params([(oos, False), (oos, False), (oos, True), (verified, True)])
    assert fitted.status_rate["out_of_scope"] == pytest.approx(2 / 5) and fitted.status_rate["no_verifier"] == 0.5


# ---------------------------------------------------------------------------------------- report


def test_heldout_report_deterministic_under_seed_and_probabilities():
    sessions = make_sessions(60)
    a = heldout_report(sessions, folds=3, n_boot=80, seed=7)
    b = heldout_report(sessions, folds=3, n_boot=80, seed=7)
    c = heldout_report(sessions, folds=3, n_boot=80, seed=8)
    assert heldout_to_dict(a) == heldout_to_dict(b)
    assert heldout_to_dict(a) != heldout_to_dict(c)
    assert [r.monitor for r in a.rows] == list(MONITORS)
    for f in a.forecasts:
        assert np.all((f["fused"] > 0) & (f["fused"] < 1))
    fused, base = a.row("fused").metrics, a.row("base_rate").metrics
    assert fused["tps_log"].low <= fused["tps_log"].value <= fused["tps_log"].high
    assert fused["auroc"].value > 0.7  # the verdict signal is strong by construction
    assert base["auroc"].value == pytest.approx(0.5) and base["delta_log"].value == 0.0
    text = format_heldout(a)
    assert "fused (stacked Platt)" in text and "base rate" in text and "Best monitor" in text


def test_heldout_report_refuses_one_outcome():
    sessions = [s for s in make_sessions(40) if s.outcome == "failure"]
    with pytest.raises(ValueError, match="successful"):
        heldout_report(sessions, folds=3, n_boot=10)


def test_tune_tracer_matches_the_scalar_scores():
    from mlx_sdm.monitor.forecast.fusion import tune_tracer
    from mlx_sdm.monitor.forecast.scoring import auroc

    signals = [session_signals(s) for s in make_sessions(30, seed=3)]
    grid = {"alpha": (0.0, 2.0), "gamma": (1.0, 5.0), "k": (0.26, 1.0), "w": (0.0, 0.2)}
    best = tune_tracer(signals, grid)
    failure = [1 - s.success for s in signals]
    best_auc = auroc([s.tracer_episode(best) for s in signals], failure)
    from itertools import product
    from mlx_sdm.monitor.online.tracer import TracerConfig
    for a, g, k, w in product(*grid.values()):
        assert auroc([s.tracer_episode(TracerConfig(alpha=a, gamma=g, k=k, w=w)) for s in signals], failure) <= best_auc + 1e-12
