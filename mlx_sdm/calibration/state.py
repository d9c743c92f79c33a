""":class:`EstimatorState`: everything prediction needs once a fit is done or a folder is loaded."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: What the stored outCDFs (Eq. 9) hold: the log-odds of sdm(z')_c (activation.sdm_rank_keys). Folders without the manifest key hold
#: sdm(z')_c itself (the earlier format) and are read that way.
OUTCDF_SCALE = "log_odds"


@dataclass
class EstimatorState:
    """Everything prediction needs (M*, its support set and eCDFs, offsets)."""

    params: dict[str, np.ndarray]
    normalization: tuple[float, float]
    support_ids: list[str]
    support_texts: list[str | None]
    support_exemplars: np.ndarray
    support_labels: np.ndarray
    support_predictions: np.ndarray
    dcdf_ca: list[np.ndarray]
    dcdf_tr: list[np.ndarray]
    outcdf: list[np.ndarray]
    calibration_q_tilde: list[np.ndarray]
    rescaler: np.ndarray
    psi: np.ndarray
    offsets: np.ndarray  # [C, Q_BINS]
    q_tilde_min_star: float
    q_tilde_min_robust: float
    threshold_succeeded: bool
    lr_weight: np.ndarray
    lr_bias: np.ndarray
