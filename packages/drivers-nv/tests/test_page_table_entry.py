"""Golden raw entries: every expected value is computed by hand from the field positions in NVIDIA's dev_mmu.h.

ver2 fields (tu102 dev_mmu.h): PTE VALID 0, APERTURE 2:1, VOL 3, PRIVILEGE 5, READ_ONLY 6, ATOMIC_DISABLE 7,
ADDRESS_VID 32:8 / ADDRESS_SYS 53:8 (page number), ADDRESS_VID_PEER 35:33, KIND 63:56. PDE APERTURE 2:1 (1 = video),
NO_ATS 5, ADDRESS_VID 32:8. Dual PDE APERTURE_BIG 2:1, ADDRESS_BIG 32:4 (>>8), APERTURE_SMALL 66:65,
ADDRESS_SMALL_VID 96:72.
ver3 fields (gh100 dev_mmu.h): PTE VALID 0, APERTURE 2:1, PCF 7:3, KIND 11:8, ADDRESS 51:12 (VID 39:12),
PEER_ID 63:61. PDE APERTURE 2:1, PCF 5:3, ADDRESS 51:12. Dual PDE PCF_BIG 5:3, ADDRESS_BIG 51:8 (>>8),
APERTURE_SMALL 66:65, PCF_SMALL 69:67, ADDRESS_SMALL 115:76.
"""

from __future__ import annotations

import pytest

from kiln.drivers.nv.page_table_entry import (
    KIND_PITCH,
    VER2_LAYOUT,
    VER3_LAYOUT,
    Aperture,
    PteFields,
)

VIDEO, PEER = Aperture.VIDEO_MEMORY, Aperture.PEER_MEMORY
SYS_COHERENT, SYS_NON_COHERENT = Aperture.SYSTEM_COHERENT_MEMORY, Aperture.SYSTEM_NON_COHERENT_MEMORY

VER2_PTE_GOLDEN = [
    # valid | page 0x5 << 8 | kind 6 << 56
    (PteFields(0x5000, VIDEO), 0x0600_0000_0000_0501),
    # valid | aperture 2 << 1 | VOL << 3 | page 0x123456 << 8 | kind 6 << 56
    (PteFields(0x1_2345_6000, SYS_COHERENT, volatile=True), 0x0600_0000_1234_560D),
    # valid | aperture 3 << 1 | page 0x1 << 8
    (PteFields(0x1000, SYS_NON_COHERENT), 0x0600_0000_0000_0107),
    # valid | aperture 1 << 1 | PRIVILEGE << 5 | READ_ONLY << 6 | page 0x200000 << 8 | peer 5 << 33 | kind
    (PteFields(0x2_0000_0000, PEER, peer_id=5, privileged=True, read_only=True), 0x0600_000A_2000_0063),
    # valid | ATOMIC_DISABLE << 7 | page 0x40000 << 8, kind PITCH = 0
    (PteFields(0x4000_0000, VIDEO, atomic_disable=True, kind=KIND_PITCH), 0x0000_0000_0400_0081),
    # largest VRAM offset ADDRESS_VID can hold: page 0x1FFFFFF
    (PteFields((1 << 37) - 0x1000, VIDEO), 0x0600_0001_FFFF_FF01),
    # system addresses use the 46-bit ADDRESS_SYS field: page 0x3FFF_FFFF_FFFF << 8
    (PteFields((1 << 58) - 0x1000, SYS_COHERENT), 0x063F_FFFF_FFFF_FF05),
]

VER3_PTE_GOLDEN = [
    # valid | kind 6 << 8 | address 0x5000 in place
    (PteFields(0x5000, VIDEO), 0x5601),
    # valid | aperture 2 << 1 | PCF 1 (uncached) << 3 | kind | address
    (PteFields(0x1_2345_6000, SYS_COHERENT, volatile=True), 0x1_2345_660D),
    # valid | aperture 1 << 1 | PCF (4 read-only + 8 no-atomic) << 3 | kind | address | peer 7 << 61
    (PteFields(0x30_0000_0000, PEER, peer_id=7, read_only=True, atomic_disable=True), 0xE000_0030_0000_0663),
    # valid | aperture 3 << 1 | PCF (1 uncached + 2 privileged) << 3 | kind | largest 52-bit address
    (PteFields((1 << 52) - 0x1000, SYS_NON_COHERENT, volatile=True, privileged=True), 0x000F_FFFF_FFFF_F61F),
    # ADDRESS_VID 39:12 holds VRAM offsets below 1 TiB
    (PteFields((1 << 40) - 0x1000, VIDEO, kind=KIND_PITCH), 0xFF_FFFF_F001),
]


