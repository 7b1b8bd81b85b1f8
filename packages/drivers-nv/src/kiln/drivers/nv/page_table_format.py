"""NVIDIA GMMU page-table formats (ver2 = Ampere, ver3 = Hopper) as `PageTableFormat`s for the generic walker.

Geometry (VA bits per level, from the header comments of `ogkm:kernel-open/nvidia-uvm/uvm_ampere_mmu.c` and
`uvm_hopper_mmu.c`, ogkm = github.com/NVIDIA/open-gpu-kernel-modules):

    ver2  PDE3 48:47 (4 entries) | PDE2 46:38 | PDE1 37:29 | PDE0 28:21 (dual, 16 B) | PT 20:12      -> 49-bit VA
    ver3  PDE4 56:56 (2 entries) | PDE3 55:47 | PDE2 46:38 | PDE1 37:29 | PDE0 28:21 (dual) | PT 20:12 -> 57-bit VA

Leaves: 4 KiB PTEs in the PT, 2 MiB PTEs in the first 8 bytes of a PDE0 dual entry, 512 MiB PTEs at PDE1 (Ampere
and Hopper list 512M in `page_sizes_ampere` / their page_table_depth; Pascal/Turing do not, hence the option).
A large page needs its physical address aligned to its size. kiln uses only the small-page half of a dual PDE
(no 64 KiB pages), as tinygrad does.

Address spaces -> PTE aperture:
* PHYS: this GPU's VRAM offset -> VIDEO_MEMORY.
* SYS: a host bus address -> SYSTEM_COHERENT_MEMORY when `snooped`, else SYSTEM_NON_COHERENT_MEMORY.
* PEER: another GPU's VRAM over NVLink/P2P -> PEER_MEMORY with a peer id. The generic memory manager hands formats a
  single integer per page, so a PEER address carries its peer id above the VRAM offset: `peer_address(id, offset)`.
`uncached` sets the volatile bit (ver2 VOL, ver3 PCF uncached). NV PTEs have no fragment field; it is ignored.
"""

from __future__ import annotations

import abc

from kiln.drivers.nv.page_table_entry import (
    PEER_ID_COUNT,
    VER2_LAYOUT,
    VER3_LAYOUT,
    Aperture,
    EntryLayout,
    PteFields,
)
from kiln.runtime.memory import AddrSpace, DecodedEntry, PageTableFormat

PEER_ID_SHIFT = 56  # a PEER address is peer_id << 56 | VRAM offset (offsets fit 40 bits on both formats)
_LOW_64 = (1 << 64) - 1


def peer_address(peer_id: int, vram_offset: int) -> int:
    """The address `map_range(..., AddrSpace.PEER)` expects for byte `vram_offset` of the GPU with `peer_id`."""
    if not 0 <= peer_id < PEER_ID_COUNT:
        raise ValueError(f"peer id {peer_id} must be in 0..{PEER_ID_COUNT - 1}")
    if not 0 <= vram_offset < 1 << PEER_ID_SHIFT:
        raise ValueError(f"peer VRAM offset {vram_offset:#x} must be in [0, 2**{PEER_ID_SHIFT})")
    return (peer_id << PEER_ID_SHIFT) | vram_offset


def split_peer_address(address: int) -> tuple[int, int]:
    """(peer id, VRAM offset) of a PEER address built by `peer_address`."""
    peer_id, offset = address >> PEER_ID_SHIFT, address & ((1 << PEER_ID_SHIFT) - 1)
    if not 0 <= peer_id < PEER_ID_COUNT:
        raise ValueError(f"PEER address {address:#x} names peer id {peer_id}; expected 0..{PEER_ID_COUNT - 1}")
    return peer_id, offset


