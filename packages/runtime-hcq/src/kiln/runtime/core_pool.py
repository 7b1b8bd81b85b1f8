"""`CorePool`: worker threads that run the cores of a multi-core CPU kernel in parallel.

A kernel with a THREAD axis reads its core number from the `core_id` parameter; a launch of `n` cores calls the
compiled function once per core number. Compiled code called through ctypes releases the GIL, so the calls really
run at the same time, one per CPU core.

Two things keep a short launch parallel. There is one worker pinned to each core (knob CPU_PIN), and a launch
wakes the workers of the cores other than its own thread's first: unpinned, Linux kept waking the worker on the core
where the launching thread was already running the first core (measured on the 2-core VM: softmax over (4096, 1024)
ran its two cores one after the other, 1.9 ms instead of 1.3). And threads claim core numbers in turn rather than
each worker owning one, so a worker that wakes late never holds up a launch: the threads already running take its
cores. An interrupt of the launching thread (Ctrl-C) leaves `run` only once no worker runs a core of the launch.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import cast

from kiln.runtime.knobs import cpu_pin

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
    """The calls of one launch. Whoever runs the batch (the launching thread or a woken worker) claims core numbers
    one at a time until none is left, so a worker that wakes late (its core busy with other work) leaves its share
    to the threads already running instead of holding up the launch. Counts finished cores and keeps the errors.

    The claim and finish counters are `itertools.count` objects: next() on one is a single C call, atomic under the
    GIL, so no lock is taken per core. `done` is a lock held from the start and released by whoever finishes the
    last core (cheaper to make and to wait on than an Event). Workers also count themselves in and out (`inside`),
    which only `abandon` reads.
    """

    def __init__(self, function: Callable[[int], None], count: int) -> None:
        self.function = function
        self.count = count
        self._claims = itertools.count()
        self._finished = itertools.count(1)
        self.errors: list[BaseException] = []  # list.append is atomic under the GIL
        self.done = threading.Lock()
        self.done.acquire()
        self._inside_lock = threading.Lock()
        self.inside = 0

    def work(self) -> None:
        """Runs unclaimed cores until every core is claimed."""
        claims, count, function = self._claims, self.count, self.function
        while (core := next(claims)) < count:
            try:
                function(core)
            except BaseException as error:  # reported to the launching thread, never lost in a worker
                self.errors.append(error)
            if next(self._finished) == count:
                self.done.release()

    def work_as_worker(self) -> None:
        """`work`, counted in `inside` from before the first claim to after the last core (workers only: a signal
        never interrupts them)."""
        with self._inside_lock:
            self.inside += 1
        self.work()
        with self._inside_lock:
            self.inside -= 1

    def abandon(self) -> None:
        """What the launching thread does when an exception not of the launch (KeyboardInterrupt from a signal
        handler, which only the main thread gets) leaves its `work` or its wait: claims every core no thread has
        started, then waits, interrupts or not, until no worker is inside the batch. Leaving earlier would let a
        worker write into buffers the caller frees and hands out again. (The finished count is not used: the
        interrupt may have come between this thread's claim of a core and its count.) A worker that enters after
        the claims are drained finds nothing to run; one that claimed a core before counted itself in first."""
        while next(self._claims) < self.count:
            pass
        while True:
            try:
                with self._inside_lock:
                    if self.inside == 0:
                        return
                time.sleep(0.0002)
            except KeyboardInterrupt:  # another Ctrl-C while the running cores finish: still wait for them
                continue


def _cpu_reader() -> Callable[[], int] | None:
    # glibc's sched_getcpu (the core the calling thread runs on, from the vDSO: no system call); None elsewhere
    try:
        function = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_int
    function.argtypes = []
    return cast(Callable[[], int], function)


_current_cpu = _cpu_reader()


class CorePool:
    """Threads that call `function(core)` for every core of a launch; the launching thread takes part.

    A launch wakes up to `count - 1` workers and runs cores itself; every thread claims the next core number until
    all are claimed, so each core runs exactly once, in parallel where workers are free.

    Args:
        name: used for the thread names.
        workers: worker threads, started on first use (default: one per core, so that wherever the launching
            thread runs, every other core has a worker; the core count minus one when CPU_PIN is off).
        cores: the host cores of this pool (None: the cores the creating thread may run on).
            With the knob CPU_PIN on (the default), worker `k` (0, 1, ...) is pinned to core `cores[k mod n]`, and a
            launch wakes the workers of the cores other than the launching thread's own first. The launching thread
            is never pinned.
    """

    def __init__(self, name: str, workers: int | None = None, cores: Sequence[int] | None = None) -> None:
        self.name = name
        self.cores = None if cores is None else tuple(cores)
        # the cores to pin to, read here: the thread that starts the workers may itself be pinned
        self._pin_cores = self.cores
        if self._pin_cores is None and hasattr(os, "sched_getaffinity"):
            self._pin_cores = tuple(sorted(os.sched_getaffinity(0)))
        self._pinned = bool(
            cpu_pin() and self._pin_cores and hasattr(os, "sched_setaffinity") and _current_cpu is not None
        )
        if workers is None:
            count = len(self.cores) if self.cores is not None else os.cpu_count() or 2
            workers = count if self._pinned else max(1, count - 1) if self.cores is None else count - 1
        self.workers = workers
        if self.workers < 0:
            raise ValueError(f"a core pool needs a non-negative number of workers, got {self.workers}")
        self._threads: list[threading.Thread] = []
        self._queues: list[queue.SimpleQueue[_Batch | None]] = []
        self._worker_cores: list[int | None] = []
        # the workers' queues in the order a launch from a given core wakes them (other cores' workers first)
        self._wake_order: dict[int, list[queue.SimpleQueue[_Batch | None]]] = {}
        self._start_lock = threading.Lock()

    def _start(self) -> None:
        with self._start_lock:
            cores = self._pin_cores
            while len(self._threads) < self.workers:
                number = len(self._threads)
                core = cores[number % len(cores)] if self._pinned and cores else None
                affinity = (core,) if core is not None else self.cores
                tasks: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
                thread = threading.Thread(
                    target=self._work, args=(tasks, affinity), name=f"kiln-{self.name}-core{number}", daemon=True
                )
                thread.start()
                self._queues.append(tasks)
                self._worker_cores.append(core)
                self._threads.append(thread)
            self._wake_order.clear()

    @staticmethod
    def _work(tasks: queue.SimpleQueue[_Batch | None], affinity: tuple[int, ...] | None) -> None:
        if affinity is not None:
            # 0: this thread (Linux sets affinity per thread). A core this process may no longer use leaves the
            # worker unpinned; the launch still completes.
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, affinity)
        while (batch := tasks.get()) is not None:
            batch.work_as_worker()

    def _queues_for(self, here: int) -> list[queue.SimpleQueue[_Batch | None]]:
        order = self._wake_order.get(here)
        if order is None:
            ranked = sorted(range(len(self._queues)), key=lambda k: self._worker_cores[k] == here)  # stable
            order = self._wake_order[here] = [self._queues[k] for k in ranked]
        return order

    def run(self, function: Callable[[int], None], count: int) -> None:
        """Calls `function(core)` for core in 0..count-1 in parallel; returns when all are done, re-raising an error."""
        if count <= 1 or self.workers == 0:
            for core in range(count):
                function(core)
            return
        if len(self._threads) < self.workers:
            self._start()
        # pinned workers: wake those on the other cores first, or a worker would wait for the core this thread is
        # about to keep busy (unpinned, Linux woke the worker on the launching thread's core again and again)
        here = _current_cpu() if self._pinned and _current_cpu is not None else -1
        batch = _Batch(function, count)
        try:
            for tasks in self._queues_for(here)[: count - 1]:
                tasks.put(batch)
            batch.work()
            batch.done.acquire()
        except BaseException:  # raised in this thread by a signal handler, not by a core (those are kept)
            batch.abandon()
            raise
        if batch.errors:
            raise batch.errors[0]

    def close(self) -> None:
        """Stops the workers (after the tasks already queued)."""
        for tasks in self._queues:
            tasks.put(None)
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        self._queues.clear()
        self._worker_cores.clear()
        self._wake_order.clear()
