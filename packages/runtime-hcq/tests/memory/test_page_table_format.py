"""Reference page-table format: hand-computed encodings and the geometry helpers of PageTableFormat."""

from __future__ import annotations

import pytest

from kiln.runtime.memory import AddrSpace, DecodedEntry, PageTableFormat, ReferencePageTableFormat

REFERENCE = ReferencePageTableFormat()


def test_reference_geometry() -> None:
    assert [REFERENCE.entries_per_table(level) for level in range(4)] == [512, 512, 512, 512]
    assert [REFERENCE.page_size(level) for level in range(4)] == [1 << 39, 1 << 30, 1 << 21, 1 << 12]
    assert [REFERENCE.table_bytes(level) for level in range(4)] == [4096] * 4


def test_reference_encodings_hand_computed() -> None:
    # bit 0 valid, 1 page, 2-3 aspace, 4 uncached, 5 snooped, 6-10 fragment, 12-51 address
    assert REFERENCE.encode_page(3, 0x10000, AddrSpace.PHYS, False, False, 0) == 0x10003
    assert REFERENCE.encode_page(2, 0x200000, AddrSpace.PHYS, False, False, 9) == 0x200000 | 3 | (9 << 6)
    assert REFERENCE.encode_page(3, 0x1234000, AddrSpace.SYS, True, True, 0) == 0x1234000 | 0b110111
    assert REFERENCE.encode_page(3, 0x5000, AddrSpace.PEER, False, False, 31) == 0x5000 | 0b1011 | (31 << 6)
    assert REFERENCE.encode_table(0, 0x7000) == 0x7001
    cleared = REFERENCE.encode_invalid(3, 0x1234000 | 0b110111 | (4 << 6))
    assert cleared == 0b110110 | (4 << 6), "cleared entries keep everything but valid and address"
    assert REFERENCE.decode(3, cleared) == DecodedEntry(False, True, 0)
    assert REFERENCE.decode(1, 0x7001) == DecodedEntry(True, False, 0x7000)
    assert REFERENCE.decode(3, 0x7001) == DecodedEntry(True, True, 0x7000), "the last level is always a page"


def test_reference_huge_pages_need_aligned_physical_addresses() -> None:
    assert REFERENCE.can_map_page(2, 0x400000, AddrSpace.PHYS)
    assert not REFERENCE.can_map_page(2, 0x401000, AddrSpace.PHYS)
    assert REFERENCE.can_map_page(3, 0x401000, AddrSpace.SYS)


@pytest.mark.parametrize("paddr", [0x1001, 1 << 52, -4096])
def test_reference_rejects_unencodable_addresses(paddr: int) -> None:
    with pytest.raises(ValueError, match="address"):
        REFERENCE.encode_page(3, paddr, AddrSpace.PHYS, False, False, 0)


def test_reference_rejects_fragment_overflow_and_tables_at_last_level() -> None:
    with pytest.raises(ValueError, match="fragment"):
        REFERENCE.encode_page(3, 0, AddrSpace.PHYS, False, False, 32)
    with pytest.raises(ValueError, match="last level"):
        REFERENCE.encode_table(3, 0x1000)


class _DualGeometry(PageTableFormat):
    """NVIDIA ver2-shaped geometry (49-bit VA, 16-byte entries at the 2 MiB level); encodings are irrelevant here."""

    level_shifts = (47, 38, 29, 21, 12)
    va_bits = 49

    def entry_bytes(self, level: int) -> int:
        return 16 if level == 3 else 8

    def encode_table(self, level: int, child_paddr: int) -> int:
        return child_paddr | 1

    def encode_page(
        self, level: int, paddr: int, aspace: AddrSpace, uncached: bool, snooped: bool, fragment: int
    ) -> int:
        return paddr | 1

    def encode_invalid(self, level: int, previous: int) -> int:
        return 0

    def decode(self, level: int, raw: int) -> DecodedEntry:
        return DecodedEntry(bool(raw & 1), level == 4, raw & ~0xFFF)


def test_geometry_from_shifts_matches_nvidia_ver2_counts() -> None:
    # Facts §1.2 (verified): NV ver2 entry counts [4, 512, 512, 256, 512]; the 32-byte root rounds up to 4 KiB.
    geometry = _DualGeometry()
    assert [geometry.entries_per_table(level) for level in range(5)] == [4, 512, 512, 256, 512]
    assert [geometry.table_bytes(level) for level in range(5)] == [4096] * 5
