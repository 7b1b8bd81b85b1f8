"""BEAM's worker processes: candidate programs are built (optimized, lowered, rendered, compiled) in parallel.

A search step's candidates are all known before any of them is timed, and building one (mostly the compiler) costs
far more than timing it; so `BuildPool.build` hands them to worker processes and returns their PROGRAM uops in the
candidates' order, and the search times them one by one in that order, as the serial search does: the result is the
same for the same timings. Timing stays in the searching process, on its device, one kernel at a time (kernels
timed side by side would slow each other down).

The workers are spawned once (a fresh interpreter each: no forked locks or device state) and reused by every step
and search of the process. A candidate whose build runs past BEAM_TIMEOUT seconds (a compiler stuck on a kernel)
has its worker killed and replaced, and counts as a candidate that failed to build (skipped, as the serial search
skips a candidate whose build raises RuntimeError). Each job carries the searching process's knob values, so a
worker builds under the same settings (disk cache, pipelines) as the caller's `Context`.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import pickle
import time
import traceback
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from kiln.codegen.kernel_info import Opt
from kiln.codegen.renderer import Renderer
from kiln.uops import Context, UOp, knobs

Job = tuple[UOp, Renderer, tuple[Opt, ...]]
"""One candidate: the prepared kernel sink, the renderer, the opt sequence to apply."""


@dataclass(frozen=True)
class BuildFailure:
    """A candidate that did not build: `runtime` when it raised RuntimeError (the search skips it), `timed_out` when
    its worker ran past the timeout (killed: skipped too); any other exception's traceback is `message`."""

    message: str
    runtime: bool = False
    timed_out: bool = False


def beam_worker_count() -> int:
    """The BEAM_WORKERS knob; 0 (its default) means min(the cores this process may use, 8)."""
    count = int(knobs.BEAM_WORKERS)
    if count < 0:
        raise ValueError(f"BEAM_WORKERS must be 0 (automatic) or a worker count, got {count}")
    if count == 0:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        count = min(cores, 8)
    return count


def can_send(sink: UOp, renderer: Renderer) -> bool:
    """Whether a job of `sink` and `renderer` can be sent to a worker (pickled); else the search builds in process."""
    try:
        pickle.dumps((sink, renderer))
    except (TypeError, AttributeError, pickle.PicklingError):
        return False
    return True


def _knob_values() -> dict[str, Any]:
    return {knob.name: knob.value() for knob in knobs.all()}


_READY = "ready"
_STARTUP_SECONDS = 120.0
"""How long a spawned worker may take to start (import kiln) before it counts as dead; not part of any job's timeout:
under load a fresh worker's imports took seconds, and counted against the job they started with they failed
candidates that build in milliseconds."""


def _worker_main(connection: Connection) -> None:
    """A worker's loop: build each job it receives, send back (index, PROGRAM uop or BuildFailure); None ends it."""
    from kiln.codegen.lifecycle import get_program

    connection.send(_READY)  # started and imported: from here on a job's time is its build's
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, values, (sink, renderer, opts) = message
        registered = {knob.name for knob in knobs.all()}
        result: UOp | BuildFailure
        try:
            with Context(**{name: value for name, value in values.items() if name in registered}):
                result = get_program(sink, renderer, opts)
        except RuntimeError:
            result = BuildFailure(traceback.format_exc(), runtime=True)
        except Exception:  # reported to the searching process, which rebuilds the candidate to raise it itself
            result = BuildFailure(traceback.format_exc())
        connection.send((index, result))


class _Worker:
    __slots__ = ("connection", "process", "ready")

    def __init__(self, context: Any) -> None:
        parent, child = context.Pipe()
        self.process: BaseProcess = context.Process(target=_worker_main, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.connection: Connection = parent
        self.ready = False

    def wait_ready(self) -> bool:
        """Waits for the worker's start-up message (once); False when it died or did not start in time."""
        if not self.ready:
            try:
                self.ready = self.connection.poll(_STARTUP_SECONDS) and self.connection.recv() == _READY
            except (EOFError, OSError):
                return False
        return self.ready

    def stop(self, kill: bool) -> None:
        if kill:
            self.process.kill()
        else:
            try:
                self.connection.send(None)
            except (OSError, ValueError):
                self.process.kill()
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


class BuildPool:
    """`workers` spawned processes that build candidates; `build(jobs, timeout)` returns results in job order."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"a build pool needs at least one worker, got {workers}")
        self._context = multiprocessing.get_context("spawn")
        self._workers = [_Worker(self._context) for _ in range(workers)]
        self.replaced = 0
        """Workers killed for running past the timeout (or found dead) and replaced."""

    @property
    def size(self) -> int:
        """The number of worker processes."""
        return len(self._workers)

    def build(self, jobs: list[Job], timeout: float) -> list[UOp | BuildFailure]:
        """Each job's PROGRAM uop (or BuildFailure), in job order; a job running past `timeout` seconds fails."""
        if timeout <= 0:
            raise ValueError(f"the per-candidate timeout must be positive seconds, got {timeout}")
        values = _knob_values()
        results: list[UOp | BuildFailure | None] = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        idle = list(self._workers)
        busy: dict[Connection, tuple[_Worker, int, float]] = {}
        while pending or busy:
            while pending and idle:
                worker, index = idle.pop(), pending.popleft()
                try:
                    if not worker.wait_ready():
                        raise OSError("the build worker did not start")
                    worker.connection.send((index, values, jobs[index]))
                except (OSError, ValueError):  # a worker that died while idle, or never started
                    pending.appendleft(index)
                    idle.append(self._replace(worker))
                    continue
                busy[worker.connection] = (worker, index, time.monotonic() + timeout)
            now = time.monotonic()
            ready = wait(list(busy), timeout=max(0.0, min(deadline for _, _, deadline in busy.values()) - now))
            for connection in ready:
                assert isinstance(connection, Connection)
                worker, index, _ = busy.pop(connection)
                try:
                    _, result = connection.recv()
                except (EOFError, OSError):  # the worker died (a crash in the compiler)
                    results[index] = BuildFailure(f"the build worker exited with {worker.process.exitcode}")
                    idle.append(self._replace(worker))
                    continue
                results[index] = result
                idle.append(worker)
            now = time.monotonic()
            for connection, (worker, index, deadline) in list(busy.items()):
                if now >= deadline:
                    del busy[connection]
                    results[index] = BuildFailure(f"building took over {timeout:g} s", timed_out=True)
                    idle.append(self._replace(worker))
        return [result if result is not None else BuildFailure("not built") for result in results]

    def _replace(self, worker: _Worker) -> _Worker:
        worker.stop(kill=True)
        fresh = _Worker(self._context)
        self._workers[self._workers.index(worker)] = fresh
        self.replaced += 1
        return fresh

    def close(self) -> None:
        """Stop every worker (they finish nothing further)."""
        for worker in self._workers:
            worker.stop(kill=False)
        self._workers = []


class _Pools:
    """The process's pool, made on first use and reused (a new one only when BEAM_WORKERS changes)."""

    pool: BuildPool | None = None


def shared_pool(workers: int) -> BuildPool:
    """The process's BuildPool of `workers` processes (spawned on first use; stopped at exit)."""
    current = _Pools.pool
    if current is not None and current.size == workers:
        return current
    if current is not None:
        current.close()
    _Pools.pool = BuildPool(workers)
    return _Pools.pool


def close_shared_pool() -> None:
    """Stop the process's pool, if any (at exit; also for tests)."""
    if _Pools.pool is not None:
        _Pools.pool.close()
        _Pools.pool = None


atexit.register(close_shared_pool)
