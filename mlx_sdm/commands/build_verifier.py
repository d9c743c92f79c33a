"""``mlx-sdm build-verifier``: a document verifier for any mlx-lm model, over the task suite."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlx_sdm.usecases.build_verifier import (
    DEFAULT_EVAL_SIZE,
    DEFAULT_MAX_TOKENS,
    DEFAULT_PER_TASK,
    BuildVerifierArgs,
    build_verifier,
    describe,
)
from mlx_sdm.usecases.second_look_build import build_second_look
from mlx_sdm.usecases.second_look_build import describe as describe_second_look
from mlx_sdm.commands.arguments import CommandParser, non_negative_int, positive_int, whole_number
from mlx_sdm.network.second_look import DEFAULT_K, SecondLookSpec

DEFAULT_MODEL = "smollm2"
DEFAULT_BATCH = 16
#: The shortest answer budget a build accepts: a JSON answer takes a few tokens before its closing brace.
MIN_MAX_TOKENS = 4

EPILOG = """
The model answers every task's prompts itself; each answer is checked against the task's gold
answer (y = 1 correct, 0 wrong or not in the task's JSON format), and the features the verifier reads
are taken while the answer is generated. Then the SDM estimator is trained, and DIR gets the
verifier, report.md / report.json (held-out and shifted answers of every task, paper Table 1 layout)
and reliability.png. verifier.json lists the tasks it covers (`mlx-sdm generate --list-tasks`).

Answers are cached in DIR.cache (or --cache-dir): a build that is stopped, even with kill -9, resumes
where it stopped when you run the same command again.

shipped tasks: bbc_topic fever sports_understanding strategyqa truthful_qa spam sentiment
your own task: a JSONL file, one row per prompt:
  {"prompt": "... Respond using the following JSON: {\\"city\\": str}. ...", "answer": {"city": "Paris"}}
  (optional "id", "split": "shifted" for rows of a shifted set, and "system" on the first row)

A recipe (--recipe FILE) builds from constructed documents instead, the paper's way: each task's
prompts with the gold answer (y = 1) or, by a seeded Bernoulli(0.5) draw, another answer (y = 0).
The file holds every setting of the build (model, tasks, pool and test sizes, seed, fit settings)
and is kept beside the weights as recipe.json, so the build can be run again from any install.

A second look (--second-look K, open questions only) draws K more answers to each everyday question
from the same prompt, in one batch, and fits the verifier on what they show beside the answer's states:
whether they repeat the answer's facts (lexical and MiniLM agreement), their spread and the answers'
log-probabilities (docs/verifiers.md, "The second look"). The questions' rows are appended to a JSONL
file in DIR.cache: a stopped build resumes, and a larger --limit reuses a smaller one's questions.
Where Alg. 3 finds no region the verifier is saved all the same, verifies nothing, and the report
says so.

examples:
  mlx-sdm build-verifier --out my-verifier                                # embedded SmolLM2, whole suite
  mlx-sdm build-verifier --tasks open_questions --per-task 1400 --eval-size 300 --batch 32 --out open-v
                                                   # everyday questions, answered as the chat answers them
  mlx-sdm build-verifier --model phi-3.5 --tasks open_questions --second-look --out phi35-open
                                                   # everyday questions judged from 6 drawn answers
  mlx-sdm build-verifier --tasks open_questions --second-look 6 --limit 40 --out look-small
                                                   # a small build: 40 questions in all
  mlx-sdm build-verifier --recipe weights/smollm2-suite/recipe.json --out suite   # the shipped default
  mlx-sdm build-verifier --model phi-3.5 --per-task 300 --out phi35-verifier
  mlx-sdm build-verifier --model path/to/mlx_model --tasks sentiment,my_task.jsonl --out v
  mlx-sdm chat --model phi-3.5 --verifier phi35-verifier
"""


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="mlx-sdm build-verifier", epilog=EPILOG,
                                description="Build a document verifier for a model from its own answers to the task suite.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="smollm2 (embedded, default), a local mlx-lm folder or .gguf, a preset (phi-3.5) or a hub id")
    p.add_argument("--tasks", nargs="+", default=None, metavar="TASK",
                   help="shipped task names and/or your .jsonl files (or a folder of them), space- or comma-separated "
                        "(default: all shipped)")
    p.add_argument("--per-task", type=positive_int, default=DEFAULT_PER_TASK,
                   help="answers per task to train and calibrate on (halved; default %(default)s)")
    p.add_argument("--eval-size", type=non_negative_int, default=DEFAULT_EVAL_SIZE,
                   help="held-out and shifted answers per task for the report, 0 or more (default %(default)s)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="verifier folder to write (atomically)")
    p.add_argument("--cache-dir", type=Path, default=None, help="answer/feature cache (default: DIR.cache)")
    p.add_argument("--max-tokens", type=whole_number(MIN_MAX_TOKENS), default=DEFAULT_MAX_TOKENS,
                   help=f"answer length limit, at least {MIN_MAX_TOKENS}; answers stop at the JSON's closing brace "
                        "(default %(default)s)")
    p.add_argument("--batch", type=positive_int, default=DEFAULT_BATCH,
                   help="answers generated together in one batch, at least 1 (default %(default)s; 32 is faster on a CPU)")
    p.add_argument("--quantized", action="store_true", help="keep a GGUF's 4-bit weights (default: float32)")
    p.add_argument("--seed", type=int, default=0, help="fitting seed (splits are fixed)")
    p.add_argument("--iterations", type=positive_int, default=None, help="override Alg. 1's iterations J (at least 1)")
    p.add_argument("--epochs", type=positive_int, default=None, help="override Alg. 1's epochs per iteration (at least 1)")
    p.add_argument("--estimator", choices=("v1", "v2"), default=None,
                   help="v1 = the paper's estimator, v2 = the canonical one (default: mlx-sdm train's default)")
    p.add_argument("--no-plot", action="store_true", help="skip reliability.png")
    p.add_argument("--second-look", nargs="?", const=DEFAULT_K, default=None, type=positive_int, metavar="K",
                   help=f"judge open questions from K answers drawn beside each answer (K default {DEFAULT_K} when "
                        "the flag has no value; with --tasks open_questions)")
    p.add_argument("--limit", type=positive_int, default=None, metavar="N",
                   help="a --second-look build of at most N questions in all (pool, held-out and shifted in "
                        "proportion): a small build, or a measurement of its time")
    p.add_argument("--recipe", type=Path, default=None, metavar="FILE",
                   help="build from constructed documents with the settings in FILE (a recipe.json, or a verifier "
                        "folder holding one); the other build options then come from the file")
    return p


#: Options a recipe holds; giving one beside --recipe is refused rather than silently ignored.
RECIPE_HOLDS = ("model", "tasks", "per_task", "eval_size", "max_tokens", "quantized", "seed", "iterations", "epochs",
                "estimator")


def run_recipe(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from mlx_sdm.usecases.suite_verifier import build_from_recipe
    from mlx_sdm.usecases.verifier_recipe import read_recipe

    given = [k for k in RECIPE_HOLDS if getattr(args, k) != parser.get_default(k)]
    if given:
        print(f"mlx-sdm build-verifier: the recipe holds --{given[0].replace('_', '-')}; edit the recipe file "
              "instead", file=sys.stderr)
        return 2
    build_from_recipe(read_recipe(args.recipe), args.out, cache_dir=args.cache_dir, plot_png=not args.no_plot,
                      say=lambda line: print(line, file=sys.stderr))
    print(f"wrote {args.out} (recipe.json, report.md, report.json{'' if args.no_plot else ', reliability.png'}); "
          f"try it: mlx-sdm generate --verifier {args.out} --list-tasks")
    return 0


def parse_args(argv: list[str] | None) -> BuildVerifierArgs:
    args = build_parser().parse_args(argv)
    tasks = [t for chunk in args.tasks for t in chunk.split(",") if t] if args.tasks else None
    return BuildVerifierArgs(out=args.out, model=args.model, tasks=tasks, per_task=args.per_task,
                             eval_size=args.eval_size, max_tokens=args.max_tokens, cache_dir=args.cache_dir,
                             quantized=args.quantized, seed=args.seed, iterations=args.iterations,
                             epochs=args.epochs, estimator=args.estimator, plot=not args.no_plot, batch=args.batch,
                             second_look=args.second_look, limit=args.limit)


def run_second_look(args: BuildVerifierArgs) -> int:
    """``--second-look K``: a second-look member for open questions (app/second_look_build.py)."""
    result = build_second_look(args, SecondLookSpec(k=args.second_look),
                               log=lambda line: print(line, file=sys.stderr))
    print(result.report)
    print(describe_second_look(result))
    print(f"wrote {args.out} (report.md, report.json, lean.json{'' if not args.plot else ', reliability.png'})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    namespace = parser.parse_args(argv)
    if namespace.recipe is not None and (namespace.second_look or namespace.limit):
        print("mlx-sdm build-verifier: --second-look and --limit build from the model's own answers, not from a "
              "recipe; leave out --recipe", file=sys.stderr)
        return 2
    if namespace.recipe is not None:
        return run_recipe(namespace, parser)
    args = parse_args(argv)
    if args.limit and not args.second_look:
        print("mlx-sdm build-verifier: --limit sizes a --second-look build; give --second-look, or size the "
              "build with --per-task and --eval-size", file=sys.stderr)
        return 2
    if args.second_look:
        return run_second_look(args)
    result = build_verifier(args, log=lambda line: print(line, file=sys.stderr))
    print(result.report)
    print(describe(result))
    print(f"wrote {args.out} (report.md, report.json{'' if not args.plot else ', reliability.png'}); "
          f"try it: mlx-sdm generate --verifier {args.out} --list-tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
