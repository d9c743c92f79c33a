"""Reading and validating session JSONL files (the format of :mod:`mlx_sdm.monitor.session_file`).

Strict about what would silently corrupt scores (raises :class:`DataError` naming file, line and
field); warns with :class:`SessionFormatWarning` about what it can carry on with."""

from __future__ import annotations

import json
import math
import os
import warnings
from typing import Any

from mlx_sdm.errors import DataError
from mlx_sdm.jsonl import iter_jsonl_objects
from mlx_sdm.monitor.session_file.provenance import Provenance
from mlx_sdm.monitor.session_file.records import (
    ACTORS,
    AUQ_ACTIONS,
    AUQ_LEVELS,
    FORMAT_VERSION,
    OUTCOMES,
    STEP_TYPES,
    TERMINATIONS,
    AUQOutput,
    Session,
    SessionFormatWarning,
    SessionStep,
    ToolCall,
    TracerOutput,
    VerifierOutput,
    normalize_step_type,
)

_STEP_KEYS = {
    "record", "session_id", "step_id", "actor", "step_type", "text", "tool_calls", "observations",
    "token_logprobs", "tokens", "hidden", "turn_index", "timestamp", "verifier", "auq", "tracer", "p_t",
}
_SESSION_KEYS = {
    "record", "format_version", "session_id", "outcome", "termination", "horizon", "pi", "model",
    "created_at", "metadata", "provenance",
}


class _Ctx:
    def __init__(self, path: str, line: int | None):
        self.path, self.line = path, line

    def error(self, fld: str | None, message: str) -> DataError:
        return DataError(message, path=self.path, line=self.line, field=fld)

    def warn(self, fld: str | None, message: str) -> None:
        where = self.path + (f":{self.line}" if self.line is not None else "")
        where += f": field {fld!r}" if fld else ""
        warnings.warn(f"{where}: {message}", SessionFormatWarning, stacklevel=4)


def _probability(ctx: _Ctx, fld: str, value: Any, *, optional: bool = True) -> float | None:
    if value is None:
        if optional:
            return None
        raise ctx.error(fld, "is missing; give a probability in [0, 1]")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ctx.error(fld, f"must be a number in [0, 1] or null, got {value!r}")
    x = float(value)
    if math.isnan(x) or x < 0.0 or x > 1.0:
        raise ctx.error(fld, f"probability {x!r} is outside [0, 1]; log probabilities, not percentages or logits")
    return x


def _number(ctx: _Ctx, fld: str, value: Any, *, optional: bool = True, minimum: float | None = None) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)):
        raise ctx.error(fld, f"must be a finite number, got {value!r}")
    if minimum is not None and float(value) < minimum:
        raise ctx.error(fld, f"must be >= {minimum}, got {value!r}")
    return float(value)