class NVPageTableFormat(PageTableFormat):
    """Shared logic of the NV formats; subclasses fix the geometry and the entry layout."""

    layout: EntryLayout
    max_fragment = 0  # no fragment field in NV PTEs

    def __init__(self, *, large_pages_512m: bool = True) -> None:
        self.large_pages_512m = large_pages_512m
        self.pte_level = self.levels - 1  # the last level: 4 KiB PTEs
        self.dual_level = self.levels - 2  # PDE0: 16-byte dual entries, or a 2 MiB PTE in the first 8 bytes
        self.huge_level = self.levels - 3  # PDE1: directory entries, or 512 MiB PTEs
        # PTE bits other than the address, per (aspace, uncached, snooped, peer id): encode_page runs once per page.
        self._templates: dict[tuple[AddrSpace, bool, bool, int], tuple[int, Aperture]] = {}

    def entry_bytes(self, level: int) -> int:
        """16 at PDE0 (dual PDE), 8 elsewhere."""
        return 16 if level == self.dual_level else 8

    def encode_table(self, level: int, child_paddr: int) -> int:
        """A PDE (dual PDE at PDE0, small-page half) pointing at a child table in this GPU's VRAM."""
        if level == self.pte_level:
            raise ValueError(f"level {level} holds PTEs and cannot point to a table")
        if level == self.dual_level:
            return self.layout.encode_dual_pde(child_paddr)
        return self.layout.encode_pde(child_paddr)

    def pte_fields(self, paddr: int, aspace: AddrSpace, uncached: bool, snooped: bool) -> PteFields:
        """The PTE fields for one page of `aspace` (the address-space rules of this driver)."""
        if aspace is AddrSpace.PHYS:
            return PteFields(paddr, Aperture.VIDEO_MEMORY, volatile=uncached)
        if aspace is AddrSpace.SYS:
            aperture = Aperture.SYSTEM_COHERENT_MEMORY if snooped else Aperture.SYSTEM_NON_COHERENT_MEMORY
            return PteFields(paddr, aperture, volatile=uncached)
        peer_id, offset = split_peer_address(paddr)
        return PteFields(offset, Aperture.PEER_MEMORY, peer_id=peer_id, volatile=uncached)

    def encode_page(
        self, level: int, paddr: int, aspace: AddrSpace, uncached: bool, snooped: bool, fragment: int
    ) -> int:
        """A PTE for a 4 KiB, 2 MiB (PDE0, big slot) or 512 MiB (PDE1) page; `fragment` is ignored."""
        peer_id, address = split_peer_address(paddr) if aspace is AddrSpace.PEER else (0, paddr)
        if level != self.pte_level and not self.can_map_page(level, paddr, aspace):
            raise ValueError(
                f"no {self.page_size(level):#x}-byte page can map {aspace.name} address {paddr:#x} at level {level}"
            )
        key = (aspace, uncached, snooped, peer_id)
        template = self._templates.get(key)
        if template is None:
            fields = self.pte_fields(
                peer_address(peer_id, 0) if aspace is AddrSpace.PEER else 0, aspace, uncached, snooped
            )
            template = self._templates[key] = (self.layout.encode_pte(fields), fields.aperture)
        # At PDE0 the PTE takes bytes 0-7 (UVM entry_offset: MMU_BIG) and the small half (bytes 8-15) stays invalid.
        return template[0] | self.layout.address_field(address, template[1])

    def encode_invalid(self, level: int, previous: int) -> int:
        """All zero: VALID 0 for PTEs, aperture INVALID for (dual) PDEs."""
        return 0

    def decode(self, level: int, raw: int) -> DecodedEntry:
        """Valid / leaf / address of a raw entry, as the generic walker needs them."""
        low = raw & _LOW_64
        if level == self.pte_level or (low & 1 and (level == self.dual_level or level == self.huge_level)):
            return DecodedEntry(bool(low & 1), True, self._pte_address(low) if low & 1 else 0)
        if low & 1:  # IS_PTE where the hardware takes no pages: treat as a (bad) leaf so nothing descends into it
            return DecodedEntry(True, True, 0)
        word = raw >> 64 if level == self.dual_level else low  # a dual PDE points through its small half
        if not (word >> 1) & 3:  # APERTURE 2:1 (APERTURE_SMALL 66:65), 0 = invalid
            return DecodedEntry(False, False, 0)
        return DecodedEntry(True, False, self._table_address(word))

    def can_map_page(self, level: int, paddr: int, aspace: AddrSpace) -> bool:
        """4 KiB anywhere; 2 MiB at PDE0 and 512 MiB at PDE1 only when the physical address is aligned to the size."""
        if level == self.pte_level:
            return True
        offset = split_peer_address(paddr)[1] if aspace is AddrSpace.PEER else paddr
        if level == self.dual_level or (level == self.huge_level and self.large_pages_512m):
            return offset % self.page_size(level) == 0
        return False

    @abc.abstractmethod
    def _pte_address(self, low: int) -> int:
        """The page address held by a valid PTE (a PEER address when its aperture is PEER)."""

    @abc.abstractmethod
    def _table_address(self, word: int) -> int:
        """The child-table address held by a PDE word (or by the small half of a dual PDE, shifted down 64 bits)."""


class NVPageTableFormatVer2(NVPageTableFormat):
    """GMMU format version 2 (Ampere; also Pascal..Ada with `large_pages_512m=False` before Ampere)."""

    layout = VER2_LAYOUT
    level_shifts = (47, 38, 29, 21, 12)
    va_bits = 49

    def _pte_address(self, low: int) -> int:
        aperture = (low >> 1) & 3
        if aperture in (Aperture.VIDEO_MEMORY, Aperture.PEER_MEMORY):
            offset = ((low >> 8) & ((1 << 25) - 1)) << 12  # ADDRESS_VID 32:8
            if aperture == Aperture.PEER_MEMORY:
                return peer_address((low >> 33) & 7, offset)  # ADDRESS_VID_PEER 35:33
            return offset
        return ((low >> 8) & ((1 << 46) - 1)) << 12  # ADDRESS_SYS 53:8

    def _table_address(self, word: int) -> int:
        return ((word >> 8) & ((1 << 25) - 1)) << 12  # PDE ADDRESS_VID 32:8 (small half: 96:72)


class NVPageTableFormatVer3(NVPageTableFormat):
    """GMMU format version 3 (Hopper)."""

    layout = VER3_LAYOUT
    level_shifts = (56, 47, 38, 29, 21, 12)
    va_bits = 57

    def _pte_address(self, low: int) -> int:
        aperture = (low >> 1) & 3
        if aperture == Aperture.VIDEO_MEMORY:
            return ((low >> 12) & ((1 << 28) - 1)) << 12  # ADDRESS_VID 39:12
        address = ((low >> 12) & ((1 << 40) - 1)) << 12  # ADDRESS 51:12
        if aperture == Aperture.PEER_MEMORY:
            return peer_address(low >> 61, address)  # PEER_ID 63:61
        return address

    def _table_address(self, word: int) -> int:
        return ((word >> 12) & ((1 << 40) - 1)) << 12  # PDE ADDRESS 51:12 (small half: 115:76)


def page_table_format(version: int, *, large_pages_512m: bool = True) -> NVPageTableFormat:
    """The format for GMMU version 2 (Ampere) or 3 (Hopper)."""
    if version == 2:
        return NVPageTableFormatVer2(large_pages_512m=large_pages_512m)
    if version == 3:
        return NVPageTableFormatVer3(large_pages_512m=large_pages_512m)
    raise ValueError(f"GMMU page-table format version {version} is not supported; expected 2 (Ampere) or 3 (Hopper)")
