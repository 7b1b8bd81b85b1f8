"""Host-memory allocator: page-aligned anonymous mappings, the memory of the CPU and PYTHON devices."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kiln.runtime.allocator import Allocator, BufferSpec, LRUAllocator

__all__ = ["HostAllocator", "HostMemory"]


def _mapping_address(mapping: mmap.mmap) -> int:
    # A ctypes object over the mapping yields its address; dropping it at once releases the buffer export,
    # so the mapping can still be closed later.
    anchor = ctypes.c_char.from_buffer(mapping)
    address = ctypes.addressof(anchor)
    del anchor
    return address


@dataclass(frozen=True, eq=False)
class HostMemory:
    """A block of host memory: `size` bytes at byte `offset` of a mapping (anonymous, or a file's for `adopt`).

    Sub-buffers are `HostMemory` objects over the same mapping at another offset, so they alias the base block.
    `external` marks memory the allocator did not make (`HostAllocator.adopt`): it is never cached nor unmapped by
    the allocator; the mapping lives as long as some HostMemory refers to it.
    """

    mapping: mmap.mmap
    offset: int
    size: int
    base_address: int
    external: bool = False
    address: int = field(init=False, repr=False)
    """The host address of the first byte (what a compiled CPU kernel receives as a pointer; read on every launch)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "address", self.base_address + self.offset)

    def view(self) -> memoryview:
        """A writable memoryview (format "B") of the block."""
        return memoryview(self.mapping)[self.offset : self.offset + self.size]


@functools.cache
def host_memory_bytes() -> int | None:
    """The host's RAM plus swap in bytes (None where the OS does not say): no single host allocation can be larger.

    An anonymous mmap is not a promise of memory: with overcommit on (Linux `vm.overcommit_memory=1`) a 4 TiB mapping
    succeeds and the process is killed when the kernel writing it runs out of pages, so requests past this size are
    refused up front. RAM from `sysconf(_SC_PHYS_PAGES) * _SC_PAGE_SIZE`; swap from /proc/meminfo's `SwapTotal`."""
    try:
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    swap = 0
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo", encoding="ascii") as meminfo:
        for line in meminfo:
            if line.startswith("SwapTotal:"):
                swap = int(line.split()[1]) * 1024  # the field is in kB
    return ram + swap if ram > 0 else None


HUGE_PAGE_MINIMUM = 1 << 22
"""Bytes from which a host allocation asks for transparent huge pages (as numpy does for its large arrays)."""


class HostAllocator(LRUAllocator[HostMemory]):
    """Allocates page-aligned host memory from anonymous mmaps.

    Args:
        device: the device name, used in error messages.
        synchronize: called before the host touches memory (copies, host views) so that work a device has queued
            on that memory is finished first; None for devices that never run work asynchronously.
        max_bytes: a cap on the bytes allocated at once (not counting the cache); exceeding it raises MemoryError,
            which the LRU layer answers by emptying its cache. None means only the OS limits allocations.
    """

    def __init__(
        self, device: str = "", synchronize: Callable[[], None] | None = None, max_bytes: int | None = None
    ) -> None:
        super().__init__(device)
        self._synchronize = synchronize
        self.max_bytes = max_bytes
        self.allocated_bytes = 0
        # adopted memory freed while work may still be queued on it, kept mapped until the next synchronization
        self._retired: list[HostMemory] = []

    def _sync(self) -> None:
        # adopted memory retired before this synchronization can be unmapped once the queued work is done
        retired, self._retired = self._retired, []
        if self._synchronize is not None:
            self._synchronize()
        del retired

    def _alloc(self, size: int, options: BufferSpec) -> HostMemory:
        if self.max_bytes is not None and self.allocated_bytes + size > self.max_bytes:
            raise MemoryError(
                f"{size} bytes requested, {self.allocated_bytes} of the {self.max_bytes}-byte limit already in use"
            )
        limit = host_memory_bytes()
        if limit is not None and size > limit:
            raise MemoryError(f"{size} bytes requested, more than the host's {limit} bytes of RAM and swap")
        try:
            mapping = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError as error:
            raise MemoryError(f"mmap of {size} bytes failed: {error}") from error
        if size >= HUGE_PAGE_MINIMUM and hasattr(mmap, "MADV_HUGEPAGE"):
            # transparent huge pages where the system gives them only on request ("madvise"): a kernel streaming
            # a large buffer then takes few TLB misses and its prefetches are not cut at every 4 KiB page (a 16M
            # float32 sum measured 18 -> 36 GB/s on one core); numpy asks for them the same way
            with contextlib.suppress(OSError):
                mapping.madvise(mmap.MADV_HUGEPAGE)
        self.allocated_bytes += size
        return HostMemory(mapping, 0, size, _mapping_address(mapping))

    def adopt(self, mapping: mmap.mmap, offset: int, size: int) -> HostMemory:
        """`size` bytes at `offset` of a writable mapping the caller made (e.g. a file mapped with ACCESS_COPY), as
        memory for `Buffer.attach`: a buffer over file data without copying it. The caller answers for the file: a
        write to it shows through and a truncation faults the next read (SIGBUS)."""
        if mapping.closed or offset < 0 or size < 0 or offset + size > len(mapping):
            raise ValueError(f"cannot adopt bytes {offset}..{offset + size} of a mapping of {len(mapping)} bytes")
        return HostMemory(mapping, offset, size, _mapping_address(mapping), external=True)

    def free(self, opaque: HostMemory, size: int, options: BufferSpec | None = None) -> None:
        """Keeps an allocated block for reuse; adopted memory is just let go (its mapping is not ours to reuse)."""
        if opaque.external:
            self._retired.append(opaque)  # a queued kernel may still read it: unmapped after the next _sync
            return
        super().free(opaque, size, options)

    def _free(self, opaque: HostMemory, options: BufferSpec) -> None:
        self.allocated_bytes -= opaque.size
        # A host view (e.g. a numpy array) may still export the mapping; then it is unmapped when the last view dies.
        with contextlib.suppress(BufferError):
            opaque.mapping.close()

    def _copyin(self, dest: HostMemory, src: memoryview) -> None:
        self._sync()
        dest.view()[:] = src

    def _copyout(self, dest: memoryview, src: HostMemory) -> None:
        self._sync()
        dest[:] = src.view()

    def _offset(self, opaque: HostMemory, size: int, offset: int) -> HostMemory:
        return HostMemory(opaque.mapping, opaque.offset + offset, size, opaque.base_address, opaque.external)

    def _as_buffer(self, opaque: HostMemory) -> memoryview:
        self._sync()
        return opaque.view()

    def supports_transfer_from(self, source: Allocator[Any]) -> bool:
        """Host memory can be copied directly from any other host allocator."""
        return isinstance(source, HostAllocator)

    def _transfer(self, dest: HostMemory, src: object, size: int, source: Allocator[Any]) -> None:
        assert isinstance(src, HostMemory) and isinstance(source, HostAllocator)
        source._sync()
        self._sync()
        ctypes.memmove(dest.address, src.address, size)