def _choice(ctx: _Ctx, fld: str, value: Any, allowed: tuple[str, ...], *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if value not in allowed:
        raise ctx.error(fld, f"must be one of {', '.join(allowed)}{' or null' if optional else ''}, got {value!r}")
    return value


def _validate_step_type(ctx: _Ctx, actor: str, step_type: Any) -> str | None:
    if step_type is None:
        if actor == "agent":
            ctx.warn("step_type", "agent step without a step_type; AUQ uses the 'unknown' propagation weight")
        return None
    if not isinstance(step_type, str):
        raise ctx.error("step_type", f"must be a string or null, got {step_type!r}")
    normalized = normalize_step_type(step_type)
    if normalized not in STEP_TYPES:
        ctx.warn(
            "step_type",
            f"unknown step type {step_type!r} (known: {', '.join(STEP_TYPES)}; aliases llm, tool, memory); "
            "AUQ uses the 'unknown' propagation weight 0.55",
        )
        return step_type
    return normalized


def _parse_tool_calls(ctx: _Ctx, value: Any) -> list[ToolCall]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ctx.error("tool_calls", f"must be a list of {{name, arguments}}, got {type(value).__name__}")
    calls = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            raise ctx.error(f"tool_calls[{i}].name", "each tool call needs a non-empty string 'name'")
        args = item.get("arguments", {})
        if args is None:
            args = {}
        if not isinstance(args, (dict, str)):
            raise ctx.error(f"tool_calls[{i}].arguments", f"must be an object or a JSON string, got {args!r}")
        calls.append(ToolCall(name=item["name"], arguments=args, id=item.get("id")))
    return calls


def _parse_logprobs(ctx: _Ctx, logprobs: Any, tokens: Any) -> tuple[list[float] | None, list[str] | None]:
    if logprobs is not None:
        if not isinstance(logprobs, list):
            raise ctx.error("token_logprobs", "must be a list of numbers or null")
        out = []
        for i, lp in enumerate(logprobs):
            if lp is None:  # a token whose log-prob was not recorded: TRACER skips it
                out.append(None)
                continue
            if isinstance(lp, bool) or not isinstance(lp, (int, float)) or math.isnan(float(lp)):
                raise ctx.error(f"token_logprobs[{i}]", f"must be a number, got {lp!r}")
            if lp > 1e-6:
                raise ctx.error(f"token_logprobs[{i}]", f"log-probability {lp} is > 0; store natural-log probabilities")
            out.append(float(lp))
        logprobs = out
    if tokens is not None:
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ctx.error("tokens", "must be a list of strings or null")
    if logprobs is not None and tokens is not None and len(logprobs) != len(tokens):
        raise ctx.error("tokens", f"has {len(tokens)} entries but token_logprobs has {len(logprobs)}; they must align")
    return logprobs, tokens


def _parse_sub(ctx: _Ctx, name: str, value: Any, cls: type) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ctx.error(name, "must be an object or null")
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(value) - known)
    if unknown:
        ctx.warn(name, f"unknown keys {unknown} ignored")
    obj = cls(**{k: v for k, v in value.items() if k in known})
    if cls is VerifierOutput:
        obj.p_lower = _probability(ctx, "verifier.p_lower", obj.p_lower)
        if obj.admitted is not None and not isinstance(obj.admitted, bool):
            raise ctx.error("verifier.admitted", f"must be true, false or null, got {obj.admitted!r}")
    elif cls is AUQOutput:
        for fld in AUQOutput.PROBABILITY_FIELDS:
            setattr(obj, fld, _probability(ctx, f"auq.{fld}", getattr(obj, fld)))
        obj.level = _choice(ctx, "auq.level", obj.level, AUQ_LEVELS)
        obj.action = _choice(ctx, "auq.action", obj.action, AUQ_ACTIONS)
        if not isinstance(obj.samples_used, int) or obj.samples_used < 0:
            raise ctx.error("auq.samples_used", f"must be a non-negative integer, got {obj.samples_used!r}")
    elif cls is TracerOutput:
        for fld in ("U", "Da", "DoA", "DoU", "r"):
            setattr(obj, fld, _number(ctx, f"tracer.{fld}", getattr(obj, fld), optional=False, minimum=0.0))
        obj.prefix_risk = _number(ctx, "tracer.prefix_risk", obj.prefix_risk, minimum=0.0)
        obj.surprisal_source = _choice(ctx, "tracer.surprisal_source", obj.surprisal_source, ("logprobs", "missing"), optional=False)
    return obj


def parse_step(raw: dict, path: str = "<memory>", line: int | None = None) -> SessionStep:
    """Validate one step record (a parsed JSON object) and build a :class:`SessionStep`."""
    ctx = _Ctx(path, line)
    for key in ("step_id", "actor"):
        if not isinstance(raw.get(key), str) or not raw.get(key):
            raise ctx.error(key, "is missing or not a non-empty string")
    actor = _choice(ctx, "actor", raw["actor"], ACTORS, optional=False)
    step_type = _validate_step_type(ctx, actor, raw.get("step_type"))
    text = raw.get("text", "")
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise ctx.error("text", f"must be a string, got {type(text).__name__}")
    observations = raw.get("observations") or []
    if not isinstance(observations, list):
        raise ctx.error("observations", "must be a list of strings")
    observations = ["" if o is None else (o if isinstance(o, str) else json.dumps(o)) for o in observations]
    logprobs, tokens = _parse_logprobs(ctx, raw.get("token_logprobs"), raw.get("tokens"))
    hidden = raw.get("hidden")
    if hidden is not None and (not isinstance(hidden, list) or not all(isinstance(h, (int, float)) for h in hidden)):
        raise ctx.error("hidden", "must be a list of numbers or null")
    turn_index = raw.get("turn_index")
    if turn_index is not None and (not isinstance(turn_index, int) or isinstance(turn_index, bool)):
        raise ctx.error("turn_index", f"must be an integer, got {turn_index!r}")
    unknown = sorted(set(raw) - _STEP_KEYS)
    if unknown:
        ctx.warn(None, f"unknown step keys {unknown} kept in SessionStep.extra")
    return SessionStep(
        step_id=raw["step_id"],
        actor=actor,
        step_type=step_type,
        text=text,
        tool_calls=_parse_tool_calls(ctx, raw.get("tool_calls")),
        observations=observations,
        token_logprobs=logprobs,
        tokens=tokens,
        hidden=hidden,
        turn_index=turn_index,
        timestamp=raw.get("timestamp"),
        verifier=_parse_sub(ctx, "verifier", raw.get("verifier"), VerifierOutput),
        auq=_parse_sub(ctx, "auq", raw.get("auq"), AUQOutput),
        tracer=_parse_sub(ctx, "tracer", raw.get("tracer"), TracerOutput),
        p_t=_probability(ctx, "p_t", raw.get("p_t")),
        extra={k: raw[k] for k in unknown},
    )


