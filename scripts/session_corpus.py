#!/usr/bin/env python
"""Generate a corpus of real multi-turn local chat sessions with known success, for the monitors.

Each session is a short conversation with the embedded model (SmolLM2-135M-Instruct, float32 on the
CPU by default): the user asks one to three things from the task suite (``mlx_sdm.network.tasks``:
topic, spam/ham, sentiment, sports, FEVER, StrategyQA, TruthfulQA; tasks mixed within a session the
way a user asks several things), sometimes follows up with "Are you sure?" (the model answers the
same item again) or "And this one?" (another item of the same task). Every answer is asked for in
the task's JSON, so it is labelled against the gold with the task's own parser.

Every agent step records its token log-probs, its AUQ belief (P(True) from the option logits with
the answer's KV cache reused, propagated P_t), its TRACER features (all-MiniLM-L6-v2 embedder by
default) and the verifier's verdict on that turn's (question, answer) document. Ground truth: a turn
succeeds when its final answer to the item equals the gold; a session succeeds when every item the
user asked was answered correctly (``metadata["turns"]`` keeps the per-item labels and verdicts).

The plan of every session (tasks, items, follow-ups) is drawn from ``--seed`` up front, so a run is
deterministic; the output JSONL is append-only, one session block written and fsynced at a time, and
a rerun skips the sessions already there (a block torn by a kill is cut off first): kill it any time
and run the same command again.

    nice -n 10 .venv/bin/python scripts/session_corpus.py --out runs/corpus.jsonl        # ~300 sessions
    gzip -9 -k runs/corpus.jsonl                                                         # ship it
    .venv/bin/python -m mlx_sdm eval-monitor runs/corpus.jsonl.gz
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from mlx_sdm.app.session_corpus import (DEFAULT_MAX_TOKENS, DEFAULT_SEED, DEFAULT_SESSIONS, DEFAULT_SPLIT,
                                        CorpusComponents, run_corpus)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="session JSONL to append to (resumable)")
    p.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS, help="sessions in the plan (default %(default)s)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="plan seed (default %(default)s)")
    p.add_argument("--tasks", default=None, help="comma-separated task names (default: every shipped task)")
    p.add_argument("--split", default=DEFAULT_SPLIT, help="task split the items come from (default %(default)s)")
    p.add_argument("--model", default=None, help="model (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--verifier", default=None, help="verifier folder (default: the model's default verifier); 'none' = off")
    p.add_argument("--embedder", default="minilm", choices=("minilm", "none"), help="TRACER sentence embedder")
    p.add_argument("--shard", default="0/1", help="I/N: generate every N-th planned session from the I-th (parallel workers)")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="tokens per answer (default %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.monitor.embedders import make_embedder
    from mlx_sdm.network.tasks import load_tasks
    from mlx_sdm.network.verifier import DEFAULT_VERIFIER_DIR, DocumentVerifier

    lm = load_model(args.model)
    verifier = None
    if args.verifier != "none":
        verifier = DocumentVerifier.load(args.verifier or DEFAULT_VERIFIER_DIR, expect_fingerprint=lm.fingerprint)
    tasks = {t.name: t for t in load_tasks(args.tasks.split(",") if args.tasks else None)}
    components = CorpusComponents(lm, verifier, make_embedder(args.embedder), tasks, split=args.split,
                                  max_tokens=args.max_tokens)
    start = time.perf_counter()
    i, n = (int(x) for x in args.shard.split("/"))
    written = run_corpus(args.out, components, args.sessions, args.seed, shard=(i, n))
    print(f"wrote {written} sessions to {args.out} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
