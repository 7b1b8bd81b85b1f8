"""The bit layout of page-table entries, supplied by a driver (PageTableFormat), and a reference layout for tests.

The generic walker knows only the tree geometry (VA shift of each level) and asks the format to encode and decode
raw entries; everything hardware-specific (valid bits, huge-page markers, address apertures) lives in the format.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from kiln.runtime.memory.address_space import AddrSpace

TABLE_ALIGNMENT = 4096  # every table is allocated on a 4 KiB boundary and rounded up to whole 4 KiB pages


@dataclass(frozen=True, slots=True)
class DecodedEntry:
    """What the generic walker needs from a raw entry.

    valid: the entry maps something (a child table, or a page).
    is_page: the entry is a leaf (always true at the last level; a huge page at a directory level).
    address: the child table's physical address for a table entry, the page's address for a leaf.
    """

    valid: bool
    is_page: bool
    address: int


class PageTableFormat(abc.ABC):
    """The geometry and entry encoding of one MMU's page tables (level 0 is the root).

    Subclasses set `level_shifts` (VA shift of each level, root first, e.g. AM (39, 30, 21, 12)) and `va_bits` (the
    root covers 2**va_bits bytes of VA), and implement the encode/decode methods. Raw entries are Python ints of
    `entry_bytes(level)` little-endian bytes (16 for a dual-PDE level).
    """

    level_shifts: tuple[int, ...]
    va_bits: int
    max_fragment: int = 31  # largest fragment value the leaf encoding can hold

    @property
    def levels(self) -> int:
        """Number of levels, root included."""
        return len(self.level_shifts)

    def page_size(self, level: int) -> int:
        """Bytes of VA covered by one entry of `level` (the page size of a leaf there)."""
        return 1 << self.level_shifts[level]

    def entries_per_table(self, level: int) -> int:
        """Entries in one table of `level`: the root spans 2**va_bits, a lower table one entry of its parent."""
        upper = self.va_bits if level == 0 else self.level_shifts[level - 1]
        return 1 << (upper - self.level_shifts[level])

    def entry_bytes(self, level: int) -> int:
        """Bytes per entry at `level` (8 unless overridden, e.g. 16 for NVIDIA's dual PDE level)."""
        return 8

    def table_bytes(self, level: int) -> int:
        """Bytes of one table at `level`, rounded up to whole 4 KiB pages."""
        raw = self.entries_per_table(level) * self.entry_bytes(level)
        return -(-raw // TABLE_ALIGNMENT) * TABLE_ALIGNMENT

    @abc.abstractmethod
    def encode_table(self, level: int, child_paddr: int) -> int:
        """Directory entry at `level` pointing to a child table at `child_paddr` in this device's VRAM."""

    @abc.abstractmethod
    def encode_page(
        self, level: int, paddr: int, aspace: AddrSpace, uncached: bool, snooped: bool, fragment: int
    ) -> int:
        """Leaf entry at `level` mapping `page_size(level)` bytes at `paddr` in `aspace`.

        `fragment` F says the naturally aligned 2**(12+F)-byte VA block around this page is mapped with the same flags
        to contiguous physical memory (formats without a fragment field ignore it).
        """

    @abc.abstractmethod
    def encode_invalid(self, level: int, previous: int) -> int:
        """The cleared form of entry `previous` at `level` (some hardware keeps permission bits in cleared entries)."""

    @abc.abstractmethod
    def decode(self, level: int, raw: int) -> DecodedEntry:
        """Decode a raw entry of `level`."""

    def can_map_page(self, level: int, paddr: int, aspace: AddrSpace) -> bool:
        """Whether a leaf may sit at `level` for this physical address (the default allows every level)."""
        return True


# Reference layout (kiln's own, for tests and examples), one 64-bit entry:
#   bit 0 valid, bit 1 page (leaf), bits 2-3 address space, bit 4 uncached, bit 5 snooped,
#   bits 6-10 fragment, bits 12-51 the 4 KiB-aligned address.
REFERENCE_VALID = 1 << 0
REFERENCE_PAGE = 1 << 1
REFERENCE_ASPACE_SHIFT = 2
REFERENCE_UNCACHED = 1 << 4
REFERENCE_SNOOPED = 1 << 5
REFERENCE_FRAGMENT_SHIFT = 6
REFERENCE_FRAGMENT_MASK = 0x1F << REFERENCE_FRAGMENT_SHIFT
REFERENCE_ADDRESS_MASK = ((1 << 52) - 1) & ~0xFFF
REFERENCE_ASPACE_CODES = {AddrSpace.PHYS: 0, AddrSpace.SYS: 1, AddrSpace.PEER: 2}


class ReferencePageTableFormat(PageTableFormat):
    """A simple documented 4-level format (shifts 39/30/21/12, 48-bit VA, 8-byte entries) for tests and examples.

    Bits: 0 valid, 1 page, 2-3 address space (PHYS 0, SYS 1, PEER 2), 4 uncached, 5 snooped, 6-10 fragment,
    12-51 address. A huge leaf requires its physical address aligned to its page size. A cleared entry keeps every bit
    except valid and address (like AMD's, so code that takes "non-zero" for "valid" is caught).
    """

    level_shifts = (39, 30, 21, 12)
    va_bits = 48

    def _check_address(self, level: int, paddr: int) -> None:
        if paddr & ~REFERENCE_ADDRESS_MASK:
            raise ValueError(f"address {paddr:#x} at level {level} is not a 4 KiB-aligned address below 2**52")

    def encode_table(self, level: int, child_paddr: int) -> int:
        """A valid non-page entry holding the child's address."""
        if level >= self.levels - 1:
            raise ValueError(f"level {level} is the last level and cannot point to a table")
        self._check_address(level, child_paddr)
        return child_paddr | REFERENCE_VALID

    def encode_page(
        self, level: int, paddr: int, aspace: AddrSpace, uncached: bool, snooped: bool, fragment: int
    ) -> int:
        """A valid page entry with the flags and fragment in their fields."""
        self._check_address(level, paddr)
        if not 0 <= fragment <= self.max_fragment:
            raise ValueError(f"fragment {fragment} does not fit the 5-bit field (0..{self.max_fragment})")
        raw = paddr | REFERENCE_VALID | REFERENCE_PAGE | (REFERENCE_ASPACE_CODES[aspace] << REFERENCE_ASPACE_SHIFT)
        if uncached:
            raw |= REFERENCE_UNCACHED
        if snooped:
            raw |= REFERENCE_SNOOPED
        return raw | (fragment << REFERENCE_FRAGMENT_SHIFT)

    def encode_invalid(self, level: int, previous: int) -> int:
        """Clear the valid bit and the address; keep the other bits."""
        return previous & ~(REFERENCE_VALID | REFERENCE_ADDRESS_MASK)

    def decode(self, level: int, raw: int) -> DecodedEntry:
        """Valid from bit 0, page from bit 1 (always a page at the last level), address from bits 12-51."""
        is_page = level == self.levels - 1 or bool(raw & REFERENCE_PAGE)
        return DecodedEntry(bool(raw & REFERENCE_VALID), is_page, raw & REFERENCE_ADDRESS_MASK)

    def can_map_page(self, level: int, paddr: int, aspace: AddrSpace) -> bool:
        """A leaf at any level, provided the physical address is aligned to that level's page size."""
        return paddr % self.page_size(level) == 0
