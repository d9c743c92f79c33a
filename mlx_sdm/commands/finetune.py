"""``mlx-sdm finetune``: a model that answers your task right, and a verifier that says which answers to trust
(``--task FILE --out DIR``: LoRA, then Alg. 4's head, then the verifier, into one folder), or Alg. 4 alone on
the positive vocabulary head (``--config FILE.yaml`` with ``data:``).

``--help`` is the task run a newcomer needs (:data:`TASK_HELP`, under 50 lines, in plain words); ``--help-all`` and
``--help-head`` print every option and the head-alone mode's reference (:data:`EPILOG`)."""

from __future__ import annotations

import argparse
import sys
import textwrap

from mlx_sdm.commands.arguments import CommandParser
from mlx_sdm.commands.chat import default_db_path
from mlx_sdm.usecases.finetune_plan import TASK_KEYS
from mlx_sdm.usecases.head_training import CONFIG_KEYS, DEFAULT_ADAPTER_PATH
from mlx_sdm.network.trainer import FinetuneArgs

from mlx_sdm.usecases.lora_training import DEFAULT_MAX_EPOCHS as DEFAULT_LORA_EPOCHS, DEFAULT_RANKS as DEFAULT_LORA_RANKS

#: The paper's values (docs/method.md § 15.4), as FinetuneArgs holds them.
DEFAULT_EPOCHS = FinetuneArgs.epochs
DEFAULT_BATCH_SIZE = FinetuneArgs.batch_size
DEFAULT_LEARNING_RATE = FinetuneArgs.learning_rate
DEFAULT_SEED = FinetuneArgs.seed

EPILOG = f"""
Your task, one command (--task FILE.jsonl ... --out DIR):
  FILE holds one row per question: {{"prompt": "...", "answer": {{"field": value}}}} (+ "id", "split":
  "shifted", "system" on the first row), every prompt starting with the task's instruction and asking for
  that JSON; a shipped task's name (bbc_topic, fever, ...) works too, and so do a CSV/TSV or JSONL table of a
  text and a label column and mlx-lm's chat or completions rows (--help shows each). The rows are split, seeded: LoRA
  training rows (the tuned model's answers to them also train the verifier), validation rows, calibration
  rows (never trained on); the task's held-out and shifted rows are kept for the report. Then, resumable
  after any stop (rerun the command):
    1. LoRA with mlx-lm's tuner on the gold answers (loss on the answer tokens only); the epochs and the
       rank are chosen on the validation rows' accuracy;
    2. Alg. 4's positive head over the adapted model (kept for a task only where it adds answers the
       verifier admits and that are right, at no cost in accuracy);
    3. the verifier built on the tuned model's own answers, so its promise is about that model.
  Time: a few hundred short rows of the embedded 135M model take tens of minutes on 2 cores; the command
  prints its estimate first (docs/finetuning.md has measured runs).
  Each task trains its own adapters, one task after another (each resumable on its own in DIR/.work/TASK).
  DIR then holds adapters/TASK/ (mlx-lm's format), heads/TASK/, verifier/ (a member per task),
  reports/TASK/ and mlx-sdm-model.json: mlx-sdm chat --model DIR / serve --model DIR / generate --model DIR
  "..." use it; a task's adapters answer the questions of that task, every other turn is the plain model's.
  --out at a finished folder adds the named tasks to it (its other tasks' files are left as they are); naming
  a task it has, with other rows, --seed or settings, retrains that task alone.
  Task-run keys (flags or YAML): {", ".join(TASK_KEYS)}.

Alg. 4 alone (--config FILE.yaml with data:, no task): the LM's output head is cloned into a frozen negative
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
  mlx-sdm finetune --task my_triage.jsonl --out triage-model            # your task (time estimate first)
  mlx-sdm chat --model triage-model
  mlx-sdm finetune --task bbc_topic sentiment --out news-model --lora-epochs 2
  mlx-sdm finetune --config examples/finetune.yaml
  mlx-sdm finetune --config examples/finetune.yaml --epochs 2 --resume
  mlx-sdm finetune --config weights/smollm2-suite-head/finetune.yaml    # the shipped head (~29 min on 2 cores)
  mlx-sdm generate --head sdm-head "Was this claim true or false? ..."
  mlx.launch --backend ring --hosts mac1,mac2 -- mlx-sdm finetune --config finetune.yaml   # data parallel
"""


