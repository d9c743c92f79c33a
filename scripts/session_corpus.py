#!/usr/bin/env python
"""Generate the session corpus of the monitors with the product as it ships (corpus.py beside it):
multi-turn chats that mix everyday questions, task questions and follow-ups, each turn through the
chat's own turn (routing, head, verifier, monitors, measured escalation), each answer labelled
(corpus_plan.py), each session stamped with the provenance of the product that made it.

Resumable (kill it and run the same command again) and sharded: run shards side by side, then merge.

    mlx-sdm's venv/bin/python scripts/session_corpus.py --out runs/corpus-0.jsonl --shard 0/4     # 4 workers:
    ...                                                  --out runs/corpus-3.jsonl --shard 3/4     #  one per core
    python scripts/session_corpus.py --merge runs/corpus-*.jsonl --out runs/corpus.jsonl
    gzip -9 -k runs/corpus.jsonl && mlx-sdm eval-monitor runs/corpus.jsonl.gz --plot monitors.png
    python scripts/session_corpus.py --out /tmp/t.jsonl --limit 2    # time two sessions on this machine
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from corpus import DEFAULT_MAX_TOKENS, DEFAULT_SESSIONS, DEFAULT_SPLIT, merge_shards, run_corpus, setup_from


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="session JSONL to append to (resumable), or the merged file")
    p.add_argument("--merge", type=Path, nargs="+", help="merge these shard files into --out (plan order) and stop")
    p.add_argument("--sessions", type=int, default=DEFAULT_SESSIONS, help="sessions in the plan (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="plan seed (default %(default)s)")
    p.add_argument("--shard", default="0/1", help="I/N: every N-th planned session from the I-th (default %(default)s)")
    p.add_argument("--limit", type=int, default=None, help="stop after this many new sessions (timing runs)")
    p.add_argument("--tasks", default=None, help="comma-separated task names (default: every shipped task)")
    p.add_argument("--split", default=DEFAULT_SPLIT, help="task split the items come from (default %(default)s)")
    p.add_argument("--model", default=None, help="model (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--verifier", default=None, help="verifier folder (default: the shipped one); 'none' = off")
    p.add_argument("--head", default=None, help="SDM-network head folder (default: the shipped one); 'none' = off")
    p.add_argument("--embedder", default="minilm", choices=("minilm", "hidden", "none"), help="TRACER embedder")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="tokens per answer (default %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.merge:
        print(f"merged {merge_shards(args.merge, args.out)} sessions into {args.out}", file=sys.stderr)
        return 0
    from mlx_sdm.usecases.loading import load_components
    from mlx_sdm.network.tasks.registry import load_tasks

    components = load_components(args.model, verifier=args.verifier, head=args.head, embedder=args.embedder)
    tasks = {t.name: t for t in load_tasks(args.tasks.split(",") if args.tasks else None)}
    setup = setup_from(components, tasks, max_tokens=args.max_tokens, split=args.split)
    print(f"made by: {setup.provenance.describe()}", file=sys.stderr)
    i, n = (int(x) for x in args.shard.split("/"))
    start = time.perf_counter()

    def report(session, seconds: float) -> None:
        turns = session.metadata["turns"]
        print(f"{session.session_id}: {len(turns)} turns, {session.outcome}, {seconds:.1f} s "
              f"({seconds / len(turns):.1f} s a turn)", file=sys.stderr, flush=True)

    written = run_corpus(args.out, setup, args.sessions, args.seed, shard=(i, n), limit=args.limit, on_session=report)
    print(f"wrote {written} sessions to {args.out} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
