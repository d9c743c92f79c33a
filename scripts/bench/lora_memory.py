"""Peak memory of ``mlx-sdm finetune --task``'s LoRA stage on a Phi-3.5-mini-shaped model with a 4-bit base
(QLoRA: ``--quantized``), measured on 1 and 2 layers and projected to the full 32, plus the head stage's figure
from ``phi3_memory.py`` (Alg. 4 on the same base): the memory of LoRA + head on a laptop.

A random mlx-lm ``phi3`` model with Phi-3.5-mini's width and vocabulary is quantized to 4 bits (group 64) and
frozen; mlx-lm's ``linear_to_lora_layers`` puts rank-8 LoRA layers on every block (the full run puts them on
the last 8 of 32); one Adam step of the LoRA stage's loss (``answer_loss``: the vocabulary head read at the
answer's positions only) on a batch of 4 rows of ``--row-tokens`` tokens with ``--answer-tokens`` answer tokens.

    resident: the quantized base + the LoRA layers after loading
    step    : the peak of the second step (Adam's state held)

Projection for the full model: the 1-layer step peak, plus 31 × the per-layer slope of the resident memory,
plus 7 × the per-layer slope of what a LoRA block adds to the step (activations kept for its backward pass):
the 24 blocks below the LoRA ones hold no gradient, so their activations are freed as the forward pass goes.

    .venv/bin/python scripts/bench/lora_memory.py                  # depths 1 and 2, rows of 256 tokens
"""

from __future__ import annotations

import argparse
import gc
import json
import runpy
import sys
from pathlib import Path

import mlx_sdm  # noqa: F401  (BLAS before mlx)

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from mlx_sdm.lm.adapters import LoraSettings, add_lora_layers  # noqa: E402
from mlx_sdm.usecases.lora_training import answer_loss  # noqa: E402

_PHI3 = runpy.run_path(str(Path(__file__).with_name("phi3_memory.py")))  # its Phi-3.5 shape and builder
GIB, PHI35, PHI35_LAYERS, build = _PHI3["GIB"], _PHI3["PHI35"], _PHI3["PHI35_LAYERS"], _PHI3["build"]

LORA_LAYERS = 8


def measure(num_layers: int, row_tokens: int, answer_tokens: int, bits: int) -> dict:
    gc.collect()
    mx.clear_cache()
    mx.random.seed(0)
    model = build(num_layers)
    nn.quantize(model, group_size=64, bits=bits)
    model.freeze()
    add_lora_layers(model, LoraSettings(8, num_layers))
    mx.eval(model.parameters())
    gc.collect()
    mx.clear_cache()
    out = {"layers": num_layers, "resident_gib": mx.get_active_memory() / GIB}
    rng = np.random.default_rng(0)
    batch = mx.array(rng.integers(0, PHI35["vocab_size"], size=(4, row_tokens + 1)), dtype=mx.int32)
    index = mx.array(np.tile(np.arange(row_tokens - answer_tokens, row_tokens), (4, 1)), dtype=mx.int32)
    mask = mx.ones((4, answer_tokens), dtype=mx.bool_)
    optimizer = optim.Adam(learning_rate=2e-4)
    step = nn.value_and_grad(model, answer_loss)
    model.train()
    for i in range(2):
        mx.reset_peak_memory()
        (loss, _), grads = step(model, batch, index, mask)
        optimizer.update(model, grads)
        mx.eval(loss, model.parameters(), optimizer.state)
    out["step_gib"] = mx.get_peak_memory() / GIB
    del model, optimizer, step
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row-tokens", type=int, default=256, help="tokens per training row (default 256)")
    parser.add_argument("--answer-tokens", type=int, default=12, help="answer tokens per row (default 12)")
    parser.add_argument("--bits", type=int, default=4)
    parser.add_argument("--head-peak-gib", type=float, default=5.71,
                        help="the head stage's peak for the same base (phi3_memory.py; docs/benchmarks.md: 5.71)")
    args = parser.parse_args(argv)
    one, two = (measure(n, args.row_tokens, args.answer_tokens, args.bits) for n in (1, 2))
    for row in (one, two):
        print(f"layers {row['layers']}: resident {row['resident_gib']:.3f} GiB, LoRA step {row['step_gib']:.3f} GiB",
              flush=True)
    resident_slope = two["resident_gib"] - one["resident_gib"]
    step_slope = two["step_gib"] - one["step_gib"]
    activation_slope = max(0.0, step_slope - resident_slope)
    full = one["step_gib"] + (PHI35_LAYERS - 1) * resident_slope + (LORA_LAYERS - 1) * activation_slope
    print(f"per layer: resident {resident_slope * 1024:.0f} MiB, a LoRA block's step {activation_slope * 1024:.0f} MiB")
    print(f"projected for {PHI35_LAYERS} layers ({LORA_LAYERS} with LoRA), {args.bits}-bit base, 4 rows of "
          f"{args.row_tokens} tokens: LoRA step peak {full:.2f} GiB; the head stage {args.head_peak_gib:.2f} GiB; "
          f"the run's peak {max(full, args.head_peak_gib):.2f} GiB (the stages run one after the other)")
    print(json.dumps({"rows": [one, two], "lora_peak_gib": full, "head_peak_gib": args.head_peak_gib}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
