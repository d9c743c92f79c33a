"""Import tau2-bench ``Results`` JSON (docs/monitoring.md, tau2-bench import) as sessions.

A Results file has ``timestamp``, ``info``, ``tasks`` and ``simulations[]``; each simulation has
``id, task_id, trial, termination_reason, reward_info{reward}, messages[]`` with messages of role
``system / assistant / user / tool`` (``content``, ``tool_calls[{id, name, arguments}]``; tool
messages carry ``id`` and ``requestor``).

Mapping (docs/monitoring.md, TRACER steps): assistant messages are agent steps (``tool_call`` if they call tools, else
``llm_call``), user messages are user steps; tool messages are attached as observations to the
message that requested them; system messages are not steps. Outcome: success iff
``reward == 1.0`` (docs/monitoring.md, TRACER evaluation). Termination: ``user_stop`` / ``agent_stop`` -> complete,
``max_steps`` -> censored (administrative budget), ``too_many_errors`` -> error.

The released reference runs carry no log-probs, so TRACER runs on situational signals only; a
message with a ``logprobs`` list of ``{token, logprob}`` (the TRACER fork's field) is used.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mlx_sdm.errors import DataError
from mlx_sdm.monitor.session_file.records import Session, SessionStep, ToolCall

TERMINATION_MAP = {
    "user_stop": "complete",
    "agent_stop": "complete",
    "max_steps": "censored",
    "too_many_errors": "error",
}


def is_tau2_results(raw: Any) -> bool:
    return isinstance(raw, dict) and isinstance(raw.get("simulations"), list)


def _logprobs(msg: dict) -> tuple[list[float] | None, list[str] | None]:
    lp = msg.get("logprobs")
    if not isinstance(lp, list) or not lp:
        return None, None
    tokens, values = [], []
    for item in lp:
        if isinstance(item, dict) and "logprob" in item:
            tokens.append(str(item.get("token", "")))
            values.append(float(item["logprob"]))
    return (values, tokens) if values else (None, None)


def simulation_to_session(sim: dict, path: str, index: int, model: str | None = None) -> Session:
    where = f"simulations[{index}]"
    if not isinstance(sim, dict) or not isinstance(sim.get("messages"), list):
        raise DataError("each simulation needs a 'messages' list", path=path, field=where)
    reward = (sim.get("reward_info") or {}).get("reward")
    outcome = None if reward is None else ("success" if float(reward) == 1.0 else "failure")
    termination = TERMINATION_MAP.get(sim.get("termination_reason"))
    sid = str(sim.get("id") or f"{sim.get('task_id')}-{sim.get('trial')}-{index}")
    steps: list[SessionStep] = []
    by_call_id: dict[str, SessionStep] = {}
    last_requestor: dict[str, SessionStep] = {}
    for m_index, msg in enumerate(sim["messages"]):
        role = msg.get("role")
        if role == "system":
            continue
        if role == "tool":
            target = by_call_id.get(str(msg.get("id"))) or last_requestor.get(msg.get("requestor", "assistant"))
            if target is None:
                raise DataError(f"tool message with id {msg.get('id')!r} answers no earlier tool call",
                                path=path, field=f"{where}.messages[{m_index}]")
            target.observations.append(msg.get("content") or "")
            continue
        if role not in ("assistant", "user"):
            raise DataError(f"unknown role {role!r} (expected system, assistant, user or tool)",
                            path=path, field=f"{where}.messages[{m_index}].role")
        calls = []
        for c in msg.get("tool_calls") or []:
            calls.append(ToolCall(name=str(c.get("name")), arguments=c.get("arguments") or {}, id=c.get("id")))
        actor = "agent" if role == "assistant" else "user"
        step_type = None if actor == "user" else ("tool_call" if calls else "llm_call")
        prefix = "user" if actor == "user" else ("tool" if calls else "llm")
        logprobs, tokens = _logprobs(msg)
        step = SessionStep(step_id=f"{prefix}_{len(steps)}", actor=actor, step_type=step_type,
                           text=msg.get("content") or "", tool_calls=calls, token_logprobs=logprobs, tokens=tokens,
                           turn_index=msg.get("turn_idx"), timestamp=msg.get("timestamp"))
        steps.append(step)
        for c in calls:
            if c.id is not None:
                by_call_id[str(c.id)] = step
        if calls:
            last_requestor[role] = step
    return Session(session_id=sid, steps=steps, outcome=outcome, termination=termination, model=model,
                   created_at=sim.get("start_time"),
                   metadata={"source": "tau2-bench", "task_id": sim.get("task_id"), "trial": sim.get("trial"),
                             "termination_reason": sim.get("termination_reason"), "reward": reward})


def read_tau2_results(path: str | os.PathLike) -> list[Session]:
    path_str = str(path)
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError("no such file", path=path_str) from None
    except json.JSONDecodeError as exc:
        from mlx_sdm.jsonl import json_error_text

        raise DataError(f"not valid JSON ({json_error_text(exc)})", path=path_str, line=exc.lineno) from None
    if not is_tau2_results(raw):
        raise DataError("not a tau2-bench Results file (no 'simulations' list)", path=path_str, field="simulations")
    info = raw.get("info") or {}
    agent = info.get("agent_info") or {}
    model = agent.get("llm") if isinstance(agent, dict) else None
    return [simulation_to_session(sim, path_str, i, model) for i, sim in enumerate(raw["simulations"])]
