"""Reading JSONL input the one way every command does: one JSON object per non-blank line, and a
DataError that names the file and line when a line is not one.

A ``.gz`` file (or any file that starts with the gzip magic bytes) is read through ``gzip``; text
must be UTF-8 (a leading byte-order mark is accepted), and a line that is not gets one error naming
the file, line and column instead of a ``UnicodeDecodeError``.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from typing import IO, Iterator

from mlx_sdm.errors import DataError

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"


def _open_binary(where: str, missing: str) -> IO[bytes]:
    try:
        handle = open(where, "rb")
    except FileNotFoundError:
        raise DataError(missing, path=where) from None
    except IsADirectoryError:
        raise DataError("is a folder, not a JSONL file", path=where) from None
    except OSError as exc:
        raise DataError(f"cannot read the file ({exc.strerror})", path=where) from None
    if handle.peek(2)[:2] == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=handle, mode="rb")
    return handle


def _decode(raw: bytes, where: str, number: int) -> str:
    if number == 1 and raw.startswith(UTF8_BOM):
        raw = raw[len(UTF8_BOM):]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); save the file as UTF-8 "
            "(e.g. iconv -f latin1 -t utf-8 IN > OUT)", path=where, line=number,
        ) from None


def iter_jsonl_objects(path: str | os.PathLike, *, missing: str = "no such file") -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for each non-blank line of ``path`` (plain or gzipped).

    ``missing`` is the message (with the fix) for a file that does not exist.
    """
    where = str(path)
    handle = _open_binary(where, missing)
    number = 0
    with handle:
        try:
            for number, raw in enumerate(handle, start=1):
                text = _decode(raw, where, number)
                if not text.strip():
                    continue
                try:
                    row = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise DataError(f"not valid JSON ({json_error_text(exc)})", path=where, line=number) from None
                if not isinstance(row, dict):
                    raise DataError("each line must be a JSON object", path=where, line=number)
                yield number, row
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise DataError(f"the gzip stream is cut off or corrupt after line {number} ({exc}); "
                            "re-create the .gz file", path=where) from None


def json_error_text(exc: json.JSONDecodeError, *, with_line: bool = False) -> str:
    """What a JSON decode error says, with its position: "Expecting ',' delimiter at column 24". Some of
    json's messages end in "at" already ("Invalid control character at"), which is not said twice."""
    message = exc.msg[: -len(" at")] if exc.msg.endswith(" at") else exc.msg
    return f"{message} at line {exc.lineno}, column {exc.colno}" if with_line else f"{message} at column {exc.colno}"


def first_jsonl_object(path: str | os.PathLike) -> dict | None:
    """The first object of a JSONL file, or None when the file is empty (errors as above)."""
    for _, row in iter_jsonl_objects(path):
        return row
    return None
