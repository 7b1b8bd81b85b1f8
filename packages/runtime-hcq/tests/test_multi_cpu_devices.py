"""Several CPU devices in one process: CPU:0, CPU:1, ... are distinct devices, each with its own queue and share of
the host's cores (CPU_SHARES), and copies between them go through the runtime."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from kiln.runtime import Buffer, CorePool, Device, copy_between
from kiln.runtime.core_pool import core_share
from kiln.runtime.cpu_device import CPUDevice
from kiln.uops import dtypes


def test_cpu_devices_are_distinct_with_their_own_queue() -> None:
    first, second, third = Device["CPU:0"], Device["CPU:1"], Device["CPU:2"]
    assert first is Device["CPU"]  # CPU:0 is the first CPU device
    assert len({id(first), id(second), id(third)}) == 3
    assert isinstance(second, CPUDevice) and second.name == "CPU:1"
    assert second.engine is not first.engine and second.core_pool is not first.core_pool
    assert (first.index, second.index, third.index) == (0, 1, 2)


@pytest.mark.parametrize("size", [0, 1, 7, 4096])
def test_copy_between_cpu_devices(size: int) -> None:
    values = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    source = Buffer("CPU:1", size, dtypes.float32)
    source.copyin(values.tobytes())
    middle = Buffer("CPU:2", size, dtypes.float32)
    copy_between(middle, source)
    back = Buffer("CPU", size, dtypes.float32)
    copy_between(back, middle)
    result = np.empty(size, dtype=np.float32)
    back.copyout(memoryview(result).cast("B"))
    np.testing.assert_array_equal(result, values)


def test_copy_between_devices_refuses_different_sizes() -> None:
    with pytest.raises(ValueError, match="different sizes"):
        copy_between(Buffer("CPU:1", 3, dtypes.float32), Buffer("CPU:2", 4, dtypes.float32))


@pytest.mark.parametrize(
    ("index", "shares", "cores", "expected"),
    [
        (0, 2, [0, 1, 2, 3], (0, 1)),
        (1, 2, [0, 1, 2, 3], (2, 3)),
        (2, 2, [0, 1, 2, 3], (0, 1)),  # devices beyond the share count wrap around
        (1, 3, [0, 1, 2, 3, 4, 5, 6], (2, 3)),
        (1, 4, [5, 9], (9,)),  # more shares than cores: one core each, round robin
        (2, 4, [5, 9], (5,)),
    ],
)
def test_core_share(index: int, shares: int, cores: list[int], expected: tuple[int, ...]) -> None:
    assert core_share(index, shares, cores) == expected


def test_core_share_refuses_bad_counts() -> None:
    with pytest.raises(ValueError, match="positive number of shares, got 0"):
        core_share(0, 0)
    with pytest.raises(ValueError, match="non-negative, got -1"):
        core_share(-1, 2)


def test_pinned_core_pool_workers_run_on_their_cores() -> None:
    cores = (sorted(os.sched_getaffinity(0))[-1],)
    pool = CorePool("pinned", workers=2, cores=cores)
    seen: dict[int, tuple[int, set[int]]] = {}
    lock = threading.Lock()

    def work(core: int) -> None:
        with lock:
            seen[core] = (threading.get_ident(), set(os.sched_getaffinity(0)))

    try:
        pool.run(work, 3)
        workers = [os.sched_getaffinity(thread.native_id or 0) for thread in pool._threads]
    finally:
        pool.close()
    assert sorted(seen) == [0, 1, 2]
    assert workers == [set(cores), set(cores)]
    # a core run by a worker (any core: threads claim them in turn) ran on the pool's cores
    caller = threading.get_ident()
    assert all(affinity == set(cores) for ident, affinity in seen.values() if ident != caller)


def test_cpu_shares_gives_each_device_its_part(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPU_SHARES", "2")
    monkeypatch.setenv("CPU_PIN", "1")
    available = sorted(os.sched_getaffinity(0))
    device = CPUDevice("CPU:1")
    assert device.cores == core_share(1, 2, available)
    assert device.core_pool.workers == len(device.cores)  # pinned (CPU_PIN): one worker per core of its part
    monkeypatch.setenv("CPU_SHARES", "0")
    with pytest.raises(ValueError, match="CPU_SHARES must be at least 1, got 0"):
        CPUDevice("CPU:3")
