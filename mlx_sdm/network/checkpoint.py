"""Per-epoch fine-tuning checkpoints, written atomically.

A checkpoint is a folder with ``arrays.safetensors`` (positive head, best positive head, Adam
state) and ``state.json`` (epoch, best metric and epoch, cached q/d, history, run identity). It
replaces the previous one as a whole (:func:`mlx_sdm.atomic.atomic_directory`), so a run killed at
any moment, or a disk that fills mid-write, leaves the last good checkpoint in place.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import mlx.core as mx

from mlx_sdm.atomic import atomic_directory, recover_directory
from mlx_sdm.errors import ArtifactError

CHECKPOINT_FORMAT_VERSION = 1
ARRAYS_FILE = "arrays.safetensors"
STATE_FILE = "state.json"


class CheckpointError(ArtifactError):
    """A checkpoint could not be written or read back."""


def write_checkpoint(directory: str | Path, arrays: dict[str, mx.array], state: dict[str, Any]) -> None:
    """Replace the checkpoint at ``directory`` with ``arrays`` + ``state``, atomically."""
    directory = Path(directory)
    previous = read_checkpoint_state(directory)
    try:
        with atomic_directory(directory) as tmp:
            mx.save_safetensors(str(tmp / ARRAYS_FILE), arrays)
            (tmp / STATE_FILE).write_text(json.dumps({"format_version": CHECKPOINT_FORMAT_VERSION, **state}, indent=1))
    except OSError as exc:
        kept = (
            f"the last good checkpoint (after epoch {previous['epoch']}) is intact there"
            if previous is not None
            else "no earlier checkpoint exists"
        )
        reason = "the disk is full" if exc.errno == errno.ENOSPC else f"the write failed ({exc.strerror or exc})"
        raise CheckpointError(
            f"{directory}: {reason} while writing the checkpoint after epoch {state.get('epoch')}; {kept}. "
            "Free some space (or pass another --adapter-path) and re-run with --resume."
        ) from exc


def read_checkpoint_state(directory: str | Path) -> dict[str, Any] | None:
    """The checkpoint's ``state.json``, or None when there is no checkpoint."""
    directory = Path(directory)
    recover_directory(directory)
    path = directory / STATE_FILE
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: corrupt checkpoint state ({exc}); delete {directory} and start again") from None
    if state.get("format_version") != CHECKPOINT_FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: field 'format_version' is {state.get('format_version')!r}, expected "
            f"{CHECKPOINT_FORMAT_VERSION}; delete {directory} and start again"
        )
    return state


def read_checkpoint(directory: str | Path) -> tuple[dict[str, mx.array], dict[str, Any]] | None:
    state = read_checkpoint_state(directory)
    if state is None:
        return None
    path = Path(directory) / ARRAYS_FILE
    try:
        arrays = mx.load(str(path))
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: cannot read checkpoint arrays ({exc}); delete {directory} and start again") from None
    return arrays, state
