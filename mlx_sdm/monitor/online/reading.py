"""What the session monitor says about one answer (docs/monitoring.md, AUQ levels and actions, docs/monitoring.md, TRACER risk): a typed value
that crosses from the monitors to the turn pipeline, the store, the UI and the server.

A reading holds its own turn only; the per-session history (for sparklines) is kept by whoever
holds the session (:class:`mlx_sdm.turn.monitoring.SessionMonitor.history`), so a stored
reading does not grow with the session's length.

The fused forecast (mlx_sdm.monitor.forecast.fused) is :attr:`MonitorReading.fused`; any other monitor
plugs in through :attr:`MonitorReading.extra` (``{monitor name: its own dict}``), kept and stored as is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from mlx_sdm.monitor.online.auq import StepUncertainty
from mlx_sdm.monitor.online.auq_escalation import EscalationAction, UncertaintyLevel
from mlx_sdm.monitor.online.degenerate import DegenerateAnswer
from mlx_sdm.monitor.session_file.records import TracerOutput


@dataclass(frozen=True)
class FusedReading:
    """The fused forecast after one answer and what moved it (docs/monitoring-eval.md)."""

    p: float  # P(session succeeds | history), calibrated on the shipped corpus
    signal: str  # one of mlx_sdm.monitor.forecast.fusion.FUSION_FEATURES
    delta: float  # change of that signal's logit contribution since the previous answer
    message: str  # plain words, e.g. "the verifier could not vouch for turn 3"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "FusedReading | None":
        if not data or data.get("p") is None:
            return None
        return cls(float(data["p"]), str(data.get("signal", "")), float(data.get("delta", 0.0)),
                   str(data.get("message", "")))


@dataclass
class MonitorReading:
    """AUQ level / escalation action / cumulative confidence P_t and TRACER risk for one answer."""

    level: UncertaintyLevel = UncertaintyLevel.LOW
    action: EscalationAction = EscalationAction.PROCEED
    cumulative_confidence: float | None = None  # P_t (docs/monitoring.md, AUQ propagation)
    step_confidence: float | None = None  # s_t after fusion (and the verifier cap, docs/monitoring.md, combining with the verifier)
    tracer_risk: float | None = None  # prefix risk R_t (docs/monitoring.md, TRACER risk)
    step_risk: float | None = None  # r_t
    irreversible: bool = False  # an irreversible tool call was proposed
    inject_reflection: bool = False  # HIGH on an llm/decision step: ask the model to state its uncertainty
    critical_below: float | None = None  # the CRITICAL floor on P_t
    auq: StepUncertainty | None = None  # the AUQ step behind the level and P_t
    tracer: TracerOutput | None = None  # the TRACER features behind R_t
    p_true: dict[str, Any] | None = None  # how much of the KV cache P(True) reused
    fused: FusedReading | None = None  # the fused forecast p_t and the signal that moved it
    extra: dict[str, Any] = field(default_factory=dict)  # other monitors, by name
    degenerate: DegenerateAnswer | None = None  # why the answer is unusable (loop, quotes and braces), if it is
    #: the verifier is confident this answer is wrong: its calibrated lower probability that it is wrong (Eq. 28)
    judged_wrong: float | None = None
    #: AUQ's level would have paused or aborted, but the verifier vouches for this answer: only logged
    auq_pause_lifted: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["level"], out["action"] = self.level.value, self.action.value
        out["auq"] = self.auq.to_dict() if self.auq is not None else {}
        out["tracer"] = self.tracer.to_dict() if self.tracer is not None else {}
        for key in ("p_true", "degenerate", "judged_wrong", "fused"):
            if out[key] is None:
                del out[key]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "MonitorReading | None":
        """A stored reading (unknown keys, e.g. an old ``history``, are dropped)."""
        if not data:
            return None
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["level"] = UncertaintyLevel(values.get("level") or "low")
        values["action"] = EscalationAction(values.get("action") or "proceed")
        values["extra"] = dict(values.get("extra") or {})
        # Readings stored before the forecast had its own field kept it under extra["fused"].
        values["fused"] = FusedReading.from_dict(values.get("fused") or values["extra"].pop("fused", None))
        values["auq"] = StepUncertainty.from_dict(values.get("auq"))
        tracer = values.get("tracer") or {}
        values["tracer"] = TracerOutput(**{k: v for k, v in tracer.items() if k in TracerOutput.__dataclass_fields__}) \
            if tracer else None
        values["degenerate"] = DegenerateAnswer.from_dict(values.get("degenerate"))
        return cls(**values)

    @property
    def fused_p(self) -> float | None:
        """The fused forecast p_t of this turn (None when the fused monitor did not run)."""
        return None if self.fused is None else self.fused.p


@dataclass(frozen=True)
class HistoryPoint:
    """One answered turn in a session's monitor history (a sparkline point)."""

    turn: int
    level: str
    cumulative_confidence: float | None
    tracer_risk: float | None
    fused_p: float | None = None  # the fused forecast p_t (the panel's ok% column)

    @classmethod
    def of(cls, turn: int, reading: MonitorReading) -> "HistoryPoint":
        return cls(turn, reading.level.value, reading.cumulative_confidence, reading.tracer_risk, reading.fused_p)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
