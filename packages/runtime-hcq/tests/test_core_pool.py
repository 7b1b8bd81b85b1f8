"""CorePool: every core of a launch runs exactly once, really in parallel, and errors reach the launching thread."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from kiln.runtime import CorePool


def test_every_core_runs_once_at_the_same_time() -> None:
    pool = CorePool("test", workers=3)
    cores: Counter[int] = Counter()
    threads: set[int] = set()
    lock = threading.Lock()
    # all four calls must be inside the function at once to pass the barrier: they run in parallel
    meeting = threading.Barrier(4, timeout=10)

    def work(core: int) -> None:
        meeting.wait()
        with lock:
            cores[core] += 1
            threads.add(threading.get_ident())

    for _ in range(5):
        meeting.reset()
        pool.run(work, 4)
    assert cores == Counter({core: 5 for core in range(4)})
    assert threading.get_ident() in threads and len(threads) == 4  # the launching thread runs core 0
    pool.close()


def test_more_cores_than_workers_still_run_each_once() -> None:
    pool = CorePool("test", workers=2)
    seen: list[int] = []
    lock = threading.Lock()

    def work(core: int) -> None:
        with lock:
            seen.append(core)

    pool.run(work, 13)
    assert sorted(seen) == list(range(13))
    pool.close()


def test_an_error_in_any_core_reaches_the_caller_after_all_cores_finish() -> None:
    pool = CorePool("test", workers=2)
    finished: list[int] = []

    def work(core: int) -> None:
        if core == 2:
            raise ArithmeticError("core 2 failed")
        finished.append(core)

    with pytest.raises(ArithmeticError, match="core 2 failed"):
        pool.run(work, 5)
    assert sorted(finished) == [0, 1, 3, 4]
    pool.run(lambda core: finished.append(10 + core), 2)  # the pool still works
    assert sorted(finished)[-2:] == [10, 11]
    pool.close()


def test_without_workers_cores_run_in_order_on_the_caller() -> None:
    seen: list[tuple[int, int]] = []
    CorePool("serial", workers=0).run(lambda core: seen.append((core, threading.get_ident())), 3)
    assert seen == [(core, threading.get_ident()) for core in range(3)]
    with pytest.raises(ValueError, match="non-negative number of workers"):
        CorePool("bad", workers=-1)
