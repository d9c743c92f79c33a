"""Reading JSONL input the one way every command does: one JSON object per non-blank line, and a
DataError that names the file and line when a line is not one."""

from __future__ import annotations

import json
import os
from typing import Iterator

from mlx_sdm.errors import DataError


def iter_jsonl_objects(path: str | os.PathLike, *, missing: str = "no such file") -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for each non-blank line of ``path``.

    ``missing`` is the message (with the fix) for a file that does not exist.
    """
    where = str(path)
    try:
        handle = open(where, encoding="utf-8")
    except FileNotFoundError:
        raise DataError(missing, path=where) from None
    except OSError as exc:
        raise DataError(f"cannot read the file ({exc.strerror})", path=where) from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise DataError(f"not valid JSON ({exc.msg} at column {exc.colno})", path=where, line=number) from None
            if not isinstance(row, dict):
                raise DataError("each line must be a JSON object", path=where, line=number)
            yield number, row
