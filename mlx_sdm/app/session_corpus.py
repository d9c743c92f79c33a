"""A corpus of real multi-turn local chat sessions with known success, for the monitors.

Each session is a short conversation with a local model: the user asks one to three things from the
task suite (``mlx_sdm.network.tasks``; tasks mixed within a session the way a user asks several
things), sometimes follows up with "Are you sure?" (the model answers the same item again) or "And
this one?" (another item of the same task). Every answer is asked for in the task's JSON, so it is
labelled against the gold with the task's own parser.

Every agent step records its token log-probs, its AUQ belief (P(True) from the option logits with
the answer's KV cache reused, propagated P_t), its TRACER features and the verifier's verdict on that
turn's (question, answer) document. Ground truth: a turn succeeds when its final answer to the item
equals the gold; a session succeeds when every item the user asked was answered correctly
(``metadata["turns"]`` keeps the per-item labels and verdicts).

The plan of every session is drawn from the seed up front (:func:`plan_sessions`), so a run is
deterministic; the output JSONL is append-only, one session block written and fsynced at a time, and
:func:`run_corpus` skips the sessions already there (a block torn by a kill is cut off first).
``scripts/session_corpus.py`` is the command line over it.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

DEFAULT_SESSIONS = 360
DEFAULT_SEED = 0
DEFAULT_MAX_TOKENS = 24  # one JSON answer unit, e.g. {"topic": "business"} is 7 tokens
DEFAULT_SPLIT = "held_out"
ITEMS_PER_SESSION = (1, 2, 3)
ITEMS_PER_SESSION_P = (0.6, 0.3, 0.1)
P_ARE_YOU_SURE = 0.3  # after an answer, ask "Are you sure?" (same item, answered again)
P_AND_THIS_ONE = 0.35  # the next item is of the same task, asked as "And this one?"
ARE_YOU_SURE = "Are you sure? Reply with the JSON again."
AND_THIS_ONE = "And this one?"
CORPUS_SYSTEM_PROMPT = ("You are a helpful AI assistant. When a message asks for JSON, reply with only that JSON "
                        "object and nothing else.")


@dataclass(frozen=True)
class PlannedTurn:
    kind: str  # "ask" | "sure" | "next"
    task: str
    item_index: int  # index into the task's split


@dataclass
class SessionPlan:
    session_id: str
    turns: list[PlannedTurn] = field(default_factory=list)


def plan_sessions(task_sizes: dict[str, int], n_sessions: int, seed: int) -> list[SessionPlan]:
    """Deterministic plan: per session 1-3 items from shuffled task queues, follow-ups drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    names = sorted(task_sizes)
    queues = {t: list(rng.permutation(task_sizes[t])) for t in names}
    cursor = {t: 0 for t in names}

    def take(task: str) -> int:
        idx = queues[task][cursor[task] % len(queues[task])]
        cursor[task] += 1
        return int(idx)

    plans = []
    for s in range(n_sessions):
        plan = SessionPlan(f"corpus-{seed}-{s:04d}")
        n_items = int(rng.choice(ITEMS_PER_SESSION, p=ITEMS_PER_SESSION_P))
        task = None
        for i in range(n_items):
            if i > 0 and rng.random() < P_AND_THIS_ONE:
                plan.turns.append(PlannedTurn("next", task, take(task)))
            else:
                task = names[int(rng.integers(len(names)))]
                plan.turns.append(PlannedTurn("ask", task, take(task)))
            if rng.random() < P_ARE_YOU_SURE:
                plan.turns.append(PlannedTurn("sure", task, plan.turns[-1].item_index))
        plans.append(plan)
    return plans


# ---------------------------------------------------------------------------------------- resume


def completed_sessions(path: Path) -> set[str]:
    """Ids of the complete session blocks in ``path``; a torn tail (kill mid-write) is cut off."""
    if not path.exists():
        return set()
    done: set[str] = set()
    good_end = 0
    offset = 0
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


def append_session(path: Path, session) -> None:
    from mlx_sdm.monitor.session_file import session_to_lines

    block = "".join(line + "\n" for line in session_to_lines(session))
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())


# ------------------------------------------------------------------------------------ generation


@dataclass
class CorpusComponents:
    lm: Any  # mlx_sdm.lm.loading.LoadedModel
    verifier: Any | None  # mlx_sdm.network.verifier.DocumentVerifier
    embedder: Any | None
    tasks: dict[str, Any]  # name -> mlx_sdm.network.tasks.Task
    split: str = DEFAULT_SPLIT
    max_tokens: int = DEFAULT_MAX_TOKENS
    system_prompt: str = CORPUS_SYSTEM_PROMPT


