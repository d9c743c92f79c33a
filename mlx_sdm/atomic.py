"""Atomic writes: a temporary file (or folder) beside the target, fsync, then rename.

A killed process leaves either the old complete artifact or the new complete one, never half.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh temporary folder; on success it replaces ``path`` as a whole.

    The previous folder is moved aside and removed only after the new one is in place, so an
    interruption at any point leaves a complete folder at ``path`` (or the old one at
    ``path.old`` if the process dies between the two renames; :func:`recover_directory` restores it).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_directory(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        # mkdtemp makes the folder 0700; an artifact folder is as readable as any file written here.
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)
        for child in tmp.rglob("*"):
            if child.is_dir():
                child.chmod(0o777 & ~umask)
            elif child.is_file():
                with open(child, "rb") as handle:
                    os.fsync(handle.fileno())
        old = path.with_name(path.name + ".old")
        if path.exists():
            if old.exists():
                shutil.rmtree(old)
            os.replace(path, old)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        if old.exists():
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def recover_directory(path: str | os.PathLike) -> None:
    """If a previous atomic_directory died between its two renames, put the old folder back."""
    path = Path(path)
    old = path.with_name(path.name + ".old")
    if old.exists() and not path.exists():
        os.replace(old, path)
