"""Log real monitored sessions with the embedded SmolLM2 on BIG-bench fact_checker (FEVER) claims,
then score them with ``mlx-sdm eval-monitor``.

Each session has two turns: the user asks whether a claim is true or false; the model answers; the
user asks "Are you sure?"; the model answers again. Every agent step carries its token log-probs,
AUQ fields (P(True) read from the option logits with the answer's KV cache reused), TRACER fields
(all-MiniLM-L6-v2 embedder) and the forecast p_t = P_t. Success = the final answer's True/False
matches the FEVER label (an answer naming neither is a failure).

    .venv/bin/python scripts/monitor_real_sessions.py --n 40 --out runs/fever_sessions.jsonl
    .venv/bin/python -m mlx_sdm eval-monitor runs/fever_sessions.jsonl --plot runs/fever_monitors.png
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import mlx_sdm  # noqa: F401  (BLAS preload first)
import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache
from mlx_sdm.progress import progress_bar

from mlx_sdm.lm.loading import load_model
from mlx_sdm.monitor.online.auq import AUQMonitor
from mlx_sdm.monitor.online.auq_config import EstimatorConfig
from mlx_sdm.monitor.online.auq_escalation import SessionStatus, UncertaintyError, UncertaintyPolicy
from mlx_sdm.monitor.online.embedders import make_embedder
from mlx_sdm.monitor.online.p_true import PTrueScorer
from mlx_sdm.monitor.online.tracer import TracerMonitor
from mlx_sdm.monitor.session_file.records import Session, SessionStep
from mlx_sdm.monitor.session_file.writer import write_sessions_jsonl

DEFAULT_TASK = str(Path(__file__).resolve().parents[2] / "shared" / "data" / "bigbench" / "fact_checker_fever" / "task.json")
DEFAULT_N = 40
DEFAULT_MAX_TOKENS = 24
INSTRUCTION = " Answer True or False first, then give one short reason."
FOLLOW_UP = "Are you sure? Answer True or False again, then give one short reason."


def parse_label(text: str) -> str | None:
    """First of true/false in the answer; 'not true' / 'incorrect' count as false."""
    low = text.lower()
    m = re.search(r"\b(not true|false|incorrect|true|correct)\b", low)
    if not m:
        return None
    return "true" if m.group(1) in ("true", "correct") else "false"


def generate(lm, messages, max_tokens):
    tok = lm.tokenizer
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    cache = make_prompt_cache(lm.model)
    ids, lps = [], []
    eos = set(tok.eos_token_ids)
    for y, logprobs in generate_step(mx.array(prompt), lm.model, max_tokens=max_tokens, prompt_cache=cache):
        ids.append(int(y))
        lps.append(float(logprobs[y].item()))
        if y in eos:
            break
    shown = [i for i in ids if i not in eos]
    text = tok.decode(shown)
    pieces = [tok.decode([i]) for i in shown]
    return text, pieces, lps[: len(shown)], cache, list(prompt) + ids


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default=DEFAULT_TASK)
    parser.add_argument("--n", type=int, default=DEFAULT_N, help="sessions (claims, balanced true/false)")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    parser.add_argument("--embedder", default="minilm", choices=("minilm", "none"))
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    examples = json.loads(Path(args.task).read_text())["examples"]
    trues = [e for e in examples if e["target_scores"].get("true") == 1]
    falses = [e for e in examples if e["target_scores"].get("false") == 1]
    chosen = [x for pair in zip(trues, falses) for x in pair][: args.n]
    lm = load_model(None)
    embedder = make_embedder(args.embedder)
    monitor = AUQMonitor(UncertaintyPolicy(), EstimatorConfig())
    sessions = []
    start = time.perf_counter()
    for ex in progress_bar(chosen, desc="sessions", file=sys.stderr):
        sid = f"fever-{ex['id']}"
        label = "true" if ex["target_scores"].get("true") == 1 else "false"
        tracer = TracerMonitor(embedder=embedder, session_id=sid)
        monitor.start(sid)
        messages = [{"role": "user", "content": ex["input"] + INSTRUCTION}]
        steps: list[SessionStep] = []
        final_label = None
        for turn in range(2):
            if turn == 1:
                messages.append({"role": "user", "content": FOLLOW_UP})
            user = SessionStep(f"user_{len(steps)}", "user", None, messages[-1]["content"], turn_index=turn)
            user.tracer = tracer.observe(user)
            steps.append(user)
            text, pieces, lps, cache, cached = generate(lm, messages, args.max_tokens)
            messages.append({"role": "assistant", "content": text})
            step = SessionStep(f"llm_{len(steps)}", "agent", "llm_call", text, token_logprobs=lps, tokens=pieces, turn_index=turn)
            scorer = PTrueScorer(lm.model, lm.tokenizer, messages, cache=cache, cached_tokens=cached)
            try:
                auq = monitor.score_step(sid, "llm_call", text, p_true=scorer, step_id=step.step_id)
            except UncertaintyError:
                auq = monitor.belief(sid).step_uncertainties[-1]
            # offline logging: record the escalation but keep the scripted session going
            monitor.belief(sid).status = SessionStatus.RUNNING
            step.auq = auq.to_format()
            step.tracer = tracer.observe(step)
            step.p_t = auq.propagated_confidence
            steps.append(step)
            final_label = parse_label(text)
        outcome = "success" if final_label == label else "failure"
        sessions.append(Session(sid, steps=steps, outcome=outcome, termination="complete", model=lm.name,
                                metadata={"task": "bigbench/fact_checker_fever", "label": label, "final_answer": final_label}))
    write_sessions_jsonl(args.out, sessions)
    ok = sum(s.outcome == "success" for s in sessions)
    print(f"wrote {len(sessions)} sessions to {args.out} ({ok} successes) in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
