"""TPS, censored TPS, AUROC, AUARC, T-ECE and Platt recalibration (docs/monitoring.md, TPS; TRACER evaluation)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlx_sdm.monitor.forecast.scoring import (
    SCHEDULES,
    auarc,
    auroc,
    beta24_closed_form,
    binary_score,
    censored_trajectory_score,
    crossfit_halves,
    crossfit_platt,
    fit_weighted_platt,
    step_weights,
    trajectory_ece,
    trajectory_proper_score,
)

P = (0.8, 0.6, 0.3)
# docs/monitoring.md, TPS table: schedule -> (Y=0 log, brier, beta; Y=1 log, brier, beta)
TABLE = {
    "linear-front": (-1.169595, -0.455000, -0.013462, -0.482509, -0.155000, -0.002816),
    "uniform": (-0.960801, -0.363333, -0.011442, -0.645981, -0.230000, -0.005141),
    "exp-front": (-1.232430, -0.481429, -0.013880, -0.445457, -0.138571, -0.002421),
    "linear-back": (-0.752007, -0.271667, -0.009421, -0.809452, -0.305000, -0.007467),
}


@pytest.mark.parametrize("schedule", list(TABLE))
def test_tps_table_all_24_values(schedule):
    got = [trajectory_proper_score(P, y, score, schedule) for y in (0, 1) for score in ("log", "brier", "beta")]
    np.testing.assert_allclose(got, TABLE[schedule], atol=6e-7)


def test_per_step_inputs_and_weights():
    np.testing.assert_allclose(binary_score(P, 0, "log"), [-1.60944, -0.91629, -0.35667], atol=1e-5)
    np.testing.assert_allclose(binary_score(P, 1, "log"), [-0.22314, -0.51083, -1.20397], atol=1e-5)
    np.testing.assert_allclose(binary_score(P, 0, "beta"), [-0.016384, -0.013680, -0.004262], atol=1e-6)
    np.testing.assert_allclose(binary_score(P, 1, "beta"), [-0.0000533, -0.001365, -0.014006], atol=1e-6)
    np.testing.assert_allclose(step_weights(3, "linear-front"), [0.5, 1 / 3, 1 / 6])
    np.testing.assert_allclose(step_weights(3, "exp-front"), [4 / 7, 2 / 7, 1 / 7])
    np.testing.assert_allclose(step_weights(3, "linear-back"), [1 / 6, 1 / 3, 0.5])


def test_beta_closed_forms_and_floors():
    p = np.linspace(0, 1, 41)
    for y in (0, 1):
        np.testing.assert_allclose(binary_score(p, y, "beta"), beta24_closed_form(p, y), atol=1e-12)
    assert binary_score(0.0, 1, "beta") == pytest.approx(-1 / 30)
    assert binary_score(1.0, 0, "beta") == pytest.approx(-1 / 60)
    # a = b = 1 is Brier up to a factor 1/2
    np.testing.assert_allclose(binary_score(p, 1, "beta", a=1, b=1), 0.5 * binary_score(p, 1, "brier"), atol=1e-12)


@pytest.mark.parametrize(
    "rate, expected",
    [(0.842, (-0.436, -0.133, -0.00263)), (0.443, (-0.687, -0.247, -0.00760)), (0.583, (-0.679, -0.243, -0.00649))],
)
def test_base_rate_regression(rate, expected):
    got = [float(binary_score(rate, rate, s)) for s in ("log", "brier", "beta")]  # expected score of the constant
    for g, e, tol in zip(got, expected, (5e-4, 5e-4, 5e-6)):
        assert g == pytest.approx(e, abs=tol)


def test_censored_log_and_brier_identities():
    p = (0.8, 0.6)
    simple = censored_trajectory_score(p, 3, complete=False)
    exact = censored_trajectory_score(p, 3, complete=False, pi=0.25)
    assert simple == pytest.approx(-1.11015, abs=1e-5)
    assert exact == pytest.approx(-0.90307, abs=1e-5)
    logit = lambda q: math.log(q / (1 - q))  # noqa: E731
    assert exact - simple == pytest.approx(0.25 * (0.5 * logit(0.8) + (1 / 3) * logit(0.6)), abs=1e-12)
    assert exact - simple == pytest.approx(0.20708, abs=1e-5)
    assert censored_trajectory_score(p, 3, complete=False, pi=0.25, score="brier") == pytest.approx(-0.34833, abs=1e-5)
    assert censored_trajectory_score(p, 3, complete=False, score="brier") == pytest.approx(-0.44, abs=1e-12)
    # weights are not renormalised: a complete 2-step prefix with horizon 3 sums to 5/6 of the weight
    assert censored_trajectory_score((0.5, 0.5), 3, complete=True, y=1) == pytest.approx(5 / 6 * math.log(0.5))


@pytest.mark.parametrize("score", ["log", "brier", "beta"])
def test_monte_carlo_identity(score):
    rng = np.random.default_rng(0)
    p = rng.uniform(0.05, 0.95, size=4)
    outcomes = rng.integers(0, 2, size=9)
    exact = censored_trajectory_score(p, 7, complete=False, pi=outcomes.mean(), score=score)
    branches = np.mean([censored_trajectory_score(p, 7, complete=True, y=int(y), score=score) for y in outcomes])
    assert exact == pytest.approx(branches, abs=1e-12)


def _markov_expected(score, schedule, T, trans, report):
    """Expected TPS of a reported trace on a Markov success process.

    States 0/1 ("bad"/"good") with P(good->good) etc; Y ~ Bernoulli(final_success[state_T]).
    q_t = P(Y=1 | state_t) by backward recursion; ``report(t, s, q)`` gives the reported p_t.
    """
    stay_good, stay_bad, succ = trans
    M = np.array([[stay_bad, 1 - stay_bad], [1 - stay_good, stay_good]])
    q = [None] * T
    q[T - 1] = np.array([succ[0], succ[1]])
    for t in range(T - 2, -1, -1):
        q[t] = M @ q[t + 1]
    w = step_weights(T, schedule)
    dist = np.array([0.5, 0.5])
    total = 0.0
    for t in range(T):
        for s in (0, 1):
            p = report(t, s, q[t][s])
            # E[S(p, Y) | state] = q*S(p,1) + (1-q)*S(p,0)
            total += dist[s] * w[t] * float(binary_score(p, q[t][s], score))
        dist = dist @ M
    return total


@settings(max_examples=25, deadline=None)
@given(
    stay_good=st.floats(0.05, 0.95), stay_bad=st.floats(0.05, 0.95),
    s0=st.floats(0.05, 0.45), s1=st.floats(0.55, 0.95),
    T=st.integers(2, 5), shift=st.floats(-0.3, 0.3).filter(lambda x: abs(x) > 0.02), step=st.integers(0, 4),
)
def test_strict_propriety_on_markov_processes(stay_good, stay_bad, s0, s1, T, shift, step):
    trans = (stay_good, stay_bad, (s0, s1))
    t_bad = step % T
    for score in ("log", "brier", "beta"):
        for schedule in SCHEDULES:
            truthful = _markov_expected(score, schedule, T, trans, lambda t, s, q: q)
            distorted = _markov_expected(
                score, schedule, T, trans, lambda t, s, q: float(np.clip(q + shift, 0.001, 0.999)) if t == t_bad else q
            )
            assert truthful > distorted, (score, schedule)


def test_auroc_orientation_and_ties():
    assert auroc([0.9, 0.8, 0.1, 0.2], [1, 1, 0, 0]) == 1.0  # failures have the higher risk
    assert auroc([0.1, 0.2, 0.9, 0.8], [1, 1, 0, 0]) == 0.0
    assert auroc([0.5, 0.5], [1, 0]) == 0.5


def test_auarc_perfect_ranking_is_step_curve_trapezoid():
    n = 20
    success = np.array([1] * 12 + [0] * 8)
    risk = np.where(success == 1, 0.1, 0.9) + np.linspace(0, 0.01, n)
    got = auarc(risk, success)
    cov = np.linspace(1.0, 0.05, 20)[::-1]
    acc = [min(1.0, 12 / max(1, math.ceil(c * n))) for c in cov]
    expected = sum((cov[i + 1] - cov[i]) * (acc[i] + acc[i + 1]) / 2 for i in range(19))
    assert got == pytest.approx(expected) and got <= 0.95 + 1e-12
    all_ok = auarc(np.arange(10.0), np.ones(10))
    assert all_ok == pytest.approx(0.95)
    with pytest.raises(ValueError, match="at least 10"):
        auarc([0.1] * 9, [1] * 9)


def test_tece_is_blind_to_resolution():
    s_true = np.array([0.2] * 10 + [0.8] * 10)
    y = np.array([1, 1] + [0] * 8 + [1] * 8 + [0, 0])
    const = np.full(20, 0.5)
    assert trajectory_ece(s_true, y) == pytest.approx(0.0, abs=1e-12)
    assert trajectory_ece(const, y) == pytest.approx(0.0, abs=1e-12)
    assert np.mean((s_true - y) ** 2) == pytest.approx(0.16)
    assert np.mean((const - y) ** 2) == pytest.approx(0.25)


def test_tece_ties_never_split():
    s = np.array([0.3] * 7 + [0.6] * 3)
    y = np.array([0] * 7 + [1] * 3)
    # one bin per distinct value: |0 - 0.3|*0.7 + |1 - 0.6|*0.3
    assert trajectory_ece(s, y) == pytest.approx(0.7 * 0.3 + 0.3 * 0.4)


def _brier(p, y):
    return (p - y) ** 2


def test_scalarisation_counterexamples():
    # phi = min: q1 = 0.5, q2 in {0.2, 0.8}; truthful min on the 0.8 branch is 0.5
    excess_branch = 0.8 * _brier(0.5, 1) + 0.2 * _brier(0.5, 0) - (0.8 * _brier(0.8, 1) + 0.2 * _brier(0.8, 0))
    assert excess_branch == pytest.approx(0.09)
    assert 0.5 * excess_branch == pytest.approx(0.045)
    # phi = mean: q1 = 0.5, q2 in {0.3, 0.7}; truthful mean 0.4 / 0.6 vs the adapted (0.5, 2*q2 - 0.5)
    for q2 in (0.3, 0.7):
        m = (0.5 + q2) / 2
        excess = q2 * _brier(m, 1) + (1 - q2) * _brier(m, 0) - (q2 * _brier(q2, 1) + (1 - q2) * _brier(q2, 0))
        assert excess == pytest.approx(0.01)
        assert (0.5 + (2 * q2 - 0.5)) / 2 == pytest.approx(q2)
    # TPS ranks the truthful trace first in the min example
    def expected_tps(p1):
        return sum(
            0.5 * (q2 * trajectory_proper_score((p1, q2), 1, "brier") + (1 - q2) * trajectory_proper_score((p1, q2), 0, "brier"))
            for q2 in (0.2, 0.8)
        )

    assert expected_tps(0.5) > expected_tps(1.0)


def test_platt_fallback_and_crossfit():
    # anti-informative forecasts -> slope <= 0 -> weighted base rate
    p = np.array([0.9, 0.8, 0.2, 0.1])
    y = np.array([0, 0, 1, 1])
    w = np.array([1.0, 1.0, 3.0, 1.0])
    m = fit_weighted_platt(p, y, w)
    assert m.fallback and m.b == 0.0
    np.testing.assert_allclose(m.apply([0.3, 0.99]), [4 / 6, 4 / 6], atol=1e-9)
    # informative forecasts -> positive slope, cross-fitted halves stratified by outcome
    rng = np.random.default_rng(1)
    ids = [f"t{i:02d}" for i in range(40)]
    ys = [i % 2 for i in range(40)]
    forecasts = [np.clip(rng.normal(0.7 if yy else 0.3, 0.1, size=3), 0.01, 0.99) for yy in ys]
    out, maps = crossfit_platt(ids, forecasts, ys)
    assert all(not mp.fallback and mp.b > 0 for mp in maps)
    assert [len(o) for o in out] == [3] * 40
    halves = crossfit_halves(ids, ys)
    for label in (0, 1):
        assert sorted(halves[np.array(ys) == label].tolist()) == [0] * 10 + [1] * 10
    # an overconfident stream (right ranking, extreme values) gains many nats from recalibration
    overconfident = [np.where(f > 0.5, 0.9999, 0.0001) for f in forecasts]
    flips = [np.where(rng.uniform(size=3) < 0.15, 1 - o, o) for o in overconfident]
    out2, _ = crossfit_platt(ids, flips, ys)
    raw = np.mean([trajectory_proper_score(f, yy) for f, yy in zip(flips, ys)])
    cal = np.mean([trajectory_proper_score(o, yy) for o, yy in zip(out2, ys)])
    assert cal > raw + 0.5


def test_bad_inputs():
    with pytest.raises(ValueError, match="probabilities"):
        trajectory_proper_score([1.2], 1)
    with pytest.raises(ValueError, match="y must be"):
        trajectory_proper_score([0.5], 2)
    with pytest.raises(ValueError, match="weights must be"):
        trajectory_proper_score([0.5], 1, weights="cosine")


def test_early_warning_and_youden():
    from mlx_sdm.monitor.forecast.scoring import early_warning, youden_threshold

    assert youden_threshold([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 0.8
    series = [[0.1, 0.9, 0.2], [1.0], [0.1, 0.1, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.1, 2.0], [0.5, 0.5]]
    ew = early_warning(series, threshold=0.8)
    assert ew.times == (50.0, 0.0, 100.0, 100.0, 100.0)
    assert ew.mean == pytest.approx(70.0) and ew.median == 100.0
    assert ew.share_before[10] == pytest.approx(0.2) and ew.share_before[60] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="at least 5"):
        early_warning(series[:4], 0.5)
