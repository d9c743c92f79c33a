"""The one thread that owns MLX state (MLX streams are thread-local): a queue of jobs, each resolving
a :class:`concurrent.futures.Future`. Nothing else: what a job does is the caller's business.

MLX needs a thread's streams destroyed by that thread before it ends, or the process may abort at
exit ("terminate called without an active exception", ml-explore/mlx#3126): the worker calls
``mx.synchronize()`` after each job and, when it stops, drops its state and calls
``mx.clear_streams()``. An atexit hook stops workers left running.
"""

from __future__ import annotations

import atexit
import gc
import queue
import threading
import weakref
from concurrent.futures import Future
from typing import Any, Callable

from mlx_sdm.errors import MlxSdmError


class MlxWorker:
    """Runs submitted callables in order on its own thread."""

    def __init__(self, *, name: str = "mlx-sdm-engine", on_stop: Callable[[], None] | None = None):
        self._jobs: queue.Queue = queue.Queue()
        self._busy = threading.Event()
        self._on_stop = on_stop
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        _LIVE.add(self)

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        if not self._thread.is_alive():
            future.set_exception(MlxSdmError("the chat engine has shut down"))
            return future
        self._jobs.put((fn, future))
        return future

    def stop(self, wait: bool = True, timeout: float | None = 30.0) -> None:
        self._jobs.put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        import mlx.core as mx  # this thread's MLX stream is the one every job runs on

        while True:
            job = self._jobs.get()
            if job is None:
                break
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            self._busy.set()
            try:
                result = fn()
                mx.synchronize()  # no work left in flight on this thread's stream between jobs
                future.set_result(result)
            except BaseException as exc:  # delivered to the caller through the future
                future.set_exception(exc)
            finally:
                self._busy.clear()
        mx.synchronize()
        if self._on_stop is not None:
            self._on_stop()  # the owner drops its MLX state here, on this thread
        gc.collect()
        mx.clear_streams()


_LIVE: "weakref.WeakSet[MlxWorker]" = weakref.WeakSet()


@atexit.register
def _stop_live_workers() -> None:
    """A worker left running at interpreter exit is stopped cleanly (its thread clears its MLX streams)."""
    for worker in list(_LIVE):
        worker.stop(wait=True, timeout=10)
