"""AUQ's configuration (docs/monitoring.md, AUQ configuration; AUQ propagation): every choice the AUQ method
leaves open, as a field of :class:`EstimatorConfig` with its default, and the step-type weights of the
propagation EMA. Read by System 1 and 2 (:mod:`.auq_confidence`) and the EMA (:mod:`.auq_propagation`)."""

from __future__ import annotations

from dataclasses import dataclass, field

STEP_TYPE_WEIGHTS = {"decision": 0.70, "llm_call": 0.55, "tool_call": 0.45, "memory_read": 0.35}  # docs/monitoring.md, AUQ propagation
UNKNOWN_STEP_WEIGHT = 0.55  # the weight of a step type outside the table (the LLM-call weight)


# AUQ constants (docs/monitoring.md, AUQ configuration) that the AUQ documentation does not make config fields
# (exposed as EstimatorConfig defaults too).
SAMPLING_TEMPERATURE = 0.8
CLUSTER_JACCARD = 0.40


@dataclass
class EstimatorConfig:
    enable_p_true: bool = True
    verbalized_weight: float = 0.4
    p_true_weight: float = 0.6
    verbalized_calibration_bias: float = 0.25
    p_true_calibration_bias: float = 0.10
    calibration_mode: str = "subtract"  # "subtract" | "none" | "platt"
    verbalized_platt: tuple[float, float] | None = None  # (a, b): c' = sigma(a + b*logit(c)) in "platt" mode
    p_true_platt: tuple[float, float] | None = None
    missing_confidence_default: float = 0.5  # no signal -> 0.5 (HIGH: gets reviewed)
    min_samples: int = 2
    max_samples: int = 5
    semantic_trigger_low: float = 0.50
    semantic_trigger_high: float = 0.72  # both bounds inclusive
    early_stop_jaccard: float = 0.60
    cluster_jaccard: float = CLUSTER_JACCARD  # connected components at >= 0.40
    sampling_temperature: float = SAMPLING_TEMPERATURE
    sampling_timeout_s: float | None = None  # past it, System 2 counts as failed (samples_used = 0)
    step_type_weights: dict[str, float] = field(default_factory=lambda: dict(STEP_TYPE_WEIGHTS))
    unknown_step_weight: float = UNKNOWN_STEP_WEIGHT
    initial_confidence: float | None = None  # P_0: None means P_1 = s_1 (no prior)
    trigger_inclusive: bool = True  # trigger zone bounds inclusive
    cluster_method: str = "components"  # "components" (single linkage) | "greedy" (first match)
    entropy_normalizer: str = "log_n"  # "log_n" | "log_k" (number of clusters)
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.calibration_mode not in ("subtract", "none", "platt"):
            raise ValueError(f"calibration_mode must be subtract, none or platt, got {self.calibration_mode!r}")
        if self.calibration_mode == "platt" and (self.verbalized_platt is None or self.p_true_platt is None):
            raise ValueError("calibration_mode='platt' needs verbalized_platt and p_true_platt = (a, b) fitted on labelled data")
        if not 2 <= self.min_samples <= self.max_samples:
            raise ValueError(f"need 2 <= min_samples <= max_samples, got {self.min_samples}, {self.max_samples}")
        if self.verbalized_weight < 0 or self.p_true_weight < 0:
            raise ValueError("fusion weights must be >= 0")
        if self.cluster_method not in ("components", "greedy"):
            raise ValueError(f"cluster_method must be components or greedy, got {self.cluster_method!r}")
        if self.entropy_normalizer not in ("log_n", "log_k"):
            raise ValueError(f"entropy_normalizer must be log_n or log_k, got {self.entropy_normalizer!r}")
