"""AUQ step confidence (docs/monitoring.md, AUQ System 1 signals; AUQ System 2 sampling; AUQ configuration): the estimator's configuration, System 1
(verbalized confidence, P(True), calibration, fusion) and System 2 (adaptive semantic entropy)."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from mlx_sdm.monitor.online.auq_propagation import STEP_TYPE_WEIGHTS, UNKNOWN_STEP_WEIGHT

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


# ----------------------------------------------------------------------------------------------
# System 1 (docs/monitoring.md, AUQ System 1 signals)

_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(%?)"
_JSON_KEY = re.compile(r'"confidence"\s*:\s*"?\s*' + _NUMBER, re.IGNORECASE)
_TAG = re.compile(r"<confidence>\s*" + _NUMBER + r"\s*</confidence>", re.IGNORECASE | re.DOTALL)


def parse_verbalized_confidence(text: str) -> float | None:
    """JSON key ``confidence`` or ``<confidence>..</confidence>`` (last occurrence wins); a value in
    (1, 100] is a percentage; clamp to [0, 1]; anything else is missing (None)."""
    matches = [m for pattern in (_JSON_KEY, _TAG) for m in pattern.finditer(text or "")]
    if not matches:
        return None
    last = max(matches, key=lambda m: m.start())
    try:
        x = float(last.group(1))
    except ValueError:
        return None
    if math.isnan(x) or math.isinf(x):
        return None
    if last.group(2) == "%" or 1.0 < x <= 100.0:
        if x > 100.0:
            return None
        x /= 100.0
    elif x > 100.0:
        return None
    return min(max(x, 0.0), 1.0)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def calibrate(c: float | None, bias: float, config: EstimatorConfig, platt: tuple[float, float] | None) -> float | None:
    """subtractive bias with clamp: c' = clip(c - bias, 0, 1); or none; or a Platt map."""
    if c is None:
        return None
    if config.calibration_mode == "none":
        return c
    if config.calibration_mode == "platt":
        a, b = platt  # type: ignore[misc]
        cc = min(max(c, config.eps), 1 - config.eps)
        return _sigmoid(a + b * math.log(cc / (1 - cc)))
    return min(max(c - bias, 0.0), 1.0)


def fuse(c_v: float | None, c_p: float | None, config: EstimatorConfig) -> float:
    """Weighted mean over the signals present, weights renormalised; none -> missing default."""
    num = den = 0.0
    if c_v is not None and config.verbalized_weight > 0:
        num += config.verbalized_weight * c_v
        den += config.verbalized_weight
    if c_p is not None and config.p_true_weight > 0:
        num += config.p_true_weight * c_p
        den += config.p_true_weight
    return num / den if den > 0 else config.missing_confidence_default


# ----------------------------------------------------------------------------------------------
# System 2 (docs/monitoring.md, AUQ System 2 sampling)

_TOKEN_SPLIT = re.compile(r"[^0-9a-z]+")


def auq_jaccard(a: str, b: str) -> float:
    """lowercase, split on non-alphanumerics, token sets; J(empty, empty) = 1."""
    sa = {t for t in _TOKEN_SPLIT.split(a.lower()) if t}
    sb = {t for t in _TOKEN_SPLIT.split(b.lower()) if t}
    if not sa and not sb:
        return 1.0
    if not sa or not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)


def cluster_samples(samples: Sequence[str], threshold: float = CLUSTER_JACCARD, method: str = "components") -> list[int]:
    """Cluster sizes, largest first. ``components``: connected components of the graph linking samples
    with Jaccard >= threshold (single linkage, order-independent). ``greedy``: each sample joins the
    first existing cluster whose first member it matches, else starts a new one."""
    n = len(samples)
    if method == "greedy":
        heads: list[int] = []
        counts: list[int] = []
        for i in range(n):
            for c, h in enumerate(heads):
                if auq_jaccard(samples[i], samples[h]) >= threshold:
                    counts[c] += 1
                    break
            else:
                heads.append(i)
                counts.append(1)
        return sorted(counts, reverse=True)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if auq_jaccard(samples[i], samples[j]) >= threshold:
                parent[find(i)] = find(j)
    sizes: dict[int, int] = {}
    for i in range(n):
        sizes[find(i)] = sizes.get(find(i), 0) + 1
    return sorted(sizes.values(), reverse=True)


def entropy_confidence(cluster_sizes: Sequence[int], normalizer: str = "log_n") -> float:
    """c_se = 1 - H/log(n), H = -sum (n_k/n) log(n_k/n) (docs/monitoring.md, AUQ System 2 sampling step 5; normaliser log n;
    ``log_k`` divides by the log of the number of clusters instead, c_se = 1 for a single cluster)."""
    n = sum(cluster_sizes)
    if n < 2:
        raise ValueError("semantic entropy needs at least 2 samples")
    H = -sum((k / n) * math.log(k / n) for k in cluster_sizes if k > 0)
    if normalizer == "log_k":
        k = sum(1 for c in cluster_sizes if c > 0)
        return 1.0 if k < 2 else 1.0 - H / math.log(k)
    return 1.0 - H / math.log(n)


class ResponseSampler(Protocol):
    """Draws ``n`` fresh responses to the step's prompt (temperature 0.8; not the original response)."""

    def sample(self, n: int) -> list[str]: ...


@dataclass
class SemanticResult:
    confidence: float | None
    samples_used: int
    early_stopped: bool
    cluster_sizes: list[int] = field(default_factory=list)
    error: str | None = None


def adaptive_semantic_entropy(sampler: ResponseSampler, config: EstimatorConfig) -> SemanticResult:
    """Adaptive scheme: min_samples first; early stop if every pair has Jaccard >= early_stop_jaccard;
    otherwise sample up to max_samples; cluster; c_se. Failure or timeout -> samples_used = 0."""
    start = time.monotonic()

    def timed_out() -> bool:
        return config.sampling_timeout_s is not None and time.monotonic() - start > config.sampling_timeout_s

    try:
        samples = list(sampler.sample(config.min_samples))
        if len(samples) < config.min_samples:
            raise RuntimeError(f"sampler returned {len(samples)} of {config.min_samples} samples")
        if timed_out():
            return SemanticResult(None, 0, False, error="timeout")
        pairs = [(i, j) for i in range(len(samples)) for j in range(i + 1, len(samples))]
        if all(auq_jaccard(samples[i], samples[j]) >= config.early_stop_jaccard for i, j in pairs):
            return SemanticResult(1.0, len(samples), True, [len(samples)])  # one cluster -> c_se = 1
        more = config.max_samples - len(samples)
        if more > 0:
            extra = list(sampler.sample(more))
            if len(extra) < more:
                raise RuntimeError(f"sampler returned {len(extra)} of {more} samples")
            samples += extra
        if timed_out():
            return SemanticResult(None, 0, False, error="timeout")
    except Exception as exc:  # noqa: BLE001 - any sampler failure means "System 2 did not run"
        return SemanticResult(None, 0, False, error=f"{type(exc).__name__}: {exc}")
    sizes = cluster_samples(samples, config.cluster_jaccard, config.cluster_method)
    return SemanticResult(entropy_confidence(sizes, config.entropy_normalizer), len(samples), False, sizes)


# ----------------------------------------------------------------------------------------------
# propagation and escalation (docs/monitoring.md, AUQ propagation; AUQ levels and actions)

