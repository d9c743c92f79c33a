"""Eq. 29–32 on hand-computed cases."""

import math

import mlx.core as mx
import numpy as np
import pytest

from mlx_sdm.network.loss import BETA_MAX, beta_for_batch, cross_entropy_next_token_loss, log_sdm, regulariser_mask
from tests.references import sdm_next_token_loss

SOFT_Q = math.e - 2.0


def _arr(*rows):
    return mx.array(np.array(rows, dtype=np.float32))


def test_uniform_logits_give_log_2v_and_unit_regulariser():
    # V = 2, all logits 0: the joint distribution is uniform over 4 entries, NLL = ln 4.
    # Reference and joint agree, so r = ||(1e-6,)*4|| = 2e-6 < 1 and r' = 1.
    z = _arr([0.0, 0.0])
    loss, parts = sdm_next_token_loss(z, z, mx.array([2]), mx.array([SOFT_Q]), mx.array([1.0]), beta=0.05)
    assert parts.nll.item() == pytest.approx(math.log(4), rel=1e-6)
    assert parts.r.item() == pytest.approx(2e-6, rel=1e-3)
    assert parts.r_prime.item() == pytest.approx(1.0)
    assert loss.item() == pytest.approx(math.log(4) + 0.05, rel=1e-6)


def test_mask_and_small_r():
    # z_ref = z_neg = [0, 0], z_pos = [ln 2, 0]: joint probabilities [.2, .2, .4, .2]; target 0 -> 2.
    # Mask zeroes columns 0 (ref/neg argmax) and 2 (ref argmax + V, pos argmax, target): the two
    # remaining columns each differ by ln(.25) - ln(.2) = -ln 1.25.
    z_neg = _arr([0.0, 0.0])
    z_pos = _arr([math.log(2.0), 0.0])
    q, d = mx.array([SOFT_Q]), mx.array([1.0])
    loss, parts = sdm_next_token_loss(z_neg, z_pos, mx.array([2]), q, d, beta=0.1)
    assert parts.nll.item() == pytest.approx(-math.log(0.4), rel=1e-5)
    diff = -math.log(1.25) + 1e-6
    expected_r = math.sqrt(2 * diff**2 + 2 * 1e-12)
    assert parts.r.item() == pytest.approx(expected_r, rel=1e-5)
    assert parts.r_prime.item() == 1.0  # max(r, 1) = 1
    mask = regulariser_mask(
        log_sdm(mx.concatenate([z_neg, z_neg], -1), q, d), log_sdm(mx.concatenate([z_neg, z_pos], -1), q, d), mx.array([2]), 2
    )
    assert mask.tolist() == [[0.0, 1.0, 0.0, 1.0]]


def test_rescaled_regulariser_with_s_between_zero_and_one():
    # z_pos = [10, 5], target token 1 -> 3. Only column 1 survives the mask.
    z_neg = _arr([0.0, 0.0])
    z_pos = _arr([10.0, 5.0])
    loss, parts = sdm_next_token_loss(z_neg, z_pos, mx.array([3]), mx.array([SOFT_Q]), mx.array([1.0]), beta=0.1)
    lse = math.log(2 + math.exp(10) + math.exp(5))
    nll = lse - 5.0
    r = math.sqrt((lse + math.log(0.25) + 1e-6) ** 2 + 3 * 1e-12)
    s = math.log(nll) / math.log(r)
    assert 0 < s < 1
    r_prime = math.sqrt(r**s)
    assert parts.nll.item() == pytest.approx(nll, rel=1e-5)
    assert parts.r.item() == pytest.approx(r, rel=1e-5)
    assert parts.s.item() == pytest.approx(s, rel=1e-4)
    assert parts.r_prime.item() == pytest.approx(r_prime, rel=1e-4)
    assert loss.item() == pytest.approx(nll + 0.1 * r_prime, rel=1e-5)


def test_q_and_d_scale_the_distribution_and_the_gradient():
    # With q = 5, d = 0.5: tau = 0.5 ln 7; NLL = -log_softmax(tau z)_t / ln 7.
    z_neg = _arr([1.0, -1.0], [0.5, 0.0])
    z_pos = _arr([2.0, 0.0], [0.0, 3.0])
    q = mx.array([5.0, 0.0])
    d = mx.array([0.5, 1.0])
    targets = mx.array([2, 3])

    def nll_only(zp):
        return sdm_next_token_loss(z_neg, zp, targets, q, d, beta=0.0)[0]

    loss, grad = mx.value_and_grad(nll_only)(z_pos)
    expected, expected_grad = 0.0, np.zeros((2, 2))
    for n in range(2):
        joint = np.concatenate([np.array(z_neg[n]), np.array(z_pos[n])]).astype(np.float64)
        base = math.log(2 + q[n].item())
        tau = d[n].item() * base
        p = np.exp(tau * joint - np.log(np.exp(tau * joint).sum()))
        t = targets[n].item()
        expected += -math.log(p[t]) / base / 2
        onehot = np.zeros(4)
        onehot[t] = 1
        expected_grad[n] = (d[n].item() * (p - onehot) / 2)[2:]  # gradient d (sdm - e_t) / N on z_pos
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(np.array(grad), expected_grad, rtol=1e-4, atol=1e-6)


def test_regulariser_has_no_gradient_below_one_and_beta_schedule():
    z = _arr([0.0, 0.0])

    def reg_only(zp):
        return sdm_next_token_loss(z, zp, mx.array([2]), mx.array([SOFT_Q]), mx.array([1.0]), beta=1.0)[1].r_prime

    grad = mx.grad(reg_only)(_arr([math.log(2.0), 0.0]))
    assert np.abs(np.array(grad)).max() == 0.0
    assert beta_for_batch(0, 4) == 0.0
    assert beta_for_batch(2, 4) == pytest.approx(BETA_MAX / 2)
    assert beta_for_batch(3, 4) == pytest.approx(0.075)


def test_cross_entropy_baseline():
    z = _arr([math.log(3.0), 0.0])
    assert cross_entropy_next_token_loss(z, mx.array([1])).item() == pytest.approx(math.log(4.0), rel=1e-6)
