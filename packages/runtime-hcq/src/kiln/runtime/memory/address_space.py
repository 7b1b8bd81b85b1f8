"""What a physical address means (AddrSpace), the record of one mapping (VirtMapping), and MappingError."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class AddrSpace(enum.Enum):
    """The address space a physical address handed to `MemoryManager.map_range` refers to.

    PHYS: an offset into this device's own VRAM (0 = start of VRAM).
    SYS:  a host DMA / bus address (pinned system memory, another device's PCIe BAR).
    PEER: an address in another device's VRAM reached over a fabric (XGMI / NVLink), already translated by the caller.
    """

    PHYS = "phys"
    SYS = "sys"
    PEER = "peer"


@dataclass(frozen=True)
class VirtMapping:
    """One mapping made by `MemoryManager.map_range` / `valloc`: `size` bytes of VA starting at `va_addr`.

    `paddrs` are `(paddr, size)` chunks in VA order; chunk k starts at `va_addr + sum(sizes of chunks before k)`.
    Flags (`aspace`, `uncached`, `snooped`) are uniform over the whole mapping.
    """

    va_addr: int
    size: int
    paddrs: tuple[tuple[int, int], ...]
    aspace: AddrSpace
    uncached: bool = False
    snooped: bool = False

    @property
    def va_end(self) -> int:
        """One past the last mapped virtual address."""
        return self.va_addr + self.size


class MappingError(RuntimeError):
    """A map over an existing mapping, or an unmap of something not (fully) mapped; raised before any write."""
