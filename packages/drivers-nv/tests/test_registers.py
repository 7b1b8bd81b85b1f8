"""Register and instance-block encodings against hand-computed words (tu102 dev_vm.h, gp100 dev_ram.h layouts)."""

from __future__ import annotations

import pytest

from kiln.drivers.nv import registers


def test_register_offsets_are_the_published_ones() -> None:
    # NV_VIRTUAL_FUNCTION_FULL_PHYS_OFFSET 0x00B80000 + PRIV_MMU_INVALIDATE_PDB 0x30A0 / _UPPER_PDB 0x30A4 / 0x30B0
    assert (registers.MMU_INVALIDATE_PDB, registers.MMU_INVALIDATE_UPPER_PDB) == (0xB830A0, 0xB830A4)
    assert registers.MMU_INVALIDATE == 0xB830B0


def test_invalidate_pdb_words() -> None:
    # ADDR 31:4 holds pdb >> 12 (0x123456), APERTURE 1:1 = 0 (video)
    assert registers.encode_invalidate_pdb(0x1_2345_6000) == (0x123_4560, 0)
    # page 2**33 does not fit ADDR's 28 bits: its low 28 bits (0) stay, bits above go to UPPER_PDB ADDR 19:0 (32)
    assert registers.encode_invalidate_pdb(1 << 45) == (0, 32)
    assert registers.decode_invalidate_pdb(0x123_4562, 1) == ((1 << 40) | 0x1_2345_6000, True)
    with pytest.raises(ValueError, match="4 KiB aligned"):
        registers.encode_invalidate_pdb(0x1800)


def test_page_directory_base_words() -> None:
    # PAGE_DIR_BASE_LO keeps bits 31:12 in place, USE_NEW_PT_FORMAT bit 10, BIG_PAGE_SIZE_64KB bit 11; HI = bits 63:32
    assert registers.encode_page_directory_base(0x1_2345_6000) == (0x2345_6C00, 1)
    assert registers.encode_page_directory_base(0x7000, volatile=True) == (0x7C04, 0)  # VOL bit 2
    base = registers.decode_page_directory_base(0x2345_6C03, 1)
    assert (base.address, base.target, base.volatile, base.new_format, base.big_page_64kb) == (
        0x1_2345_6000,
        3,
        False,
        True,
        True,
    )
    with pytest.raises(ValueError, match="4 KiB-aligned"):
        registers.encode_page_directory_base(0x1010)
