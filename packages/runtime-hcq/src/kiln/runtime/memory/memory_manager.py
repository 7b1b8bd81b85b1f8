"""MemoryManager: physical VRAM allocation plus virtual mappings through a driver's page-table format.

Physical VRAM `[0, vram_size)` is split into three TLSF allocators laid out back to back: the boot allocator
`[0, boot_size)` (root table, firmware), an optional page-table allocator (when the CPU sees only part of VRAM,
`reserve_ptable`), and the general allocator for the rest. Virtual addresses come from a VA allocator handed in by
the driver (shared by every device of a driver so a buffer gets the same VA on each GPU).

Every map and unmap is checked before anything is written: mapping over a valid leaf, unmapping a hole or unmapping
part of a huge page raises MappingError and leaves memory and allocators untouched.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from kiln.runtime.memory.address_space import AddrSpace, MappingError, VirtMapping
from kiln.runtime.memory.page_table_format import TABLE_ALIGNMENT, PageTableFormat
from kiln.runtime.memory.physical_memory import PhysicalMemory
from kiln.runtime.memory.tlsf import TLSFAllocator
from kiln.runtime.memory.walker import PageTableWalker, WalkRun

_ZERO_CHUNK = 1 << 20  # zero-fill in pieces so a large palloc never builds one huge bytes object


class Translation(NamedTuple):
    """Where a page-table walk for one VA stops: the level and the raw entry there (a leaf, or an invalid entry)."""

    level: int
    raw_entry: int


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


class MemoryManager:
    """Allocates device memory and maps it (or host / peer memory) into the device's virtual address space.

    Args:
        memory: the VRAM the page tables live in (simulated or a BAR view).
        pt_format: the driver's page-table layout.
        vram_size: bytes of VRAM this manager owns (drivers keep firmware areas at the top outside it).
        boot_size: bytes at the bottom reserved for boot-time allocations (root table, firmware).
        va_allocator: allocator of virtual addresses (alignment is absolute).
        va_base: the VA that index 0 of every page-table level maps (e.g. AM's PAGE_TABLE_START_ADDR).
        palloc_ranges: (chunk size, alignment) pairs `valloc` tries, largest first.
        reserve_ptable: carve a page-table region (vram_size / 512 rounded up to 1 MiB) after the boot region.
    """

    def __init__(
        self,
        memory: PhysicalMemory,
        pt_format: PageTableFormat,
        vram_size: int,
        *,
        boot_size: int,
        va_allocator: TLSFAllocator,
        va_base: int,
        palloc_ranges: Sequence[tuple[int, int]],
        reserve_ptable: bool = False,
    ) -> None:
        self._check_format(pt_format)
        self.memory = memory
        self.pt_format = pt_format
        self.vram_size = vram_size
        self.va_allocator = va_allocator
        self.va_base = va_base
        self.page_size = pt_format.page_size(pt_format.levels - 1)
        if va_base % self.page_size:
            raise ValueError(f"va_base {va_base:#x} is not aligned to the smallest page ({self.page_size:#x})")
        if not 0 < boot_size < vram_size or boot_size % TABLE_ALIGNMENT or vram_size % TABLE_ALIGNMENT:
            raise ValueError(
                f"need 0 < boot_size < vram_size, both multiples of 4 KiB; got boot_size {boot_size:#x}, "
                f"vram_size {vram_size:#x}"
            )
        self.palloc_ranges = sorted(palloc_ranges, reverse=True)
        for chunk, align in self.palloc_ranges:
            if chunk <= 0 or chunk % self.page_size or align <= 0 or align & (align - 1):
                raise ValueError(
                    f"palloc range ({chunk:#x}, {align:#x}) needs a positive multiple of {self.page_size:#x} and a "
                    "power-of-two alignment"
                )
        self.boot_allocator = TLSFAllocator(boot_size, base=0)
        general_base = boot_size
        self.ptable_allocator: TLSFAllocator | None = None
        if reserve_ptable:
            ptable_size = _round_up(vram_size // 512, 1 << 20)
            self.ptable_allocator = TLSFAllocator(ptable_size, base=boot_size)
            general_base += ptable_size
        if general_base >= vram_size:
            raise ValueError(f"vram_size {vram_size:#x} leaves nothing after the reserved regions ({general_base:#x})")
        self.pa_allocator = TLSFAllocator(vram_size - general_base, base=general_base)
        self.root_paddr = self.palloc(pt_format.table_bytes(0), boot=True, ptable=True)
        self._walker = PageTableWalker(
            memory, pt_format, va_base, self.root_paddr, self._allocate_table, lambda paddr: self.pfree(paddr, True)
        )

    @staticmethod
    def _check_format(pt_format: PageTableFormat) -> None:
        shifts = pt_format.level_shifts
        decreasing = all(upper > lower for upper, lower in itertools.pairwise(shifts))
        if not shifts or not decreasing or shifts[0] >= pt_format.va_bits:
            raise ValueError(f"level_shifts {shifts} must be strictly decreasing and below va_bits {pt_format.va_bits}")
        for level in range(pt_format.levels):
            if pt_format.decode(level, 0).valid:
                raise ValueError(
                    f"{type(pt_format).__name__}: an all-zero entry must decode as invalid (level {level})"
                )

    # ---- physical memory ----------------------------------------------------------------------------------------

    def _allocator_for(self, boot: bool, ptable: bool) -> TLSFAllocator:
        if boot:
            return self.boot_allocator
        if ptable and self.ptable_allocator is not None:
            return self.ptable_allocator
        return self.pa_allocator

    def palloc(self, size: int, align: int = 4096, zero: bool = True, boot: bool = False, ptable: bool = False) -> int:
        """Allocate `size` bytes (rounded up to 4 KiB) of VRAM; returns the physical address.

        `boot` takes it from the boot region, `ptable` from the page-table region when one is reserved. Raises
        MemoryError naming the sizes when the region is full.
        """
        size = _round_up(size, self.page_size)
        allocator = self._allocator_for(boot, ptable)
        try:
            paddr = allocator.alloc(size, align)
        except MemoryError as error:
            region = "boot" if boot else "page-table" if allocator is self.ptable_allocator else "general"
            raise MemoryError(f"out of {region} VRAM: {error}") from None
        if zero:
            for offset in range(0, size, _ZERO_CHUNK):
                self.memory.write(paddr + offset, bytes(min(_ZERO_CHUNK, size - offset)))
        return paddr

    def pfree(self, paddr: int, ptable: bool = False) -> None:
        """Free VRAM from `palloc` (the owning region is found from the address; `ptable` is accepted for symmetry)."""
        for allocator in (self.boot_allocator, self.ptable_allocator, self.pa_allocator):
            if allocator is not None and allocator.base <= paddr < allocator.base + allocator.size:
                allocator.free(paddr)
                return
        raise ValueError(f"cannot free {paddr:#x}: outside the managed VRAM [0, {self.vram_size:#x})")

    def _allocate_table(self, level: int, size: int, boot: bool) -> int:
        return self.palloc(size, align=TABLE_ALIGNMENT, zero=True, boot=boot, ptable=True)

    # ---- virtual addresses --------------------------------------------------------------------------------------

    def alloc_vaddr(self, size: int, align: int = 4096) -> int:
        """A VA range of `size` bytes, naturally aligned (to the largest power of two <= size, at least `align`) so
        huge pages and large fragments can be used."""
        if size <= 0:
            raise ValueError(f"VA size must be positive, got {size:#x}")
        return self.va_allocator.alloc(size, max(align, 1 << (size.bit_length() - 1)))

    def free_vaddr(self, vaddr: int) -> None:
        """Return a VA range from `alloc_vaddr`."""
        self.va_allocator.free(vaddr)

    # ---- mapping ------------------------------------------------------------------------------------------------

    def _check_range(self, vaddr: int, size: int) -> None:
        if size <= 0 or vaddr % self.page_size or size % self.page_size:
            raise ValueError(
                f"range [{vaddr:#x}, +{size:#x}) must be non-empty and aligned to the page size {self.page_size:#x}"
            )
        top = self.va_base + (1 << self.pt_format.va_bits)
        if vaddr < self.va_base or vaddr + size > top:
            raise ValueError(f"range [{vaddr:#x}, {vaddr + size:#x}) leaves the VA space [{self.va_base:#x}, {top:#x})")

    def map_range(
        self,
        vaddr: int,
        size: int,
        paddrs: Sequence[tuple[int, int]],
        aspace: AddrSpace,
        uncached: bool = False,
        snooped: bool = False,
        boot: bool = False,
    ) -> VirtMapping:
        """Map [vaddr, vaddr + size) to the `(paddr, size)` chunks in order, with uniform flags.

        Each chunk gets the largest pages its alignment allows. Raises MappingError, before writing anything, when
        any page of the range is already mapped; on MemoryError (no VRAM for tables) nothing stays mapped. A driver's
        `check_reach` runs first and may refuse a range its hardware cannot reach.
        """
        self.check_reach(vaddr, size, paddrs, aspace)
        self._check_range(vaddr, size)
        if not isinstance(aspace, AddrSpace):
            raise TypeError(f"aspace must be an AddrSpace, got {aspace!r}")
        chunks = tuple((int(paddr), int(length)) for paddr, length in paddrs)
        for paddr, length in chunks:
            if length <= 0 or length % self.page_size or paddr < 0 or paddr % self.page_size:
                raise ValueError(f"chunk ({paddr:#x}, {length:#x}) is not a non-empty run of {self.page_size:#x} pages")
        if sum(length for _, length in chunks) != size:
            raise ValueError(f"chunks sum to {sum(length for _, length in chunks):#x} bytes, expected size {size:#x}")
        mapped = self._walker.first_mapped(vaddr, size)
        if mapped is not None:
            raise MappingError(
                f"cannot map [{vaddr:#x}, {vaddr + size:#x}): the page at {mapped:#x} overlapping it is already mapped"
            )
        position = vaddr
        try:
            for paddr, length in chunks:
                self._walker.map_pages(
                    position,
                    length,
                    paddr,
                    aspace,
                    uncached=uncached,
                    snooped=snooped,
                    boot=boot,
                    contiguous_range=(position, position + length),
                )
                position += length
        except BaseException:
            if position > vaddr:
                self._walker.clear(list(self._walker.runs(vaddr, position - vaddr)))
            raise
        self.on_range_mapped()
        return VirtMapping(vaddr, size, chunks, aspace, uncached, snooped)

    def unmap_range(self, vaddr: int, size: int) -> None:
        """Unmap [vaddr, vaddr + size), freeing page tables left empty (never the root).

        Raises MappingError, before writing anything, when part of the range is not mapped or the range would cut a
        huge page.
        """
        self._check_range(vaddr, size)
        end = vaddr + size
        runs = list(self._walker.runs(vaddr, size))
        for run in runs:
            if not run.mapped:
                raise MappingError(f"cannot unmap [{vaddr:#x}, {end:#x}): {max(run.vaddr, vaddr):#x} is not mapped")
            if run.vaddr < vaddr or run.end > end:
                straddled = run.vaddr if run.vaddr < vaddr else run.end - run.page_size
                raise MappingError(
                    f"cannot unmap [{vaddr:#x}, {end:#x}): it covers only part of the {run.page_size:#x}-byte page "
                    f"at {straddled:#x}"
                )
        self._walker.clear(runs)
        self.on_range_unmapped()

    def valloc(self, size: int, align: int = 4096, uncached: bool = False, contiguous: bool = False) -> VirtMapping:
        """Allocate VRAM and map it at a fresh VA (AddrSpace.PHYS); `size` is rounded up to whole pages.

        Non-contiguous allocations take chunks greedily from `palloc_ranges` (largest first). On MemoryError every
        chunk and the VA taken so far are released.
        """
        if size <= 0:
            raise ValueError(f"valloc size must be positive, got {size:#x}")
        size = _round_up(size, self.page_size)
        vaddr = self.alloc_vaddr(size, align)
        chunks: list[tuple[int, int]] = []
        try:
            if contiguous:
                chunks.append((self._palloc_contiguous(size), size))
            else:
                remaining = size
                for chunk, chunk_align in self.palloc_ranges:
                    while remaining >= chunk:
                        try:
                            chunks.append((self.palloc(chunk, chunk_align, zero=False), chunk))
                        except MemoryError:
                            break
                        remaining -= chunk
                if remaining:
                    general = self.pa_allocator
                    raise MemoryError(
                        f"valloc of {size:#x} bytes: {remaining:#x} bytes could not be allocated "
                        f"({general.free_bytes:#x} bytes free, largest block {general.largest_free:#x})"
                    )
            return self.map_range(vaddr, size, chunks, AddrSpace.PHYS, uncached=uncached)
        except BaseException:
            for paddr, _ in chunks:
                self.pfree(paddr)
            self.free_vaddr(vaddr)
            raise

    def _palloc_contiguous(self, size: int) -> int:
        # Prefer the alignment of the largest palloc chunk that fits, so the block can use huge pages.
        align = next((chunk_align for chunk, chunk_align in self.palloc_ranges if chunk <= size), self.page_size)
        try:
            return self.palloc(size, align, zero=False)
        except MemoryError:
            if align == self.page_size:
                raise
            return self.palloc(size, self.page_size, zero=False)

    def vfree(self, mapping: VirtMapping) -> None:
        """Undo `valloc`: unmap, free the VA, and free the physical chunks (only for PHYS mappings)."""
        if not self.va_allocator.is_allocated(mapping.va_addr):
            raise ValueError(f"cannot vfree {mapping.va_addr:#x}: its VA was not allocated by alloc_vaddr / valloc")
        self.unmap_range(mapping.va_addr, mapping.size)
        self.free_vaddr(mapping.va_addr)
        if mapping.aspace is AddrSpace.PHYS:
            for paddr, _ in mapping.paddrs:
                self.pfree(paddr)

    def reserve_page_tables(self, vaddr: int, size: int, boot: bool = False) -> list[int]:
        """Create and pin the tables a mapping of [vaddr, vaddr + size) starts in; returns their paddrs, root first.

        Pinned tables are never freed (their addresses can be handed to firmware, e.g. NVIDIA's GSP). Raises
        MappingError when a page is already mapped where a table would go.
        """
        self._check_range(vaddr, size)
        return self._walker.reserve_tables(vaddr, size, boot)

    # ---- inspection and hooks -----------------------------------------------------------------------------------

    def translate(self, vaddr: int) -> Translation:
        """Level and raw entry where the walk for `vaddr` stops (a leaf, or the invalid entry of a hole)."""
        self._check_range(vaddr - vaddr % self.page_size, self.page_size)
        level, raw, _, _ = self._walker.translate(vaddr)
        return Translation(level, raw)

    def physical_address(self, vaddr: int) -> int:
        """The address `vaddr` maps to (as the format decodes it); MappingError when unmapped."""
        level, raw = self.translate(vaddr)
        decoded = self.pt_format.decode(level, raw)
        if not decoded.valid:
            raise MappingError(f"{vaddr:#x} is not mapped")
        return decoded.address + vaddr % self.pt_format.page_size(level)

    def walk(self, vaddr: int, size: int) -> Iterator[WalkRun]:
        """The runs of leaves and holes covering [vaddr, vaddr + size), in VA order."""
        self._check_range(vaddr, size)
        return self._walker.runs(vaddr, size)

    def page_table_pages(self) -> set[int]:
        """Physical addresses of every allocated page table, root included."""
        return self._walker.table_paddrs()

    def check_reach(self, vaddr: int, size: int, paddrs: Sequence[tuple[int, int]], aspace: AddrSpace) -> None:
        """Hook called first by `map_range`: raises ValueError when the hardware cannot reach the range or a chunk
        (nothing is written yet); every address is reachable here."""

    def on_range_mapped(self) -> None:
        """Hook called after every successful map (drivers invalidate TLBs here)."""

    def on_range_unmapped(self) -> None:
        """Hook called after every successful unmap (drivers invalidate TLBs here)."""
