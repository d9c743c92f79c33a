"""AUQ monitor: dual-process step confidence, propagation and escalation (monitoring spec section 2).

Per agent step (2.1):

1. System 1: verbalized confidence ``c_v`` and P(True) ``c_p``, calibration biases, fusion -> ``f_t``;
2. System 2 (opt-in, trigger zone only): adaptive semantic entropy -> ``c_se``; ``s_t = min(f_t, c_se)``;
   with a verifier probability ``v_t`` (spec 5.4 v1): ``s'_t = min(s_t, v_t)``;
3. propagation ``P_t = w(type) * s_t + (1 - w(type)) * P_{t-1}`` (``propagate_ema``);
4. escalation: level/action from ``P_t``, irreversible-tool override, reflection + pause on HIGH,
   abort with :class:`UncertaintyError` on CRITICAL.

Every value the spec marks [RESOLVED] is a field of :class:`UncertaintyPolicy` or
:class:`EstimatorConfig` with that default.
"""

from __future__ import annotations

import enum
import math
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol, Sequence

from mlx_sdm.errors import MlxSdmError
from mlx_sdm.monitor import spans
from mlx_sdm.monitor.session_file import STEP_ID_PREFIX, normalize_step_type

# Constants of spec 2.9 that are not config fields in [DOC] (exposed as EstimatorConfig defaults too).
SAMPLING_TEMPERATURE = 0.8
CLUSTER_JACCARD = 0.40
STEP_TYPE_WEIGHTS = {"decision": 0.70, "llm_call": 0.55, "tool_call": 0.45, "memory_read": 0.35}  # 2.4
UNKNOWN_STEP_WEIGHT = 0.55  # [RESOLVED]
LLM_STEP_TYPES = ("llm_call", "decision")  # "LLM step" for reflection injection (2.6)

REFLECTION_TEXT = (
    "Stop and state your uncertainty explicitly before going on. List each point in your current reasoning "
    "that you are NOT confident about. For every point give (1) what you already know, (2) what you do not "
    "know, (3) what information would resolve it."
)
REFLECTION_KIND = "uncertainty_reflection"
GUIDANCE_KIND = "human_guidance"


