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

Compiled kernels launch natively (`run_kernel`): given a core launcher (kiln.renderers' `CoreLauncher`, built by the
CPU compiler), the claiming, the calls and the wait for the last core happen in native code without the GIL, and a
pinned worker keeps polling for the next launch for CPU_SPIN microseconds before it sleeps. On the 2-core VM this
took `(1024,1024) @ (1024,16)` from ~330 to ~260 us a call: the two thread wake-ups per launch it saves cost
~25 us each there. Python callables (`run`) keep the threads' queues; a polling worker looks at its queue when
`run` bumps the state's POKE word.
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

from kiln.renderers import CoreLauncher
from kiln.runtime.fork_hooks import renew_after_fork
from kiln.runtime.knobs import cpu_pin, cpu_spin_microseconds

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

# the launcher state's words (kiln.renderers' core_launcher)
CLAIM = CoreLauncher.CLAIM
FINISHED = CoreLauncher.FINISHED
FUNCTION = CoreLauncher.FUNCTION
POKE = CoreLauncher.POKE
EXCLUDE = CoreLauncher.EXCLUDE
ARGUMENT_COUNT = CoreLauncher.ARGUMENT_COUNT
ARGUMENTS = CoreLauncher.ARGUMENTS
MAX_ARGUMENTS = CoreLauncher.MAX_ARGUMENTS
HEADER_WORDS = CoreLauncher.HEADER_WORDS
WORKER_WORDS = CoreLauncher.WORKER_WORDS


def _no_launcher(state: int, word: int, count: int, phase: int) -> int:
    raise RuntimeError("this core pool has no native launcher")


