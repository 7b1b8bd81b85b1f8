"""Sparse simulated memory: a VRAM (or a host's system memory) of any size that only stores the pages written."""

from __future__ import annotations

from kiln.runtime.memory import SparseMemory

PAGE_BYTES = 4096


class SimulatedMemory:
    """A byte-addressable memory of `size` bytes, named in its errors; pages never written (or all zero again) read as
    zero and cost no host memory: the pages are kept by the runtime's `SparseMemory`.

    A 16 GiB simulated VRAM holding a few page tables and buffers costs a few MiB of host memory. Accesses outside
    `[0, size)` raise ValueError: on a simulator they are always a bug of the caller.
    """

    def __init__(self, size: int, name: str = "memory") -> None:
        if size <= 0 or size % PAGE_BYTES:
            raise ValueError(f"{name} size {size:#x} must be a positive multiple of {PAGE_BYTES}")
        self.size = size
        self.name = name
        self._memory = SparseMemory(size)

    def _check(self, address: int, length: int) -> None:
        if address < 0 or length < 0 or address + length > self.size:
            raise ValueError(f"{self.name} access [{address:#x}, +{length:#x}) is outside [0, {self.size:#x})")

    def read(self, paddr: int, size: int) -> bytes:
        """Read `size` bytes at `paddr`."""
        self._check(paddr, size)
        return self._memory.read(paddr, size)

    def write(self, paddr: int, data: bytes) -> None:
        """Write `data` at `paddr`."""
        self._check(paddr, len(data))
        self._memory.write(paddr, data)

    def read_u64(self, paddr: int) -> int:
        """Read one little-endian 64-bit word."""
        return int.from_bytes(self.read(paddr, 8), "little")

    def write_u64(self, paddr: int, value: int) -> None:
        """Write one little-endian 64-bit word."""
        self.write(paddr, value.to_bytes(8, "little"))

    def read_u32(self, paddr: int) -> int:
        """Read one little-endian 32-bit word."""
        return int.from_bytes(self.read(paddr, 4), "little")

    def write_u32(self, paddr: int, value: int) -> None:
        """Write one little-endian 32-bit word."""
        self.write(paddr, value.to_bytes(4, "little"))

    def resident_pages(self) -> set[int]:
        """Addresses of the 4 KiB pages stored (written, and not all zero)."""
        return {number * PAGE_BYTES for number in self._memory.stored_page_numbers()}

    @property
    def resident_bytes(self) -> int:
        """Host bytes spent on stored pages."""
        return self._memory.resident_pages() * PAGE_BYTES