class UncertaintyLevel(str, enum.Enum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


class EscalationAction(str, enum.Enum):
    PROCEED = "proceed"
    PROCEED_WITH_LOG = "proceed_with_log"
    PAUSE_FOR_HUMAN = "pause_for_human"
    ABORT = "abort"


class SessionStatus(str, enum.Enum):
    RUNNING = "running"
    WAITING_FOR_HUMAN = "waiting_for_human"
    ABORTED = "aborted"


ACTION_FOR_LEVEL = {
    UncertaintyLevel.LOW: EscalationAction.PROCEED,
    UncertaintyLevel.MEDIUM: EscalationAction.PROCEED_WITH_LOG,
    UncertaintyLevel.HIGH: EscalationAction.PAUSE_FOR_HUMAN,
    UncertaintyLevel.CRITICAL: EscalationAction.ABORT,
}


class UncertaintyError(MlxSdmError):
    """Raised on CRITICAL: the session's cumulative confidence fell below the high threshold."""

    def __init__(self, level: UncertaintyLevel, cumulative_confidence: float, step_id: str):
        self.level, self.cumulative_confidence, self.step_id = level, cumulative_confidence, step_id
        super().__init__(
            f"step {step_id}: cumulative confidence {cumulative_confidence:.3f} is {level.value.upper()}; "
            "the session was aborted (review the conversation, then start a new one or lower high_threshold)"
        )


class MonitorStateError(MlxSdmError):
    """A call that does not fit the session's state (scoring while paused, resuming a running session)."""


# ----------------------------------------------------------------------------------------------
# configuration (spec 2.9)


@dataclass
class UncertaintyPolicy:
    low_threshold: float = 0.80
    medium_threshold: float = 0.60
    high_threshold: float = 0.40
    enable_p_true: bool = True
    enable_semantic_sampling: bool = False
    irreversible_tool_names: list[str] = field(default_factory=list)
    inject_reflection_on_high: bool = True
    reset_on_resume: bool = False  # [RESOLVED] resuming keeps P_t
    reflection_text: str = REFLECTION_TEXT
    reflection_step_types: tuple[str, ...] = LLM_STEP_TYPES  # [RESOLVED] reflection on HIGH "LLM steps" only
    escalate_span_on_override: bool = True  # [RESOLVED] a MEDIUM step paused by the override emits escalate
    high_uncertainty_levels: tuple[str, ...] = ("high", "critical")  # [RESOLVED] counted in high_uncertainty_steps

    def __post_init__(self) -> None:
        if not (1.0 >= self.low_threshold > self.medium_threshold > self.high_threshold >= 0.0):
            raise ValueError(
                "UncertaintyPolicy thresholds must satisfy 1 >= low > medium > high >= 0, got "
                f"low={self.low_threshold}, medium={self.medium_threshold}, high={self.high_threshold}"
            )
        if "NOT confident" not in self.reflection_text:
            raise ValueError("reflection_text must contain the phrase 'NOT confident' (tools locate the message by it)")


@dataclass
class EstimatorConfig:
    enable_p_true: bool = True
    verbalized_weight: float = 0.4
    p_true_weight: float = 0.6
    verbalized_calibration_bias: float = 0.25
    p_true_calibration_bias: float = 0.10
    calibration_mode: str = "subtract"  # [RESOLVED] "subtract" | "none" | "platt"
    verbalized_platt: tuple[float, float] | None = None  # (a, b): c' = sigma(a + b*logit(c)) in "platt" mode
    p_true_platt: tuple[float, float] | None = None
    missing_confidence_default: float = 0.5  # [RESOLVED] no signal -> 0.5 (HIGH: gets reviewed)
    min_samples: int = 2
    max_samples: int = 5
    semantic_trigger_low: float = 0.50
    semantic_trigger_high: float = 0.72  # [RESOLVED] both bounds inclusive
    early_stop_jaccard: float = 0.60
    cluster_jaccard: float = CLUSTER_JACCARD  # [RESOLVED] connected components at >= 0.40
    sampling_temperature: float = SAMPLING_TEMPERATURE
    sampling_timeout_s: float | None = None  # past it, System 2 counts as failed (samples_used = 0)
    step_type_weights: dict[str, float] = field(default_factory=lambda: dict(STEP_TYPE_WEIGHTS))
    unknown_step_weight: float = UNKNOWN_STEP_WEIGHT
    initial_confidence: float | None = None  # [RESOLVED] P_0: None means P_1 = s_1 (no prior)
    trigger_inclusive: bool = True  # [RESOLVED] trigger zone bounds inclusive
    cluster_method: str = "components"  # [RESOLVED] "components" (single linkage) | "greedy" (first match)
    entropy_normalizer: str = "log_n"  # [RESOLVED] "log_n" | "log_k" (number of clusters)
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
# System 1 (spec 2.2)

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
    """[RESOLVED] subtractive bias with clamp: c' = clip(c - bias, 0, 1); or none; or a Platt map."""
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
# System 2 (spec 2.3)

_TOKEN_SPLIT = re.compile(r"[^0-9a-z]+")


def auq_jaccard(a: str, b: str) -> float:
    """[RESOLVED] lowercase, split on non-alphanumerics, token sets; J(empty, empty) = 1."""
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
    """c_se = 1 - H/log(n), H = -sum (n_k/n) log(n_k/n) (spec 2.3 step 5; [RESOLVED] normaliser log n;
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
# propagation and escalation (spec 2.4, 2.5)


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


def level_for(confidence: float, policy: UncertaintyPolicy) -> UncertaintyLevel:
    """Thresholds are floors on P_t (the tier table of [DOC])."""
    if confidence >= policy.low_threshold:
        return UncertaintyLevel.LOW
    if confidence >= policy.medium_threshold:
        return UncertaintyLevel.MEDIUM
    if confidence >= policy.high_threshold:
        return UncertaintyLevel.HIGH
    return UncertaintyLevel.CRITICAL


def is_irreversible(tool_names: Sequence[str], policy: UncertaintyPolicy) -> bool:
    """Any tool name containing any non-empty entry of irreversible_tool_names (case-insensitive)."""
    entries = [e.lower() for e in policy.irreversible_tool_names if e]
    return any(e in name.lower() for name in tool_names for e in entries)


def decide_action(level: UncertaintyLevel, irreversible: bool) -> EscalationAction:
    """Level -> action, with the irreversible override: MEDIUM + irreversible tool -> PAUSE_FOR_HUMAN."""
    if irreversible and level is UncertaintyLevel.MEDIUM:
        return EscalationAction.PAUSE_FOR_HUMAN
    return ACTION_FOR_LEVEL[level]


# ----------------------------------------------------------------------------------------------
# belief state (spec 2.7)


@dataclass
class StepUncertainty:
    step_id: str
    step_type: str
    verbalized_confidence: float | None
    p_true_confidence: float | None
    fused_confidence: float
    entropy_confidence: float | None
    step_confidence: float
    propagated_confidence: float
    level: UncertaintyLevel
    action: EscalationAction
    p_true_ran: bool
    samples_used: int
    early_stopped: bool
    irreversible: bool
    verifier_confidence: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["level"], out["action"] = self.level.value, self.action.value
        return out

    def to_format(self):
        """As the session JSONL ``auq`` record."""
        from mlx_sdm.monitor.session_file import AUQOutput

        d = self.to_dict()
        return AUQOutput(**{k: d[k] for k in AUQOutput.__dataclass_fields__})


@dataclass
class AgentBeliefState:
    session_id: str
    step_uncertainties: list[StepUncertainty] = field(default_factory=list)
    cumulative_confidence: float | None = None
    status: SessionStatus = SessionStatus.RUNNING
    transcript: list[dict[str, Any]] = field(default_factory=list)
    step_counter: int = 0

    def summary(self, policy: UncertaintyPolicy) -> dict[str, Any]:
        """Run metadata under ``metadata["uncertainty"]`` (2.7)."""
        cum = self.cumulative_confidence
        return {
            "overall_level": level_for(cum, policy).value if cum is not None else None,
            "cumulative_confidence": cum,
            "total_steps": len(self.step_uncertainties),
            "high_uncertainty_steps": sum(s.level.value in policy.high_uncertainty_levels for s in self.step_uncertainties),
            "last_step_id": self.step_uncertainties[-1].step_id if self.step_uncertainties else None,
        }


# ----------------------------------------------------------------------------------------------
# the monitor


PTrueSource = float | Callable[[], float] | None


class AUQMonitor:
    """AUQ over any number of sessions, keyed by session id.

    ``score_step`` returns the step's :class:`StepUncertainty`; on ABORT it records the step, marks the
    session aborted and raises :class:`UncertaintyError`. On PAUSE_FOR_HUMAN the session waits for
    :meth:`resume`; a HIGH LLM step first gets the reflection SYSTEM message in its transcript.
    ``transcript`` lists are the engine's own message lists when passed to :meth:`start`.
    """

    def __init__(self, policy: UncertaintyPolicy | None = None, estimator: EstimatorConfig | None = None, *,
                 tracer_provider=None):
        self.policy = policy or UncertaintyPolicy()
        self.estimator = estimator or EstimatorConfig()
        self.tracer = spans.get_tracer(tracer_provider)
        self.sessions: dict[str, AgentBeliefState] = {}

    # -- session management --------------------------------------------------------------------
    def start(self, session_id: str, transcript: list[dict[str, Any]] | None = None) -> AgentBeliefState:
        state = AgentBeliefState(session_id=session_id, transcript=transcript if transcript is not None else [])
        self.sessions[session_id] = state
        return state

    def belief(self, session_id: str) -> AgentBeliefState:
        if session_id not in self.sessions:
            return self.start(session_id)
        return self.sessions[session_id]

    def run_metadata(self, session_id: str) -> dict[str, Any]:
        return {"uncertainty": self.belief(session_id).summary(self.policy)}

    @property
    def p_true_enabled(self) -> bool:
        """[RESOLVED] P(True) runs only if both the policy and the estimator enable it."""
        return self.policy.enable_p_true and self.estimator.enable_p_true

    # -- scoring -------------------------------------------------------------------------------
    def score_step(
        self,
        session_id: str,
        step_type: str,
        response_text: str = "",
        *,
        p_true: PTrueSource = None,
        sampler: ResponseSampler | None = None,
        tool_names: Sequence[str] = (),
        verifier_p: float | None = None,
        step_id: str | None = None,
    ) -> StepUncertainty:
        """Score one agent step. ``p_true`` is a value or a zero-argument callable (run only if enabled);
        ``sampler`` draws System 2 samples; ``tool_names`` are the calls this step proposes (gate them
        on the returned action before executing); ``verifier_p`` is the verifier's p_lower (spec 5.4 v1)."""
        state = self.belief(session_id)
        if state.status is SessionStatus.WAITING_FOR_HUMAN:
            raise MonitorStateError(f"session {session_id!r} is waiting for human guidance; call resume() first")
        if state.status is SessionStatus.ABORTED:
            raise MonitorStateError(f"session {session_id!r} was aborted on CRITICAL uncertainty; start a new session")
        cfg = self.estimator
        stype = normalize_step_type(step_type) or "llm_call"
        if step_id is None:
            step_id = f"{STEP_ID_PREFIX.get(stype, 'llm')}_{state.step_counter}"
        state.step_counter += 1

        # System 1
        c_v = parse_verbalized_confidence(response_text)
        c_p, p_true_ran = None, False
        if self.p_true_enabled and p_true is not None:
            c_p = float(p_true() if callable(p_true) else p_true)
            if not 0.0 <= c_p <= 1.0 or math.isnan(c_p):
                raise ValueError(f"step {step_id}: P(True) must be in [0, 1], got {c_p}")
            p_true_ran = True
        f = fuse(
            calibrate(c_v, cfg.verbalized_calibration_bias, cfg, cfg.verbalized_platt),
            calibrate(c_p, cfg.p_true_calibration_bias, cfg, cfg.p_true_platt),
            cfg,
        )

        # System 2
        c_se, samples_used, early = None, 0, False
        s = f
        if cfg.trigger_inclusive:
            in_zone = cfg.semantic_trigger_low <= f <= cfg.semantic_trigger_high
        else:
            in_zone = cfg.semantic_trigger_low < f < cfg.semantic_trigger_high
        if self.policy.enable_semantic_sampling and sampler is not None and in_zone:
            result = adaptive_semantic_entropy(sampler, cfg)
            samples_used, early = result.samples_used, result.early_stopped
            if result.confidence is not None:
                c_se = result.confidence
                s = min(f, c_se)  # pessimistic fusion
            spans.emit(self.tracer, spans.SPAN_SEMANTIC,
                       {"step_id": step_id, "sample_count": samples_used, "early_stopped": early})
        if verifier_p is not None:
            if not 0.0 <= float(verifier_p) <= 1.0:
                raise ValueError(f"step {step_id}: verifier_p must be in [0, 1], got {verifier_p}")
            s = min(s, float(verifier_p))  # spec 5.4 v1

        # propagation and escalation
        P = propagate_ema(state.cumulative_confidence, s, stype, cfg)
        state.cumulative_confidence = P
        level = level_for(P, self.policy)
        irreversible = is_irreversible(tool_names, self.policy)
        action = decide_action(level, irreversible)
        step = StepUncertainty(
            step_id=step_id, step_type=stype, verbalized_confidence=c_v, p_true_confidence=c_p,
            fused_confidence=f, entropy_confidence=c_se, step_confidence=s, propagated_confidence=P,
            level=level, action=action, p_true_ran=p_true_ran, samples_used=samples_used,
            early_stopped=early, irreversible=irreversible, verifier_confidence=verifier_p,
        )
        state.step_uncertainties.append(step)
        spans.emit(self.tracer, spans.SPAN_ESTIMATE, {
            "step_id": step_id, "step_type": stype, "verbalized_confidence": c_v, "p_true_confidence": c_p,
            "fused_confidence": f, "propagated_confidence": P, "level": level.value, "action": action.value,
            "p_true_ran": p_true_ran, "samples_used": samples_used,
        })
        escalates = level in (UncertaintyLevel.HIGH, UncertaintyLevel.CRITICAL) or (
            action is EscalationAction.PAUSE_FOR_HUMAN and self.policy.escalate_span_on_override
        )
        if escalates:
            spans.emit(self.tracer, spans.SPAN_ESCALATE, {
                "step_id": step_id, "level": level.value, "cumulative_confidence": P, "irreversible": irreversible,
            })
        if action is EscalationAction.PAUSE_FOR_HUMAN:
            if level is UncertaintyLevel.HIGH and stype in self.policy.reflection_step_types and self.policy.inject_reflection_on_high:
                state.transcript.append({"role": "system", "content": self.policy.reflection_text,
                                         "metadata": {"kind": REFLECTION_KIND, "step_id": step_id}})
            state.status = SessionStatus.WAITING_FOR_HUMAN
        elif action is EscalationAction.ABORT:
            state.status = SessionStatus.ABORTED
            raise UncertaintyError(level, P, step_id)
        return step

    def resume(self, session_id: str, guidance: str) -> AgentBeliefState:
        """Append the human guidance as a USER message (after the reflection) and continue."""
        state = self.belief(session_id)
        if state.status is not SessionStatus.WAITING_FOR_HUMAN:
            raise MonitorStateError(f"session {session_id!r} is {state.status.value}, not waiting for human guidance")
        if not guidance or not guidance.strip():
            raise ValueError("resume() needs non-empty guidance text")
        state.transcript.append({"role": "user", "content": guidance, "metadata": {"kind": GUIDANCE_KIND}})
        state.status = SessionStatus.RUNNING
        if self.policy.reset_on_resume:
            state.cumulative_confidence = None
        return state


def uncertainty_guard_node(monitor: AUQMonitor, step_type: str, escalate_node: str) -> Callable[[dict], dict]:
    """A graph node (2.7): scores the state's last assistant message as a ``step_type`` step.

    ``state`` is a dict with ``session_id``, ``messages`` (role/content dicts) and ``metadata``; optional
    ``p_true``, ``sampler``, ``tool_names``. On PAUSE_FOR_HUMAN sets ``metadata["uncertainty_escalate"]``
    and ``metadata["next_node"] = escalate_node``; on ABORT the UncertaintyError propagates.
    """

    def node(state: dict) -> dict:
        messages = state.get("messages", [])
        text = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "assistant"), "")
        metadata = state.setdefault("metadata", {})
        step = monitor.score_step(state["session_id"], step_type, text, p_true=state.get("p_true"),
                                  sampler=state.get("sampler"), tool_names=state.get("tool_names", ()))
        metadata.update(monitor.run_metadata(state["session_id"]))
        metadata["uncertainty_escalate"] = step.action is EscalationAction.PAUSE_FOR_HUMAN
        if metadata["uncertainty_escalate"]:
            metadata["next_node"] = escalate_node
        return state

    return node
