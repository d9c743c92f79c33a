"""The canonical SDM estimator (SDM activations, arXiv 2509.12760; "v2"), the second estimator kind.

Map of the differences from the v1 estimator (docs/method.md § 22): no quantile
vector v, no rescaler W'', no offsets, no Alg. 3 / Eq. 28 and no prediction-flip rule (ŷ = argmax z′
always). Instead:

* rescaled Similarity (v2 Eq. 8): q′ = min(q, (2+q)^{SDM(z′)_ŷ});
* threshold search (v2 Alg. 1) on the calibration (q′, SDM(z′), y) of the selected epoch;
* admission SDM_HR^lower (v2 Eqs. 11–19): n̂_c from the class-c calibration q′ (Eq. 11), the DKW
  error ε = max_c ε_c (Eqs. 12–13) lowers the Distance quantile d_lower = clip(d − ε, 0, 1), the
  activation is recomputed with d_lower, and ŷ is admitted iff q′_lower ≥ q′_min ∧ SDM^lower_ŷ ≥ ψ_ŷ
  (and, as in the code, ⌊q′_lower⌋ > 0, the search succeeded and {c : SDM^lower_c ≥ ψ_c} = {ŷ});
* epoch and iteration selection by the minimum balanced calibration sdm loss (ties → later).
"""

from __future__ import annotations

import numpy as np

from mlx_sdm.calibration import ecdf
from mlx_sdm.calibration.activation import sdm_numpy
from mlx_sdm.calibration.constants import ALPHA_PRIME, Q_RESCALE_OFFSET
from mlx_sdm.calibration.dkw import dkw_epsilon
from mlx_sdm.calibration.threshold import ThresholdResult

KIND_V1 = "v1"
KIND_V2 = "v2"
#: The nested-region kind (nested.py): v2's fit, then regions over an α ladder.
KIND_NESTED = "nested"
KINDS = (KIND_V1, KIND_V2, KIND_NESTED)


def rescaled_similarity_v2(probs: np.ndarray, predictions: np.ndarray, q: np.ndarray) -> np.ndarray:
    """v2 Eq. 8: q′ = min(q, (2+q)^{SDM(z′)_ŷ}); q′ = 0 exactly when q = 0."""
    q = np.asarray(q, dtype=np.float64)
    at_pred = np.asarray(probs)[np.arange(len(predictions)), predictions]
    return np.minimum(q, np.power(Q_RESCALE_OFFSET + q, at_pred))


def balanced_sdm_loss(logits: np.ndarray, labels: np.ndarray, q: np.ndarray, d: np.ndarray, num_classes: int) -> float:
    """Mean over classes of the class mean of −log_{2+q} SDM(z′)_y (v2 epoch/iteration selection)."""
    probs = sdm_numpy(logits, q, d)
    per_point = -np.log(np.maximum(probs[np.arange(len(labels)), labels], 1e-300)) / np.log(Q_RESCALE_OFFSET + q)
    return float(np.mean([per_point[labels == c].mean() for c in range(num_classes) if np.any(labels == c)]))


def find_threshold_v2(q_prime: np.ndarray, probs: np.ndarray, labels: np.ndarray, num_classes: int,
                      alpha_prime: float = ALPHA_PRIME) -> ThresholdResult:
    """v2 Alg. 1: the smallest q* among the in-distribution calibration q′ at which every class's
    (1 − α′) quantile of SDM(z′) at the true label is ≥ α′; q′_min = +∞ when none is."""
    q_prime = np.asarray(q_prime, dtype=np.float64)
    labels = np.asarray(labels)
    keep = np.floor(q_prime) > 0
    kq, ky = q_prime[keep], labels[keep]
    k_true = np.asarray(probs)[keep, ky] if keep.any() else np.zeros(0)
    for q_star in np.unique(kq):
        psi = np.array([ecdf.quantile(np.sort(k_true[(ky == c) & (kq >= q_star)]), 1.0 - alpha_prime)
                        for c in range(num_classes)])
        if np.all(psi >= alpha_prime):
            return ThresholdResult(float(q_star), psi, True)
    return ThresholdResult(float("inf"), np.zeros(num_classes), False)


def predict_v2(logits: np.ndarray, q: np.ndarray, d: np.ndarray, calibration_q_prime: list[np.ndarray],
               psi: np.ndarray, q_prime_min: float, succeeded: bool, alpha_prime: float) -> dict[str, np.ndarray]:
    """SDM_HR^lower for each row (v2 Eqs. 8, 11–19)."""
    yhat = np.argmax(logits, axis=1)
    rows = np.arange(len(yhat))
    probs = sdm_numpy(logits, q, d)  # Eq. 6
    q_prime = rescaled_similarity_v2(probs, yhat, q)  # Eq. 8
    n_hat = np.stack([ecdf.count_below_capped(s, q_prime) for s in calibration_q_prime], axis=1)  # Eq. 11
    eps = dkw_epsilon(n_hat, alpha_prime).max(axis=1)  # Eqs. 12-13: ε = max_c ε_c
    d_lower = np.clip(np.asarray(d, dtype=np.float64) - eps, 0.0, 1.0)  # Eq. 14
    lower = sdm_numpy(logits, q, d_lower)  # Eqs. 15-16
    q_prime_lower = rescaled_similarity_v2(lower, yhat, q)  # Eq. 17
    p_lower = lower[rows, yhat]
    singleton = (lower >= psi[None, :]).sum(axis=1) == 1
    admitted = (bool(succeeded) & (np.floor(q_prime_lower) > 0) & (q_prime_lower >= q_prime_min)
                & (p_lower >= psi[yhat]) & singleton)  # Eqs. 18-19
    return {"prediction": yhat, "q_prime": q_prime, "q_prime_lower": q_prime_lower, "p_lower": p_lower,
            "p_centroid": probs[rows, yhat], "admitted": admitted, "d_lower": d_lower}
