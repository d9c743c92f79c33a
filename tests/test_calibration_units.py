"""Hand-computed cases for the SDM estimator's building blocks (docs/method.md § 3–12, § 23)."""

import math

import mlx_sdm  # noqa: F401
import mlx.core as mx
import numpy as np
import pytest

from mlx_sdm.calibration import ecdf
from mlx_sdm.calibration.activation import flipped, sdm, sdm_loss, sdm_numpy
from mlx_sdm.calibration.constants import CAUCHY_KAPPA, SOFTMAX_D, SOFTMAX_Q, cauchy_kappa
from mlx_sdm.calibration.dkw import dkw_epsilon, effective_sample_sizes, shifted_vectors
from mlx_sdm.calibration.offsets import mad, output_offsets, robust_q_tilde_min
from mlx_sdm.calibration.rescaler import quantile_vector, rescaled_similarity, train_rescaler
from tests.references import rescaler_loss
from mlx_sdm.calibration.similarity import class_distance_cdfs, distance_quantile
from tests.references import q_from_neighbours
from tests.tolerance import FLOAT32_TOLERANCE
from mlx_sdm.calibration.threshold import bucket_medians, find_threshold


# ---------------------------------------------------------------- § 7 eCDFs, boundaries (A.5)
def test_reverse_ecdf_boundaries():
    s = np.array([1.0, 2.0, 3.0, 4.0])
    assert ecdf.reverse(s, 0.0) == 1.0  # d_nearest = 0 → 1
    assert ecdf.reverse(s, 1.0) == 1.0  # equal to the smallest stored value → 1
    assert ecdf.reverse(s, 2.5) == 0.5  # two of four stored values are ≥ 2.5
    assert ecdf.reverse(s, 4.0) == 0.25  # equal to a unique maximum → 1/n
    assert ecdf.reverse(s, 4.0001) == 0.0  # beyond the maximum → 0
    assert ecdf.reverse(np.array([]), 1.0) == 0.0  # empty class → 0


def test_forward_saturating_boundaries():
    s = np.array([0.1, 0.5, 0.9])
    assert ecdf.forward_saturating(s, 0.05) == 0.0
    assert ecdf.forward_saturating(s, 0.5) == pytest.approx(1 / 3)  # strictly below: one value
    assert ecdf.forward_saturating(s, 0.9) == 1.0  # saturates at the maximum (plain forward gives 2/3)
    assert ecdf.forward(s, 0.9) == pytest.approx(2 / 3)
    assert ecdf.forward_saturating(s, 0.95) == 1.0
    assert ecdf.forward_saturating(np.array([]), 0.5) == 0.0
    assert ecdf.forward(np.array([]), 0.5) == 0.0


def test_quantile_and_capped_count():
    s = np.array([0.2, 0.5, 0.9, 0.99])
    assert ecdf.quantile(s, 0.05) == 0.2  # S[floor(0.2)] = S[0]
    assert ecdf.quantile(s, 0.5) == 0.9  # S[2]
    assert ecdf.quantile(s, 1.0) == 0.99  # capped at n − 1
    assert ecdf.quantile(np.array([]), 0.05) == 0.0
    assert ecdf.quantile(np.array([-0.3, 1.0]), 0.05) == 0.0  # clipped below at 0
    assert ecdf.count_below_capped(np.array([1.0, 2.0, 3.0]), 10.0) == 2  # N_c − 1 cap
    assert ecdf.count_below_capped(np.array([1.0, 2.0, 3.0]), 2.0) == 1
    assert ecdf.count_below_capped(np.array([]), 2.0) == 0


# ---------------------------------------------------------------- § 3 q (Eq. 5), § 4 d (Eq. 6)
def test_q_from_crafted_neighbour_list():
    # query predicted 1; neighbours (label, prediction) sorted by distance
    labels = [1, 1, 1, 0, 1]
    preds = [1, 1, 1, 1, 1]  # the fourth is mispredicted → stop
    assert q_from_neighbours(1, labels, preds) == 3
    assert q_from_neighbours(0, labels, preds) == 0  # first neighbour has another prediction
    assert q_from_neighbours(1, labels, preds, k=2) == 2  # capped at k
    # self-match exclusion by index: the query (index 7) is its own first neighbour and mispredicted
    idx = [7, 3, 5, 9, 2]
    labels = [0, 1, 1, 1, 0]
    preds = [1, 1, 1, 1, 1]
    assert q_from_neighbours(1, labels, preds) == 0
    assert q_from_neighbours(1, labels, preds, neighbour_indices=idx, self_index=7) == 3


def test_d_is_min_over_classes():
    cdfs = [np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.5, 5.0])]
    # class 0: 3 of 4 stored ≥ 2 → 0.75; class 1: 1 of 2 → 0.5; d = min = 0.5
    assert distance_quantile(np.array([2.0]), cdfs)[0] == 0.5
    assert distance_quantile(np.array([0.4]), cdfs)[0] == 1.0
    assert distance_quantile(np.array([4.5]), cdfs)[0] == 0.0
    assert distance_quantile(np.array([2.0]), cdfs + [np.array([])])[0] == 0.0  # empty class → d = 0