#: What ``--help`` prints: the task run, for a person who has a labelled file and nothing else.
TASK_HELP = """usage: mlx-sdm finetune --task FILE --out DIR [--plan] [options]

Teach a model your task from labelled examples, and build the verifier that says which of its
answers to trust. Everything runs on this machine; rerun the same command to resume after a stop.

Your file, one labelled example a row (the form is detected and said in one line):
  CSV or TSV    text,label   then rows such as   "Win a prize now!",spam
  JSONL         {{"text": "Win a prize now!", "label": "spam"}}
                (--text-column NAME and --label-column NAME name other columns;
                 --instruction "Is this e-mail junk?" is the question asked before each text)
  task rows     {{"prompt": "Is this e-mail junk? ... TEXT: Win a prize now!", "answer": {{"label": "spam"}}}}
  mlx-lm chat   {{"messages": [{{"role": "user", "content": "..."}}, {{"role": "assistant", "content": "spam"}}]}}
  completions   {{"prompt": "...", "completion": "spam"}}
  A chat or completion answer is a bare label (its prompt is then written as for a table) or the
  one-field JSON (the prompt as it is). Rows with "split": "shifted" are other data, tested apart.

{rows}

Check a file first (reads it, prints the rows, labels and time; trains and writes nothing):
  mlx-sdm finetune --task mail.csv --instruction "Is this e-mail junk?" --plan

The flags most people change:
  --lora-epochs N    passes over the training rows, at most (default {epochs}; more when it guesses)
  --train-rows N     training rows a task, at most (default {train_rows})
  --model NAME       the model to teach: smollm2 (default, 135M), a folder, a .gguf or a hub id

Where the result goes: DIR holds the adapters, the verifier and report.md, whose first lines say
how often the tuned model was right, how many answers were verified, and what to do next. Use it:
  mlx-sdm chat --model DIR             questions starting with the instruction use the tuned model
  mlx-sdm serve --model DIR            the same through an OpenAI-compatible server
  mlx-sdm export DIR --out OUT         one plain mlx-lm model (the verifier does not travel with it)

Example:
  mlx-sdm finetune --task mail.csv --instruction "Is this e-mail junk?" --out junk-model
  mlx-sdm chat --model junk-model

Every option: --help-all. The head alone on a frozen model (--config FILE.yaml): --help-head.
"""


def task_help() -> str:
    from mlx_sdm.usecases.finetune_plan import DEFAULT_TRAIN_ROWS, TaskFinetuneArgs, minimum_rows, minimum_why
    from pathlib import Path

    args = TaskFinetuneArgs(tasks=(), out=Path("."))
    rows = textwrap.fill(f"How many rows: at least {minimum_rows(args)} (not counting shifted ones): {minimum_why(args)}. "
                         "A few hundred is better. Repeated rows are kept once; the same text with two labels is "
                         "refused, naming both lines.", width=100)
    return TASK_HELP.format(rows=rows, epochs=DEFAULT_LORA_EPOCHS, train_rows=DEFAULT_TRAIN_ROWS)


