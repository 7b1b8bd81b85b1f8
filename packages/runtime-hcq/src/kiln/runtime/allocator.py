"""Device memory allocators: the `Allocator` interface, buffer options, and an LRU cache of freed blocks.

An allocator hands out opaque handles to device memory (a pointer, a mapping object, a driver handle ...). The
handle type is the allocator's business; `Buffer` only passes it back to the same allocator.
"""

from __future__ import annotations

import abc
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kiln.runtime.knobs import lru_enabled

__all__ = ["Allocator", "BufferSpec", "LRUAllocator", "OpaqueT", "OutOfMemoryError"]

OpaqueT = TypeVar("OpaqueT")


@dataclass(frozen=True)
class BufferSpec:
    """Options of one allocation; two blocks are interchangeable in the LRU cache only if their specs are equal.

    Attributes:
        uncached: the memory must not be cached by the device (signals, doorbell-visible data).
        cpu_access: the CPU must be able to map and read/write the memory directly.
        host: the memory lives in host RAM (pinned) instead of the device's own memory.
        nolru: when freed, return the block to the device at once instead of keeping it in the LRU cache.
    """

    uncached: bool = False
    cpu_access: bool = False
    host: bool = False
    nolru: bool = False


DEFAULT_SPEC = BufferSpec()


class OutOfMemoryError(MemoryError):
    """The device could not provide `requested` bytes, even after the allocator emptied its cache."""

    def __init__(self, device: str, requested: int, freed_cache_bytes: int, reason: str) -> None:
        self.device = device
        self.requested = requested
        self.freed_cache_bytes = freed_cache_bytes
        super().__init__(
            f"out of memory on device {device!r}: could not allocate {requested} bytes "
            f"(freed {freed_cache_bytes} cached bytes and retried): {reason}"
        )


class Allocator(abc.ABC, Generic[OpaqueT]):
    """Allocates and frees device memory and copies between it and host memory.

    Subclasses implement `_alloc`, `_free`, `_copyin` and `_copyout`. They may implement `_offset` (sub-buffer views
    that share the base block's memory) and `_as_buffer` (a zero-copy host view of the memory); `supports_offset` and
    `supports_as_buffer` tell whether they do. `_transfer` is an optional fast device-to-device copy.
    """

    def __init__(self, device: str = "") -> None:
        self.device = device

    # -- public interface -------------------------------------------------------------------------------------------
    def alloc(self, size: int, options: BufferSpec | None = None) -> OpaqueT:
        """Allocates `size` bytes; raises `OutOfMemoryError` when the device has no room."""
        spec = self._check_request(size, options)
        try:
            return self._alloc(size, spec)
        except OutOfMemoryError:
            raise
        except MemoryError as error:
            raise OutOfMemoryError(self.device, size, 0, str(error) or type(error).__name__) from error

    def free(self, opaque: OpaqueT, size: int, options: BufferSpec | None = None) -> None:
        """Gives back a block from `alloc(size, options)`."""
        self._free(opaque, options or DEFAULT_SPEC)

    @property
    def supports_offset(self) -> bool:
        """Whether this allocator implements `_offset` (sub-buffers sharing a base block's memory)."""
        return type(self)._offset is not Allocator._offset

    @property
    def supports_as_buffer(self) -> bool:
        """Whether this allocator implements `_as_buffer` (zero-copy host views)."""
        return type(self)._as_buffer is not Allocator._as_buffer

    def supports_transfer_from(self, source: Allocator[Any]) -> bool:
        """Whether `_transfer` can copy directly from memory of `source` into memory of this allocator."""
        return False

    # -- what a device implements ----------------------------------------------------------------------------------
    @abc.abstractmethod
    def _alloc(self, size: int, options: BufferSpec) -> OpaqueT:
        """Allocates `size` bytes of device memory; raises MemoryError when the device is full."""

    @abc.abstractmethod
    def _free(self, opaque: OpaqueT, options: BufferSpec) -> None:
        """Returns the block to the device."""

    @abc.abstractmethod
    def _copyin(self, dest: OpaqueT, src: memoryview) -> None:
        """Copies host bytes `src` (C-contiguous, format "B", exactly the block's size) into device memory."""

    @abc.abstractmethod
    def _copyout(self, dest: memoryview, src: OpaqueT) -> None:
        """Copies the whole block `src` into the writable host bytes `dest` (format "B", the block's size)."""

    def _offset(self, opaque: OpaqueT, size: int, offset: int) -> OpaqueT:
        """A handle to the `size` bytes at byte `offset` of block `opaque`, sharing its memory."""
        raise NotImplementedError(f"{type(self).__name__} does not support sub-buffers")

    def _as_buffer(self, opaque: OpaqueT) -> memoryview:
        """A writable host memoryview (format "B") aliasing the block's memory."""
        raise NotImplementedError(f"{type(self).__name__} has no host view of its memory")

    def _transfer(self, dest: OpaqueT, src: object, size: int, source: Allocator[Any]) -> None:
        """Copies `size` bytes from `src` (a block of `source`) into `dest`; only if `supports_transfer_from`."""
        raise NotImplementedError(f"{type(self).__name__} cannot transfer from {type(source).__name__}")

    # -- helpers -----------------------------------------------------------------------------------------------------
    def _check_request(self, size: int, options: BufferSpec | None) -> BufferSpec:
        if type(size) is int and size > 0 and options is None:  # the common request, checked in one step
            return DEFAULT_SPEC
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"allocation size must be an int, got {size!r} ({type(size).__name__})")
        if size <= 0:
            raise ValueError(f"allocation size must be a positive number of bytes, got {size}")
        if options is not None and not isinstance(options, BufferSpec):
            raise TypeError(f"options must be a BufferSpec or None, got {type(options).__name__}")
        return options or DEFAULT_SPEC


