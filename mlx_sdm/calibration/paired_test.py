"""Two classifiers on the same labelled rows: is one's lower accuracy a real gap or sampling noise?

The exact two-sided McNemar test (docs/method.md § 19): only the discordant rows carry information,
b where A is right and B wrong, c where A is wrong and B right.
Under "A and B are equally accurate" each discordant row falls to either side with probability 1/2, so
b ~ Binomial(b + c, 1/2); the p-value sums the probabilities of every count no more likely than the
observed min(b, c) (capped at 1). Integer binomial coefficients make it exact, ties included.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np

#: Below this p the shortfall is called a real gap.
SIGNIFICANCE = 0.05


def mcnemar_exact_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for discordant counts b and c (1.0 when there are none)."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    k = b + c
    observed = comb(k, min(b, c))
    tail, coefficient = 0, 1  # C(k, i), stepped along i
    for i in range(k + 1):
        tail += coefficient if coefficient <= observed else 0
        coefficient = coefficient * (k - i) // (i + 1)
    return min(1.0, tail / 2 ** k)


@dataclass(frozen=True)
class PairedComparison:
    """A (e.g. the adaptor) against B (e.g. the logistic probe) on the same n rows."""

    n: int
    accuracy_a: float
    accuracy_b: float
    b: int  # rows A gets right and B wrong
    c: int  # rows A gets wrong and B right
    p_value: float

    @property
    def behind(self) -> int:
        """Rows by which A trails B (0 when A is at least as accurate)."""
        return max(0, self.c - self.b)

    def verdict(self, a: str = "adaptor", b: str = "probe") -> str:
        """Plain words: A ≥ B, or behind by k rows within sampling noise, or behind by k rows: a real gap."""
        if not self.behind:
            return f"{a} ≥ {b}"
        rows, p = f"{self.behind} row{'' if self.behind == 1 else 's'}", f"p = {self.p_value:.3g}"
        if self.p_value < SIGNIFICANCE:
            return f"behind by {rows} ({p}): a real gap"
        return f"behind by {rows}, within sampling noise ({p})"


def paired_comparison(labels: np.ndarray, predictions_a: np.ndarray, predictions_b: np.ndarray) -> PairedComparison:
    """Accuracies, discordant counts and the exact McNemar p of two prediction vectors on the same rows."""
    labels, pa, pb = np.asarray(labels), np.asarray(predictions_a), np.asarray(predictions_b)
    if not (labels.shape == pa.shape == pb.shape) or labels.ndim != 1:
        raise ValueError(f"labels and both predictions must be 1-D of one length, got {labels.shape}, {pa.shape}, "
                         f"{pb.shape}")
    right_a, right_b = pa == labels, pb == labels
    b, c = int(np.sum(right_a & ~right_b)), int(np.sum(~right_a & right_b))
    n = len(labels)
    acc = (lambda r: float(r.mean())) if n else (lambda r: float("nan"))
    return PairedComparison(n, acc(right_a), acc(right_b), b, c, mcnemar_exact_p(b, c))
