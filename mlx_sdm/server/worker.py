"""The one owner of MLX in the server: a single worker thread with a bounded queue.

Every request that needs the model becomes a job ``fn(backend)`` run in order on this thread (MLX
streams are thread-local; the model, its KV caches and the verifier live here). Admission is
bounded: :meth:`ModelWorker.submit` counts the jobs waiting and running, and when ``max_pending`` are
already there it raises :class:`Overloaded` at once with a Retry-After estimate, so an overloaded
server answers 503 and never hangs a caller.
"""

from __future__ import annotations

import gc
import math
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Generic, TypeVar

from mlx_sdm.errors import MlxSdmError

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
    """Runs ``open_backend()`` and then every submitted job on ONE thread. ``ready`` resolves to the backend."""

    def __init__(self, open_backend: Callable[[], B], *, max_pending: int = DEFAULT_MAX_PENDING):
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self.max_pending = max_pending
        self._jobs: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._pending = 0
        self._mean_job_s = 1.0  # running mean of job time, for Retry-After
        self._backend: B | None = None
        self._thread = threading.Thread(target=self._run, args=(open_backend,), name="mlx-sdm-serve", daemon=True)
        self.ready: Future = Future()
        self._thread.start()

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def submit(self, fn: Callable[[B], T]) -> "Future[T]":
        """Queue ``fn(backend)``; raises :class:`Overloaded` when ``max_pending`` jobs are already in."""
        future: Future = Future()
        with self._lock:
            if not self._thread.is_alive():
                raise MlxSdmError("the model worker has stopped")
            if self._pending >= self.max_pending:
                raise Overloaded(self._pending, max(1, math.ceil(self._pending * self._mean_job_s)))
            self._pending += 1
        self._jobs.put((fn, future))
        return future

    def shutdown(self, timeout: float = 30.0) -> None:
        """Finish the job running now, drop the queued ones (their futures fail) and stop the thread."""
        self._jobs.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # ------------------------------------------------------------------ worker thread

    def _run(self, open_backend: Callable[[], B]) -> None:
        import mlx.core as mx  # this thread's stream is the one every job runs on

        try:
            self._backend = open_backend()
            self.ready.set_result(self._backend)
        except BaseException as exc:  # reported through `ready`
            self.ready.set_exception(exc)
        while self._backend is not None:
            job = self._jobs.get()
            if job is None:
                break
            self._run_job(*job, mx=mx)
        self._fail_queued()
        # MLX needs a thread's streams destroyed by that thread before it ends (ml-explore/mlx#3126).
        mx.synchronize()
        self._backend = None
        gc.collect()
        mx.clear_streams()

    def _run_job(self, fn: Callable[[Any], Any], future: Future, *, mx: Any) -> None:
        started = time.perf_counter()
        try:
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(self._backend)
                    mx.synchronize()  # nothing left in flight on this stream between jobs
                    future.set_result(result)
                except BaseException as exc:  # delivered to the caller through the future
                    future.set_exception(exc)
        finally:
            with self._lock:
                self._pending -= 1
                self._mean_job_s = 0.8 * self._mean_job_s + 0.2 * (time.perf_counter() - started)

    def _fail_queued(self) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                fn, future = job
                if future.set_running_or_notify_cancel():
                    future.set_exception(MlxSdmError("the server is shutting down"))
                with self._lock:
                    self._pending -= 1
