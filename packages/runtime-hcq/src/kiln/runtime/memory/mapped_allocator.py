"""`MappedAllocator`: the allocator of user-space GPU drivers, over a `MemoryManager` and the GPU's MMU.

Both drivers (AM, NV) allocate the same way: device memory is a `valloc` of their memory manager, pinned host memory
is mapped into the GPU's address space (SYS pages), a buffer is a byte range of an allocation at one virtual
address, copies in and out go through the GPU's virtual memory, and a copy from another device of the same driver
maps the source allocation into this device (PEER / XGMI / BAR) and reads it there. What differs is small and is
what a driver's subclass provides: where host pages come from and how they are mapped and released, how an imported
mapping is undone, and the device's virtual-memory accessors.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Protocol

from kiln.runtime.allocator import Allocator, BufferSpec, LRUAllocator
from kiln.runtime.memory.address_space import VirtMapping

__all__ = ["MappedAllocation", "MappedAllocator", "MappedBuffer", "VirtualMemory"]


class VirtualMemory(Protocol):
    """A GPU's virtual address space as the allocator copies through it (the simulated hardware of a driver)."""

    def read_virtual(self, va_addr: int, size: int) -> bytes:
        """`size` bytes at GPU virtual address `va_addr`."""
        ...

    def write_virtual(self, va_addr: int, data: bytes) -> None:
        """Writes `data` at GPU virtual address `va_addr`."""
        ...


@dataclass
class MappedAllocation:
    """One block of device memory or pinned host memory, and every device it is mapped into (at the same VA).

    `host_chunks` are the (bus address, size) pieces of host memory behind a host allocation (empty for device
    memory); `imports` maps the name of each other device that mapped this block to its mapping there.
    """

    owner: Any
    mapping: VirtMapping
    host_chunks: tuple[tuple[int, int], ...] = ()
    imports: dict[str, VirtMapping] = field(default_factory=dict)


@dataclass(frozen=True)
class MappedBuffer:
    """The allocator's handle: `size` bytes at `offset` of an allocation (sub-buffers share the allocation)."""

    allocation: MappedAllocation
    offset: int
    size: int

    @property
    def va_addr(self) -> int:
        """GPU virtual address of the first byte, the same on every device the allocation is mapped into."""
        return self.allocation.mapping.va_addr + self.offset


class MappedAllocator(LRUAllocator[MappedBuffer], abc.ABC):
    """Device and pinned host memory of one GPU through its memory manager; copies through its MMU.

    `device` is the driver's device: its `memory_manager` (`valloc`, `vfree`) allocates device memory; `memory` is
    its virtual address space, which copies go through. Subclasses provide host memory (`_map_host_memory`,
    `_release_host_memory`), undoing another device's import (`_unmap_import`) and mapping another device's
    allocation here (`_import`).
    """

    def __init__(self, name: str, device: Any, memory: VirtualMemory) -> None:
        super().__init__(name)
        self.owner = device
        self.memory = memory

    @property
    def memory_manager(self) -> Any:
        """The device's memory manager (`valloc`, `vfree`)."""
        return self.owner.memory_manager

    def read_virtual(self, va_addr: int, size: int) -> bytes:
        """`size` bytes at GPU virtual address `va_addr`."""
        return self.memory.read_virtual(va_addr, size)

    def write_virtual(self, va_addr: int, data: bytes) -> None:
        """Writes `data` at GPU virtual address `va_addr`."""
        self.memory.write_virtual(va_addr, data)

    def map(self, buffer: MappedBuffer) -> VirtMapping:
        """Makes `buffer` (memory of any device of this driver, or pinned host memory) usable on this device, at its
        own VA: the owner's mapping, else this device's import of it (made once, undone when the owner frees it)."""
        allocation = buffer.allocation
        if allocation.owner is self.owner:
            return allocation.mapping
        name = self.owner.name
        mapping = allocation.imports.get(name)
        if mapping is None:
            mapping = allocation.imports[name] = self._import(allocation)
        return mapping

    # -- what a driver provides ----------------------------------------------------------------------------------
    @abc.abstractmethod
    def _map_host_memory(self, size: int, uncached: bool) -> tuple[VirtMapping, tuple[tuple[int, int], ...]]:
        """Pinned host memory of at least `size` bytes mapped into the GPU: (its mapping, its host pieces)."""

    @abc.abstractmethod
    def _release_host_memory(self, allocation: MappedAllocation) -> None:
        """Unmaps a host allocation from this GPU and gives its host pages back."""

    @abc.abstractmethod
    def _unmap_import(self, device_name: str, mapping: VirtMapping) -> None:
        """Undoes another device's mapping of one of this device's allocations."""

    @abc.abstractmethod
    def _import(self, allocation: MappedAllocation) -> VirtMapping:
        """Maps another device's allocation, or a host allocation, into this device at its VA."""

    # -- the shared allocator ------------------------------------------------------------------------------------
    def _alloc(self, size: int, options: BufferSpec) -> MappedBuffer:
        if options.host:
            mapping, chunks = self._map_host_memory(size, options.uncached)
            return MappedBuffer(MappedAllocation(self.owner, mapping, chunks), 0, size)
        mapping = self.memory_manager.valloc(size, uncached=options.uncached)
        return MappedBuffer(MappedAllocation(self.owner, mapping), 0, size)

    def _free(self, opaque: MappedBuffer, options: BufferSpec) -> None:
        allocation = opaque.allocation
        for name, imported in allocation.imports.items():
            self._unmap_import(name, imported)
        allocation.imports.clear()
        if allocation.host_chunks:
            self._release_host_memory(allocation)
        else:
            self.memory_manager.vfree(allocation.mapping)

    def _copyin(self, dest: MappedBuffer, src: memoryview) -> None:
        self.write_virtual(dest.va_addr, src.tobytes())

    def _copyout(self, dest: memoryview, src: MappedBuffer) -> None:
        dest[:] = self.read_virtual(src.va_addr, src.size)

    def _offset(self, opaque: MappedBuffer, size: int, offset: int) -> MappedBuffer:
        if offset < 0 or size < 0 or offset + size > opaque.size:
            raise ValueError(f"sub-buffer [{offset}, +{size}) does not fit the {opaque.size}-byte buffer")
        return MappedBuffer(opaque.allocation, opaque.offset + offset, size)

    def supports_transfer_from(self, source: Allocator[Any]) -> bool:
        """Direct copies from any device of the same driver: its buffer is mapped here and read."""
        return isinstance(source, type(self))

    def _transfer(self, dest: MappedBuffer, src: object, size: int, source: Allocator[Any]) -> None:
        if not isinstance(src, MappedBuffer):
            raise TypeError(f"expected a MappedBuffer to copy from, got {type(src).__name__}")
        self.map(src)
        self.write_virtual(dest.va_addr, self.read_virtual(src.va_addr, size))
