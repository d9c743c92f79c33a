"""Rules for command-line values, checked by argparse as it parses (``type=``): a bad value is one line
naming the option and its valid range, and nothing has loaded yet. Each rule is written here once and
used by every command that takes the option."""

from __future__ import annotations

import argparse
import math
from typing import Callable

from mlx_sdm.lm.defaults import MAX_TEMPERATURE

MAX_PORT = 65535
#: ``--model``'s help (generate, chat and serve load the same default)
MODEL_HELP = ("the embedded SmolLM2 with its shipped fine-tuned folder (default; weights/smollm2-tuned: each task's "
              "adapters and verifier); smollm2: the plain embedded model; a fine-tuned folder, a local mlx-lm folder "
              "or .gguf, a preset (phi-3.5) or a hub id")
#: ``--no-second-look``'s help, the same for chat, generate and serve.
NO_SECOND_LOOK_HELP = ("judge everyday answers by their hidden states alone, without drawing more answers to the same "
                       "question (the second look runs only with a verifier built with `build-verifier --second-look`; "
                       "the shipped default has none)")


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: the option at fault, what it takes, where the
    options are listed (argparse's default prints the whole usage block first)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")


def whole_number(low: int, high: int | None = None, note: str = "") -> Callable[[str], int]:
    """A ``type=`` for whole numbers from ``low`` (to ``high``); ``note`` says what a special value means."""
    if high is None:
        wanted = f"a whole number, at least {low}"
    else:
        wanted = f"a whole number from {low} to {high}"
    wanted += f" ({note})" if note else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {value}")
        return value

    return parse


#: ``--port``: a TCP port; 0 asks the system for any free one.
port = whole_number(0, MAX_PORT, "0 = any free port")
#: Budgets, sizes and counts that mean nothing at 0: ``--max-tokens``, ``--max-pending``, ``--epochs``, ...
positive_int = whole_number(1)
#: Counts where 0 means "none": ``--explain K`` (nearest exemplars shown), ``--eval-size``.
non_negative_int = whole_number(0)


def temperature(text: str) -> float:
    """``--temperature``: 0 (greedy) up to the limit the server also applies to a request's temperature."""
    wanted = f"a number from 0 to {MAX_TEMPERATURE:g} (0 = greedy)"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}") from None
    if not math.isfinite(value) or not 0.0 <= value <= MAX_TEMPERATURE:
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
    return value
