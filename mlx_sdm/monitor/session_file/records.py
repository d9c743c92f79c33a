"""The records of the session JSONL format (see :mod:`mlx_sdm.monitor.session_file`): sessions, steps,
the per-step verifier/AUQ/TRACER outputs, the allowed values of their fields and the step-id rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlx_sdm.monitor.session_file.provenance import Provenance

FORMAT_VERSION = 1

ACTORS = ("agent", "user")
STEP_TYPES = ("decision", "llm_call", "tool_call", "memory_read")
STEP_TYPE_ALIASES = {"llm": "llm_call", "tool": "tool_call", "memory": "memory_read"}
STEP_ID_PREFIX = {"decision": "decision", "llm_call": "llm", "tool_call": "tool", "memory_read": "memory"}
OUTCOMES = ("success", "failure")
# complete = outcome determined; censored = administrative stop (turn/context/step budget);
# abandoned = user left (informative, excluded from censored scoring); error = self-inflicted stop.
TERMINATIONS = ("complete", "censored", "abandoned", "error")
AUQ_LEVELS = ("low", "medium", "high", "critical")
AUQ_ACTIONS = ("proceed", "proceed_with_log", "pause_for_human", "abort")


class SessionFormatWarning(UserWarning):
    """Input the reader could carry on with, but that the user should know about."""


def step_id_for(step_type: str | None, actor: str, index: int) -> str:
    """``f"{prefix}_{i}"`` (docs/monitoring.md, session data model): prefix from the step type, ``user`` for user steps."""
    if actor == "user":
        return f"user_{index}"
    return f"{STEP_ID_PREFIX.get(normalize_step_type(step_type) or '', 'llm')}_{index}"


def normalize_step_type(step_type: str | None) -> str | None:
    if step_type is None:
        return None
    return STEP_TYPE_ALIASES.get(step_type, step_type)


# ----------------------------------------------------------------------------------------------
# dataclasses


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)  # a JSON string is allowed (tau2)
    id: str | None = None

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"name": self.name, "arguments": self.arguments}
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass
class VerifierOutput:
    """Per-step verdict of the document-level verifier (a subset of ``Verdict.to_dict()``)."""

    p_lower: float | None = None
    admitted: bool | None = None
    reason: str | None = None
    prediction: int | None = None
    #: the verifier's task the question was routed to (its status then follows network/verdict.status_of)
    task: str | None = None

    def to_dict(self) -> dict:
        out = {"p_lower": self.p_lower, "admitted": self.admitted, "reason": self.reason, "prediction": self.prediction}
        if self.task is not None:  # written only when routed: files without it read as before
            out["task"] = self.task
        return out


@dataclass
class AUQOutput:
    """Per-step AUQ belief (docs/monitoring.md, AUQ belief state). Levels/actions are lower-case strings."""

    verbalized_confidence: float | None = None
    p_true_confidence: float | None = None
    fused_confidence: float | None = None
    entropy_confidence: float | None = None
    step_confidence: float | None = None
    propagated_confidence: float | None = None
    level: str | None = None
    action: str | None = None
    p_true_ran: bool = False
    samples_used: int = 0
    early_stopped: bool = False
    irreversible: bool = False

    PROBABILITY_FIELDS = (
        "verbalized_confidence", "p_true_confidence", "fused_confidence",
        "entropy_confidence", "step_confidence", "propagated_confidence",
    )

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass
class TracerOutput:
    """Per-step TRACER features (docs/monitoring.md, TRACER): surprisal U, repetition Da, gaps DoA/DoU,
    step risk r, prefix score R_t; ``embedder`` names the sentence embedder used (None = Jaccard
    fallback); ``surprisal_source`` is "logprobs" or "missing" (U set to 0, situational signals only)."""

    U: float = 0.0
    Da: float = 0.0
    DoA: float = 0.0
    DoU: float = 0.0
    r: float = 0.0
    prefix_risk: float | None = None
    embedder: str | None = None
    surprisal_source: str = "logprobs"

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass
class SessionStep:
    step_id: str
    actor: str
    step_type: str | None
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    token_logprobs: list[float] | None = None
    tokens: list[str] | None = None
    hidden: list[float] | None = None
    turn_index: int | None = None
    timestamp: str | None = None
    verifier: VerifierOutput | None = None
    auq: AUQOutput | None = None
    tracer: TracerOutput | None = None
    p_t: float | None = None  # TPS forecast: P(session eventually succeeds | history up to this step)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, session_id: str) -> dict:
        out: dict[str, Any] = {
            "record": "step",
            "session_id": session_id,
            "step_id": self.step_id,
            "actor": self.actor,
            "step_type": self.step_type,
            "text": self.text,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "observations": list(self.observations),
            "token_logprobs": self.token_logprobs,
            "tokens": self.tokens,
        }
        for name in ("hidden", "turn_index", "timestamp", "p_t"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        for name in ("verifier", "auq", "tracer"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name).to_dict()
        out.update(self.extra)
        return out


@dataclass
class Session:
    session_id: str
    steps: list[SessionStep] = field(default_factory=list)
    outcome: str | None = None  # "success" | "failure" | None (unknown)
    termination: str | None = None  # see TERMINATIONS
    horizon: int | None = None  # evaluated horizon T for TPS (budget for censored sessions)
    pi: float | None = None  # estimate of P(Y=1 | stopped prefix) for exact censored TPS
    model: str | None = None
    created_at: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    provenance: Provenance | None = None  # the product that made it (None: unknown, an older file)

    @property
    def success(self) -> int | None:
        """TPS label Y (1 = success), None when unknown."""
        return None if self.outcome is None else int(self.outcome == "success")

    def agent_steps(self) -> list[SessionStep]:
        return [s for s in self.steps if s.actor == "agent"]

    def header_dict(self) -> dict:
        out: dict[str, Any] = {
            "record": "session",
            "format_version": self.format_version,
            "session_id": self.session_id,
            "outcome": self.outcome,
            "termination": self.termination,
            "horizon": self.horizon,
            "pi": self.pi,
            "model": self.model,
            "created_at": self.created_at,
            "metadata": self.metadata,
        }
        if self.provenance is not None:
            out["provenance"] = self.provenance.to_dict()
        return out

