"""Generating the session corpus with the product as it ships.

Every turn goes through the chat's own turn, :class:`~mlx_sdm.turn.pipeline.TurnPipeline` with the
chat's session monitor (:class:`~mlx_sdm.turn.monitoring.SessionMonitor`) and the chat engine's turn
options (:class:`~mlx_sdm.executor.engine.EngineConfig`): the same routing of the verifier and head,
system prompt, verdict, AUQ / TRACER / fused forecast and measured escalation a user gets. (Two
differences, both to keep a scripted session going: a turn that pauses is followed by the next planned
message, as a user who moves on; and the model is not asked for a reflection on HIGH.) The components
are loaded as ``mlx-sdm chat`` loads them (:func:`mlx_sdm.usecases.loading.load_components`; the MiniLM
embedder by default).

The plan and the labels: :mod:`corpus_plan`. Each session record carries the
:class:`~mlx_sdm.monitor.session_file.provenance.Provenance` of the product that made it. The output JSONL is
append-only, one session block written and fsynced at a time; a rerun skips the sessions already there
(a block torn by a kill is cut off first), and ``shard = (i, n)`` keeps every n-th planned session from
the i-th, so shards run side by side and are merged in plan order (:func:`merge_shards`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from corpus_plan import EVERYDAY, EverydayPrompt, PlannedTurn, SessionPlan, label_turn, plan_sessions, \
    session_success, user_text
from mlx_sdm.monitor.session_file.provenance import Provenance, make_provenance
from mlx_sdm.monitor.session_file.records import Session, SessionStep, VerifierOutput
from mlx_sdm.monitor.session_file.writer import session_to_lines

DEFAULT_SESSIONS = 400
DEFAULT_MAX_TOKENS = 64
DEFAULT_SPLIT = "held_out"


@dataclass
class CorpusSetup:
    components: Any  # mlx_sdm.turn.pipeline.TurnComponents
    tasks: dict[str, Any]  # name -> mlx_sdm.network.tasks.Task
    everyday: list[EverydayPrompt]
    options: Any  # mlx_sdm.turn.pipeline.TurnOptions
    provenance: Provenance
    split: str = DEFAULT_SPLIT


def turn_options(max_tokens: int) -> Any:
    """The chat engine's turn options (one place), without the reflection on HIGH."""
    from mlx_sdm.executor.engine import EngineConfig

    return EngineConfig(max_tokens=max_tokens, generate_reflection=False).turn_options()


def setup_from(components: Any, tasks: dict[str, Any], *, max_tokens: int = DEFAULT_MAX_TOKENS,
               split: str = DEFAULT_SPLIT, everyday: list[EverydayPrompt] | None = None) -> CorpusSetup:
    from corpus_plan import everyday_prompts

    lm = components.lm
    provenance = make_provenance(model_name=lm.name, fingerprint=getattr(lm, "fingerprint", None),
                                 verifier_path=components.verifier_path, head_path=components.head_path,
                                 embedder=components.embedder, extra={"split": split, "max_tokens": max_tokens})
    return CorpusSetup(components, tasks, everyday if everyday is not None else everyday_prompts(),
                       turn_options(max_tokens), provenance, split)


# ------------------------------------------------------------------------------------------- one session


def _question(setup: CorpusSetup, items: dict[str, list], turn: PlannedTurn) -> tuple[str, dict[str, Any]]:
    """(prompt, what labels its answers) of the question a turn asks or follows up."""
    if turn.task == EVERYDAY:
        p = setup.everyday[turn.item_index]
        return p.prompt, {"check": p.check, "item": p.id, "gold": dict(p.check)}
    item = items[turn.task][turn.item_index]
    return item.prompt, {"task": setup.tasks[turn.task], "gold": item.gold, "item": item.id}


def _steps(outcome: Any, monitor: Any, text: str, n: int, turn_index: int) -> tuple[SessionStep, SessionStep]:
    """The user's and the answer's session-JSONL steps of one turn, from what the chat's turn produced."""
    user = SessionStep(f"user_{n}", "user", None, text, turn_index=turn_index, tracer=monitor.tracer.outputs[-2])
    reading, verdict = outcome.monitor, outcome.verdict
    auq = reading.auq.to_format() if reading.auq is not None else None
    agent = SessionStep(f"llm_{n + 1}", "agent", "llm_call", outcome.text, token_logprobs=list(outcome.logprobs),
                        tokens=list(outcome.tokens), turn_index=turn_index, auq=auq, tracer=monitor.tracer.outputs[-1],
                        p_t=reading.cumulative_confidence)
    if verdict is not None:
        v = verdict.verdict  # None: no estimator judgement (not one of the verifier's tasks, or an empty answer)
        agent.verifier = (VerifierOutput(v.p_lower, bool(v.admitted), v.reason, int(v.prediction), outcome.task)
                          if v is not None else VerifierOutput(None, False, verdict.reason, None, outcome.task))
    return user, agent


def _turn_record(step: SessionStep, planned: PlannedTurn, asked: dict, outcome: Any, label: Any) -> dict:
    verdict = outcome.verdict
    reading = outcome.monitor
    return {"step_id": step.step_id, "kind": planned.kind, "task": planned.task, "item": asked["item"],
            "gold": asked["gold"], "answer": label.answer, "well_formed": label.well_formed, "correct": label.correct,
            "why": label.why, "route": outcome.task,
            "verdict": None if verdict is None else {**verdict.to_dict(), "status": verdict.status.value,
                                                     "task": outcome.task},
            "action": reading.action.value, "fused_p": reading.fused_p,
            "degenerate": None if reading.degenerate is None else reading.degenerate.reason}


