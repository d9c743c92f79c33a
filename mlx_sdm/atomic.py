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

from mlx_sdm.errors import OutputError


def _nearest_existing(path: Path) -> Path:
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def check_output_file(path: str | os.PathLike) -> Path:
    """Refuse, before any work, an output file that cannot be written: a folder, a parent that is a
    file, or a folder without write permission. Returns the path."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{path}: is a folder; give a file name, e.g. {path / 'out.jsonl'}")
    _check_can_create(path, path.parent)
    return path


def _check_can_create(path: Path, parent: Path) -> None:
    """``path`` can be made under ``parent``: its nearest existing folder is a writable folder."""
    base = _nearest_existing(parent)
    if not base.is_dir():
        raise OutputError(f"{path}: cannot be created because {base} is a file, not a folder; choose another path")
    if not os.access(base, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: no permission to write in {base}; choose a folder you can write to")
    try:  # the permission bits do not tell it all (root, /proc, a read-only mount): make a file and remove it
        fd, probe = tempfile.mkstemp(prefix=".mlx-sdm-probe.", dir=base)
    except OSError as exc:
        raise OutputError(f"{path}: {base} does not take new files ({exc.strerror or exc}); choose a folder you can "
                          "write to") from exc
    os.close(fd)
    os.unlink(probe)


def check_output_folder(path: str | os.PathLike, *, force: bool = False, artifact_files: tuple[str, ...] = ()) -> Path:
    """Refuse, before any work, an output folder that would destroy something: an existing file (it
    is never renamed or replaced), an existing artifact (one of ``artifact_files`` inside) unless
    ``force``, or any other non-empty folder (never replaced, even with ``force``)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{path}: is an existing file, not a folder; choose another --out (the file is left untouched)")
    if path.is_dir() and any(path.iterdir()):
        is_artifact = any((path / name).exists() for name in artifact_files)
        if not is_artifact:
            raise OutputError(f"{path}: is a non-empty folder that is not an mlx-sdm artifact; choose a new folder "
                              "(it is never replaced)")
        if not force:
            raise OutputError(f"{path}: already holds a saved artifact; pass --force to replace it, or choose another --out")
    _check_can_create(path, path.parent)  # atomic_directory writes the new folder beside it, then renames
    return path


def _write_error(path: Path, exc: OSError) -> OutputError:
    return OutputError(f"{path}: cannot write ({exc.strerror or exc}); check that the folder exists, is writable "
                       "and has free space")


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
    if path.is_dir():
        raise OutputError(f"{path}: is a folder; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _write_error(path, exc) from exc
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
    if path.exists() and not path.is_dir():  # never rename a user's file to .old
        raise OutputError(f"{path}: is an existing file, not a folder; choose another path (the file is left untouched)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        recover_directory(path)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as exc:
        raise _write_error(path, exc) from exc
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