class _PrintHelp(argparse.Action):
    """``--help``: the task run in plain words; ``--help-all`` / ``--help-head``: every option and the reference."""

    def __init__(self, option_strings, dest, full: bool = False, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.full = full

    def __call__(self, parser, namespace, values, option_string=None):
        print(parser.format_help() if self.full else task_help(), end="" if self.full else "")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="mlx-sdm finetune", add_help=False,
        description="Teach a model your task and build the verifier that says which of its answers to trust: "
                    "--task FILE --out DIR (LoRA, Alg. 4's head, the verifier, into one folder). With "
                    "--config FILE.yaml and data:, Alg. 4 alone on the positive vocabulary head.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-h", "--help", action=_PrintHelp, help="the task run in plain words")
    p.add_argument("--help-all", "--help-head", action=_PrintHelp, full=True,
                   help="this list of every option, and the head-alone mode's reference")
    p.add_argument("--config", "-c", metavar="FILE.yaml", help="YAML file with the keys below; flags override it")
    p.add_argument("--model", help="'smollm2' (embedded, default), a local mlx-lm folder, a .gguf file or a hub id")
    p.add_argument("--quantized", action="store_true", default=None, help="load the frozen base 4-bit")
    p.add_argument("--seed", type=int, help=f"seed: of the row split and the draws with --task (default 0); of the token shuffling with --config (default {DEFAULT_SEED})")
    p.add_argument("--quiet", dest="progress", action="store_false", default=None, help="no progress bars")
    add_task_arguments(p)
    alone = p.add_argument_group("Alg. 4 alone (--config FILE.yaml with data:, no --task)")
    alone.add_argument("--verifier", metavar="DIR", help="document verifier built on this model (default: the shipped SmolLM2 one)")
    alone.add_argument("--data", metavar="PATH", help="folder with train.jsonl + valid.jsonl, a BIG-bench task.json, or a "
                   "verifier recipe (a recipe.json, or a verifier folder holding one, e.g. smollm2-suite)")
    alone.add_argument("--train-size", type=int, help="with a task.json: training documents (default: half of the rest)")
    alone.add_argument("--calibration-size", type=int, help="with a task.json: calibration documents")
    alone.add_argument("--test-size", type=int, help="with a task.json: documents held out first, never used (default 0)")
    alone.add_argument("--epochs", type=int, help=f"epochs; the best is kept (default {DEFAULT_EPOCHS}, as in the paper)")
    alone.add_argument("--batch-size", type=int, help=f"target tokens per mini-batch (default {DEFAULT_BATCH_SIZE})")
    alone.add_argument("--learning-rate", type=float, help=f"Adam learning rate (default {DEFAULT_LEARNING_RATE:g})")
    alone.add_argument("--warmup-epochs", type=int,
                   help="first epochs trained with q=e-2, d=1 (plain joint softmax) instead of the verifier's q, d "
                        "(default 0, the paper's; use 1 when the untuned model's answers are all out of distribution)")
    alone.add_argument("--steps-per-report", type=int, help="mini-batches between loss reports (default 10)")
    alone.add_argument("--adapter-path", metavar="DIR", help=f"where the positive head is written (default {DEFAULT_ADAPTER_PATH})")
    alone.add_argument("--resume", action="store_true", default=None, help="continue from the last per-epoch checkpoint")
    alone.add_argument("--resume-adapter-file", metavar="DIR", help="start from this trained head instead of the untuned one")
    alone.add_argument("--no-compile", dest="compile", action="store_false", default=None, help="do not mx.compile the step")
    return p


def add_task_arguments(p: argparse.ArgumentParser) -> None:
    t = p.add_argument_group("your task (--task): LoRA, the head and the verifier into one folder")
    t.add_argument("--task", nargs="+", action="extend", metavar="FILE_OR_NAME",
                   help="task files (.csv, .tsv, .jsonl) or shipped task names; with --out, runs the three stages")
    t.add_argument("--out", metavar="DIR", help="the model folder to write (rerun the same command to resume)")
    t.add_argument("--plan", action="store_true", default=None,
                   help="read the files and run every check, print the rows per part, the labels and the time; "
                        "train and write nothing")
    t.add_argument("--text-column", metavar="NAME", help="a table's column of texts (default text)")
    t.add_argument("--label-column", metavar="NAME", help="a table's column of labels (default label)")
    t.add_argument("--instruction", metavar="TEXT",
                   help="the question asked before each text of a table, e.g. \"Is this e-mail junk?\"")
    t.add_argument("--field", metavar="NAME", help="the JSON field of a table's answers (default label)")
    t.add_argument("--lora-ranks", nargs="+", type=int, metavar="R",
                   help=f"LoRA ranks, tried in order while validation accuracy is below the target (default {' '.join(map(str, DEFAULT_LORA_RANKS))})")
    t.add_argument("--lora-layers", type=int, metavar="N", help="last N blocks get LoRA layers (default 8)")
    t.add_argument("--lora-epochs", type=int, metavar="N", help=f"at most N epochs per rank (default {DEFAULT_LORA_EPOCHS})")
    t.add_argument("--lora-learning-rate", type=float, help="Adam's rate for LoRA (default 2e-4)")
    t.add_argument("--lora-batch-size", type=int, help="rows per LoRA step (default 4)")
    t.add_argument("--target-accuracy", type=float, help="validation accuracy after which no larger rank is tried (default 0.9)")
    t.add_argument("--train-rows", type=int, help="LoRA training rows per task, at most (default 320)")
    t.add_argument("--validation-rows", type=int, help="validation rows per task (default 40)")
    t.add_argument("--verifier-rows", type=int, help="rows per task the verifier is calibrated on (D_ca; default 300). It is trained (D_tr) on the model's answers to the LoRA training rows")
    t.add_argument("--eval-rows", type=int, help="held-out and shifted rows per task in the report (default 100)")
    t.add_argument("--no-head", dest="head", action="store_false", default=None, help="skip stage 2 (Alg. 4's head)")
    t.add_argument("--head-rank", type=int, help="rank of the compact head kept in the folder (default 64)")
    t.add_argument("--head-rows", type=int, help="rows per task of the training and the calibration rows that Alg. 4 reads (default 60)")
    t.add_argument("--no-baselines", dest="baselines", action="store_false", default=None,
                   help="leave the untuned model and the head alone out of the report (faster)")
    t.add_argument("--keep-work", dest="keep_work", action="store_true", default=None,
                   help="keep DIR/.work (epoch checkpoints, cached answers) after the run: a rerun then refits the "
                        "verifier from them; by default only its run.json stays")
    t.add_argument("--from-reviews", nargs="?", const=str(default_db_path()), metavar="DB",
                   help="the review queue's labels and edits on these tasks' answers join the rows (an edit or an "
                        "accepted answer trains LoRA, a rejected one the verifier); DB: the chat store (default "
                        f"{default_db_path()}); with --model DIR, that folder's tasks are retrained on its base")


