#!/usr/bin/env python
"""Benchmark SDM-network fine-tuning on SmolLM2, in one run:

1. the time of one SDM training step (Eq. 32 over the joint 2|V| heads, with the regulariser)
   against a plain cross-entropy step on the same trainable positive head and the same batch of
   target tokens (both ``mx.compile``-d Adam steps, alternated, median of --steps); ratio, goal ≤ 1.5;
2. the peak memory (``mx.get_peak_memory``) of one SmolLM2 fine-tuning epoch: token targets,
   the epoch's steps and, with the shipped verifier present, Alg. 4's regeneration of the training
   and calibration documents with verification.

    .venv/bin/python scripts/bench/bench_finetune.py                      # 50-token batches, 30 steps each
    .venv/bin/python scripts/bench/bench_finetune.py --epoch-docs 40 --steps 50
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import mlx_sdm  # noqa: F401

DEFAULT_STEPS = 30
DEFAULT_BATCH = 50
DEFAULT_EPOCH_DOCS = 24
DEFAULT_TASK = ROOT.parent / "shared" / "data" / "bigbench" / "fact_checker_fever" / "task.json"
GIB = 1024**3


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="timed steps of each kind")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help="target tokens per step (paper: 50)")
    p.add_argument("--epoch-docs", type=int, default=DEFAULT_EPOCH_DOCS, help="training and calibration documents in the measured epoch")
    p.add_argument("--task", type=Path, default=DEFAULT_TASK)
    p.add_argument("--quantized", action="store_true", help="4-bit frozen base")
    return p


def cross_entropy_batch_loss(heads, hidden, targets, q, d, beta, global_count, weight=None, group=None):
    """Plain next-token cross-entropy on the positive head only (targets unshifted)."""
    import mlx.core as mx

    from mlx_sdm.network.loss import cross_entropy_next_token_loss

    z_pos = hidden.astype(mx.float32) @ heads.positive.T
    loss = cross_entropy_next_token_loss(z_pos, targets - heads.vocab_size)
    return loss, loss


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import mlx.core as mx
    import numpy as np

    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.network.data import build_token_targets, from_verification_documents
    from mlx_sdm.network.encoding import encode_task
    from mlx_sdm.network.heads import VocabularyHeads
    from mlx_sdm.network.trainer import FinetuneArgs, train_positive_head
    from mlx_sdm.network.finetune_scoring import LMScorer
    from mlx_sdm.network.finetune_steps import build_train_step, make_optimizer, sdm_batch_loss
    from mlx_sdm.network.verifier import DEFAULT_VERIFIER_DIR, DocumentVerifier

    lm = load_model(quantized=args.quantized)
    documents = from_verification_documents(encode_task(args.task), lm.tokenizer)
    verified = [d for d in documents if d.label == 1]
    vocab = lm.vocab_size
    tokens = build_token_targets(lm, verified[: max(8, args.batch_size // 4)], vocab)
    rows = np.arange(args.batch_size) % len(tokens)
    hidden = mx.array(tokens.hidden[rows])
    targets = mx.array(tokens.targets[rows])
    rng = np.random.default_rng(0)
    q = mx.array(rng.integers(1, 20, size=args.batch_size).astype(np.float32))
    d = mx.array(rng.uniform(0.3, 1.0, size=args.batch_size).astype(np.float32))
    beta, count = mx.array(0.05), mx.array(float(args.batch_size))

    steps = {}
    for name, loss in (("sdm", sdm_batch_loss), ("cross_entropy", cross_entropy_batch_loss)):
        heads = VocabularyHeads.from_model(lm.model)
        optimizer = make_optimizer(1e-5)
        steps[name] = (heads, optimizer, build_train_step(heads, optimizer, loss, compile=True))
    times = {name: [] for name in steps}
    for i in range(args.steps + 3):  # 3 warm-up steps each (compilation), alternated for fairness
        for name, (heads, optimizer, step) in steps.items():
            tic = time.perf_counter()
            out = step(hidden, targets, q, d, beta, count)
            mx.eval(out, heads.state, optimizer.state)
            if i >= 3:
                times[name].append(time.perf_counter() - tic)
    sdm_ms = statistics.median(times["sdm"]) * 1e3
    ce_ms = statistics.median(times["cross_entropy"]) * 1e3
    print(f"SmolLM2 (|V| = {vocab}, hidden {lm.hidden_size}), {args.batch_size}-token batch, median of {args.steps} steps:")
    print(f"  SDM step (Eq. 32 + regulariser, 2|V| joint): {sdm_ms:.2f} ms")
    print(f"  cross-entropy step (positive head only):     {ce_ms:.2f} ms")
    print(f"  ratio SDM / CE: {sdm_ms / ce_ms:.2f} (goal <= 1.5)")
    del steps

    verifier_dir = DEFAULT_VERIFIER_DIR
    n = args.epoch_docs
    train, calibration = documents[:n], documents[n : 2 * n]
    mx.clear_cache()
    mx.reset_peak_memory()
    tic = time.perf_counter()
    if (verifier_dir / "verifier.json").is_file():
        verifier = DocumentVerifier.load(verifier_dir, expect_fingerprint=lm.fingerprint)
        scorer = LMScorer.from_verifier(lm, verifier)
        what = f"Alg. 4 epoch with generation + verification ({n} training, {n} calibration documents)"
    else:

        class Untested:
            def __call__(self, docs, head, purpose="calibration"):
                from mlx_sdm.network.finetune_scoring import Outcome

                return [Outcome(prediction=1, admitted=False, q=1.0, d=1.0, correct=False) for _ in docs]

        scorer = Untested()
        what = f"training epoch only ({n} documents; no verifier at {verifier_dir}, so no generation)"
    result = train_positive_head(lm, train, calibration, scorer, FinetuneArgs(epochs=1, batch_size=args.batch_size, progress=False))
    elapsed = time.perf_counter() - tic
    print(f"peak memory of one SmolLM2 {what}: {mx.get_peak_memory() / GIB:.2f} GiB in {elapsed:.0f} s "
          f"(base {'4-bit' if args.quantized else 'float32'}; {result.history[-1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
