"""The one place progress bars are made.

On a terminal a command gets a tqdm bar. Piped or redirected (a log file, ``| tee``, CI), or with ``NO_COLOR`` set
or ``TERM=dumb``, the same calls print a few plain lines instead: one each time another quarter of the work is
done, with the bar's description, counts and last postfix, and nothing for transient (``leave=False``) bars, so a
log holds a handful of readable lines rather than hundreds of carriage-return redraws, and no escape code.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import time
from typing import Any, Iterable, Iterator, TextIO

#: A piped bar prints a line each time this fraction of its total is done (so at most four lines).
PLAIN_STEP = 0.25
#: An ANSI escape sequence (colour, bold, cursor movement), as a library's coloured console writes them.
ESCAPE_CODE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain_output(stream: TextIO) -> bool:
    """Plain lines, no escape codes: output that is not a terminal, or a person who asked for none (``NO_COLOR``
    set to anything, https://no-color.org; ``TERM=dumb``): tqdm redraws with carriage returns and, for stacked
    bars, cursor-movement codes."""
    return not is_terminal(stream) or bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM") == "dumb"


def is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it",
                 leave: bool = True, disable: bool = False, file: TextIO | None = None, initial: int = 0) -> Any:
    """A tqdm bar on a terminal; a :class:`PlainProgress` (same calls) when ``file`` (stderr) is not one.
    ``initial``: work done before (a resumed run's finished epochs)."""
    stream = file or sys.stderr
    if not disable and not plain_output(stream):
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, dynamic_ncols=True, leave=leave, file=stream,
                    initial=initial)
    bar = PlainProgress(iterable, total=total, desc=desc, unit=unit, file=stream, silent=disable or not leave)
    bar.n = initial
    return bar


class PlainProgress:
    """The part of tqdm's interface the commands use, printing at most a line per ``PLAIN_STEP`` of the total."""

    def __init__(self, iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", file: TextIO | None = None, silent: bool = False):
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.file, self.silent = file or sys.stderr, silent
        self.n, self.postfix = 0, ""
        self.started = time.monotonic()
        self.printed_step = 0  # quarters already reported
        self.closed = False

    def __iter__(self) -> Iterator:
        for item in self.iterable or ():
            yield item
            self.update(1)
        self.close()

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int | float = 1) -> None:
        self.n += n
        if not self.total:
            return
        step = int(min(self.n / self.total, 1.0) / PLAIN_STEP + 1e-9)
        if step > self.printed_step:
            self.printed_step = step
            self._line()

    def set_description(self, desc: str, refresh: bool = True) -> None:
        self.desc = desc

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True, **kwargs: Any) -> None:
        items = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def clear(self) -> None:
        """tqdm erases its bar before another line is printed; plain lines need nothing erased."""

    def refresh(self) -> None:
        self.update(0)  # the total may have changed (a bar that shrinks when work is skipped)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if not self.total and self.n:
            self._line()  # no total to take quarters of: one line at the end

    def _line(self) -> None:
        if self.silent:
            return
        seconds = time.monotonic() - self.started
        count = f"{self.n:g}/{self.total:g}" if self.total else f"{self.n:g}"
        percent = f" {100 * self.n / self.total:.0f}%" if self.total else ""
        extra = f" ({self.postfix})" if self.postfix else ""
        label = f"{self.desc}: " if self.desc else ""
        print(f"{label}{count} {self.unit}{percent}, {seconds:.0f} s{extra}", file=self.file, flush=True)


class _WithoutEscapeCodes(io.TextIOBase):
    """A text stream that passes what is written on to ``stream`` without its escape codes."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(ESCAPE_CODE.sub("", text))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def without_escape_codes() -> Iterator[None]:
    """Around a library that colours its output whatever it writes to (mlx-lm's trainer forces a truecolor rich
    console): on plain output (:func:`plain_output`) stdout loses its escape codes; on a terminal, as it is."""
    if not plain_output(sys.stdout):
        yield
        return
    with contextlib.redirect_stdout(_WithoutEscapeCodes(sys.stdout)):
        yield