def test_class_distance_cdfs_keep_q_positive_only():
    d = np.array([3.0, 1.0, 2.0, 5.0])
    cdfs = class_distance_cdfs(d, np.array([0, 0, 1, 1]), np.array([1, 2, 0, 4]), 2)
    assert cdfs[0].tolist() == [1.0, 3.0]
    assert cdfs[1].tolist() == [5.0]  # the q = 0 point is left out


# ---------------------------------------------------------------- § 6 activation and loss
def test_sdm_equals_softmax_at_q_e_minus_2_d_1():
    z = mx.array([[1.5, -0.3, 2.0], [0.0, 4.0, -1.0]])
    # both float32 MLX: sdm scales z by τ = ln(2 + (e − 2)), which rounds to 1 or to 1 − u depending on the
    # machine's log kernel, before the same softmax: float32 precision (tests/tolerance.py)
    assert np.allclose(np.array(sdm(z, SOFTMAX_Q, SOFTMAX_D)), np.array(mx.softmax(z, axis=-1)),
                       rtol=FLOAT32_TOLERANCE, atol=FLOAT32_TOLERANCE)
    assert SOFTMAX_Q == pytest.approx(math.e - 2)


def test_sdm_hand_value_argmax_and_uniform():
    # q = 2, d = 0.5: (2+2)^(0.5 z) = 2^z → z = [0, 1] gives [1/3, 2/3]
    out = np.array(sdm(mx.array([[0.0, 1.0]]), 2.0, 0.5))
    assert np.allclose(out, [[1 / 3, 2 / 3]], atol=1e-6)
    z = np.array([[0.2, 0.9, -1.0]])
    assert np.argmax(sdm_numpy(z, 10, 0.3)) == np.argmax(z)
    assert np.allclose(sdm_numpy(z, 10, 0.0), 1 / 3)  # d = 0 → uniform
    assert flipped(sdm_numpy(z, 10, 0.0), np.array([1]))[0]  # a uniform output is a flip (ties count)
    assert not flipped(sdm_numpy(z, 10, 0.3), np.array([1]))[0]


def test_loss_gradient_is_d_times_sdm_minus_onehot():
    z = mx.array([[0.5, -1.0, 2.0], [1.0, 0.3, -0.2]])
    y = mx.array([0, 2])
    q = mx.array([3.0, 10.0])
    d = mx.array([0.4, 0.9])
    g = np.array(mx.grad(lambda zz: sdm_loss(zz, y, q, d))(z))
    s = np.array(sdm(z, q, d))
    expected = np.array(d)[:, None] * (s - np.eye(3)[np.array(y)]) / 2  # mean over N = 2
    assert np.allclose(g, expected, atol=1e-6)
    # loss value: −log_{2+q} sdm_y
    value = float(sdm_loss(z, y, q, d))
    manual = -np.mean([math.log(s[0, 0]) / math.log(5.0), math.log(s[1, 2]) / math.log(12.0)])
    assert value == pytest.approx(manual, rel=1e-5)


# ---------------------------------------------------------------- § 9–10 rescaler, DKW
def test_dkw_epsilon():
    assert dkw_epsilon(100)[()] == pytest.approx(0.13581, abs=5e-6)
    assert dkw_epsilon(0)[()] == 1.0
    assert dkw_epsilon(1)[()] == pytest.approx(1.3581015, abs=1e-6)


def test_effective_sample_size_and_shifted_vectors():
    pools = [np.array([0.5, 1.0, 2.0, 3.0]), np.array([0.1, 0.2])]
    assert effective_sample_sizes(np.array([2.5]), pools).tolist() == [[3, 1]]  # class 1 capped at N − 1
    v = np.array([[0.9, 0.2, 0.0]])
    lower, upper = shifted_vectors(v, np.array([0]), np.array([[0.3, 0.3, 0.3]]))
    assert np.allclose(lower, [[0.6, 0.5, 0.3]])
    assert np.allclose(upper, [[1.0, 0.0, 0.0]])  # clipped to [0, 1]


def test_quantile_vector_and_q_tilde():
    outcdf = [np.array([0.2, 0.6, 0.8]), np.array([0.1, 0.3])]
    v = quantile_vector(np.array([[0.7, 0.3]]), outcdf)
    assert np.allclose(v, [[2 / 3, 1.0]])
    assert rescaled_similarity(v, np.array([0]), np.array([6]))[0] == pytest.approx(2 / 3 * math.log(8))


def test_rescaler_reduces_eq21_loss():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    v = np.clip(np.eye(2)[y] * 0.8 + rng.uniform(0, 0.3, (200, 2)), 0, 1)
    qt = rng.uniform(0, 3, 200)
    res = train_rescaler(v, qt, y, 2, seed=0, max_epochs=50)
    init = np.random.default_rng(0).uniform(-1 / math.sqrt(2), 1 / math.sqrt(2), (2, 2))
    assert rescaler_loss(res.weight, v, qt, y) < rescaler_loss(init, v, qt, y) - 0.1


