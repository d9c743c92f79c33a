"""``mlx-sdm <command>``: one entry point, thin command modules (mlx-lm style).

Each command lives in ``mlx_sdm/commands/<name>.py`` with ``DEFAULT_*`` constants, a
``build_parser()`` and a ``main(argv)``; this module only dispatches, importing a command's
module (and so MLX, models, Textual) only when that command runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import mlx_sdm  # noqa: F401  (puts the fast BLAS in place before any command imports mlx)
from mlx_sdm.errors import MlxSdmError

#: name -> (module, one-line summary), in the order a new user meets them.
COMMANDS: dict[str, tuple[str, str]] = {
    "chat": ("mlx_sdm.commands.chat", "private verified chat in the terminal (Textual UI, or --plain)"),
    "history": ("mlx_sdm.commands.history", "search stored chat sessions by words, verdict, task and date (JSON)"),
    "review": ("mlx_sdm.commands.review", "list the review queue (JSON) and accept, reject or correct its answers"),
    "serve": ("mlx_sdm.commands.serve", "OpenAI-compatible local server: every answer with its verdict, /v1/verify"),
    "generate": ("mlx_sdm.commands.generate", "answer one prompt and print its verdict, p_lower, q, d and exemplars"),
    "doctor": ("mlx_sdm.commands.doctor", "report backend, device, BLAS, measured GFLOPS and the embedded model"),
    "demo": ("mlx_sdm.commands.demo", "build an SDM estimator on real embedded data and print its report"),
    "build-verifier": ("mlx_sdm.commands.build_verifier",
                       "build a verifier for any mlx-lm model from its own answers to the task suite"),
    "train": ("mlx_sdm.commands.train", "train an SDM estimator / document verifier from labelled JSONL"),
    "verify": ("mlx_sdm.commands.verify", "verify JSONL rows (embeddings or prompt+completion) in batch"),
    "report": ("mlx_sdm.commands.report", "Table-1 style calibration report on labelled JSONL, with plots"),
    "finetune": ("mlx_sdm.commands.finetune",
                 "teach a model your task from a labelled file (CSV, JSONL), with a verifier for its answers"),
    "export": ("mlx_sdm.commands.export", "write a fine-tuned folder as one plain mlx-lm model (and a GGUF file)"),
    "compress-head": ("mlx_sdm.commands.compress_head", "store a fine-tuned head as its low-rank change (the form that ships)"),
    "eval-monitor": ("mlx_sdm.commands.eval_monitor", "score logged sessions: TPS, AUROC, AUARC per monitor"),
}

USAGE = """usage: mlx-sdm <command> [options]

Private, verified LLM chat on your own machine. Every answer comes with a calibrated
p_lower (admitted only when p_lower >= alpha' = 0.95) and the training exemplars behind it.

commands:
{commands}

Run `mlx-sdm <command> --help` for a command's options and examples.
First time here? `mlx-sdm doctor`, then `mlx-sdm chat`.
"""


def available_commands() -> dict[str, tuple[str, str]]:
    return {name: spec for name, spec in COMMANDS.items() if importlib.util.find_spec(spec[0]) is not None}


def _usage() -> str:
    commands = available_commands()
    width = max(len(name) for name in commands) + 2  # the longest name still gets two spaces before its help
    rows = "\n".join(f"  {name:<{width}}{summary}" for name, (_, summary) in commands.items())
    return USAGE.format(commands=rows)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    if argv[0] in {"-V", "--version"}:
        print(f"mlx-sdm {mlx_sdm.__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    commands = available_commands()
    if name not in commands:
        print(f"mlx-sdm: unknown command {name!r}.\n", file=sys.stderr)
        print(_usage(), file=sys.stderr)
        return 2
    module = importlib.import_module(commands[name][0])
    try:
        result = module.main(rest)
    except MlxSdmError as exc:  # bad input or a refused artifact: one clear line, no traceback
        print(f"mlx-sdm {name}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"mlx-sdm {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`mlx-sdm ... | head`): stop quietly, as cat does
        _silence_stdout()
        return 141  # 128 + SIGPIPE, what a shell reports for a command whose pipe closed
    return int(result or 0)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise on the closed pipe."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout replaced (tests) or already closed
        pass


if __name__ == "__main__":
    sys.exit(main())
