"""AUQ propagation (docs/monitoring.md, AUQ propagation): the step-type weighted EMA of step confidences."""

from __future__ import annotations

from mlx_sdm.monitor.online.auq_config import EstimatorConfig
from mlx_sdm.monitor.session_file.records import normalize_step_type


def step_weight(step_type: str | None, config: EstimatorConfig) -> float:
    return config.step_type_weights.get(normalize_step_type(step_type) or "", config.unknown_step_weight)


def propagate_ema(previous: float | None, s: float, step_type: str | None, config: EstimatorConfig) -> float:
    """P_t = w*s_t + (1-w)*P_{t-1}; P_1 = s_1 unless ``initial_confidence`` sets a prior P_0.
    Not the SAUP estimator (see tracer.saup_rms)."""
    if previous is None:
        previous = config.initial_confidence
    if previous is None:
        return s
    w = step_weight(step_type, config)
    return w * s + (1.0 - w) * previous

