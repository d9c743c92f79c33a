"""The exact McNemar test of calibration.paired_test on hand-computed cases, against scipy's exact
binomial test, and symmetric in its two classifiers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from mlx_sdm.calibration.paired_test import PairedComparison, mcnemar_exact_p, paired_comparison


@pytest.mark.parametrize("b, c, p", [
    (0, 5, 2 * 0.5 ** 5),                 # both tails' extremes: 2/32
    (5, 0, 0.0625),
    (3, 3, 1.0),                          # b = c: nothing to see
    (0, 0, 1.0),                          # no discordant rows
    (1, 5, (1 + 6 + 6 + 1) / 64),         # C(6, i) <= C(6, 1) = 6 for i in {0, 1, 5, 6}
    (2, 8, 2 * (1 + 10 + 45) / 1024),     # 2 · P(X <= 2), X ~ Bin(10, 1/2)
    (4, 5, 1.0),                          # odd k, next to the middle: every count is as likely or less
    (0, 1, 1.0),                          # one discordant row: both outcomes have probability 1/2
    (0, 6, 2 / 64),
])
def test_hand_computed_p_values(b, c, p):
    assert mcnemar_exact_p(b, c) == pytest.approx(p, rel=1e-12)


def test_agrees_with_scipys_exact_binomial_test():
    for b in range(0, 30):
        for c in range(0, 30):
            expected = binomtest(b, b + c, 0.5).pvalue if b + c else 1.0
            assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-9), (b, c)


def test_large_counts_stay_exact_and_in_range():
    assert mcnemar_exact_p(500, 500) == 1.0
    assert 0.0 < mcnemar_exact_p(400, 600) < 1e-9
    assert mcnemar_exact_p(1000, 0) == pytest.approx(2 / 2 ** 1000, rel=1e-12)
    assert mcnemar_exact_p(4990, 5010) == pytest.approx(binomtest(4990, 10000, 0.5).pvalue, rel=1e-9)


def test_negative_counts_are_refused():
    with pytest.raises(ValueError):
        mcnemar_exact_p(-1, 2)


def test_paired_comparison_counts_the_discordant_rows():
    labels = np.array([0, 1, 1, 0, 1, 0])
    a = np.array([0, 1, 0, 0, 0, 0])  # right on rows 0, 1, 3, 5
    b = np.array([0, 1, 1, 1, 1, 0])  # right on rows 0, 1, 2, 4, 5
    cmp = paired_comparison(labels, a, b)
    assert cmp == PairedComparison(n=6, accuracy_a=4 / 6, accuracy_b=5 / 6, b=1, c=2, p_value=1.0)
    assert cmp.behind == 1 and cmp.verdict() == "behind by 1 row, within sampling noise (p = 1)"


def test_three_class_rows_and_shape_mismatch():
    labels = np.array([2, 2, 1, 0, 0])
    cmp = paired_comparison(labels, np.array([2, 2, 1, 0, 0]), np.array([1, 0, 1, 2, 0]))
    assert (cmp.b, cmp.c, cmp.accuracy_a, cmp.accuracy_b) == (3, 0, 1.0, 0.4)
    assert cmp.p_value == pytest.approx(2 / 8) and cmp.behind == 0 and cmp.verdict() == "adaptor ≥ probe"
    with pytest.raises(ValueError):
        paired_comparison(labels, labels[:4], labels)


@pytest.mark.parametrize("b, c, words", [
    (5, 5, "adaptor ≥ probe"),
    (7, 2, "adaptor ≥ probe"),
    (2, 5, "behind by 3 rows, within sampling noise (p = 0.453)"),  # (1 + 7 + 21) · 2 / 128
    (0, 6, "behind by 6 rows (p = 0.0312): a real gap"),
])
def test_verdict_words(b, c, words):
    cmp = PairedComparison(200, (190 + b - c) / 200, 190 / 200, b, c, mcnemar_exact_p(b, c))
    assert cmp.verdict() == words


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=60))
def test_swapping_the_two_classifiers_swaps_b_and_c_and_keeps_p(rows):
    labels, a, b = (np.array(col) for col in zip(*rows))
    ab, ba = paired_comparison(labels, a, b), paired_comparison(labels, b, a)
    assert (ab.b, ab.c, ab.accuracy_a, ab.accuracy_b) == (ba.c, ba.b, ba.accuracy_b, ba.accuracy_a)
    assert ab.p_value == ba.p_value and 0.0 < ab.p_value <= 1.0
    assert ab.accuracy_a - ab.accuracy_b == pytest.approx((ab.b - ab.c) / len(labels))
