"""Peak memory of SDM-network fine-tuning on a Phi-3.5-mini-shaped model, per layer, and the
laptop estimate for the full 32-layer model with a 4-bit frozen base.

A randomly initialised mlx-lm ``phi3`` model with Phi-3.5-mini's width and vocabulary (hidden 3072,
vocabulary 32064, intermediate 8192, 32 heads) is built with 1, 2, ... layers; its base is
quantized to 4 bits (group 64) and frozen; the three vocabulary heads (docs/method.md § 16: reference/negative
frozen, positive trainable, float32) are cloned from the float ``lm_head`` before quantization.
For each depth the script records (``mx.reset_peak_memory`` / ``mx.get_peak_memory``):

  resident: memory held after loading (quantized base + float32 heads); the transient peak of
            building the random float model before quantizing is not counted, since a laptop loads
            an already quantized checkpoint
  prefill : peak while force-decoding one prompt of --prompt-tokens tokens
  step    : peak of an Adam step of Eq. 32 on --batch-tokens target tokens (the training peak)

The per-layer cost is the slope between depths; the full-model estimate is the shallowest
model's peak plus (32 − its depth) × the largest slope.

    python scripts/bench/phi3_memory.py                     # depths 1 and 2, 128-token prompt, 50 tokens
    python scripts/bench/phi3_memory.py --layers 1 2 3 --prompt-tokens 500
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time


import mlx_sdm  # noqa: F401,E402  (BLAS before mlx)

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models import phi3

from mlx_sdm.network.heads import VocabularyHeads
from mlx_sdm.network.finetune_steps import build_train_step, make_optimizer

PHI35 = dict(hidden_size=3072, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=32, vocab_size=32064)
PHI35_LAYERS = 32
GIB = 1024**3


def build(num_layers: int) -> nn.Module:
    args = phi3.ModelArgs(model_type="phi3", num_hidden_layers=num_layers, rms_norm_eps=1e-5, tie_word_embeddings=False, **PHI35)
    model = phi3.Model(args)
    model.eval()
    return model


def measure(num_layers: int, prompt_tokens: int, batch_tokens: int, bits: int) -> dict:
    gc.collect()
    mx.clear_cache()
    mx.reset_peak_memory()
    mx.random.seed(0)
    model = build(num_layers)
    heads = VocabularyHeads.from_model(model)
    mx.eval(heads.parameters())
    nn.quantize(model, group_size=64, bits=bits)
    model.freeze()
    mx.eval(model.parameters())
    gc.collect()
    mx.clear_cache()
    out = {"layers": num_layers, "resident_gib": mx.get_active_memory() / GIB, "build_peak_gib": mx.get_peak_memory() / GIB}

    mx.reset_peak_memory()
    rng = np.random.default_rng(0)
    tic = time.perf_counter()
    ids = mx.array(rng.integers(0, PHI35["vocab_size"], size=(1, prompt_tokens)), dtype=mx.int32)
    hidden = model.model(ids)[0].astype(mx.float32)
    mx.eval(hidden)
    out["prefill_gib"] = mx.get_peak_memory() / GIB
    out["prefill_s"] = time.perf_counter() - tic

    mx.reset_peak_memory()
    rows = mx.array(rng.integers(0, prompt_tokens, size=batch_tokens))
    targets = mx.array(rng.integers(0, PHI35["vocab_size"], size=batch_tokens) + PHI35["vocab_size"])
    q = mx.array(rng.integers(0, 10, size=batch_tokens).astype(np.float32))
    d = mx.array(rng.uniform(0.1, 1.0, size=batch_tokens).astype(np.float32))
    step = build_train_step(heads, make_optimizer(1e-5), compile=False)
    tic = time.perf_counter()
    for _ in range(2):  # the second step holds Adam's state from the first
        loss, _ = step(hidden[rows], targets, q, d, mx.array(0.05), mx.array(float(batch_tokens)))
        mx.eval(loss, heads.state)
    out["step_gib"] = mx.get_peak_memory() / GIB
    out["step_s"] = (time.perf_counter() - tic) / 2
    out["active_after_gib"] = mx.get_active_memory() / GIB
    del model, heads, hidden, step
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2], help="depths to measure (default 1 2)")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="prompt length force-decoded (default 128)")
    parser.add_argument("--batch-tokens", type=int, default=50, help="target tokens per step (default 50, the paper's)")
    parser.add_argument("--bits", type=int, default=4, help="bits of the frozen base (default 4)")
    args = parser.parse_args(argv)
    if len(args.layers) < 2:
        parser.error("give at least two depths to measure the per-layer slope")
    rows = []
    for n in sorted(args.layers):
        row = measure(n, args.prompt_tokens, args.batch_tokens, args.bits)
        rows.append(row)
        print(
            f"layers {n}: resident {row['resident_gib']:.3f} GiB, prefill({args.prompt_tokens}) {row['prefill_gib']:.3f} GiB "
            f"[{row['prefill_s']:.1f} s], step({args.batch_tokens}) {row['step_gib']:.3f} GiB [{row['step_s']:.2f} s]",
            flush=True,
        )
    first, last = rows[0], rows[-1]
    span = last["layers"] - first["layers"]
    per_layer = {k: (last[k] - first[k]) / span for k in ("resident_gib", "prefill_gib", "step_gib")}
    peak_first = max(first["resident_gib"], first["prefill_gib"], first["step_gib"])
    slope = max(per_layer.values())
    estimate = peak_first + (PHI35_LAYERS - first["layers"]) * slope
    summary = {
        "bits": args.bits,
        "prompt_tokens": args.prompt_tokens,
        "batch_tokens": args.batch_tokens,
        "rows": rows,
        "per_layer_gib": per_layer,
        "full_model_layers": PHI35_LAYERS,
        "full_model_peak_estimate_gib": estimate,
    }
    print("per layer: " + ", ".join(f"{k} {v * 1024:.1f} MiB" for k, v in per_layer.items()))
    print(f"estimate for {PHI35_LAYERS} layers, {args.bits}-bit frozen base: peak {estimate:.2f} GiB")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
