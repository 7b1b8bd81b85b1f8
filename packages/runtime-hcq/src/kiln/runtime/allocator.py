"""Device memory allocators: the `Allocator` interface, buffer options, and an LRU cache of freed blocks.

An allocator hands out opaque handles to device memory (a pointer, a mapping object, a driver handle ...). The
handle type is the allocator's business; `Buffer` only passes it back to the same allocator.
"""

from __future__ import annotations

import abc
import threading
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kiln.runtime.fork_hooks import renew_after_fork
from kiln.runtime.knobs import lru_enabled

__all__ = ["Allocator", "BufferSpec", "DeviceTimeline", "LRUAllocator", "OpaqueT", "OutOfMemoryError"]

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


class DeviceTimeline(Protocol):
    """What an allocator needs of its device's work to know when a freed block is no longer used (`HCQCompiled`)."""

    def submitted_value(self) -> int:
        """The timeline value of the last work handed to the device: no later work can use a block freed now."""
        ...

    def completed_value(self) -> int:
        """The timeline value the device has reached: all work up to it is done."""
        ...

    def synchronize(self) -> None:
        """Waits until all work handed to the device is done."""
        ...


class Allocator(abc.ABC, Generic[OpaqueT]):
    """Allocates and frees device memory and copies between it and host memory.

    Subclasses implement `_alloc`, `_free`, `_copyin` and `_copyout`. They may implement `_offset` (sub-buffer views
    that share the base block's memory) and `_as_buffer` (a zero-copy host view of the memory); `supports_offset` and
    `supports_as_buffer` tell whether they do. `_transfer` is an optional fast device-to-device copy.

    An allocator that follows its device's timeline (`follow_timeline`, which `HCQCompiled` calls) returns a freed
    block to the device only once the device has passed the block's last use: a block freed while queued work may
    still write it (its tensor dropped right after `realize()`) waits in a deferred list until the timeline passes
    the value the device had handed out at the free. Unmapping it at once let a running kernel write into unmapped
    memory (SIGSEGV).
    """

    def __init__(self, device: str = "") -> None:
        self.device = device
        self._timeline: DeviceTimeline | None = None
        # (last use, block, size, options) of freed blocks the device may still use, oldest first; the same deque
        # for the allocator's life (emptied in place), so its device can test it cheaply
        self._deferred: deque[tuple[int, OpaqueT, int, BufferSpec]] = deque()
        self._deferred_lock = threading.Lock()
        renew_after_fork(self)

    def after_fork_in_child(self) -> None:
        """Renews the locks (another thread of the parent may have held them at the fork)."""
        self._deferred_lock = threading.Lock()

    def follow_timeline(self, timeline: DeviceTimeline) -> None:
        """Makes frees wait for the device's work: see the class docstring."""
        self._timeline = timeline

    @property
    def deferred_bytes(self) -> int:
        """Bytes freed by their users that wait for the device to pass their last use before they are released."""
        with self._deferred_lock:
            return sum(entry[2] for entry in self._deferred)

    def _release(self, opaque: OpaqueT, size: int, spec: BufferSpec) -> None:
        """Returns a freed block to the device (`_free`) now if no queued work can still use it, else once the device
        has passed the last work handed out before this free."""
        timeline = self._timeline
        if timeline is not None:
            last_use = timeline.submitted_value()
            if timeline.completed_value() < last_use:
                with self._deferred_lock:
                    self._deferred.append((last_use, opaque, size, spec))
                return
        self._free(opaque, spec)
        if self._deferred:
            self.release_passed()

    def release_passed(self) -> int:
        """Releases the deferred blocks whose last use the device has passed; returns their bytes."""
        timeline = self._timeline
        if timeline is None or not self._deferred:
            return 0
        done = timeline.completed_value()
        ready = []
        with self._deferred_lock:
            deferred = self._deferred
            while deferred and deferred[0][0] <= done:
                ready.append(deferred.popleft())
        for _, opaque, _, spec in ready:
            self._free(opaque, spec)
        return sum(entry[2] for entry in ready)

    def _wait_and_release_deferred(self) -> int:
        """Waits for the device, then releases every deferred block; returns their bytes."""
        if self._timeline is None:
            return 0
        waiting = self.deferred_bytes
        self._timeline.synchronize()  # a device may release the passed blocks itself when it synchronizes
        with self._deferred_lock:
            ready = list(self._deferred)
            self._deferred.clear()
        for _, opaque, _, spec in ready:
            self._free(opaque, spec)
        return max(waiting, sum(entry[2] for entry in ready))

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
        """Gives back a block from `alloc(size, options)` (released once the device's queued work is past it)."""
        self._release(opaque, size, options or DEFAULT_SPEC)

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
    runs out of memory, the allocator waits for the device, gives the whole cache (and the blocks whose release
    waited for the device) back to it, and tries the allocation once more.

    A freed block goes into the cache at once, even while queued work may still use it: whoever gets it next uses
    it through the same in-order queue (after that work) or through host access, which synchronizes first. Only
    giving it back to the device waits for the timeline (see `Allocator`).
    """

    def __init__(self, device: str = "") -> None:
        super().__init__(device)
        # blocks by size for the default options (the usual request: an int key, no BufferSpec hash per call), by
        # (size, options) for others
        self._cache: defaultdict[int | tuple[int, BufferSpec], list[OpaqueT]] = defaultdict(list)
        self._cached_bytes = 0
        # Buffers are freed by the garbage collector, possibly on another thread than the allocating one.
        self._lock = threading.Lock()

    def after_fork_in_child(self) -> None:
        """Renews the locks (another thread of the parent may have held them at the fork)."""
        super().after_fork_in_child()
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
        if self._deferred:
            self.release_passed()
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
            self._release(opaque, size, spec)
            return
        key = size if options is None else _cache_key(size, spec)
        with self._lock:
            self._cache[key].append(opaque)
            self._cached_bytes += size

    def free_cache(self) -> int:
        """Returns every cached block to the device, and the freed blocks that waited for it, after waiting for the
        device (a queued kernel may still write a cached block); returns how many bytes that freed."""
        deferred = self._wait_and_release_deferred()
        with self._lock:
            cache, self._cache = self._cache, defaultdict(list)
            freed, self._cached_bytes = self._cached_bytes, 0
        for key, blocks in cache.items():
            spec = DEFAULT_SPEC if isinstance(key, int) else key[1]
            for opaque in blocks:
                self._free(opaque, spec)
        return freed + deferred


def _cache_key(size: int, spec: BufferSpec) -> int | tuple[int, BufferSpec]:
    return size if spec == DEFAULT_SPEC else (size, spec)
