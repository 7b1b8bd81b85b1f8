"""Allocator interface, LRU reuse and the out-of-memory retry path, against a fake device with a byte budget."""

from __future__ import annotations

import pytest

from kiln.runtime import Allocator, BufferSpec, LRUAllocator, OutOfMemoryError


class BudgetAllocator(LRUAllocator[int]):
    """Hands out integer handles while `capacity` bytes last; records every call so tests can check them."""

    def __init__(self, capacity: int) -> None:
        super().__init__("FAKE:0")
        self.capacity = capacity
        self.in_use: dict[int, int] = {}
        self.next_handle = 100
        self.alloc_calls: list[int] = []
        self.freed: list[int] = []

    def _alloc(self, size: int, options: BufferSpec) -> int:
        self.alloc_calls.append(size)
        if sum(self.in_use.values()) + size > self.capacity:
            raise MemoryError(f"budget of {self.capacity} bytes exhausted")
        handle, self.next_handle = self.next_handle, self.next_handle + 1
        self.in_use[handle] = size
        return handle

    def _free(self, opaque: int, options: BufferSpec) -> None:
        self.freed.append(opaque)
        del self.in_use[opaque]

    def _copyin(self, dest: int, src: memoryview) -> None:
        raise AssertionError("not used")

    def _copyout(self, dest: memoryview, src: int) -> None:
        raise AssertionError("not used")


class PlainAllocator(Allocator[int]):
    """No cache: a MemoryError from the device becomes OutOfMemoryError at once."""

    def _alloc(self, size: int, options: BufferSpec) -> int:
        raise MemoryError("device full")

    def _free(self, opaque: int, options: BufferSpec) -> None:
        raise AssertionError("not used")

    def _copyin(self, dest: int, src: memoryview) -> None:
        raise AssertionError("not used")

    def _copyout(self, dest: memoryview, src: int) -> None:
        raise AssertionError("not used")


def test_freed_block_is_reused_for_same_size_and_options() -> None:
    allocator = BudgetAllocator(1 << 20)
    first = allocator.alloc(4096)
    allocator.free(first, 4096)
    assert allocator.cached_bytes == 4096
    assert allocator.alloc(4096) == first
    assert allocator.alloc_calls == [4096]  # the second allocation never reached the device
    assert allocator.cached_bytes == 0


def test_cache_is_keyed_by_size_and_options() -> None:
    allocator = BudgetAllocator(1 << 20)
    block = allocator.alloc(4096)
    allocator.free(block, 4096)
    other_size = allocator.alloc(8192)
    other_options = allocator.alloc(4096, BufferSpec(uncached=True))
    assert block not in (other_size, other_options)
    assert allocator.alloc(4096, BufferSpec()) == block  # default options equal BufferSpec()


def test_blocks_freed_with_equal_options_objects_share_a_cache_entry_and_free_cache_returns_each_spec() -> None:
    allocator = BudgetAllocator(1 << 20)
    default, uncached = allocator.alloc(256, BufferSpec()), allocator.alloc(256, BufferSpec(uncached=True))
    allocator.free(default, 256, BufferSpec())  # an equal object, not the module's default one
    allocator.free(uncached, 256, BufferSpec(uncached=True))
    assert allocator.alloc(256) == default  # found under the default options
    allocator.free(default, 256)
    freed_specs: list[BufferSpec] = []
    allocator._free = lambda opaque, options: freed_specs.append(options)  # type: ignore[method-assign]
    assert allocator.free_cache() == 512
    assert sorted(freed_specs, key=repr) == sorted([BufferSpec(), BufferSpec(uncached=True)], key=repr)


def test_nolru_blocks_go_straight_back_to_the_device() -> None:
    allocator = BudgetAllocator(1 << 20)
    spec = BufferSpec(nolru=True)
    block = allocator.alloc(64, spec)
    allocator.free(block, 64, spec)
    assert allocator.freed == [block]
    assert allocator.cached_bytes == 0


def test_out_of_memory_frees_the_cache_and_retries_once() -> None:
    allocator = BudgetAllocator(10_000)
    cached = [allocator.alloc(3000) for _ in range(3)]
    for block in cached:
        allocator.free(block, 3000)
    # 9000 bytes sit in the cache; 5000 more do not fit until the cache is returned to the device.
    block = allocator.alloc(5000)
    assert sorted(allocator.freed) == sorted(cached)
    assert allocator.in_use == {block: 5000}
    assert allocator.alloc_calls == [3000, 3000, 3000, 5000, 5000]
    assert allocator.cached_bytes == 0


def test_out_of_memory_after_retry_names_size_freed_bytes_and_device() -> None:
    allocator = BudgetAllocator(10_000)
    held = allocator.alloc(6000)
    spare = allocator.alloc(2000)
    allocator.free(spare, 2000)
    with pytest.raises(OutOfMemoryError) as raised:
        allocator.alloc(7000)
    error = raised.value
    assert isinstance(error, MemoryError)
    assert (error.requested, error.freed_cache_bytes, error.device) == (7000, 2000, "FAKE:0")
    message = str(error)
    assert "7000 bytes" in message and "2000 cached bytes" in message and "FAKE:0" in message
    assert "budget of 10000 bytes exhausted" in message
    assert allocator.in_use == {held: 6000}


def test_plain_allocator_reports_out_of_memory_with_nothing_freed() -> None:
    with pytest.raises(OutOfMemoryError, match=r"could not allocate 128 bytes \(freed 0 cached bytes"):
        PlainAllocator("PLAIN").alloc(128)


def test_free_cache_returns_freed_byte_count() -> None:
    allocator = BudgetAllocator(1 << 20)
    blocks = [allocator.alloc(size) for size in (100, 200, 300)]
    for block, size in zip(blocks, (100, 200, 300)):
        allocator.free(block, size)
    assert allocator.free_cache() == 600
    assert sorted(allocator.freed) == sorted(blocks)
    assert allocator.free_cache() == 0


@pytest.mark.parametrize(("size", "error"), [(0, ValueError), (-8, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_sizes_are_rejected(size: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="allocation size"):
        BudgetAllocator(100).alloc(size)  # type: ignore[arg-type]


def test_bad_options_are_rejected() -> None:
    with pytest.raises(TypeError, match="BufferSpec"):
        BudgetAllocator(100).alloc(8, {"uncached": True})  # type: ignore[arg-type]


def test_optional_features_are_detected_from_overrides() -> None:
    allocator = BudgetAllocator(100)
    assert not allocator.supports_offset and not allocator.supports_as_buffer
    assert not allocator.supports_transfer_from(allocator)
    with pytest.raises(NotImplementedError, match="sub-buffers"):
        allocator._offset(1, 1, 0)