# ---------------------------------------------------------------- § 11 Alg. 3
def _alg3_set():
    """Two classes, 20 points each with q̃ = 1.0, 1.1, …, 2.9; the first five of each class have
    o[y] = 0.6, the rest 0.99. Plus points Alg. 3 must ignore. Answer: q̃_min = 1.5, ψ = (0.99, 0.99)."""
    qt, o, y, yhat = [], [], [], []
    for c in (0, 1):
        for i in range(20):
            p = 0.6 if i < 5 else 0.99
            row = [1 - p, 1 - p]
            row[c] = p
            qt.append(1.0 + 0.1 * i)
            o.append(row)
            y.append(c)
            yhat.append(c)
    qt.append(0.9); o.append([0.02, 0.98]); y.append(0); yhat.append(1)  # ⌊q̃⌋ = 0 → excluded
    qt.append(2.0); o.append([0.9, 0.1]); y.append(1); yhat.append(1)  # rescaler flip → excluded
    return np.array(qt), np.array(o), np.array(y), np.array(yhat)


def test_alg3_threshold_on_constructed_calibration_set():
    qt, o, y, yhat = _alg3_set()
    res = find_threshold(qt, o, y, yhat, 2, 0.95)
    assert res.succeeded
    assert res.q_tilde_min == pytest.approx(1.5)
    assert np.allclose(res.psi, [0.99, 0.99])


def test_alg3_fails_when_a_class_never_reaches_alpha():
    qt, o, y, yhat = _alg3_set()
    o = o.copy()
    o[(y == 1) & (yhat == 1)] = [0.1, 0.9]
    res = find_threshold(qt, o, y, yhat, 2, 0.95)
    assert not res.succeeded and res.q_tilde_min == math.inf


def test_bucket_medians_stratified_by_prediction():
    qt = np.array([0.5, 1.2, 1.8, 2.5, 2.2])
    o = np.array([[0.7, 0.3], [0.8, 0.2], [0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    yhat = np.array([0, 0, 0, 1, 1])  # the last one is a rescaler flip → bucket (1, 0)
    med = bucket_medians(qt, o, yhat, 2)
    assert med == {(0, 0): 0.7, (0, 1): pytest.approx(0.85), (1, 0): 0.4, (1, 2): 0.8}


# ---------------------------------------------------------------- § 12 offsets
def test_cauchy_multiplier():
    assert CAUCHY_KAPPA == pytest.approx(6.3138, abs=5e-5)
    assert cauchy_kappa(0.95) == pytest.approx(6.313751514675031, rel=1e-12)


def test_mad_and_robust_offsets():
    assert mad([1, 2, 3, 4, 100]) == 1.0  # median |x − 3| = 1, no 1.4826 factor
    assert robust_q_tilde_min(1.8, [1.7, 1.8, 2.0]) == pytest.approx(1.8 + CAUCHY_KAPPA * 0.1)
    assert robust_q_tilde_min(1.8, [1.8]) == 1.8  # J = 1: MAD = 0
    assert robust_q_tilde_min(1.8, [math.inf, math.inf, 1.8]) == 1.8  # non-finite MAD falls back
    m = output_offsets([{(0, 0): 0.5}, {(0, 0): 0.6, (1, 3): 0.9}, {(0, 0): 0.8}], 2)
    assert m[0, 0] == pytest.approx(CAUCHY_KAPPA * 0.1)
    assert m[1, 3] == 0.0 and m[1, 5] == 0.0  # one observation → MAD 0; never observed → 0
    # paper Table 2/3 relation: MAD 0.007 → m = 0.044; MAD 0.100 → +0.631
    assert CAUCHY_KAPPA * 0.007 == pytest.approx(0.044, abs=5e-4)


# ---------------------------------------------------------------- § 7 against the definitions
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_values = st.lists(st.integers(-5, 5).map(float), max_size=12)


@settings(max_examples=60, deadline=None)
@given(_values, st.integers(-6, 6).map(float))
def test_ecdfs_match_their_definitions(values, x):
    s = np.sort(np.array(values))
    n = len(s)
    below = sum(v < x for v in values)
    assert ecdf.forward(s, x) == (below / n if n else 0.0)
    # § 7 computes the reverse eCDF as 1 - idx/n (bit-exact with the reference), which is the
    # fraction of stored values >= x up to one rounding.
    assert ecdf.reverse(s, x) == (1.0 - below / n if n else 0.0)
    assert ecdf.reverse(s, x) == pytest.approx(sum(v >= x for v in values) / n if n else 0.0, abs=1e-15)
    assert ecdf.forward_saturating(s, x) == ((1.0 if x >= s[-1] else below / n) if n else 0.0)
    assert ecdf.count_below_capped(s, x) == (min(below, n - 1) if n else 0)
