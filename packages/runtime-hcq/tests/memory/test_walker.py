"""The generic walker: hand-computed runs over leaves and holes, and a format with 16-byte (dual) entries."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from kiln.runtime.memory import (
    AddrSpace,
    DecodedEntry,
    MemoryManager,
    PageTableFormat,
    ReferencePageTableFormat,
    SparseMemory,
    TLSFAllocator,
)

PAGE = 4096
MIB = 1 << 20
VA_BASE = 0x2000_0000_0000


def reference_manager() -> MemoryManager:
    return MemoryManager(
        SparseMemory(64 * MIB),
        ReferencePageTableFormat(),
        64 * MIB,
        boot_size=2 * MIB,
        va_allocator=TLSFAllocator(1 << 40, base=VA_BASE + (1 << 42)),
        va_base=VA_BASE,
        palloc_ranges=[(PAGE, PAGE)],
    )


def test_runs_report_leaves_and_holes_at_their_level() -> None:
    manager = reference_manager()
    manager.map_range(VA_BASE + PAGE, PAGE, [(0x9000, PAGE)], AddrSpace.PHYS)
    manager.map_range(VA_BASE + 4 * MIB, 2 * MIB, [(0x400000, 2 * MIB)], AddrSpace.PHYS)
    runs = [(run.vaddr - VA_BASE, run.level, run.count, run.mapped) for run in manager.walk(VA_BASE, 8 * MIB)]
    assert runs == [
        (0, 3, 1, False),
        (PAGE, 3, 1, True),
        (2 * PAGE, 3, 510, False),
        (2 * MIB, 2, 1, False),
        (4 * MIB, 2, 1, True),
        (6 * MIB, 2, 1, False),
    ]
    # A walk starting inside the huge page reports the whole leaf, starting before the walked range.
    (run,) = manager.walk(VA_BASE + 5 * MIB, PAGE)
    assert (run.vaddr, run.size, run.raw_entries) == (VA_BASE + 4 * MIB, 2 * MIB, (0x400000 | 0b11 | (9 << 6),))


class DualFormat(PageTableFormat):
    """NVIDIA-shaped test format: levels 29/21/12 (38-bit VA); the 2 MiB level has 256 16-byte entries.

    Level-1 entry: the low qword holds a 2 MiB leaf (bit 0 valid, address bits 12-51), the high qword a child table
    pointer (bit 64 valid, table address >> 12 in bits 76-115). Other levels: bit 0 valid, bit 1 page, bits 12-51.
    """

    level_shifts = (29, 21, 12)
    va_bits = 38

    def entry_bytes(self, level: int) -> int:
        return 16 if level == 1 else 8

    def encode_table(self, level: int, child_paddr: int) -> int:
        return (((child_paddr >> 12) << 76) | (1 << 64)) if level == 1 else child_paddr | 1

    def encode_page(
        self, level: int, paddr: int, aspace: AddrSpace, uncached: bool, snooped: bool, fragment: int
    ) -> int:
        return paddr | 1 if level == 1 else paddr | 3

    def encode_invalid(self, level: int, previous: int) -> int:
        return 0

    def decode(self, level: int, raw: int) -> DecodedEntry:
        if level == 1 and not raw & 1 and raw >> 64 & 1:
            return DecodedEntry(True, False, ((raw >> 76) & ((1 << 40) - 1)) << 12)
        return DecodedEntry(bool(raw & 1), level == 2 or level == 1 or bool(raw & 2), raw & ((1 << 52) - 4096))

    def can_map_page(self, level: int, paddr: int, aspace: AddrSpace) -> bool:
        return level != 0 and paddr % self.page_size(level) == 0


def dual_translate(memory: SparseMemory, root: int, va: int) -> tuple[int, int] | None:
    """Independent decode of DualFormat from raw bytes."""
    raw = int.from_bytes(memory.read(root + 8 * (va >> 29 & 511), 8), "little")
    if not raw & 1:
        return None
    assert not raw & 2, "no leaves at the root"
    entry = memory.read((raw & ((1 << 52) - 4096)) + 16 * (va >> 21 & 255), 16)
    low, high = int.from_bytes(entry[:8], "little"), int.from_bytes(entry[8:], "little")
    if low & 1:
        return (low & ((1 << 52) - 4096)) + va % (2 * MIB), 2 * MIB
    if not high & 1:
        return None
    table = (high >> 12) << 12
    raw = int.from_bytes(memory.read(table + 8 * (va >> 12 & 511), 8), "little")
    return ((raw & ((1 << 52) - 4096)) + va % PAGE, PAGE) if raw & 1 else None


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 700), st.integers(1, 700), st.booleans()),
        min_size=1,
        max_size=4,
    )
)
def test_dual_entry_format_maps_and_unmaps(slots: list[tuple[int, int, bool]]) -> None:
    memory = SparseMemory(64 * MIB)
    manager = MemoryManager(
        memory,
        DualFormat(),
        64 * MIB,
        boot_size=2 * MIB,
        va_allocator=TLSFAllocator(1 << 30, base=1 << 36),
        va_base=0,
        palloc_ranges=[(PAGE, PAGE)],
    )
    model: dict[int, tuple[int, int]] = {}  # page VA -> (paddr, expected leaf size)
    for slot, (offset, pages, aligned_pa) in enumerate(slots):
        va = slot * (1 << 29) + (1 << 28) + offset * PAGE  # one root entry per mapping, 2nd half of it
        paddr = (slot + 1) * (1 << 30) + (va % (2 * MIB) if aligned_pa else PAGE)
        manager.map_range(va, pages * PAGE, [(paddr, pages * PAGE)], AddrSpace.PHYS)
        for page in range(pages):
            page_va = va + page * PAGE
            block = page_va - page_va % (2 * MIB)
            huge = aligned_pa and block >= va and block + 2 * MIB <= va + pages * PAGE
            model[page_va] = (paddr + page * PAGE, 2 * MIB if huge else PAGE)
    for page_va, expected in model.items():
        assert dual_translate(memory, manager.root_paddr, page_va) == expected
    for slot, (offset, pages, _) in enumerate(slots):
        va = slot * (1 << 29) + (1 << 28) + offset * PAGE
        assert dual_translate(memory, manager.root_paddr, va - PAGE) is None
        manager.unmap_range(va, pages * PAGE)
        assert dual_translate(memory, manager.root_paddr, va) is None
    assert manager.page_table_pages() == {manager.root_paddr}
    assert memory.read(manager.root_paddr, 4096) == bytes(4096)
