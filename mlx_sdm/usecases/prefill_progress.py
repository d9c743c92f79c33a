"""A progress bar on stderr for a long prompt prefill (``generate``, ``chat --plain``): fed by mlx-lm's
``prompt_progress_callback`` (the turn's ``on_prefill``); short prompts show nothing."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from mlx_sdm.executor.events import LONG_PREFILL_TOKENS

#: Prompts with fewer new tokens prefill in about a second: no bar (the engine's rule for PrefillProgress).
DEFAULT_PREFILL_PROGRESS_TOKENS = LONG_PREFILL_TOKENS


class PrefillBar:
    """Call with (done, total) as the prompt prefills; a progress bar opens for a long prompt and closes at the end."""

    def __init__(self, *, min_tokens: int = DEFAULT_PREFILL_PROGRESS_TOKENS, file: TextIO | None = None):
        self.min_tokens, self.file = min_tokens, file
        self.bar: Any = None
        self.finished = False  # mlx-lm may report the end twice (all but one token, then all)
        self.calls: list[tuple[int, int]] = []  # (done, total) as reported, for whoever wants to look

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((int(done), int(total)))
        if done == 0:
            self.finished = False  # a new prompt
        if total < self.min_tokens or self.finished:
            return
        if self.bar is None:
            from mlx_sdm.progress import progress_bar

            self.bar = progress_bar(total=int(total), desc="reading the prompt", unit="tok",
                                    file=self.file or sys.stderr, leave=False)
        self.bar.update(int(done) - self.bar.n)
        if done >= total - 1:  # mlx-lm prefills all but the last token before the first step
            self.finished = True
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
