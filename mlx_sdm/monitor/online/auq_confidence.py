"""AUQ step confidence (docs/monitoring.md, AUQ System 1 signals; AUQ System 2 sampling): System 1 (verbalized
confidence, P(True), calibration, fusion) and System 2 (adaptive semantic entropy). The estimator's
configuration is :class:`~mlx_sdm.monitor.online.auq_config.EstimatorConfig`."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from mlx_sdm.monitor.online.auq_config import CLUSTER_JACCARD, EstimatorConfig


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