class LRUAllocator(Allocator[OpaqueT]):
    """An allocator that keeps freed blocks and hands them out again for the same (size, options).

    Device allocation is slow (a driver call, page-table updates); tensors of the same shape are freed and
    allocated over and over, so caching freed blocks makes most allocations a dictionary lookup. When the device
    runs out of memory, the whole cache is given back to the device and the allocation is tried once more.
    """

    def __init__(self, device: str = "") -> None:
        super().__init__(device)
        # blocks by size for the default options (the usual request: an int key, no BufferSpec hash per call), by
        # (size, options) for others
        self._cache: defaultdict[int | tuple[int, BufferSpec], list[OpaqueT]] = defaultdict(list)
        self._cached_bytes = 0
        # Buffers are freed by the garbage collector, possibly on another thread than the allocating one.
        self._lock = threading.Lock()

    @property
    def cached_bytes(self) -> int:
        """Bytes held in the cache (freed by their users, not yet returned to the device)."""
        return self._cached_bytes

    def alloc(self, size: int, options: BufferSpec | None = None) -> OpaqueT:
        """Reuses a cached block of the same size and options, else allocates; empties the cache on OOM and retries."""
        key: int | tuple[int, BufferSpec]
        if type(size) is int and size > 0 and options is None:  # the common request, checked in one step
            spec, key = DEFAULT_SPEC, size
        else:
            spec = self._check_request(size, options)
            key = _cache_key(size, spec)
        with self._lock:
            bucket = self._cache.get(key)
            if bucket:
                self._cached_bytes -= size
                return bucket.pop()
        try:
            return self._alloc(size, spec)
        except MemoryError as first_error:
            freed = self.free_cache()
            try:
                return self._alloc(size, spec)
            except MemoryError as error:
                reason = str(error) or str(first_error) or type(error).__name__
                raise OutOfMemoryError(self.device, size, freed, reason) from error

    def free(self, opaque: OpaqueT, size: int, options: BufferSpec | None = None) -> None:
        """Keeps the block for reuse (unless `options.nolru` or the LRU knob is off)."""
        spec = options or DEFAULT_SPEC
        if spec.nolru or not lru_enabled():
            self._free(opaque, spec)
            return
        key = size if options is None else _cache_key(size, spec)
        with self._lock:
            self._cache[key].append(opaque)
            self._cached_bytes += size

    def free_cache(self) -> int:
        """Returns every cached block to the device; returns how many bytes that freed."""
        with self._lock:
            cache, self._cache = self._cache, defaultdict(list)
            freed, self._cached_bytes = self._cached_bytes, 0
        for key, blocks in cache.items():
            spec = DEFAULT_SPEC if isinstance(key, int) else key[1]
            for opaque in blocks:
                self._free(opaque, spec)
        return freed


def _cache_key(size: int, spec: BufferSpec) -> int | tuple[int, BufferSpec]:
    return size if spec == DEFAULT_SPEC else (size, spec)