def generate_answer(lm, messages: list[dict], max_tokens: int):
    """Greedy answer with its token log-probs; returns (text, pieces, logprobs, cache, cached token ids)."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache

    tok = lm.tokenizer
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    cache = make_prompt_cache(lm.model)
    ids, lps = [], []
    eos = set(tok.eos_token_ids)
    for y, logprobs in generate_step(mx.array(prompt), lm.model, max_tokens=max_tokens, prompt_cache=cache):
        ids.append(int(y))
        lps.append(float(logprobs[y].item()))
        if int(y) in eos:
            break
        if _closes_json(tok.decode([i for i in ids if i not in eos])):
            break  # the JSON answer unit is complete (the verifier's json_close delimiter)
    shown = [i for i in ids if i not in eos]
    text = tok.decode(shown)
    return text, [tok.decode([i]) for i in shown], lps[: len(shown)], cache, list(prompt) + ids


def _closes_json(text: str) -> bool:
    start = text.find("{")
    return start >= 0 and text.find("}", start + 1) >= 0


def verdict_of(components: CorpusComponents, prompt: str, answer: str) -> dict | None:
    """The verifier's verdict on this turn's document (question, answer), with its status word."""
    if components.verifier is None:
        return None
    if not answer.strip():  # nothing to verify: the verifier cannot vouch for an empty answer
        return {"p_lower": None, "q": None, "d": None, "admitted": False, "prediction": None, "reason": "empty_answer",
                "status": "not_verified"}
    from mlx_sdm.network.verdict import status_of

    route = components.verifier.route(prompt)  # a multi-task verifier: the task's system prompt and name
    v = components.verifier.verify_text(components.lm, prompt, answer, system=route.system, explain=0)
    status = status_of(v, routed=route.task is not None).value  # the one rule (network/verdict.py)
    return {"p_lower": v.p_lower, "q": int(v.q), "d": float(v.d), "admitted": bool(v.admitted),
            "prediction": int(v.prediction), "reason": v.reason, "status": status, "task": route.task}


def run_session(plan: SessionPlan, components: CorpusComponents, items: dict[str, list],
                on_step: Callable[[int], None] | None = None):
    """Run one planned session; returns a ``format.Session`` with per-item labels in its metadata."""
    from mlx_sdm.monitor.auq import AUQMonitor, EstimatorConfig, SessionStatus, UncertaintyError, UncertaintyPolicy
    from mlx_sdm.monitor.p_true import PTrueScorer
    from mlx_sdm.monitor.tracer import TracerMonitor
    from mlx_sdm.monitor.session_file import Session, SessionStep, VerifierOutput

    lm, sid = components.lm, plan.session_id
    auq = AUQMonitor(UncertaintyPolicy(), EstimatorConfig())
    auq.start(sid)
    tracer = TracerMonitor(embedder=components.embedder, session_id=sid)
    messages = [{"role": "system", "content": components.system_prompt}]
    steps, turns = [], []
    for turn_index, planned in enumerate(plan.turns):
        task, item = components.tasks[planned.task], items[planned.task][planned.item_index]
        user_text = {"ask": item.prompt, "next": f"{AND_THIS_ONE} {item.prompt}", "sure": ARE_YOU_SURE}[planned.kind]
        # the chat's system prompt follows the task being asked (SmolLM2-135M answers in a task's JSON only
        # when the system prompt shows that JSON); earlier turns stay in the conversation
        messages[0] = {"role": "system", "content": task.system or components.system_prompt}
        messages.append({"role": "user", "content": user_text})
        user = SessionStep(f"user_{len(steps)}", "user", None, user_text, turn_index=turn_index)
        user.tracer = tracer.observe(user)
        steps.append(user)
        text, pieces, lps, cache, cached = generate_answer(lm, messages, components.max_tokens)
        messages.append({"role": "assistant", "content": text})
        step = SessionStep(f"llm_{len(steps)}", "agent", "llm_call", text, token_logprobs=lps, tokens=pieces,
                           turn_index=turn_index)
        verdict = verdict_of(components, item.prompt, text)
        if verdict is not None:
            step.verifier = VerifierOutput(verdict["p_lower"], verdict["admitted"], verdict["reason"], verdict["prediction"],
                                           verdict.get("task"))
        try:
            belief = auq.score_step(sid, "llm_call", text, p_true=PTrueScorer(lm.model, lm.tokenizer, messages, cache=cache,
                                                                             cached_tokens=cached), step_id=step.step_id)
        except UncertaintyError:  # offline logging: record the escalation, keep the scripted session going
            belief = auq.belief(sid).step_uncertainties[-1]
        auq.belief(sid).status = SessionStatus.RUNNING
        step.auq = belief.to_format()
        step.tracer = tracer.observe(step)
        step.p_t = belief.propagated_confidence
        steps.append(step)
        label = task.label_answer(text, item.gold)
        turns.append({"step_id": step.step_id, "kind": planned.kind, "task": planned.task, "item": item.id,
                      "gold": item.gold, "answer": label.answer, "well_formed": label.well_formed,
                      "correct": label.correct, "verdict": verdict})
        if on_step is not None:
            on_step(len(steps))
    final = {}  # item -> correctness of its last answer (a follow-up answer replaces the first)
    for t in turns:
        final[(t["task"], t["item"])] = t["correct"]
    success = all(final.values())
    return Session(sid, steps=steps, outcome="success" if success else "failure", termination="complete",
                   model=lm.name, metadata={"n_steps": len(steps), "items": len(final),
                                            "items_correct": int(sum(final.values())), "turns": turns})


def run_corpus(out: Path, components: CorpusComponents, n_sessions: int, seed: int, *, progress: bool = True,
               on_step: Callable[[int], None] | None = None, shard: tuple[int, int] = (0, 1)) -> int:
    """Generate the planned sessions not yet in ``out``; returns how many were written now.
    ``shard = (i, n)`` keeps the plans whose index is i mod n (parallel workers, merged in plan order)."""
    from tqdm import tqdm

    items = {name: task.split(components.split) for name, task in components.tasks.items()}
    plans = plan_sessions({n: len(v) for n, v in items.items()}, n_sessions, seed)[shard[0]::shard[1]]
    done = completed_sessions(out)
    todo = [p for p in plans if p.session_id not in done]
    out.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    bar = tqdm(total=len(plans), initial=len(plans) - len(todo), desc="sessions", unit="session",
               file=sys.stderr, disable=not progress)
    for plan in todo:
        append_session(out, run_session(plan, components, items, on_step))
        written += 1
        bar.update(1)
    bar.close()
    return written
