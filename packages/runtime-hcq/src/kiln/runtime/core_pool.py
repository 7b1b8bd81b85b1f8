"""`CorePool`: worker threads that run the cores of a multi-core CPU kernel in parallel.

A kernel with a THREAD axis reads its core number from the `core_id` parameter; a launch of `n` cores calls the
compiled function once per core number. Compiled code called through ctypes releases the GIL, so the calls really
run at the same time, one per CPU core.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence

__all__ = ["CorePool", "core_share"]


def core_share(index: int, shares: int, cores: Sequence[int] | None = None) -> tuple[int, ...]:
    """The host cores of device number `index` when the cores are split into `shares` equal parts.

    With more shares than cores, devices share cores round-robin (each still gets one). Raises ValueError for a
    non-positive `shares` or a negative `index`.
    """
    if shares < 1:
        raise ValueError(f"cores are split into a positive number of shares, got {shares}")
    if index < 0:
        raise ValueError(f"a device number is non-negative, got {index}")
    available = sorted(os.sched_getaffinity(0)) if cores is None else list(cores)
    if shares >= len(available):
        return (available[index % len(available)],)
    size = len(available) // shares
    part = index % shares
    return tuple(available[part * size : (part + 1) * size])


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
        cores: the host cores the workers are pinned to (None: not pinned); the default worker count is then one
            fewer than these cores.
    """

    def __init__(self, name: str, workers: int | None = None, cores: Sequence[int] | None = None) -> None:
        self.name = name
        self.cores = None if cores is None else tuple(cores)
        if workers is None:
            workers = max(1, (os.cpu_count() or 2) - 1) if self.cores is None else len(self.cores) - 1
        self.workers = workers
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
        if self.cores is not None:
            os.sched_setaffinity(0, self.cores)  # 0: this thread (Linux sets affinity per thread)
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
