"""Test devices for the runtime's own tests (no CPU/PYTHON device exists in this package yet).

TESTHOST: an HCQ device whose memory is host memory and whose queue is a software `ThreadQueueEngine`.
TESTOPAQUE: a device whose allocator hands out opaque ids with no host view and no sub-buffers, so copies must
go through staging memory.

The helper modules here (`conformance_kernels`, `device_opt_fuzz`, `fake_libcuda`) import by name: this folder is on
pytest's `pythonpath` (root pyproject.toml), as is codegen's tests folder, whose kernel corpus and opt fuzzer they run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kiln.runtime import BufferSpec, Device, DeviceBase, HCQCompiled, HostAllocator, LRUAllocator, ThreadQueueEngine


class HostTestDevice(HCQCompiled):
    """A host-memory device serviced by a worker thread."""

    def __init__(self, name: str) -> None:
        self.engine = ThreadQueueEngine(name)
        super().__init__(name, HostAllocator(name, synchronize=lambda: self.synchronize(timeout=10.0)), self.engine)


class OpaqueAllocator(LRUAllocator[int]):
    """Memory the host cannot see: blocks are ids of bytearrays held by the allocator."""

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.blocks: dict[int, bytearray] = {}
        self.next_id = 1

    def _alloc(self, size: int, options: BufferSpec) -> int:
        block, self.next_id = self.next_id, self.next_id + 1
        self.blocks[block] = bytearray(size)
        return block

    def _free(self, opaque: int, options: BufferSpec) -> None:
        del self.blocks[opaque]

    def _copyin(self, dest: int, src: memoryview) -> None:
        self.blocks[dest][:] = src

    def _copyout(self, dest: memoryview, src: int) -> None:
        dest[:] = self.blocks[src]


class OpaqueTestDevice(DeviceBase):
    """A device whose memory is reachable only through copies."""

    def __init__(self, name: str) -> None:
        super().__init__(name, OpaqueAllocator(name))


Device.register("TESTHOST", HostTestDevice)
Device.register("TESTOPAQUE", OpaqueTestDevice)


@pytest.fixture
def host_device() -> Iterator[HostTestDevice]:
    """A fresh TESTHOST device (not the cached one), closed after the test."""
    device = HostTestDevice("TESTHOST:fresh")
    yield device
    device.engine.close(timeout=5.0)
