"""Golden tests: raw AMD entries equal values computed by hand from the cited bit layouts."""

from __future__ import annotations

import pytest

from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.page_table_entry import (
    PageTableLevel,
    encode_directory_entry,
    encode_leaf_entry,
    entry_address,
    is_leaf_entry,
)

GFX11 = GfxGeneration.GFX11
GFX9_4 = GfxGeneration.GFX9_4

# Hand-computed: V=0x1 S=0x2 snooped=0x4 X=0x10 R=0x20 W=0x40, fragment << 7, P = 1 << 54 (0x0040_0000_0000_0000),
# TF = 1 << 56 (0x0100_...), BFS 9 << 59 (0x4800_...),
# MTYPE UC=3 at 50:48 (gfx11: 0x0003_...) or at 58:57 (gfx9: 0x0600_...)
LEAF_CASES = [
    # generation, level, address, system, snooped, uncached, fragment, expected
    (GFX11, PageTableLevel.PTB, 0x10000, False, False, False, 0, 0x0000_0000_0001_0071),
    (GFX11, PageTableLevel.PDB0, 0x200000, False, False, False, 9, 0x0040_0000_0020_04F1),
    (GFX11, PageTableLevel.PDB1, 0x0, False, False, False, 18, 0x0040_0000_0000_0971),
    (GFX11, PageTableLevel.PTB, 0x1234000, True, True, True, 0, 0x0003_0000_0123_4077),
    (GFX11, PageTableLevel.PTB, 0xFFF_FFFF_F000, False, False, False, 31, 0x0000_0FFF_FFFF_FFF1),
    (GFX11, PageTableLevel.PDB0, 0x8_0000_0000, True, False, False, 9, 0x0040_0008_0000_04F3),
    (GFX9_4, PageTableLevel.PTB, 0x10000, False, False, True, 0, 0x0600_0000_0001_0071),
    # translate-further: a 2 MiB leaf at PDB0 carries neither P nor TF
    (GFX9_4, PageTableLevel.PDB0, 0x400000, False, False, False, 9, 0x0000_0000_0040_04F1),
    (GFX9_4, PageTableLevel.PDB0, 0x400000, False, True, True, 9, 0x0600_0000_0040_04F5),
    (GFX9_4, PageTableLevel.PDB1, 0x4000_0000, False, False, False, 18, 0x0040_0000_4000_0971),
    # 48-bit addresses are fine on MI300
    (GFX9_4, PageTableLevel.PTB, 0x1000_0000_0000, True, True, False, 0, 0x0000_1000_0000_0077),
]


@pytest.mark.parametrize(
    ("generation", "level", "address", "system", "snooped", "uncached", "fragment", "expected"), LEAF_CASES
)
def test_leaf_entry_golden(
    generation: GfxGeneration,
    level: int,
    address: int,
    system: bool,
    snooped: bool,
    uncached: bool,
    fragment: int,
    expected: int,
) -> None:
    raw = encode_leaf_entry(
        generation, level, address, system=system, snooped=snooped, uncached=uncached, fragment=fragment
    )
    assert raw == expected, f"{raw:#018x} != {expected:#018x}"
    assert is_leaf_entry(generation, level, raw)
    assert entry_address(level, raw, leaf=True) == address


DIRECTORY_CASES = [
    (GFX11, PageTableLevel.PDB2, 0x2000, 0x0000_0000_0000_2001),
    (GFX11, PageTableLevel.PDB1, 0x3000, 0x0000_0000_0000_3001),
    (GFX11, PageTableLevel.PDB0, 0x7FF_FFFF_F000, 0x0000_07FF_FFFF_F001),
    (GFX9_4, PageTableLevel.PDB2, 0x2000, 0x0000_0000_0000_2001),
    (GFX9_4, PageTableLevel.PDB1, 0x3000, 0x4800_0000_0000_3001),  # block fragment size 9
    (GFX9_4, PageTableLevel.PDB0, 0x7000, 0x0100_0000_0000_7001),  # translate further
]


@pytest.mark.parametrize(("generation", "level", "table", "expected"), DIRECTORY_CASES)
def test_directory_entry_golden(generation: GfxGeneration, level: int, table: int, expected: int) -> None:
    raw = encode_directory_entry(generation, level, table)
    assert raw == expected, f"{raw:#018x} != {expected:#018x}"
    assert not is_leaf_entry(generation, level, raw)
    assert entry_address(level, raw, leaf=False) == table


@pytest.mark.parametrize(
    ("generation", "level", "address", "fragment", "message"),
    [
        (GFX11, PageTableLevel.PTB, 1 << 44, 0, "44-bit"),
        (GFX9_4, PageTableLevel.PTB, 1 << 48, 0, "48-bit"),
        (GFX11, PageTableLevel.PDB0, 0x201000, 0, "aligned to 0x200000"),
        (GFX11, PageTableLevel.PDB1, 0x20_0000, 0, "aligned to 0x40000000"),
        (GFX11, PageTableLevel.PTB, 0x1800, 0, "aligned to 0x1000"),
        (GFX11, PageTableLevel.PTB, 0x1000, 32, "fragment"),
        (GFX11, 4, 0x1000, 0, "level"),
    ],
)
def test_leaf_entry_rejects(generation: GfxGeneration, level: int, address: int, fragment: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        encode_leaf_entry(generation, level, address, system=False, snooped=False, uncached=False, fragment=fragment)


def test_directory_entry_rejects() -> None:
    with pytest.raises(ValueError, match=r"levels PDB2\.\.PDB0"):
        encode_directory_entry(GFX11, PageTableLevel.PTB, 0x1000)
    with pytest.raises(ValueError, match="aligned"):
        encode_directory_entry(GFX11, PageTableLevel.PDB0, 0x1040)
    with pytest.raises(ValueError, match="44-bit"):
        encode_directory_entry(GFX11, PageTableLevel.PDB0, 1 << 44)


def test_invalid_entry_is_not_a_leaf_marker_on_gfx11_directories() -> None:
    # A zero entry at a directory level is not a huge page on GFX11 (no P bit), and the PTB level is always a leaf.
    assert not is_leaf_entry(GFX11, PageTableLevel.PDB0, 0)
    assert is_leaf_entry(GFX11, PageTableLevel.PTB, 0)
