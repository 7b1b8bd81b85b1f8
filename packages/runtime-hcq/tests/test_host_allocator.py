"""HostAllocator: page-aligned host memory, copies, views, the byte cap and direct transfers."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import numpy as np
import pytest

from kiln.runtime import BufferSpec, HostAllocator, OutOfMemoryError


def test_blocks_are_page_aligned_and_distinct() -> None:
    allocator = HostAllocator("HOST")
    blocks = [allocator.alloc(size) for size in (1, 100, 4096, 5000)]
    addresses = [block.address for block in blocks]
    assert all(address % mmap.PAGESIZE == 0 for address in addresses)
    assert len(set(addresses)) == len(addresses)


def test_copy_in_and_out_round_trip() -> None:
    allocator = HostAllocator("HOST")
    payload = os.urandom(10_000)
    block = allocator.alloc(len(payload))
    allocator._copyin(block, memoryview(payload))
    out = bytearray(len(payload))
    allocator._copyout(memoryview(out), block)
    assert bytes(out) == payload
    # The memory at the block's address holds the bytes too (ctypes reads it independently of the allocator).
    assert ctypes.string_at(block.address, len(payload)) == payload


def test_offset_views_alias_the_block() -> None:
    allocator = HostAllocator("HOST")
    block = allocator.alloc(256)
    view = allocator._offset(block, 16, 100)
    assert view.address == block.address + 100
    allocator._copyin(view, memoryview(bytes(range(16))))
    assert bytes(allocator._as_buffer(block)[100:116]) == bytes(range(16))
    assert bytes(allocator._as_buffer(block)[:100]) == bytes(100)


def test_as_buffer_is_zero_copy() -> None:
    allocator = HostAllocator("HOST")
    block = allocator.alloc(64)
    host = np.frombuffer(allocator._as_buffer(block), dtype=np.uint8)
    host[:] = np.arange(64, dtype=np.uint8)
    assert ctypes.string_at(block.address, 64) == bytes(range(64))


def test_synchronize_hook_runs_before_host_access() -> None:
    calls: list[str] = []
    allocator = HostAllocator("HOST", synchronize=lambda: calls.append("sync"))
    block = allocator.alloc(8)
    allocator._copyin(block, memoryview(bytes(8)))
    allocator._copyout(memoryview(bytearray(8)), block)
    allocator._as_buffer(block)
    assert calls == ["sync"] * 3


def test_max_bytes_cap_triggers_cache_flush_then_out_of_memory() -> None:
    allocator = HostAllocator("HOST:capped", max_bytes=3 * 4096)
    first = allocator.alloc(4096)
    allocator.free(first, 4096)
    big = allocator.alloc(3 * 4096)  # needs the cached page back
    assert allocator.allocated_bytes == 3 * 4096 and allocator.cached_bytes == 0
    with pytest.raises(OutOfMemoryError, match=r"HOST:capped.*4096 bytes"):
        allocator.alloc(4096)
    allocator.free(big, 3 * 4096, BufferSpec(nolru=True))
    assert allocator.allocated_bytes == 0


def test_freeing_a_block_with_a_live_host_view_keeps_the_view_valid() -> None:
    allocator = HostAllocator("HOST")
    block = allocator.alloc(32)
    allocator._copyin(block, memoryview(b"k" * 32))
    view = allocator._as_buffer(block)
    allocator.free(block, 32, BufferSpec(nolru=True))  # cannot unmap yet: the view still exports the mapping
    assert bytes(view) == b"k" * 32


def test_transfer_between_host_allocators_copies_bytes() -> None:
    source, dest = HostAllocator("A"), HostAllocator("B")
    assert dest.supports_transfer_from(source)
    src_block, dest_block = source.alloc(1000), dest.alloc(1000)
    payload = os.urandom(1000)
    source._copyin(src_block, memoryview(payload))
    dest._transfer(dest_block, src_block, 1000, source)
    assert bytes(dest._as_buffer(dest_block)) == payload


def test_adopted_file_mapping_backs_a_buffer_without_copy(tmp_path: os.PathLike[str]) -> None:
    from kiln.runtime import Buffer, Device
    from kiln.uops import dtypes

    path = os.path.join(tmp_path, "data.bin")
    values = np.arange(8, dtype=np.float32)
    with open(path, "wb") as file:
        file.write(b"\0" * 16 + values.tobytes())
    with open(path, "rb") as file:
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    allocator = Device["CPU"].allocator
    assert isinstance(allocator, HostAllocator)
    memory = allocator.adopt(mapping, 16, 32)
    assert memory.external and memory.address == ctypes.addressof(ctypes.c_char.from_buffer(mapping, 16))
    buffer = Buffer("CPU", 8, dtypes.float32).attach(memory)
    np.testing.assert_array_equal(buffer.numpy(), values)
    buffer.copyin(np.full(8, 7.0, dtype=np.float32))  # copy-on-write: the process sees it, the file does not
    assert mapping[16:20] == np.float32(7.0).tobytes()
    with open(path, "rb") as file:
        assert file.read()[16:] == values.tobytes()
    cached = allocator.cached_bytes
    buffer.deallocate()
    assert allocator.cached_bytes == cached  # adopted memory is never kept for reuse
    with pytest.raises(ValueError, match=r"cannot adopt bytes 30\.\.62 of a mapping of 48 bytes"):
        allocator.adopt(mapping, 30, 32)
    with pytest.raises(ValueError, match="attach needs adopted memory of at least 64 bytes"):
        Buffer("CPU", 16, dtypes.float32).attach(allocator.adopt(mapping, 0, 32))
    with pytest.raises(RuntimeError, match="attach needs an unallocated buffer"):
        Buffer("CPU", 1, dtypes.float32).allocate().attach(allocator.adopt(mapping, 0, 4))


def test_freed_adopted_memory_stays_mapped_until_a_sync() -> None:
    import weakref

    synced: list[bool] = []
    allocator = HostAllocator("CPU", synchronize=lambda: synced.append(True))
    mapping = mmap.mmap(-1, 4096)
    memory = allocator.adopt(mapping, 0, 64)
    alive = weakref.ref(memory)
    allocator.free(memory, 64)
    del memory
    assert alive() is not None  # a kernel queued before the free may still read it
    allocator._sync()
    assert synced == [True] and alive() is None


def test_a_request_past_ram_and_swap_is_refused_before_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    # with overcommit on, mmap would grant it and the process would be killed when a kernel writes the pages
    from kiln.runtime import host_allocator

    lines = Path("/proc/meminfo").read_text().splitlines()
    meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in lines}
    assert host_allocator.host_memory_bytes() == meminfo["MemTotal"] + meminfo["SwapTotal"]
    monkeypatch.setattr(host_allocator, "host_memory_bytes", lambda: 1 << 20)
    mapped: list[int] = []
    real_mmap = mmap.mmap

    def counting_mmap(*args: object, **kwargs: object) -> mmap.mmap:
        mapped.append(1)
        return real_mmap(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(mmap, "mmap", counting_mmap)
    allocator = HostAllocator("HOST:small")
    with pytest.raises(OutOfMemoryError, match=r"could not allocate 2097152 bytes.*1048576 bytes of RAM and swap"):
        allocator.alloc(2 << 20)
    assert mapped == []
    assert allocator.alloc(4096).size == 4096
