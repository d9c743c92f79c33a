"""``mlx-sdm finetune``: SDM-network fine-tuning of the positive vocabulary head (Alg. 4)."""

from __future__ import annotations

import argparse
import sys

from mlx_sdm.commands.arguments import CommandParser
from mlx_sdm.errors import MlxSdmError
from mlx_sdm.usecases.head_training import CONFIG_KEYS, DEFAULT_ADAPTER_PATH
from mlx_sdm.network.trainer import FinetuneArgs

#: The paper's values (docs/method.md § 15.4), as FinetuneArgs holds them.
DEFAULT_EPOCHS = FinetuneArgs.epochs
DEFAULT_BATCH_SIZE = FinetuneArgs.batch_size
DEFAULT_LEARNING_RATE = FinetuneArgs.learning_rate
DEFAULT_SEED = FinetuneArgs.seed

EPILOG = f"""
What it does (arXiv 2502.20167, Alg. 4): the LM's output head is cloned into a frozen negative
head and a trainable positive head. Documents whose answer is correct (label 1) teach the positive
head their answer tokens with the next-token SDM loss (Eq. 32): the joint 2|V| distribution is
sharpened by each document's Similarity q and Distance d from the verifier, and a regulariser
(Eqs. 29-31, beta rising 0 -> 0.1 in every epoch) keeps it near the original model. Before
training and after each epoch the model answers every calibration prompt; an answer counts when
the verifier admits it (y^=1, p_lower >= 0.95) and it is correct. The epoch with the most such
answers is kept - the untuned model's count is the bar to beat, so the result never admits fewer.

Config keys (YAML; mlx-lm lora_config.yaml names where the meaning is the same):
  {", ".join(CONFIG_KEYS)}
Command-line flags override the file. Data: a folder with train.jsonl + valid.jsonl (calibration),
rows {{"prompt", "completion", "label", "task_label"}} (+ "system", "id", "max_generation_tokens"),
or a BIG-bench task.json (encoded as in the paper; see --train-size/--calibration-size), or a verifier
recipe: the verifier's own pool halves (train_size / calibration_size per task, task_train_sizes /
task_calibration_sizes for single tasks). The shipped head's config is weights/smollm2-suite-head/finetune.yaml.

Output: ADAPTER_PATH/positive_head.safetensors + manifest.json (base model fingerprint, verifier,
data hash, epochs, best epoch, counts); a checkpoint after every epoch in ADAPTER_PATH.checkpoint/
(--resume continues a killed run from it with the same result).

examples:
  mlx-sdm finetune --config examples/finetune.yaml
  mlx-sdm finetune --config examples/finetune.yaml --epochs 2 --resume
  mlx-sdm finetune --config weights/smollm2-suite-head/finetune.yaml    # the shipped head (~29 min on 2 cores)
  mlx-sdm generate --head sdm-head "Was this claim true or false? ..."
  mlx.launch --backend ring --hosts mac1,mac2 -- mlx-sdm finetune --config finetune.yaml   # data parallel
"""


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="mlx-sdm finetune",
        description="Fine-tune the positive vocabulary head of an SDM network (verified generation).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", "-c", metavar="FILE.yaml", help="YAML file with the keys below; flags override it")
    p.add_argument("--model", help="'smollm2' (embedded, default), a local mlx-lm folder, a .gguf file or a hub id")
    p.add_argument("--quantized", action="store_true", default=None, help="load the frozen base 4-bit")
    p.add_argument("--verifier", metavar="DIR", help="document verifier built on this model (default: the shipped SmolLM2 one)")
    p.add_argument("--data", metavar="PATH", help="folder with train.jsonl + valid.jsonl, a BIG-bench task.json, or a "
                   "verifier recipe (a recipe.json, or a verifier folder holding one, e.g. smollm2-suite)")
    p.add_argument("--train-size", type=int, help="with a task.json: training documents (default: half of the rest)")
    p.add_argument("--calibration-size", type=int, help="with a task.json: calibration documents")
    p.add_argument("--test-size", type=int, help="with a task.json: documents held out first, never used (default 0)")
    p.add_argument("--epochs", type=int, help=f"epochs; the best is kept (default {DEFAULT_EPOCHS}, as in the paper)")
    p.add_argument("--batch-size", type=int, help=f"target tokens per mini-batch (default {DEFAULT_BATCH_SIZE})")
    p.add_argument("--learning-rate", type=float, help=f"Adam learning rate (default {DEFAULT_LEARNING_RATE:g})")
    p.add_argument("--warmup-epochs", type=int,
                   help="first epochs trained with q=e-2, d=1 (plain joint softmax) instead of the verifier's q, d "
                        "(default 0, the paper's; use 1 when the untuned model's answers are all out of distribution)")
    p.add_argument("--seed", type=int, help=f"seed of the token shuffling (default {DEFAULT_SEED})")
    p.add_argument("--steps-per-report", type=int, help="mini-batches between loss reports (default 10)")
    p.add_argument("--adapter-path", metavar="DIR", help=f"where the positive head is written (default {DEFAULT_ADAPTER_PATH})")
    p.add_argument("--resume", action="store_true", default=None, help="continue from the last per-epoch checkpoint")
    p.add_argument("--resume-adapter-file", metavar="DIR", help="start from this trained head instead of the untuned one")
    p.add_argument("--no-compile", dest="compile", action="store_false", default=None, help="do not mx.compile the step")
    p.add_argument("--quiet", dest="progress", action="store_false", default=None, help="no progress bars")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from mlx_sdm.usecases.head_training import build_config, read_config_file, run_finetune

        file_values = read_config_file(args.config) if args.config else {}
        overrides = {k: v for k, v in vars(args).items() if k != "config"}
        config = build_config(file_values, overrides, source=args.config or "command line")
        result, head_path = run_finetune(config)
    except MlxSdmError as exc:
        print(f"mlx-sdm finetune: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mlx-sdm finetune: interrupted; re-run with --resume to continue from the last epoch", file=sys.stderr)
        return 130
    import mlx.core as mx

    if mx.distributed.init().rank() != 0:  # under mlx.launch only rank 0 reports (and wrote the head)
        return 0
    print(
        f"calibration answers admitted and correct: untuned {result.initial_metric}, best {result.best_metric} "
        f"(epoch {result.best_epoch} of {result.epochs_run})"
    )
    print(f"saved {head_path} (use it with: mlx-sdm generate --head {head_path} / mlx-sdm chat --head {head_path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
