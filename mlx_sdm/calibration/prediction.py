"""The test-time procedure on the adaptor's outputs: docs/method.md § 13 steps 2–8 for the paper's estimator (v1,
ending in Eq. 28) and SDM_HR^lower for the canonical one (v2, canonical.py). Both return the same
per-row arrays (prediction, q, d, p_lower, admitted, ...)."""

from __future__ import annotations

import numpy as np

from mlx_sdm.calibration.activation import flipped, sdm_numpy, sdm_rank_keys, softmax_numpy
from mlx_sdm.calibration.canonical import predict_v2
from mlx_sdm.calibration.constants import Q_BINS
from mlx_sdm.calibration.dkw import dkw_epsilon, effective_sample_sizes, rescaled_output, shifted_vectors
from mlx_sdm.calibration.knn import SupportIndex
from mlx_sdm.calibration.rescaler import quantile_vector, rescaled_similarity
from mlx_sdm.calibration.similarity import distance_quantile
from mlx_sdm.calibration.state import OUTCDF_SCALE, EstimatorState


def predict_paper(st: EstimatorState, index: SupportIndex, z: np.ndarray, hp: np.ndarray, alpha: float,
                  outcdf_scale: str) -> dict[str, np.ndarray]:
    """§ 13 steps 2–8 (v1) for the logits ``z`` and exemplars ``hp`` of step 1."""
    yhat = np.argmax(z, axis=1)
    rows = np.arange(len(yhat))
    qd = index.q_and_nearest(hp, yhat)  # step 2: Eq. 5, no exclusion
    d = distance_quantile(qd.d_nearest, st.dcdf_ca)  # step 3: Eq. 6
    s = sdm_numpy(z, qd.q, d)  # step 4: Eq. 7
    sdm_flip = flipped(s, yhat)
    q_prime = np.where(sdm_flip, 0, qd.q)
    # step 5: Eq. 9 (outCDFs over the log-odds of sdm, OUTCDF_SCALE; over sdm in older folders)
    v = quantile_vector(sdm_rank_keys(z, qd.q, d) if outcdf_scale == OUTCDF_SCALE else s, st.outcdf)
    q_tilde = rescaled_similarity(v, yhat, q_prime)  # Eq. 10
    centroid = rescaled_output(v, q_tilde, st.rescaler)  # Eq. 11
    centroid_flip = np.argmax(centroid, axis=1) != yhat
    q_tilde = np.where(centroid_flip, 0.0, q_tilde)
    n_hat = effective_sample_sizes(q_tilde, st.calibration_q_tilde)  # step 6: Eq. 12
    eps = dkw_epsilon(n_hat, alpha)  # Eq. 13
    v_lower, _ = shifted_vectors(v, yhat, eps)  # step 7: Eq. 14
    q_tilde_lower = rescaled_similarity(v_lower, yhat, q_prime)  # Eq. 16
    lower = rescaled_output(v_lower, q_tilde_lower, st.rescaler)  # Eq. 18
    lower_flip = np.argmax(lower, axis=1) != yhat
    q_tilde_lower = np.where(lower_flip, 0.0, q_tilde_lower)
    q_bin = np.floor(q_tilde_lower).astype(np.int64)
    m = st.offsets[yhat, np.clip(q_bin, 0, Q_BINS - 1)]
    m = np.where(q_bin < Q_BINS, m, 0.0)  # a bucket never observed has no offset
    p_adj = lower[rows, yhat] - m
    # Eq. 28 (with the reference's equivalent conditions, § 13 step 8)
    admitted = (st.threshold_succeeded & (q_bin >= 1) & (q_tilde_lower >= st.q_tilde_min_star)
                & (q_tilde_lower >= st.q_tilde_min_robust) & (p_adj >= st.psi[yhat]))
    ood = (qd.q == 0) | (d <= 0)
    flip_any = sdm_flip | centroid_flip | lower_flip
    return {"prediction": yhat, "q": qd.q, "d": d, "d_nearest": qd.d_nearest, "q_bin": q_bin,
            "q_tilde": q_tilde, "q_tilde_lower": q_tilde_lower, "p_lower": np.maximum(0.0, p_adj),
            "p_centroid": centroid[rows, yhat], "admitted": admitted, "ood": ood, "flipped": flip_any & ~ood,
            "softmax": softmax_numpy(z), "logits": z, "exemplar": hp}


def predict_canonical(st: EstimatorState, index: SupportIndex, z: np.ndarray, hp: np.ndarray,
                      alpha: float) -> dict[str, np.ndarray]:
    """SDM_HR^lower (v2) for the logits ``z`` and exemplars ``hp``, in the same per-row arrays."""
    yhat = np.argmax(z, axis=1)
    qd = index.q_and_nearest(hp, yhat)  # v2 Eq. 4, no exclusion
    d = distance_quantile(qd.d_nearest, st.dcdf_ca)  # v2 Eq. 5
    r = predict_v2(z, qd.q, d, st.calibration_q_tilde, st.psi, st.q_tilde_min_star, st.threshold_succeeded,
                   alpha)
    ood = qd.q == 0
    q_bin = np.floor(r["q_prime_lower"]).astype(np.int64)
    return {"prediction": yhat, "q": qd.q, "d": d, "d_nearest": qd.d_nearest, "q_bin": q_bin,
            "q_tilde": r["q_prime"], "q_tilde_lower": r["q_prime_lower"],
            "p_lower": r["p_lower"],
            "p_centroid": r["p_centroid"], "admitted": r["admitted"], "ood": ood,
            "flipped": np.zeros(len(yhat), bool), "softmax": softmax_numpy(z), "logits": z, "exemplar": hp}
