"""Peak memory and time of `mlx-sdm generate` against the prompt's length (docs/benchmarks.md, "A long paste").

Each length runs in its own process (a fresh peak): a prompt of about N tokens of BBC News article text
(mlx_sdm/network/tasks/data/bbc_topic.jsonl.gz, the articles one after another) goes through the
command's own ``main`` with the default model, verifier and head, P(True) and the monitor as ``generate``
runs them; the child reports its peak resident memory (``resource.getrusage``, ru_maxrss) and the
command's own figures (prompt tokens read, tokens left out, time to the first token, the whole turn).

    .venv/bin/python scripts/bench/bench_memory.py                       # 1k 2k 4k 8k 16k 30k tokens
    .venv/bin/python scripts/bench/bench_memory.py --tokens 1000 8000 --max-tokens 16
    .venv/bin/python scripts/bench/bench_memory.py --attention 512 1024 2048 4096   # where the time goes
    .venv/bin/python scripts/bench/bench_memory.py --prefill-steps 256 512 1024 2048  # 2,048 tokens, by chunk size

``--attention L ...``: one SmolLM2 layer's attention (9 query heads, 3 key/value heads, 64 dims, causal) over
L positions in one piece, ``mx.fast.scaled_dot_product_attention``, ms (mean of 2 after a warm-up).
``--prefill-steps S ...``: SmolLM2's 30 layers reading ``--prefill-tokens`` (2,048) tokens S at a time through a
KV cache, s (mlx-lm's prefill of the answer read 2,048 at a time before; ``PREFILL_STEP_TOKENS`` is 512 now).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_TOKENS = (1000, 2000, 4000, 8000, 16000, 30000)
DEFAULT_MAX_TOKENS = 16
DEFAULT_TIMEOUT_S = 900
ARTICLES = Path(__file__).resolve().parents[2] / "mlx_sdm" / "network" / "tasks" / "data" / "bbc_topic.jsonl.gz"
INSTRUCTION = "Summarize the following news articles in one sentence.\n\n"


def paste_of(tokenizer, tokens: int) -> str:
    """BBC article texts, one after another, cut at the word where the message reaches ``tokens`` tokens."""
    texts = [json.loads(line)["input"] for line in gzip.open(ARTICLES, "rt", encoding="utf-8")]
    words: list[str] = []
    for text in texts * 4:
        words += text.split() + ["\n\n"]
        if len(words) > tokens * 1.2:  # SmolLM2 reads these articles at ~1.3 tokens a word: enough to cut from
            break
    lo, hi = 1, len(words)
    while lo < hi:  # the fewest words whose message has at least ``tokens`` tokens
        mid = (lo + hi) // 2
        if len(tokenizer.encode(INSTRUCTION + " ".join(words[:mid]))) >= tokens:
            hi = mid
        else:
            lo = mid + 1
    return INSTRUCTION + " ".join(words[:lo])


def child(tokens: int, max_tokens: int) -> dict:
    import mlx_sdm  # noqa: F401  (BLAS preload before MLX)
    from mlx_sdm.commands.generate import main
    from mlx_sdm.lm.loading import load_model

    prompt = paste_of(load_model().tokenizer, tokens)
    out = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = main([prompt, "--max-tokens", str(max_tokens), "--json"])
    wall = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
    payload = json.loads(out.getvalue()) if rc == 0 else {}
    generation = payload.get("generation", {})
    return {"tokens": tokens, "chars": len(prompt), "rc": rc, "peak_gib": peak_kb / 2**20, "command_s": wall,
            "prompt_tokens": generation.get("prompt_tokens"), "left_out": generation.get("truncated_prompt_tokens"),
            "first_token_s": generation.get("first_token_s"), "note": payload.get("prompt_note")}


def attention_ms(length: int, repeats: int = 2) -> float:
    import mlx_sdm  # noqa: F401  (BLAS preload before MLX)
    import mlx.core as mx

    q = mx.random.normal((1, 9, length, 64))
    k, v = mx.random.normal((1, 3, length, 64)), mx.random.normal((1, 3, length, 64))
    mx.eval(mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask="causal"))
    started = time.perf_counter()
    for _ in range(repeats):
        mx.eval(mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask="causal"))
    return 1000 * (time.perf_counter() - started) / repeats


def prefill_s(step: int, tokens: int = 2048) -> float:
    import mlx_sdm  # noqa: F401  (BLAS preload before MLX)
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.lm.prefill import prefill_hidden

    lm = load_model()
    ids = lm.tokenizer.encode(paste_of(lm.tokenizer, tokens))[:tokens]
    started = time.perf_counter()
    prefill_hidden(lm.model, ids, step=step)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, nargs="+", default=list(DEFAULT_TOKENS), help="prompt lengths in tokens")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="answer length (default %(default)s)")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S, help="seconds per length (default %(default)s)")
    p.add_argument("--attention", type=int, nargs="+", help="time one layer's attention over these lengths instead")
    p.add_argument("--prefill-steps", type=int, nargs="+", help="time reading a prompt at these chunk sizes instead")
    p.add_argument("--prefill-tokens", type=int, default=2048, help="the prompt's length for --prefill-steps (default %(default)s)")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.attention:
        for n in args.attention:
            print(f"attention over {n:,} positions, one layer: {attention_ms(n):.0f} ms", flush=True)
        return 0
    if args.prefill_steps:
        for step in args.prefill_steps:
            print(f"{args.prefill_tokens:,} tokens read {step} at a time: {prefill_s(step, args.prefill_tokens):.1f} s",
                  flush=True)
        return 0
    if args.child is not None:
        print(json.dumps(child(args.child, args.max_tokens)))
        return 0
    print("| message tokens | characters | prompt tokens read | left out | first token (s) | whole command (s) | peak RSS (GiB) |")
    print("|---|---|---|---|---|---|---|")
    for n in args.tokens:
        command = [sys.executable, __file__, "--child", str(n), "--max-tokens", str(args.max_tokens)]
        started = time.perf_counter()
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"| {n:,} | | | | | > {args.timeout} (stopped) | |", flush=True)
            continue
        lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
        if run.returncode != 0 or not lines:
            print(f"| {n:,} | failed (exit {run.returncode}, {time.perf_counter() - started:.0f} s): "
                  f"{run.stderr.strip().splitlines()[-1:] } | | | | | |", flush=True)
            continue
        r = json.loads(lines[-1])
        print(f"| {n:,} | {r['chars']:,} | {r['prompt_tokens']:,} | {r['left_out']:,} | {r['first_token_s']:.1f} | "
              f"{r['command_s']:.1f} | {r['peak_gib']:.2f} |", flush=True)
        if r.get("note"):
            print(f"<!-- {n}: {r['note']} -->", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
