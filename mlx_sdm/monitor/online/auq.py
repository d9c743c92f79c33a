"""AUQ monitor: dual-process step confidence, propagation and escalation (docs/monitoring.md, AUQ).

Per agent step (2.1):

1. System 1: verbalized confidence ``c_v`` and P(True) ``c_p``, calibration biases, fusion -> ``f_t``;
2. System 2 (opt-in, trigger zone only): adaptive semantic entropy -> ``c_se``; ``s_t = min(f_t, c_se)``;
   with a verifier probability ``v_t`` (docs/monitoring.md, combining with the verifier, the v1 cap): ``s'_t = min(s_t, v_t)``;
3. propagation ``P_t = w(type) * s_t + (1 - w(type)) * P_{t-1}`` (``propagate_ema``);
4. escalation: level/action from ``P_t``, irreversible-tool override, reflection + pause on HIGH,
   abort with :class:`UncertaintyError` on CRITICAL.

Every choice the AUQ method leaves open (docs/monitoring.md, AUQ configuration) is a field of :class:`UncertaintyPolicy` or
:class:`EstimatorConfig` with that default.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Mapping, Sequence

from mlx_sdm.monitor.online import spans
from mlx_sdm.monitor.online.auq_config import EstimatorConfig
from mlx_sdm.monitor.online.auq_confidence import (
    ResponseSampler,
    adaptive_semantic_entropy,
    calibrate,
    fuse,
    parse_verbalized_confidence,
)
from mlx_sdm.monitor.online.auq_escalation import (
    GUIDANCE_KIND,
    REFLECTION_KIND,
    EscalationAction,
    MonitorStateError,
    SessionStatus,
    UncertaintyError,
    UncertaintyLevel,
    UncertaintyPolicy,
    decide_action,
    is_irreversible,
    level_for,
)
from mlx_sdm.monitor.online.auq_propagation import propagate_ema
from mlx_sdm.monitor.session_file.records import STEP_ID_PREFIX, normalize_step_type

# belief state (docs/monitoring.md, AUQ belief state)


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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "StepUncertainty | None":
        """A stored step (``to_dict``) back; None for none, or for a record that lacks a field."""
        names = [f.name for f in fields(cls)]
        if not data or any(name not in data for name in names if name != "verifier_confidence"):
            return None
        values = {name: data[name] for name in names if name in data}
        values["level"], values["action"] = UncertaintyLevel(values["level"]), EscalationAction(values["action"])
        return cls(**values)

    def to_format(self):
        """As the session JSONL ``auq`` record."""
        from mlx_sdm.monitor.session_file.records import AUQOutput

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
        """P(True) runs only if both the policy and the estimator enable it."""
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
        on the returned action before executing); ``verifier_p`` is the verifier's p_lower (docs/monitoring.md, combining with the verifier, the v1 cap)."""
        state = self.belief(session_id)
        if state.status is SessionStatus.WAITING_FOR_HUMAN:
            raise MonitorStateError(f"session {session_id!r} is waiting for human guidance; call resume() first")
        if state.status is SessionStatus.ABORTED:
            raise MonitorStateError(f"session {session_id!r} was aborted on CRITICAL uncertainty; start a new session")
        stype = normalize_step_type(step_type) or "llm_call"
        if step_id is None:
            step_id = f"{STEP_ID_PREFIX.get(stype, 'llm')}_{state.step_counter}"
        state.step_counter += 1
        c_v, c_p, p_true_ran, f = self._system_one(step_id, response_text, p_true)
        s, c_se, samples_used, early = self._system_two(step_id, f, sampler)
        if verifier_p is not None:
            if not 0.0 <= float(verifier_p) <= 1.0:
                raise ValueError(f"step {step_id}: verifier_p must be in [0, 1], got {verifier_p}")
            s = min(s, float(verifier_p))  # docs/monitoring.md, combining with the verifier, the v1 cap

        # propagation and escalation
        P = propagate_ema(state.cumulative_confidence, s, stype, self.estimator)
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
        self._escalate(state, step)
        return step

    def _system_one(self, step_id: str, response_text: str, p_true: PTrueSource) -> tuple[float | None, float | None, bool, float]:
        """System 1 (2.2): verbalized ``c_v``, P(True) ``c_p`` (run only if enabled), calibrated and fused -> ``f_t``."""
        cfg = self.estimator
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
        return c_v, c_p, p_true_ran, f

    def _system_two(self, step_id: str, f: float, sampler: ResponseSampler | None) -> tuple[float, float | None, int, bool]:
        """System 2 (2.3), in the trigger zone only: ``s_t = min(f_t, c_se)``; returns (s_t, c_se, samples, early stop)."""
        cfg = self.estimator
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
        return s, c_se, samples_used, early

    def _escalate(self, state: AgentBeliefState, step: StepUncertainty) -> None:
        """Spans, reflection + pause on PAUSE_FOR_HUMAN, abort with UncertaintyError on ABORT (2.5, 2.6)."""
        step_id, level, action, P = step.step_id, step.level, step.action, step.propagated_confidence
        spans.emit(self.tracer, spans.SPAN_ESTIMATE, {
            "step_id": step_id, "step_type": step.step_type, "verbalized_confidence": step.verbalized_confidence,
            "p_true_confidence": step.p_true_confidence, "fused_confidence": step.fused_confidence,
            "propagated_confidence": P, "level": level.value, "action": action.value,
            "p_true_ran": step.p_true_ran, "samples_used": step.samples_used,
        })
        escalates = level in (UncertaintyLevel.HIGH, UncertaintyLevel.CRITICAL) or (
            action is EscalationAction.PAUSE_FOR_HUMAN and self.policy.escalate_span_on_override
        )
        if escalates:
            spans.emit(self.tracer, spans.SPAN_ESCALATE, {
                "step_id": step_id, "level": level.value, "cumulative_confidence": P, "irreversible": step.irreversible,
            })
        if action is EscalationAction.PAUSE_FOR_HUMAN:
            if level is UncertaintyLevel.HIGH and step.step_type in self.policy.reflection_step_types and self.policy.inject_reflection_on_high:
                state.transcript.append({"role": "system", "content": self.policy.reflection_text,
                                         "metadata": {"kind": REFLECTION_KIND, "step_id": step_id}})
            state.status = SessionStatus.WAITING_FOR_HUMAN
        elif action is EscalationAction.ABORT:
            state.status = SessionStatus.ABORTED
            raise UncertaintyError(level, P, step_id)

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