def task_values(args: argparse.Namespace, file_values: dict) -> dict | None:
    """The task run's keys (the YAML's, the flags' over them) when this is a task run, else None."""
    flags = {k: v for k, v in vars(args).items() if v is not None and k != "config"}
    if not {"task", "from_reviews"} & (set(flags) | set(file_values)):
        return None
    return {**file_values, **flags}  # a key a task run does not read is refused by task_args_from, by name


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mlx_sdm.usecases.head_training import build_config, read_config_file, run_finetune

    file_values = read_config_file(args.config, CONFIG_KEYS + tuple(TASK_KEYS)) if args.config else {}
    values = task_values(args, file_values)
    if values is not None:
        return run_task(values, args.config or "command line")
    from mlx_sdm.errors import DataError

    if args.plan:
        raise DataError("--plan checks a task run: give --task FILE (the head alone has no plan)", field="--plan")
    if args.config is None and args.data is None:  # nothing named: a newcomer's first try, told the task run
        raise DataError("name your labelled file: --task FILE --out DIR (`mlx-sdm finetune --help` shows the file "
                        "forms); the head alone on a frozen model takes --config FILE.yaml (--help-head)", field="--task")
    overrides = {k: v for k, v in vars(args).items()
                 if k not in ("config", "plan") and (k in CONFIG_KEYS or k not in TASK_KEYS)}
    config = build_config(file_values, overrides, source=args.config or "command line")
    try:
        result, head_path = run_finetune(config)
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


def run_task(values: dict, source: str) -> int:
    """``--task``: each task's stages, into one folder that grows a task at a time; prints how each file was read
    first, and at the end what each run found and what to do next (the top of its report.md). ``--plan``: the checks
    and numbers only."""
    from mlx_sdm.usecases.finetune_plan import task_args_from
    from mlx_sdm.usecases.finetune_preview import intake_lines, preview_run, preview_text
    from mlx_sdm.usecases.finetune_report import summary_lines
    from mlx_sdm.usecases.model_growth import run_growth

    plan = bool(values.pop("plan", False))
    has_out = bool(values.get("out"))
    args = task_args_from(values if has_out or not plan else {**values, "out": "."}, source)
    preview = preview_run(args, has_out=has_out)
    if plan:
        print(preview_text(preview))
        return 0
    for line in intake_lines(preview.tasks):
        print(line)
    try:
        outcome = run_growth(args)
    except KeyboardInterrupt:
        print(f"mlx-sdm finetune: interrupted; rerun the same command to continue from the last checkpoint in "
              f"{args.out}", file=sys.stderr)
        return 130
    minutes = sum(sum(run.clock.seconds.values()) for run in outcome.runs.values()) / 60
    print(f"saved {outcome.folder} ({minutes:.0f} min; its tasks: {', '.join(e.name for e in outcome.manifest.entries)});"
          f" use it with: mlx-sdm chat --model {outcome.folder}")
    for name, run in outcome.runs.items():
        print(f"{name} (the full report: {outcome.folder / 'reports' / name / 'report.md'}):")
        for line in summary_lines(run.report):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
