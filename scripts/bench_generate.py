#!/usr/bin/env python
"""Benchmark: plain mlx_lm.stream_generate vs mlx-sdm generation with same-pass feature capture and
a final verdict. One process, the same model, prompt and length (end of turn is masked so both
produce exactly --tokens tokens); runs alternate to share the machine's load fairly.

Prints decode tokens/s of each, their ratio (goal >= 0.95), and the share of the answer's total
time spent on verification (features + verdict; goal <= 3%).

    .venv/bin/python scripts/bench_generate.py                 # SmolLM2 float32, 128 tokens, 3 rounds
    .venv/bin/python scripts/bench_generate.py --tokens 128 --rounds 5 --quantized
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import mlx_sdm  # noqa: E402,F401

DEFAULT_TOKENS = 128
DEFAULT_ROUNDS = 3
DEFAULT_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS)
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--model", default=None, help="default: the embedded SmolLM2")
    p.add_argument("--quantized", action="store_true")
    p.add_argument("--verifier", default=None, help="default: weights/smollm2-fever")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import mlx.core as mx
    from mlx_lm.generate import stream_generate

    from mlx_sdm.lm.generation import GenerationConfig, generate_with_features, render_prompt
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.verifier import DEFAULT_VERIFIER_DIR, DocumentVerifier

    lm = load_model(args.model, quantized=args.quantized)
    verifier = DocumentVerifier.load(args.verifier or DEFAULT_VERIFIER_DIR, expect_fingerprint=lm.fingerprint)
    eos = sorted(lm.tokenizer.eos_token_ids)

    eos_mask = mx.zeros((lm.vocab_size,)).at[mx.array(eos)].add(-1e9)

    def no_eos(tokens, logits):  # both paths generate exactly --tokens tokens
        return logits + eos_mask

    ids = render_prompt(lm.tokenizer, args.prompt, verifier.recipe.system)

    def plain() -> tuple[float, float]:
        tic = time.perf_counter()
        first = None
        n = 0
        for response in stream_generate(lm.model, lm.tokenizer, mx.array(ids), max_tokens=args.tokens,
                                        logits_processors=[no_eos]):
            if first is None:
                first = time.perf_counter()
            n = response.generation_tokens
        end = time.perf_counter()
        return n / (end - first), end - tic

    def ours() -> tuple[float, float, float]:
        tic = time.perf_counter()
        config = GenerationConfig(max_tokens=args.tokens, delimiter=verifier.recipe.delimiter, stop_at_delimiter=False,
                                  extra={"logits_processors": [no_eos]})
        result = generate_with_features(lm, ids, config)
        t_verify = time.perf_counter()
        verifier.verify_features(result.features, explain=3)
        end = time.perf_counter()
        verification = result.feature_time_s + (end - t_verify)
        return len(result.tokens) / result.generation_time_s, end - tic, verification

    plain()
    ours()  # warm-up (kernels, caches)
    plain_tps, ours_tps, shares, plain_total, ours_total = [], [], [], [], []
    for r in range(args.rounds):
        tps, total = plain()
        plain_tps.append(tps)
        plain_total.append(total)
        tps, total, verification = ours()
        ours_tps.append(tps)
        ours_total.append(total)
        shares.append(verification / total)
        print(f"round {r + 1}: plain {plain_tps[-1]:.1f} tok/s, ours {ours_tps[-1]:.1f} tok/s, "
              f"verification {verification * 1000:.1f} ms = {shares[-1]:.2%} of {total:.2f} s", flush=True)
    p, o = statistics.median(plain_tps), statistics.median(ours_tps)
    print(f"model {lm.name} ({'4-bit' if lm.quantized else 'float32'}), prompt {len(ids)} tokens, answer {args.tokens} tokens, "
          f"{args.rounds} rounds (medians)")
    print(f"plain mlx_lm.stream_generate: {p:.1f} tokens/s; with feature capture: {o:.1f} tokens/s; ratio {o / p:.3f} (goal >= 0.95)")
    print(f"end-to-end time ratio (plain / ours incl. verdict): {statistics.median(plain_total) / statistics.median(ours_total):.3f}")
    print(f"verification share of a {args.tokens}-token answer: {statistics.median(shares):.2%} (goal <= 3%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
