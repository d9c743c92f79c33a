"""The LoRA stage's training throughput beside mlx-lm's own, on the same rows, model, rank and batch, in one run.

Both sides train the embedded SmolLM2-135M-Instruct (float32) with LoRA rank 8 on its last 8 blocks, batch 4,
Adam 2e-4, on the same BBC-topic training rows rendered with the task's system prompt, masked to the answer:

- ``mlx_lm.lora``: the command itself (``python -m mlx_lm lora --train``) on the model exported as an mlx-lm
  folder, the rows as its chat JSONL, ``--mask-prompt``; its own printed throughput;
- ``mlx-sdm``: ``usecases/lora_training.train_one_epoch`` (mlx-lm's ``train`` with the answer-position loss).

Both processes use the same BLAS (OpenBLAS, preloaded as ``import mlx_sdm`` does; ``--reference-blas`` also
times a plain ``mlx_lm.lora``, which on Linux runs on the mlx[cpu] wheel's reference BLAS). The figure compared
is training rows per second over the same number of steps, taken from wall-clock time
inside each process after a warm-up (mlx-lm's trainer prints tokens/s over answer tokens, and it counts one more
target per row than ours: rows/s is the figure both sides mean the same by). Rounds alternate (mlx-lm, ours,
mlx-lm, ours) so a busy machine slows both alike. Not a test: it prints a table and the ratio.

    .venv/bin/python scripts/bench/lora_throughput.py --steps 30 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlx_sdm  # noqa: F401  (the fast BLAS before mlx)

ROOT = Path(__file__).resolve().parents[2]
MLX_LM_TIMING = re.compile(r"TIMING rows=(\d+) seconds=([0-9.]+)")


def rows_for(count: int):
    from mlx_sdm.network.tasks.registry import load_tasks
    from mlx_sdm.usecases.lora_training import LoraRow

    task = load_tasks(["bbc_topic"])[0]
    items = task.split("pool", size=count)
    return [LoraRow(i.id, task.name, i.prompt, task.answer_format.completion(i.gold), task.system) for i in items]


def export_model(folder: Path) -> Path:
    """The embedded SmolLM2 as an mlx-lm model folder (what ``mlx_lm.lora --model`` reads)."""
    from mlx_lm.utils import save_config, save_model

    from mlx_sdm.lm.loading import load_model

    if (folder / "config.json").is_file():
        return folder
    lm = load_model()
    save_model(folder, lm.model, donate_model=False)
    save_config(dict(vars(lm.model.args)), config_path=folder / "config.json")
    lm.tokenizer.save_pretrained(folder)
    return folder


MLX_LM_RUNNER = r'''
import sys, time, types
if PRELOAD:
    import mlx_sdm.blas  # OpenBLAS before MLX, as `import mlx_sdm` does: the same BLAS as our side
    mlx_sdm.blas.preload()
import mlx_lm.lora as lora
from mlx_lm.tuner import trainer
real_train = trainer.train
def timed_train(model, optimizer, train_dataset, val_dataset=None, args=None, **kw):
    warm = {"n": 0, "start": None}
    inner = kw.get("iterate_batches", trainer.iterate_batches)
    def counted(*a, **k):
        for batch in inner(*a, **k):
            warm["n"] += 1
            if warm["n"] == WARMUP + 1:
                warm["start"] = time.perf_counter()
            yield batch
    kw["iterate_batches"] = counted
    real_train(model, optimizer, train_dataset, val_dataset, args, **kw)
    steps = warm["n"] - WARMUP - 1
    print(f"TIMING rows={steps * args.batch_size} seconds={time.perf_counter() - warm['start']:.3f}", flush=True)
lora.train = timed_train
sys.argv = ["mlx_lm.lora"] + sys.argv[1:]
lora.main()
'''


def run_mlx_lm(model: Path, rows, steps: int, warmup: int, work: Path, *, fast_blas: bool = True) -> tuple[int, float]:
    data = work / "data"
    data.mkdir(exist_ok=True)
    lines = "".join(json.dumps({"messages": r.messages()}) + "\n" for r in rows)
    (data / "train.jsonl").write_text(lines)
    (data / "valid.jsonl").write_text(lines)
    config = work / "lora.yaml"
    config.write_text("lora_parameters:\n  rank: 8\n  scale: 20.0\n  dropout: 0.0\n")
    code = MLX_LM_RUNNER.replace("WARMUP", str(warmup)).replace("PRELOAD", str(fast_blas))
    out = subprocess.run([sys.executable, "-c", code, "--model", str(model), "--train", "--data", str(data),
                          "--iters", str(steps + warmup + 1), "--batch-size", "4", "--num-layers", "8",
                          "--learning-rate", "2e-4", "--mask-prompt", "--steps-per-eval", "100000",
                          "--val-batches", "1", "--steps-per-report", "10", "--adapter-path", str(work / "adapters"),
                          "--save-every", "100000", "-c", str(config)],
                         capture_output=True, text=True, cwd=work)
    found = MLX_LM_TIMING.search(out.stdout)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"mlx_lm.lora failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return int(found.group(1)), float(found.group(2))


def run_ours(rows, steps: int, warmup: int) -> tuple[int, float]:
    """Our LoRA stage's epoch function over the same rows, timed the same way (after ``warmup`` steps)."""
    import mlx.optimizers as optim
    from mlx_lm.tuner.trainer import TrainingArgs, train

    from mlx_sdm.lm.adapters import LoraSettings, add_lora_layers
    from mlx_sdm.lm.loading import load_model
    from mlx_sdm.usecases.lora_training import answer_batches, answer_loss, chat_dataset

    lm = load_model()
    dataset = chat_dataset(rows, lm.tokenizer, lm.max_context, {})
    lm.model.freeze()
    add_lora_layers(lm.model, LoraSettings(8, 8))
    state = {"n": 0, "start": 0.0}

    def counted(*a, **k):
        for batch in answer_batches(*a, **k):
            state["n"] += 1
            if state["n"] == warmup + 1:
                state["start"] = time.perf_counter()
            yield batch

    args = TrainingArgs(batch_size=4, iters=steps + warmup + 1, steps_per_report=10, steps_per_eval=100000,
                        steps_per_save=100000, adapter_file=tempfile.mktemp(suffix=".safetensors"))
    train(lm.model, optim.Adam(learning_rate=2e-4), dataset, None, args, loss=answer_loss, iterate_batches=counted)
    return (state["n"] - warmup - 1) * 4, time.perf_counter() - state["start"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per side and round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows", type=int, default=240)
    parser.add_argument("--export", default=str(ROOT / "build" / "smollm2-mlx"), help="where the mlx-lm folder goes")
    parser.add_argument("--reference-blas", action="store_true", help="also time mlx_lm.lora without OpenBLAS")
    a = parser.parse_args()
    rows = rows_for(a.rows)
    model = export_model(Path(a.export))
    results = {"mlx_lm.lora": [], "mlx-sdm": []}
    with tempfile.TemporaryDirectory() as work:
        for round_ in range(a.rounds):
            n, s = run_mlx_lm(model, rows, a.steps, a.warmup, Path(work))
            results["mlx_lm.lora"].append(n / s)
            n, s = subprocess_ours(a.steps, a.warmup, a.rows)
            results["mlx-sdm"].append(n / s)
            print(f"round {round_ + 1}: mlx_lm.lora {results['mlx_lm.lora'][-1]:.2f} rows/s, "
                  f"mlx-sdm {results['mlx-sdm'][-1]:.2f} rows/s", flush=True)
        if a.reference_blas:
            n, s = run_mlx_lm(model, rows, a.steps, a.warmup, Path(work), fast_blas=False)
            print(f"mlx_lm.lora on the wheel's reference BLAS: {n / s:.2f} rows/s")
    theirs, ours = (sum(v) / len(v) for v in (results["mlx_lm.lora"], results["mlx-sdm"]))
    print("\n| side | training rows/s (mean of rounds) |\n|---|---|")
    print(f"| mlx_lm.lora (its own command, --mask-prompt) | {theirs:.2f} |\n| mlx-sdm finetune's LoRA stage | {ours:.2f} |")
    print(f"\nratio mlx-sdm / mlx_lm.lora: {ours / theirs:.2f}x  ({a.rounds} rounds of {a.steps} steps, batch 4, rank 8, "
          f"last 8 blocks, SmolLM2-135M float32, {a.rows} BBC rows)")


def subprocess_ours(steps: int, warmup: int, rows: int) -> tuple[int, float]:
    """Ours in a fresh process too, so both sides start alike (a model load, a cold allocator)."""
    code = (f"import runpy; b = runpy.run_path({str(Path(__file__).resolve())!r}); "
            f"n, s = b['run_ours'](b['rows_for']({rows}), {steps}, {warmup}); print(f'TIMING rows={{n}} seconds={{s:.3f}}')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    found = MLX_LM_TIMING.search(out.stdout)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"our side failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return int(found.group(1)), float(found.group(2))


if __name__ == "__main__":
    main()
