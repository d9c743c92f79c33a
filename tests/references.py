"""Plain references the tests check the product's code against (none of them runs in the product):

- :func:`q_from_neighbours`: Eq. 5 walked neighbour by neighbour, against the vectorised q of
  :mod:`mlx_sdm.calibration.knn` and the estimator;
- :func:`rescaler_loss`: Eq. 21 in numpy, the objective :func:`mlx_sdm.calibration.rescaler.train_rescaler` lowers;
- :func:`sdm_next_token_loss`: Eq. 32 for one single-process mini-batch, composed of the product's
  :func:`~mlx_sdm.network.loss.sdm_token_terms` and :func:`~mlx_sdm.network.loss.sdm_loss_from_terms`
  (what :func:`mlx_sdm.network.finetune_steps.sdm_batch_loss` computes from the heads).
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx
import numpy as np

from mlx_sdm.calibration.constants import Q_RESCALE_OFFSET
from mlx_sdm.network.loss import LossParts, sdm_loss_from_terms, sdm_token_terms


def q_from_neighbours(query_prediction: int, neighbour_labels: Sequence[int], neighbour_predictions: Sequence[int],
                      neighbour_indices: Sequence[int] | None = None, self_index: int | None = None,
                      k: int | None = None) -> int:
    """Eq. 5 on a distance-sorted neighbour list: the length of the longest prefix in which every
    neighbour is correctly predicted and shares the query's prediction. With ``self_index`` the
    query's own entry (matched by index) is skipped (self-match exclusion for D_tr); ``k`` caps q."""
    q = 0
    for pos, (y, yhat) in enumerate(zip(neighbour_labels, neighbour_predictions)):
        if self_index is not None and neighbour_indices is not None and neighbour_indices[pos] == self_index:
            continue
        if yhat == query_prediction and yhat == y:
            q += 1
            if k is not None and q >= k:
                break
        else:
            break
    return q


def rescaler_loss(weight: np.ndarray, v: np.ndarray, q_tilde: np.ndarray, labels: np.ndarray) -> float:
    """Eq. 21: mean_n −log_{2+q̃_n} softmax(ln(2+q̃_n) W''ᵀ v_n)_{y_n}."""
    tau = np.log(Q_RESCALE_OFFSET + q_tilde)[:, None]
    s = tau * (v @ weight)
    s = s - s.max(axis=1, keepdims=True)
    logp = s - np.log(np.exp(s).sum(axis=1, keepdims=True))
    return float(np.mean(-logp[np.arange(len(labels)), labels] / tau[:, 0]))


def sdm_next_token_loss(
    z_neg: mx.array,
    z_pos: mx.array,
    targets: mx.array,
    q: mx.array,
    d: mx.array,
    beta: float | mx.array,
    z_ref: mx.array | None = None,
) -> tuple[mx.array, LossParts]:
    """Eq. 32 for one mini-batch of N target tokens (see :func:`sdm_token_terms` for the shapes)."""
    nll, norms = sdm_token_terms(z_neg, z_pos, targets, q, d, z_ref)
    return sdm_loss_from_terms(nll, norms, beta)
