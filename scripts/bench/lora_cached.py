"""The LoRA stage with the frozen blocks run once per row (``usecases/lora_cached.py``) beside today's path
(mlx-lm's ``train`` on the whole model), on the same rows, model, rank, batch and seeds, in one process.

The embedded SmolLM2-135M-Instruct (float32, 30 blocks), LoRA rank 8 on the last 8, batch 4, Adam 2e-4, on
BBC-topic training rows rendered with the task's system prompt (``lora_throughput.rows_for``). Each side has its
own copy of the model, LoRA layers (the same seeded start) and Adam; the epochs alternate (old 1, new 1, old 2,
new 2, ...) so a busy machine slows both alike. The figure is training rows per second of each epoch (wall clock
of ``train_one_epoch``, its compile included); the new side's one-off forward through the frozen blocks is timed
apart and also spread over the epochs. Both sides' last-report losses are printed: they must agree (the same
batches, the same loss; tests/test_lora_cached.py checks it on a tiny model). ``--mlx-lm-steps N`` also times
``mlx_lm.lora`` itself for N steps on the same rows (``lora_throughput.run_mlx_lm``). Not a test.

    .venv/bin/python scripts/bench/lora_cached.py --rows 64 --epochs 2
"""

from __future__ import annotations

import argparse
import runpy
import tempfile
import time
from pathlib import Path

import mlx_sdm  # noqa: F401  (the fast BLAS before mlx)

_THROUGHPUT = runpy.run_path(str(Path(__file__).with_name("lora_throughput.py")))  # its rows, its mlx_lm.lora runner
rows_for, run_mlx_lm, export_model, ROOT = (_THROUGHPUT[k] for k in ("rows_for", "run_mlx_lm", "export_model", "ROOT"))


def side(rows, cached: bool, work: Path):
    """A fresh model with rank-8 LoRA layers on its last 8 blocks (seeded as the LoRA stage seeds them), its Adam,
    and (new side) the frozen-block cache."""
    import mlx.core as mx
    import mlx.optimizers as optim

    from mlx_sdm.lm.adapters import LoraSettings, add_lora_layers
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.usecases.lora_cached import FrozenCache
    from mlx_sdm.usecases.lora_training import chat_dataset

    lm = load_model(None)
    dataset = chat_dataset(rows, lm.tokenizer, lm.max_context, {})
    lm.model.freeze()
    mx.random.seed(8)
    add_lora_layers(lm.model, LoraSettings(8, 8))
    cache = FrozenCache(lm.model, dataset, 8, work, print) if cached else None
    return lm.model, dataset, optim.Adam(learning_rate=2e-4), cache


def main() -> None:
    from mlx_sdm.usecases.lora_training import LoraPlan, train_one_epoch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--mlx-lm-steps", type=int, default=0, help="also time mlx_lm.lora for N steps (0: not)")
    parser.add_argument("--export", default=str(ROOT / "build" / "smollm2-mlx"))
    a = parser.parse_args()
    rows = rows_for(a.rows)
    plan = LoraPlan(batch_size=4, num_layers=8)
    with tempfile.TemporaryDirectory() as work:
        sides = {"old": side(rows, False, Path(work)), "new": side(rows, True, Path(work))}
        started = time.perf_counter()
        sides["new"][3].get()
        build = time.perf_counter() - started
        rates: dict[str, list[float]] = {"old": [], "new": []}
        for epoch in range(1, a.epochs + 1):
            for name, (model, dataset, optimizer, cache) in sides.items():
                model.train()
                started = time.perf_counter()
                reports = train_one_epoch(model, optimizer, dataset, plan, 1000 + epoch, Path(work), show=False,
                                          cache=cache)
                seconds = time.perf_counter() - started
                rates[name].append(len(dataset) / seconds)
                print(f"epoch {epoch} {name}: {seconds:.1f} s, {rates[name][-1]:.2f} rows/s, last loss "
                      f"{reports.loss:.5f}", flush=True)
        sides["new"][3].close()
        theirs = None
        if a.mlx_lm_steps:
            n, s = run_mlx_lm(export_model(Path(a.export)), rows, a.mlx_lm_steps, 1, Path(work))
            theirs = n / s
    old, new = (sum(v) / len(v) for v in (rates["old"], rates["new"]))
    spread = a.rows * a.epochs / (a.rows * a.epochs / new + build)
    print("\n| path | training rows/s (mean of epochs) |\n|---|---|")
    print(f"| today's: mlx-lm `train`, every block every step | {old:.2f} |")
    print(f"| frozen blocks once per row (epochs only) | {new:.2f} |")
    print(f"| the same, its {build:.0f} s cache build spread over the {a.epochs} epochs | {spread:.2f} |")
    if theirs is not None:
        print(f"| mlx_lm.lora --mask-prompt ({a.mlx_lm_steps} steps) | {theirs:.2f} |")
    print(f"\nspeed-up: {new / old:.2f}x per epoch, {spread / old:.2f}x with the build ({a.rows} BBC rows, "
          f"{a.epochs} epochs, batch 4, rank 8, last 8 of 30 blocks, SmolLM2-135M float32)")


if __name__ == "__main__":
    main()