def parse_session_header(raw: dict, path: str = "<memory>", line: int | None = None) -> Session:
    ctx = _Ctx(path, line)
    version = raw.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ctx.error("format_version", f"is {version!r}; this version of mlx-sdm reads format {FORMAT_VERSION}")
    sid = raw.get("session_id")
    if not isinstance(sid, str) or not sid:
        raise ctx.error("session_id", "is missing or not a non-empty string")
    horizon = raw.get("horizon")
    if horizon is not None and (not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1):
        raise ctx.error("horizon", f"must be a positive integer or null, got {horizon!r}")
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ctx.error("metadata", "must be an object")
    unknown = sorted(set(raw) - _SESSION_KEYS)
    if unknown:
        ctx.warn(None, f"unknown session keys {unknown} kept in Session.metadata")
        metadata = {**metadata, **{k: raw[k] for k in unknown}}
    return Session(
        session_id=sid,
        outcome=_choice(ctx, "outcome", raw.get("outcome"), OUTCOMES),
        termination=_choice(ctx, "termination", raw.get("termination"), TERMINATIONS),
        horizon=horizon,
        pi=_probability(ctx, "pi", raw.get("pi")),
        model=raw.get("model"),
        created_at=raw.get("created_at"),
        metadata=metadata,
        provenance=_provenance(ctx, raw.get("provenance")),
    )


def _provenance(ctx: Any, raw: Any) -> Provenance | None:
    if raw is None:
        return None
    try:
        return Provenance.from_dict(raw, "provenance")
    except ValueError as exc:
        raise ctx.error("provenance", f"{exc}; fix or remove the field (sessions without it read as provenance unknown)") from None


def validate_session(session: Session, path: str, line: int | None) -> None:
    ctx = _Ctx(path, line)
    seen: set[str] = set()
    for step in session.steps:
        if step.step_id in seen:
            raise ctx.error("step_id", f"duplicate step_id {step.step_id!r} in session {session.session_id!r}")
        seen.add(step.step_id)
    if session.outcome is not None and session.outcome not in OUTCOMES:
        raise ctx.error("outcome", f"must be one of {OUTCOMES} or null, got {session.outcome!r}")
    if session.termination == "censored" and session.horizon is not None:
        n_agent = len(session.agent_steps())
        if n_agent > session.horizon:
            raise ctx.error("horizon", f"censored session {session.session_id!r} has {n_agent} agent steps, more than its horizon {session.horizon}")


def read_sessions_jsonl(path: str | os.PathLike) -> list[Session]:
    """Read every session of a session JSONL file (format: the docstring of ``mlx_sdm.monitor.session_file.writer``)."""
    path_str = str(path)
    sessions: list[Session] = []
    by_id: dict[str, Session] = {}
    header_line: dict[str, int] = {}
    for lineno, raw in iter_jsonl_objects(
            path, missing="no such file; export sessions with the chat store or pass a session JSONL"):
        kind = raw.get("record")
        if kind == "session":
            session = parse_session_header(raw, path_str, lineno)
            if session.session_id in by_id:
                raise DataError(f"session {session.session_id!r} appears twice (first at line {header_line[session.session_id]})",
                                path=path_str, line=lineno, field="session_id")
            by_id[session.session_id] = session
            header_line[session.session_id] = lineno
            sessions.append(session)
        elif kind == "step":
            sid = raw.get("session_id")
            if sid is None and sessions:
                session = sessions[-1]
            elif sid in by_id:
                session = by_id[sid]
            else:
                raise DataError(f"step refers to session {sid!r}, which has no preceding session record",
                                path=path_str, line=lineno, field="session_id")
            step = parse_step(raw, path_str, lineno)
            if any(s.step_id == step.step_id for s in session.steps):
                raise DataError(f"duplicate step_id {step.step_id!r} in session {session.session_id!r}",
                                path=path_str, line=lineno, field="step_id")
            session.steps.append(step)
        else:
            raise DataError(f"must be 'session' or 'step', got {kind!r}", path=path_str, line=lineno, field="record")
    for session in sessions:
        validate_session(session, path_str, header_line[session.session_id])
    return sessions