def run_session(plan: SessionPlan, setup: CorpusSetup, items: dict[str, list],
                on_step: Callable[[int], None] | None = None) -> Session:
    """One planned session through the chat's turn; a :class:`Session` with each answer's label."""
    from mlx_sdm.turn.monitoring import MonitorConfig, SessionMonitor
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnRequest

    components = setup.components
    pipeline = TurnPipeline(components)
    monitor = SessionMonitor(plan.session_id, MonitorConfig(), embedder=components.embedder)
    messages: list[dict] = []
    steps: list[SessionStep] = []
    turns: list[dict] = []
    kept: list = [None]  # the conversation's KV cache the next turn reuses (the pipeline hands it over)
    asked, asked_question = None, ""
    for turn_index, planned in enumerate(plan.turns):
        question, labelled_by = _question(setup, items, planned)
        if planned.kind in ("everyday", "task"):
            asked, asked_question = labelled_by, question
        text = user_text(planned, question)
        messages.append({"role": "user", "content": text})
        prefix, kept[0] = kept[0], None
        outcome = pipeline.run(TurnRequest(list(messages), setup.options), monitor=monitor, prefix=prefix,
                               keep_prefix=lambda cache: kept.__setitem__(0, cache))
        messages.append({"role": "assistant", "content": outcome.text})
        user, agent = _steps(outcome, monitor, text, len(steps), turn_index)
        steps += [user, agent]
        label = label_turn(planned, outcome.text, task=asked.get("task"), gold=asked["gold"], check=asked.get("check"),
                           question=asked_question)
        turns.append(_turn_record(agent, planned, asked, outcome, label))
        if on_step is not None:
            on_step(len(steps))
    return Session(plan.session_id, steps=steps, outcome="success" if session_success(turns) else "failure",
                   termination="complete", model=components.lm.name, provenance=setup.provenance,
                   metadata={"n_steps": len(steps), "turns": turns})


# ------------------------------------------------------------------------------------- resume and shards


def completed_sessions(path: Path) -> set[str]:
    """Ids of the complete session blocks in ``path``; a torn tail (kill mid-write) is cut off."""
    if not path.exists():
        return set()
    done: set[str] = set()
    good_end = offset = 0
    pending: tuple[str, int] | None = None  # (session id, steps still expected)
    with open(path, "rb") as handle:
        for raw in handle:
            offset += len(raw)
            try:
                row = json.loads(raw)
            except json.JSONDecodeError:
                break
            if not raw.endswith(b"\n"):
                break
            if row.get("record") == "session":
                pending = (row["session_id"], int(row["metadata"]["n_steps"]))
            elif pending is not None and row.get("session_id") == pending[0]:
                pending = (pending[0], pending[1] - 1)
            else:
                break
            if pending is not None and pending[1] == 0:
                done.add(pending[0])
                good_end, pending = offset, None
    if good_end != path.stat().st_size:
        with open(path, "r+b") as handle:
            handle.truncate(good_end)
            handle.flush()
            os.fsync(handle.fileno())
    return done


def append_session(path: Path, session: Session) -> None:
    block = "".join(line + "\n" for line in session_to_lines(session))
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())


def corpus_plans(setup: CorpusSetup, n_sessions: int, seed: int) -> tuple[list[SessionPlan], dict[str, list]]:
    items = {name: task.split(setup.split) for name, task in setup.tasks.items()}
    return plan_sessions({n: len(v) for n, v in items.items()}, len(setup.everyday), n_sessions, seed), items


def run_corpus(out: Path, setup: CorpusSetup, n_sessions: int, seed: int, *, shard: tuple[int, int] = (0, 1),
               limit: int | None = None, on_step: Callable[[int], None] | None = None,
               on_session: Callable[[Session, float], None] | None = None) -> int:
    """Generate this shard's planned sessions not yet in ``out`` (at most ``limit`` of them now);
    returns how many were written. ``on_session(session, seconds)`` after each."""
    plans, items = corpus_plans(setup, n_sessions, seed)
    done = completed_sessions(Path(out))
    todo = [p for p in plans[shard[0]::shard[1]] if p.session_id not in done][:limit]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    for plan in todo:
        started = time.perf_counter()
        session = run_session(plan, setup, items, on_step)
        append_session(Path(out), session)
        if on_session is not None:
            on_session(session, time.perf_counter() - started)
    return len(todo)


def merge_shards(shards: list[Path], out: Path) -> int:
    """The shards' complete sessions in plan order (session ids sort in plan order), written atomically."""
    from mlx_sdm.monitor.session_file.reader import read_sessions_jsonl
    from mlx_sdm.monitor.session_file.writer import write_sessions_jsonl

    sessions = []
    for shard in shards:
        completed_sessions(shard)  # cut a torn tail first
        sessions += read_sessions_jsonl(shard)
    sessions.sort(key=lambda s: s.session_id)
    write_sessions_jsonl(out, sessions)
    return len(sessions)
