"""A freed block goes back to the device only once the device's timeline has passed its last use.

Before, `LRU=0` unmapped a block at its free while a queued kernel still wrote it, and an out-of-memory retry
unmapped the cached blocks without waiting for the device: the kernel then wrote into unmapped memory (SIGSEGV).
The kernels here look at the block's mapping when they run instead of writing into it, so the old behaviour fails
an assertion instead of killing the test process.
"""

from __future__ import annotations

import threading

import pytest

from kiln.runtime import HCQArgsState, HCQCompiled, HostAllocator, KernelArgLayout, OutOfMemoryError
from kiln.runtime.host_allocator import HostMemory
from kiln.uops import Context

Launch = tuple[int, int, int]


def no_args() -> HCQArgsState:
    return HCQArgsState(KernelArgLayout(()), memoryview(bytearray(8)), [])


class _MappingProbe:
    """A kernel that waits for the test, then records whether the block it would write is still mapped."""

    def __init__(self, memory: HostMemory) -> None:
        self.memory = memory
        self.gate = threading.Event()
        self.mapped_when_run: list[bool] = []

    def __call__(self, args: HCQArgsState, global_size: Launch, local_size: Launch) -> None:
        self.gate.wait(10.0)
        mapped = not self.memory.mapping.closed
        self.mapped_when_run.append(mapped)
        if mapped:
            self.memory.view()[:] = b"\x07" * self.memory.size  # what the kernel's store would do


def _allocator(device: HCQCompiled) -> HostAllocator:
    assert isinstance(device.allocator, HostAllocator)
    return device.allocator


def test_with_lru_off_a_block_freed_under_a_queued_kernel_is_unmapped_only_after_it(host_device: HCQCompiled) -> None:
    allocator = _allocator(host_device)
    probe = _MappingProbe(allocator.alloc(4096))
    host_device.execute(probe, no_args(), (1,))
    with Context(LRU=0):
        allocator.free(probe.memory, 4096)  # what dropping a tensor right after realize() does
        assert allocator.deferred_bytes == 4096
        assert not probe.memory.mapping.closed
        probe.gate.set()
        host_device.synchronize(timeout=10.0)
    assert probe.mapped_when_run == [True]
    assert probe.memory.mapping.closed  # released once the timeline passed the launch
    assert allocator.deferred_bytes == 0


def test_a_block_freed_when_the_device_is_idle_is_released_at_once(host_device: HCQCompiled) -> None:
    allocator = _allocator(host_device)
    memory = allocator.alloc(4096)
    host_device.execute(lambda args, global_size, local_size: None, no_args(), (1,))
    host_device.synchronize(timeout=10.0)
    with Context(LRU=0):
        allocator.free(memory, 4096)
    assert memory.mapping.closed and allocator.deferred_bytes == 0


def test_out_of_memory_waits_for_the_device_before_unmapping_cached_blocks(host_device: HCQCompiled) -> None:
    allocator = _allocator(host_device)
    allocator.max_bytes = allocator.allocated_bytes + 8192
    probe = _MappingProbe(allocator.alloc(8192))
    host_device.execute(probe, no_args(), (1,))
    allocator.free(probe.memory, 8192)  # into the LRU cache while the kernel still waits to write it
    assert allocator.cached_bytes == 8192
    opener = threading.Timer(0.05, probe.gate.set)  # the kernel finishes while the allocation waits for the device
    opener.start()
    try:
        block = allocator.alloc(4096)  # over the cap with the cached block: empties the cache and retries
    finally:
        opener.join()
    assert probe.mapped_when_run == [True]
    assert probe.memory.mapping.closed and allocator.cached_bytes == 0
    allocator.free(block, 4096)


def test_out_of_memory_still_raises_naming_the_bytes_after_releasing_deferred_blocks(host_device: HCQCompiled) -> None:
    allocator = _allocator(host_device)
    allocator.max_bytes = allocator.allocated_bytes + 8192
    probe = _MappingProbe(allocator.alloc(8192))
    host_device.execute(probe, no_args(), (1,))
    with Context(LRU=0):
        allocator.free(probe.memory, 8192)
    assert allocator.deferred_bytes == 8192
    opener = threading.Timer(0.2, probe.gate.set)  # the kernel finishes while the retry waits for the device
    opener.start()
    try:
        with pytest.raises(OutOfMemoryError, match=r"could not allocate 16384 bytes \(freed 8192 cached bytes"):
            allocator.alloc(16384)
    finally:
        opener.join()
    assert probe.mapped_when_run == [True] and allocator.deferred_bytes == 0
    block = allocator.alloc(8192)  # the released block's room is usable again
    allocator.free(block, 8192)


def test_drop_after_launch_stress(host_device: HCQCompiled) -> None:
    # the bounded CI form: 50 blocks each dropped while a queued kernel is about to write it, with LRU off
    allocator = _allocator(host_device)
    probes = []
    with Context(LRU=0):
        for _ in range(50):
            probe = _MappingProbe(allocator.alloc(4096))
            probe.gate.set()
            host_device.execute(probe, no_args(), (1,))
            allocator.free(probe.memory, 4096)
            probes.append(probe)
        host_device.synchronize(timeout=10.0)
    assert [each.mapped_when_run for each in probes] == [[True]] * 50
    assert all(each.memory.mapping.closed for each in probes) and allocator.deferred_bytes == 0
