"""NV page-table formats: geometry, address-space rules, large-page rules, golden leaf entries, decode round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln.drivers.nv.page_table_format import (
    NVPageTableFormatVer2,
    NVPageTableFormatVer3,
    page_table_format,
    peer_address,
    split_peer_address,
)
from kiln.runtime.memory import AddrSpace

VER2, VER3 = NVPageTableFormatVer2(), NVPageTableFormatVer3()
MIB = 1 << 20


def test_geometry_matches_the_hardware_levels() -> None:
    # ver2: PDE3 48:47, PDE2 46:38, PDE1 37:29, PDE0 28:21 (dual), PT 20:12
    assert [VER2.entries_per_table(level) for level in range(5)] == [4, 512, 512, 256, 512]
    assert [VER2.entry_bytes(level) for level in range(5)] == [8, 8, 8, 16, 8]
    assert [VER2.page_size(level) for level in range(5)] == [1 << 47, 1 << 38, 512 * MIB, 2 * MIB, 4096]
    # ver3 adds PDE4 56:56 above
    assert [VER3.entries_per_table(level) for level in range(6)] == [2, 512, 512, 512, 256, 512]
    assert [VER3.entry_bytes(level) for level in range(6)] == [8, 8, 8, 8, 16, 8]
    for fmt in (VER2, VER3):
        assert all(fmt.table_bytes(level) == 4096 for level in range(fmt.levels))


def test_address_space_rules_golden() -> None:
    # PHYS 2 MiB page at PDE0: valid | page 0x200 << 8 | kind 6 << 56, small half (high 64 bits) zero
    assert VER2.encode_page(3, 0x20_0000, AddrSpace.PHYS, False, False, 9) == 0x0600_0000_0002_0001
    # SYS snooped -> SYSTEM_COHERENT (2 << 1); uncached -> VOL (1 << 3)
    assert VER2.encode_page(4, 0x7000, AddrSpace.SYS, True, True, 0) == 0x0600_0000_0000_070D
    # SYS not snooped -> SYSTEM_NON_COHERENT (3 << 1)
    assert VER2.encode_page(4, 0x7000, AddrSpace.SYS, False, False, 0) == 0x0600_0000_0000_0707
    # PEER id 3 at 1 GiB as a 512 MiB page at PDE1: aperture 1 << 1 | page 0x40000 << 8 | peer 3 << 33 | kind
    assert VER2.encode_page(2, peer_address(3, 1 << 30), AddrSpace.PEER, False, True, 0) == 0x0600_0006_0400_0003
    # ver3 PEER: aperture 1 << 1 | kind 6 << 8 | address 0x20_0000 in place | PEER_ID 5 << 61, uncached PCF 1 << 3
    assert VER3.encode_page(4, peer_address(5, 0x20_0000), AddrSpace.PEER, True, False, 0) == 0xA000_0000_0020_060B
    # ver3 PHYS 4 KiB: valid | kind | address
    assert VER3.encode_page(5, 0x1234_5000, AddrSpace.PHYS, False, False, 0) == 0x1234_5601


def test_table_entries_point_to_the_small_half_at_the_dual_level() -> None:
    assert VER2.encode_table(3, 0x20_3000) == (0x2_0302 << 64) | 0x20
    assert VER2.encode_table(1, 0x20_0000) == 0x2_0022
    assert VER3.encode_table(4, 0x20_4000) == (0x20_4012 << 64) | 0x10
    with pytest.raises(ValueError, match="cannot point to a table"):
        VER2.encode_table(4, 0x1000)


def test_large_page_rules() -> None:
    # 2 MiB at PDE0 and 512 MiB at PDE1 only when the physical address is aligned; nothing above PDE1
    assert VER2.can_map_page(3, 6 * MIB, AddrSpace.PHYS)
    assert not VER2.can_map_page(3, 6 * MIB + 4096, AddrSpace.PHYS)
    assert VER2.can_map_page(2, 1024 * MIB, AddrSpace.SYS)
    assert not VER2.can_map_page(2, 1026 * MIB, AddrSpace.SYS)
    assert not VER2.can_map_page(1, 0, AddrSpace.PHYS)
    assert not VER3.can_map_page(2, 0, AddrSpace.PHYS)  # ver3 PDE2: Blackwell-only 256 GiB pages
    assert VER3.can_map_page(3, 512 * MIB, AddrSpace.PHYS)
    assert VER2.can_map_page(4, 0x1000, AddrSpace.PHYS)
    # the peer id bits above the offset do not count against alignment
    assert VER2.can_map_page(3, peer_address(7, 2 * MIB), AddrSpace.PEER)
    # pre-Ampere ver2 (Pascal, Turing) has no 512 MiB pages
    assert not NVPageTableFormatVer2(large_pages_512m=False).can_map_page(2, 0, AddrSpace.PHYS)
    with pytest.raises(ValueError, match="no 0x200000-byte page"):
        VER2.encode_page(3, 0x1000, AddrSpace.PHYS, False, False, 0)


def test_invalid_entries_are_zero_and_decode_invalid() -> None:
    for fmt in (VER2, VER3):
        for level in range(fmt.levels):
            raw = fmt.encode_invalid(level, 0xFFFF)
            assert raw == 0
            assert not fmt.decode(level, raw).valid


def test_peer_address_helpers() -> None:
    assert peer_address(2, 0x1000) == (2 << 56) | 0x1000
    assert split_peer_address((6 << 56) | 0xABC000) == (6, 0xABC000)
    with pytest.raises(ValueError, match="peer id 8"):
        peer_address(8, 0)
    with pytest.raises(ValueError, match="version 4"):
        page_table_format(4)


@given(
    version=st.sampled_from([2, 3]),
    aspace=st.sampled_from(list(AddrSpace)),
    page=st.integers(0, (1 << 25) - 1),
    peer=st.integers(0, 7),
    uncached=st.booleans(),
    snooped=st.booleans(),
    level_from_bottom=st.integers(0, 2),
)
def test_decode_inverts_encode(
    version: int, aspace: AddrSpace, page: int, peer: int, uncached: bool, snooped: bool, level_from_bottom: int
) -> None:
    fmt = page_table_format(version)
    level = fmt.levels - 1 - level_from_bottom
    offset = (page << 12) & ~(fmt.page_size(level) - 1)
    paddr = peer_address(peer, offset) if aspace is AddrSpace.PEER else offset
    decoded = fmt.decode(level, fmt.encode_page(level, paddr, aspace, uncached, snooped, 0))
    assert (decoded.valid, decoded.is_page, decoded.address) == (True, True, paddr)
    if level_from_bottom:
        table = fmt.decode(level, fmt.encode_table(level, offset))
        assert (table.valid, table.is_page, table.address) == (True, False, offset)
