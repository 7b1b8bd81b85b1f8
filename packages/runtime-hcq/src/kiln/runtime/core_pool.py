"""`CorePool`: worker threads that run the cores of a multi-core CPU kernel in parallel.

A kernel with a THREAD axis reads its core number from the `core_id` parameter; a launch of `n` cores calls the
compiled function once per core number. Compiled code called through ctypes releases the GIL, so the calls really
run at the same time, one per CPU core.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

__all__ = ["CorePool"]


class _Batch:
    """The calls of one launch: counts finished cores and keeps the first error."""

    def __init__(self, function: Callable[[int], None], count: int) -> None:
        self.function = function
        self.remaining = count
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.done = threading.Event()

    def run(self, core: int) -> None:
        try:
            self.function(core)
        except BaseException as error:  # reported to the launching thread, never lost in a worker
            with self.lock:
                self.error = self.error or error
        with self.lock:
            self.remaining -= 1
            finished = self.remaining == 0
        if finished:
            self.done.set()


class CorePool:
    """Threads that call `function(core)` for every core of a launch; the launching thread runs core 0 itself.

    Args:
        name: used for the thread names.
        workers: worker threads (default: the CPU count minus one, since the caller works too); started on first use.
    """

    def __init__(self, name: str, workers: int | None = None) -> None:
        self.name = name
        self.workers = max(1, (os.cpu_count() or 2) - 1) if workers is None else workers
        if self.workers < 0:
            raise ValueError(f"a core pool needs a non-negative number of workers, got {self.workers}")
        self._tasks: queue.SimpleQueue[tuple[_Batch, int] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()

    def _start(self) -> None:
        with self._start_lock:
            while len(self._threads) < self.workers:
                thread = threading.Thread(
                    target=self._work, name=f"kiln-{self.name}-core{len(self._threads) + 1}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            batch, core = task
            batch.run(core)

    def run(self, function: Callable[[int], None], count: int) -> None:
        """Calls `function(core)` for core in 0..count-1 in parallel; returns when all are done, re-raising an error."""
        if count <= 1 or self.workers == 0:
            for core in range(count):
                function(core)
            return
        if len(self._threads) < self.workers:
            self._start()
        batch = _Batch(function, count)
        for core in range(1, count):
            self._tasks.put((batch, core))
        batch.run(0)
        batch.done.wait()
        if batch.error is not None:
            raise batch.error

    def close(self) -> None:
        """Stops the workers (after the tasks already queued)."""
        for _ in self._threads:
            self._tasks.put(None)
        for thread in self._threads:
            thread.join()
        self._threads.clear()
