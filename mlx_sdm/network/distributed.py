"""Data-parallel helpers on MLX's own distributed backend (``mlx.launch``, ``mx.distributed``).

Each rank takes an interleaved shard (``items[rank::size]``) of the documents to force-decode and
to generate for; the per-document results are gathered so that every rank holds the same, ordered
global arrays, and the gradients of every mini-batch are averaged with
:func:`mlx.nn.average_gradients`. With one process every helper is the identity.
"""

from __future__ import annotations

from typing import Sequence, TypeVar

import mlx.core as mx
import numpy as np

T = TypeVar("T")


def world(backend: str = "any"):
    """The global group (size 1 when the program was not started by ``mlx.launch``)."""
    return mx.distributed.init(backend=backend)


def shard_indices(count: int, group) -> list[int]:
    """This rank's interleaved share of ``range(count)``."""
    if group is None or group.size() == 1:
        return list(range(count))
    return list(range(group.rank(), count, group.size()))


def shard(items: Sequence[T], group) -> list[T]:
    return [items[i] for i in shard_indices(len(items), group)]


def gather_rows(local: np.ndarray, group) -> list[np.ndarray]:
    """All ranks' ``local`` arrays (any number of rows, same trailing shape and dtype), in rank order."""
    if group is None or group.size() == 1:
        return [local]
    counts = mx.distributed.all_gather(mx.array([local.shape[0]], dtype=mx.int32), group=group, stream=mx.cpu)
    counts = [int(c) for c in np.array(counts)]
    width = max(counts)
    padded = np.zeros((width,) + local.shape[1:], dtype=local.dtype)
    padded[: local.shape[0]] = local
    gathered = np.array(mx.distributed.all_gather(mx.array(padded), group=group, stream=mx.cpu))
    gathered = gathered.reshape((group.size(), width) + local.shape[1:])
    return [gathered[r, : counts[r]] for r in range(group.size())]


def unshard_rows(local: np.ndarray, count: int, group) -> np.ndarray:
    """Inverse of :func:`shard` for per-item rows: the global [count, ...] array in item order."""
    if group is None or group.size() == 1:
        return local
    parts = gather_rows(local, group)
    out = np.zeros((count,) + local.shape[1:], dtype=local.dtype)
    for rank, part in enumerate(parts):
        out[rank::group.size()] = part
    return out
