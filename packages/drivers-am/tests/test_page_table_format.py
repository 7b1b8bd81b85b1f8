"""AMPageTableFormat: the address-space rules, huge-page rules and decoding the generic walker relies on."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.page_table_entry import encode_leaf_entry
from kiln.drivers.am.page_table_format import AMPageTableFormat
from kiln.runtime.memory import AddrSpace

BASE = 0x8_0100_0000  # a fabric base 16 MiB- but not 1 GiB-aligned (32 GiB + 16 MiB)


@pytest.mark.parametrize("generation", list(GfxGeneration))
def test_address_spaces(generation: GfxGeneration) -> None:
    pt_format = AMPageTableFormat(generation, BASE)
    phys = pt_format.encode_page(3, 0x5000, AddrSpace.PHYS, uncached=False, snooped=False, fragment=0)
    sys = pt_format.encode_page(3, 0x5000, AddrSpace.SYS, uncached=False, snooped=True, fragment=0)
    peer = pt_format.encode_page(3, 0x5000, AddrSpace.PEER, uncached=False, snooped=True, fragment=0)
    # PHYS gets the fabric base added; SYS sets S (bit 1); PEER is a fabric address as given, S clear.
    assert phys == (BASE + 0x5000) | 0x71
    assert sys == 0x5000 | 0x77
    assert peer == 0x5000 | 0x75
    # Directory entries point to tables at their fabric address too.
    assert pt_format.encode_table(0, 0x3000) == (BASE + 0x3000) | 1


@pytest.mark.parametrize("generation", list(GfxGeneration))
def test_decode(generation: GfxGeneration) -> None:
    pt_format = AMPageTableFormat(generation, BASE)
    for level in range(3):
        table = pt_format.decode(level, pt_format.encode_table(level, 0x7000))
        assert (table.valid, table.is_page, table.address) == (True, False, 0x7000)  # back to a VRAM offset
    for level, paddr in ((1, 0x4000_0000), (2, 0x20_0000), (3, 0x1000)):
        leaf = pt_format.decode(level, pt_format.encode_page(level, paddr, AddrSpace.SYS, False, False, 3))
        assert (leaf.valid, leaf.is_page, leaf.address) == (True, True, paddr)
        cleared = pt_format.decode(level, pt_format.encode_invalid(level, 0))
        assert not cleared.valid


def test_huge_pages_need_an_aligned_device_address() -> None:
    pt_format = AMPageTableFormat(GfxGeneration.GFX11, BASE)
    # BASE is 16 MiB- but not 1 GiB-aligned: VRAM offset 0 may be a 2 MiB page, not a 1 GiB one.
    assert pt_format.can_map_page(2, 0, AddrSpace.PHYS)
    assert not pt_format.can_map_page(1, 0, AddrSpace.PHYS)
    assert pt_format.can_map_page(1, (1 << 30) - 0x100_0000 + (1 << 30), AddrSpace.PHYS)  # BASE + it is 1 GiB-aligned
    assert pt_format.can_map_page(1, 1 << 30, AddrSpace.SYS)  # bus addresses are not moved
    assert not pt_format.can_map_page(2, 0x1000, AddrSpace.PEER)
    assert pt_format.can_map_page(3, 0x1000, AddrSpace.PEER)
    assert not pt_format.can_map_page(0, 0, AddrSpace.SYS)  # never a leaf at the root


def test_rejects_bad_base() -> None:
    with pytest.raises(ValueError, match="VRAM base"):
        AMPageTableFormat(GfxGeneration.GFX11, 0x800)
    with pytest.raises(ValueError, match="44-bit"):
        AMPageTableFormat(GfxGeneration.GFX11, 1 << 44)


@given(
    generation=st.sampled_from(list(GfxGeneration)),
    level=st.integers(1, 3),
    page=st.integers(0, (1 << 36) - 1),
    aspace=st.sampled_from(list(AddrSpace)),
    uncached=st.booleans(),
    snooped=st.booleans(),
    fragment=st.integers(0, 31),
)
def test_fast_encoder_matches_reference_encoder(
    generation: GfxGeneration, level: int, page: int, aspace: AddrSpace, uncached: bool, snooped: bool, fragment: int
) -> None:
    pt_format = AMPageTableFormat(generation, BASE)
    paddr = page << (12 + 9 * (3 - level)) if level < 3 else page << 12
    paddr &= (1 << 43) - 1
    address = BASE + paddr if aspace is AddrSpace.PHYS else paddr
    system = aspace is AddrSpace.SYS
    try:
        expected = encode_leaf_entry(
            generation, level, address, system=system, snooped=snooped, uncached=uncached, fragment=fragment
        )
    except ValueError as error:
        with pytest.raises(ValueError, match=re.escape(str(error))):
            pt_format.encode_page(level, paddr, aspace, uncached, snooped, fragment)
        return
    assert pt_format.encode_page(level, paddr, aspace, uncached, snooped, fragment) == expected
