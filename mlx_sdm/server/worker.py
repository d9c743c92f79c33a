"""The one owner of MLX in the server, with a bounded queue.

Every request that needs the model becomes a job ``fn(backend)`` run in order on the executor's
:class:`~mlx_sdm.executor.worker.MlxWorker` thread (MLX streams are thread-local; the model, its KV
cache and the verifier live there). Admission is bounded: :meth:`ModelWorker.submit` counts the jobs
waiting and running, and when ``max_pending`` are already in it raises :class:`Overloaded` at once
with a Retry-After estimate, so an overloaded server answers 503 and never hangs a caller.
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Generic, TypeVar

from mlx_sdm.errors import MlxSdmError
from mlx_sdm.executor.worker import MlxWorker

B = TypeVar("B")
T = TypeVar("T")
DEFAULT_MAX_PENDING = 16


class Overloaded(Exception):
    """The queue is full; try again after ``retry_after`` seconds."""

    def __init__(self, pending: int, retry_after: int):
        super().__init__(f"the server is busy: {pending} requests are queued for the model; retry in {retry_after} s")
        self.pending = pending
        self.retry_after = retry_after


class ModelWorker(Generic[B]):
    """Builds the backend with ``open_backend()`` on the MLX thread, then runs submitted jobs there.
    ``ready`` resolves to the backend (or to the error that kept it from loading)."""

    def __init__(self, open_backend: Callable[[], B], *, max_pending: int = DEFAULT_MAX_PENDING):
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self.max_pending = max_pending
        self._lock = threading.Lock()
        self._pending = 0
        self._mean_job_s = 1.0  # running mean of job time, for Retry-After
        self._backend: B | None = None
        self._thread = MlxWorker(name="mlx-sdm-serve", on_stop=self._drop)
        self.ready: Future = self._thread.submit(lambda: self._open(open_backend))

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def submit(self, fn: Callable[[B], T]) -> "Future[T]":
        """Queue ``fn(backend)``; raises :class:`Overloaded` when ``max_pending`` jobs are already in."""
        with self._lock:
            if self._pending >= self.max_pending:
                raise Overloaded(self._pending, max(1, math.ceil(self._pending * self._mean_job_s)))
            self._pending += 1
        future = self._thread.submit(lambda: self._timed(fn))
        future.add_done_callback(self._done)
        return future

    def shutdown(self, timeout: float = 30.0) -> None:
        """Finish the queued jobs and stop the thread (it drops the model and clears its MLX streams)."""
        self._thread.stop(wait=True, timeout=timeout)

    # ------------------------------------------------------------------ on the MLX thread

    def _open(self, open_backend: Callable[[], B]) -> B:
        self._backend = open_backend()
        return self._backend

    def _timed(self, fn: Callable[[B], T]) -> T:
        if self._backend is None:
            raise MlxSdmError("the model is not loaded")
        started = time.perf_counter()
        try:
            return fn(self._backend)
        finally:
            elapsed = time.perf_counter() - started
            with self._lock:
                self._mean_job_s = 0.8 * self._mean_job_s + 0.2 * elapsed

    def _done(self, future: Any) -> None:
        with self._lock:
            self._pending -= 1

    def _drop(self) -> None:
        self._backend = None