@pytest.mark.parametrize(("fields", "expected"), VER2_PTE_GOLDEN)
def test_ver2_pte_golden(fields: PteFields, expected: int) -> None:
    assert VER2_LAYOUT.encode_pte(fields) == expected


@pytest.mark.parametrize(("fields", "expected"), VER3_PTE_GOLDEN)
def test_ver3_pte_golden(fields: PteFields, expected: int) -> None:
    assert VER3_LAYOUT.encode_pte(fields) == expected


def test_ver2_directory_entries_golden() -> None:
    # aperture video (1 << 1) | NO_ATS (1 << 5) | page 0x200 << 8
    assert VER2_LAYOUT.encode_pde(0x20_0000) == 0x2_0022
    # small half (bytes 8..15): aperture video | page 0x203 << 8; big half: NO_ATS only
    assert VER2_LAYOUT.encode_dual_pde(0x20_3000) == (0x2_0302 << 64) | 0x20
    # big half: NO_ATS | aperture video | (0x1234500 >> 8) << 4; small half: aperture video | page 0x7 << 8
    assert VER2_LAYOUT.encode_dual_pde(0x7000, big_table_paddr=0x123_4500) == (0x702 << 64) | 0x12_3472


def test_ver3_directory_entries_golden() -> None:
    # aperture video (1 << 1) | PCF VALID_CACHED_ATS_NOT_ALLOWED (2 << 3) | address in place
    assert VER3_LAYOUT.encode_pde(0x20_0000) == 0x20_0012
    # small half: aperture video | PCF_SMALL 2 << 3 | address 0x204000 at 115:76 (bit 12 of the high word);
    # big half: PCF_BIG 2 (INVALID_ATS_NOT_ALLOWED) << 3
    assert VER3_LAYOUT.encode_dual_pde(0x20_4000) == (0x20_4012 << 64) | 0x10
    # big half: PCF_BIG 2 << 3 | aperture video | (0x1234500 >> 8) << 8
    assert VER3_LAYOUT.encode_dual_pde(None, big_table_paddr=0x123_4500) == 0x123_4512


@pytest.mark.parametrize(
    ("layout", "fields", "message"),
    [
        (VER2_LAYOUT, PteFields(1 << 37, VIDEO), "37-bit"),
        (VER2_LAYOUT, PteFields(1 << 58, SYS_COHERENT), "58-bit"),
        (VER3_LAYOUT, PteFields(1 << 40, VIDEO), "40-bit"),
        (VER3_LAYOUT, PteFields(1 << 52, SYS_NON_COHERENT), "52-bit"),
        (VER2_LAYOUT, PteFields(0x1800, VIDEO), "multiple of 4 KiB"),
        (VER3_LAYOUT, PteFields(0x1000, PEER, peer_id=8), "peer_id 8"),
        (VER2_LAYOUT, PteFields(0x1000, VIDEO, peer_id=1), "only PEER"),
        (VER3_LAYOUT, PteFields(0x1000, VIDEO, kind=0x10), "KIND"),
        (VER2_LAYOUT, PteFields(0x1000, VIDEO, kind=0x100), "KIND"),
    ],
)
def test_unrepresentable_entries_are_rejected(layout: object, fields: PteFields, message: str) -> None:
    assert isinstance(layout, (type(VER2_LAYOUT), type(VER3_LAYOUT)))
    with pytest.raises(ValueError, match=message):
        layout.encode_pte(fields)


def test_table_addresses_must_be_aligned_and_fit() -> None:
    with pytest.raises(ValueError, match="multiple of 4 KiB"):
        VER2_LAYOUT.encode_pde(0x1100)
    with pytest.raises(ValueError, match="ADDRESS_VID"):
        VER2_LAYOUT.encode_pde(1 << 37)
    with pytest.raises(ValueError, match="256-byte"):
        VER3_LAYOUT.encode_dual_pde(None, big_table_paddr=0x1080)