_WAKE = object()
"""Put in a worker's queue by a native launch that found the worker asleep (its parked flag claimed)."""
_LAUNCH_NUMBERS = 0x7FFFFFFF  # launch numbers are 31 bits (the claim word's high half), 1.. and round again


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

    def __init__(
        self,
        name: str,
        workers: int | None = None,
        cores: Sequence[int] | None = None,
        launcher: Callable[[], CoreLauncher | None] | None = None,
    ) -> None:
        renew_after_fork(self)  # its workers do not survive a fork
        self.name = name
        self._launcher_factory = launcher
        self.launcher: CoreLauncher | None = None
        self._state: ctypes.Array[ctypes.c_int64] | None = None
        self._state_address = 0
        self._budget = 0
        self._launch_lock = threading.Lock()
        self._launches = 0
        self._launch_function: Callable[[int, int, int, int], int] = _no_launcher
        self.cores = None if cores is None else tuple(cores)
        # the cores to pin to, read here: the thread that starts the workers may itself be pinned
        self._pin_cores = self.cores
        if self._pin_cores is None and hasattr(os, "sched_getaffinity"):
            self._pin_cores = tuple(sorted(os.sched_getaffinity(0)))
        self._pinned = bool(
            cpu_pin() and self._pin_cores and hasattr(os, "sched_setaffinity") and _current_cpu is not None
        )
        # CPU_SPIN, read here like CPU_PIN; unpinned, a polling worker could sit on the launching thread's core
        self._spin = cpu_spin_microseconds() if self._pinned else 0
        if workers is None:
            count = len(self.cores) if self.cores is not None else os.cpu_count() or 2
            workers = count if self._pinned else max(1, count - 1) if self.cores is None else count - 1
        self.workers = workers
        if self.workers < 0:
            raise ValueError(f"a core pool needs a non-negative number of workers, got {self.workers}")
        self._threads: list[threading.Thread] = []
        self._queues: list[queue.SimpleQueue[object]] = []
        self._worker_cores: list[int | None] = []
        # the workers' queues in the order a launch from a given core wakes them (other cores' workers first)
        self._wake_order: dict[int, list[queue.SimpleQueue[object]]] = {}
        self._start_lock = threading.Lock()

    def _start(self) -> None:
        with self._start_lock:
            cores = self._pin_cores
            if self._state is None and self._launcher_factory is not None and self.workers > 0:
                # the native launcher is built (compiled once per process) when the pool starts: a device whose
                # kernels never use two cores never builds it
                self.launcher = self._launcher_factory()
                if self.launcher is not None:
                    self._launch_function = self.launcher.launch
                    self._state = CoreLauncher.new_state(self.workers)
                    self._state_address = ctypes.addressof(self._state)
                    self._budget = int(self._spin * self.launcher.polls_per_microsecond())
            while len(self._threads) < self.workers:
                number = len(self._threads)
                core = cores[number % len(cores)] if self._pinned and cores else None
                affinity = (core,) if core is not None else self.cores
                if self._state is not None:
                    self._state[HEADER_WORDS + WORKER_WORDS * number] = -1 if core is None else core
                tasks: queue.SimpleQueue[object] = queue.SimpleQueue()
                work = self._work if self._state is None else self._work_native
                thread = threading.Thread(
                    target=work, args=(tasks, affinity, number), name=f"kiln-{self.name}-core{number}", daemon=True
                )
                thread.start()
                self._queues.append(tasks)
                self._worker_cores.append(core)
                self._threads.append(thread)
            self._wake_order.clear()

    @staticmethod
    def _pin(affinity: tuple[int, ...] | None) -> None:
        if affinity is not None:
            # 0: this thread (Linux sets affinity per thread). A core this process may no longer use leaves the
            # worker unpinned; the launch still completes.
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, affinity)

    @classmethod
    def _work(cls, tasks: queue.SimpleQueue[object], affinity: tuple[int, ...] | None, number: int) -> None:
        cls._pin(affinity)
        while isinstance(batch := tasks.get(), _Batch):
            batch.work_as_worker()

    def _work_native(self, tasks: queue.SimpleQueue[object], affinity: tuple[int, ...] | None, number: int) -> None:
        """A worker with a native launcher: polls for native launches in the launcher's `kiln_core_worker` (without
        the GIL); between polling spells it takes what its queue holds (Python batches, wake-ups, None to stop)."""
        self._pin(affinity)
        state, address = self._state, self._state_address
        assert state is not None and self.launcher is not None
        worker, budget = self.launcher.worker, self._budget
        # No launch is seen yet (-1 is no launch number), so the first look at the claim word takes part in the
        # launch there if it has unclaimed cores. Reading that launch's number here instead lost a wake-up: a launch
        # published while this thread was starting found its parked flag clear (not parked: polling, so not woken)
        # and counted on it, and it then read that launch's number here and slept through it.
        seen = -1
        while True:
            poke = state[POKE]  # read before looking at the queue: a `run` after this look changes it
            try:
                item = tasks.get_nowait()
            except queue.Empty:
                result = worker(address, number, seen, poke, budget)
                seen = result >> 1
                if not result & 1:
                    continue  # poked: something was queued (maybe for another worker)
                item = tasks.get()  # parked: sleep until a launch wakes this worker or work is queued
            if item is None:
                return
            if isinstance(item, _Batch):
                item.work_as_worker()

    def _queues_for(self, here: int) -> list[queue.SimpleQueue[object]]:
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
            if self._state is not None:
                self._state[POKE] += 1  # polling workers return to look at their queues
            batch.work()
            batch.done.acquire()
        except BaseException:  # raised in this thread by a signal handler, not by a core (those are kept)
            batch.abandon()
            raise
        if batch.errors:
            raise batch.errors[0]

    def run_kernel(self, address: int, function: Callable[..., None], arguments: Sequence[int], count: int) -> None:
        """Runs the `count` cores of the compiled kernel at `address`: natively when the pool has a core launcher and
        the kernel takes at most MAX_ARGUMENTS parameters (its `arguments`, then the core number), else as `run` of
        `function(*arguments, core)` (`function`: the kernel's ctypes call)."""
        if len(self._threads) < self.workers:
            self._start()
        if self._state is None or len(arguments) >= MAX_ARGUMENTS or count <= 1:
            self.run(lambda core: function(*arguments, core), count)
            return
        state, launch = self._state, self._launch_function
        here = _current_cpu() if self._pinned and _current_cpu is not None else -1
        with self._launch_lock:
            state[FUNCTION] = address
            state[ARGUMENT_COUNT] = len(arguments)
            state[ARGUMENTS : ARGUMENTS + len(arguments)] = arguments  # type: ignore[call-overload]  # any sequence
            state[FINISHED] = 0
            state[EXCLUDE] = here
            self._launches = self._launches % _LAUNCH_NUMBERS + 1
            word = self._launches << 32 | count
            woken = 0
            try:
                woken = launch(self._state_address, word, count, 0)
                if woken:
                    self._wake(woken)
                    launch(self._state_address, word, count, 1)
            except BaseException:
                # an interrupt (a signal handler's exception) between the calls: the launch is published, so it is
                # finished before the caller may reuse its buffers, and every worker whose flag was claimed is woken
                self._finish_interrupted(word, count)
                raise

    def _wake(self, woken: int) -> None:
        state, queues = self._state, self._queues
        assert state is not None
        listed = HEADER_WORDS + WORKER_WORDS * self.workers
        for position in range(woken):
            queues[state[listed + position]].put(_WAKE)

    def _finish_interrupted(self, word: int, count: int) -> None:
        # Every worker gets a wake-up, not only those phase 0 named: the interrupt may have come before its count
        # was even stored, and a worker whose parked flag was claimed but never woken would sleep for good while
        # launches counted on it. A spare wake-up only makes a worker poll once more.
        while True:
            try:
                for tasks in self._queues:
                    tasks.put(_WAKE)
                self._launch_function(self._state_address, word, count, 1)
                return
            except KeyboardInterrupt:  # another Ctrl-C meanwhile: the launch must still finish
                continue

    def after_fork_in_child(self) -> None:
        """Makes this process's copy usable after `os.fork()` (run by `fork_hooks` in the child): the workers did
        not survive the fork, so the pool forgets them and starts new ones at its next launch (the native state is
        kept: a new worker marks itself polling when it starts); the locks are new."""
        self._threads = []
        self._queues = []
        if self._state is not None:
            # a launch another thread had published at the fork has no launching thread here: its unclaimed cores
            # are dropped, or a new worker (that sees no launch yet) would run one and count it in the next launch
            self._state[CLAIM] = self._state[CLAIM] >> 32 << 32
        self._worker_cores = []
        self._wake_order = {}
        self._start_lock = threading.Lock()
        self._launch_lock = threading.Lock()

    def close(self) -> None:
        """Stops the workers (after the tasks already queued)."""
        for tasks in self._queues:
            tasks.put(None)
        if self._state is not None:
            self._state[POKE] += 1
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        self._queues.clear()
        self._worker_cores.clear()
        self._wake_order.clear()
