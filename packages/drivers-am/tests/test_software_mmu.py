"""The software MMU against page tables written by hand (raw values computed from the cited bit layouts)."""

from __future__ import annotations

import pytest

from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.registers import AMRegister, Hub
from kiln.drivers.am.simulated_hardware import SimulatedAMHardware, SimulatedHive, SimulatedPlatform
from kiln.drivers.am.software_mmu import PageFault, WalkerError

VA_START = 0x2000_0000_0000
ROOT, PDB1_TABLE, PDB0_TABLE, PTB_TABLE = 0x1000, 0x2000, 0x3000, 0x4000


def _set_context(hardware: SimulatedAMHardware, root_fabric: int, cntl: int) -> None:
    write = hardware.write_register
    write(Hub.GC, AMRegister.VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32, (root_fabric | 1) & 0xFFFF_FFFF)
    write(Hub.GC, AMRegister.VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32, root_fabric >> 32)
    write(Hub.GC, AMRegister.VM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32, 0)
    write(Hub.GC, AMRegister.VM_CONTEXT0_PAGE_TABLE_START_ADDR_HI32, VA_START >> 44)  # (VA_START >> 12) >> 32
    write(Hub.GC, AMRegister.VM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32, 0xFFFF_FFFF)
    write(Hub.GC, AMRegister.VM_CONTEXT0_PAGE_TABLE_END_ADDR_HI32, 0x7)  # end VA 0x7FFF_FFFF_FFFF
    write(Hub.GC, AMRegister.VM_CONTEXT0_CNTL, cntl)


def _entry(hardware: SimulatedAMHardware, table: int, index: int, raw: int) -> None:
    hardware.vram.write(table + 8 * index, raw.to_bytes(8, "little"))


def _va(pdb2: int, pdb1: int, pdb0: int, ptb: int, offset: int = 0) -> int:
    return VA_START + (pdb2 << 39) + (pdb1 << 30) + (pdb0 << 21) + (ptb << 12) + offset


# CNTL: ENABLE_CONTEXT bit 0, PAGE_TABLE_DEPTH 2:1, PAGE_TABLE_BLOCK_SIZE 6:3 (mask 0x78 in gc_11_0_0 and gc_9_4_3).
CNTL_GFX11 = 0x1 | 3 << 1  # 0x7
CNTL_GFX9_4 = 0x1 | 2 << 1 | 9 << 3  # 0x4D


@pytest.fixture
def gfx11() -> SimulatedAMHardware:
    hardware = SimulatedAMHardware(SimulatedPlatform(), 1 << 30, GfxGeneration.GFX11)
    _set_context(hardware, ROOT, CNTL_GFX11)
    _entry(hardware, ROOT, 0, 0x2001)  # PDE -> PDB1 table at 0x2000
    _entry(hardware, PDB1_TABLE, 2, 0x3001)  # PDE -> PDB0 table
    _entry(hardware, PDB0_TABLE, 3, 0x4001)  # PDE -> PTB
    _entry(hardware, PTB_TABLE, 5, 0x0000_0000_1234_5071)  # 4 KiB page at 0x12345000, V R W X
    _entry(hardware, PDB0_TABLE, 4, 0x0040_0004_0000_04F1)  # 2 MiB page (P) at 0x4_0000_0000, fragment 9
    _entry(hardware, PDB1_TABLE, 5, 0x0043_0000_8000_0077)  # 1 GiB page (P), system, snooped, MTYPE UC
    return hardware


def test_gfx11_walk_to_each_level(gfx11: SimulatedAMHardware) -> None:
    small = gfx11.mmu.translate(_va(0, 2, 3, 5, 0x123))
    assert (small.address, small.system, small.level, small.page_size) == (0x1234_5123, False, 3, 0x1000)
    assert small.flags.readable and small.flags.writeable and small.flags.executable
    assert (small.flags.mtype, small.flags.fragment, small.flags.snooped) == (0, 0, False)

    huge = gfx11.mmu.translate(_va(0, 2, 4, 7, 0x234))
    assert (huge.address, huge.system, huge.level, huge.flags.fragment) == (0x4_0000_7234, False, 2, 9)

    giant = gfx11.mmu.translate(_va(0, 5, 17, 3, 0x10))
    assert (giant.address, giant.system, giant.level) == (0x8000_0000 + (17 << 21) + (3 << 12) + 0x10, True, 1)
    assert (giant.flags.snooped, giant.flags.mtype) == (True, 3)


def test_gfx11_faults(gfx11: SimulatedAMHardware) -> None:
    with pytest.raises(PageFault, match="level PTB") as fault:
        gfx11.mmu.translate(_va(0, 2, 3, 6))
    assert fault.value.level == 3
    with pytest.raises(PageFault, match="level PDB0"):
        gfx11.mmu.translate(_va(0, 2, 9, 0))
    with pytest.raises(PageFault, match="level PDB2"):
        gfx11.mmu.translate(_va(1, 0, 0, 0))
    with pytest.raises(PageFault, match="outside the context"):
        gfx11.mmu.translate(VA_START - 0x1000)


def test_gfx11_rejects_translate_further_bit(gfx11: SimulatedAMHardware) -> None:
    _entry(gfx11, PDB0_TABLE, 8, 0x0100_0000_0000_4001)
    with pytest.raises(WalkerError, match="translate-further"):
        gfx11.mmu.translate(_va(0, 2, 8, 0))


def test_context_disabled_and_depth_checked(gfx11: SimulatedAMHardware) -> None:
    gfx11.write_register(Hub.GC, AMRegister.VM_CONTEXT0_CNTL, CNTL_GFX11 & ~1)
    with pytest.raises(PageFault, match="not enabled"):
        gfx11.mmu.translate(_va(0, 2, 3, 5))
    gfx11.write_register(Hub.GC, AMRegister.VM_CONTEXT0_CNTL, CNTL_GFX9_4)
    with pytest.raises(WalkerError, match="depth 2"):
        gfx11.mmu.translate(_va(0, 2, 3, 5))


def test_translations_are_cached_until_invalidated(gfx11: SimulatedAMHardware) -> None:
    va = _va(0, 2, 3, 5)
    assert gfx11.mmu.translate(va).address == 0x1234_5000
    _entry(gfx11, PTB_TABLE, 5, 0x0000_0000_0ABC_D071)
    assert gfx11.mmu.translate(va).address == 0x1234_5000  # stale, as a real TLB would be
    assert gfx11.read_register(Hub.MM, AMRegister.VM_INVALIDATE_ENG17_SEM) == 1
    gfx11.write_register(Hub.MM, AMRegister.VM_INVALIDATE_ENG17_REQ, 0x00F8_0001)  # the other hub: no effect
    assert gfx11.mmu.translate(va).address == 0x1234_5000
    # GC 11 layout: L1 PTEs (0x800000) alone leave the L2 PTE cache, PDE caches alone leave both PTE caches
    gfx11.write_register(Hub.GC, AMRegister.VM_INVALIDATE_ENG17_REQ, 0x0080_0001)
    assert gfx11.mmu.translate(va).address == 0x1234_5000
    gfx11.write_register(Hub.GC, AMRegister.VM_INVALIDATE_ENG17_REQ, 0x0070_0001)
    assert gfx11.mmu.translate(va).address == 0x1234_5000
    gfx11.write_register(Hub.GC, AMRegister.VM_INVALIDATE_ENG17_REQ, 0x00F8_0002)  # VMID 1: not this context
    assert gfx11.read_register(Hub.GC, AMRegister.VM_INVALIDATE_ENG17_ACK) == 2
    assert gfx11.mmu.translate(va).address == 0x1234_5000
    gfx11.write_register(Hub.GC, AMRegister.VM_INVALIDATE_ENG17_REQ, 0x0088_0001)  # L2 PTEs + L1 PTEs
    assert gfx11.read_register(Hub.GC, AMRegister.VM_INVALIDATE_ENG17_ACK) == 1
    assert gfx11.mmu.translate(va).address == 0x0ABC_D000


def test_cached_directory_entries_until_their_level_is_invalidated(gfx11: SimulatedAMHardware) -> None:
    va = _va(0, 2, 3, 5)
    assert gfx11.mmu.translate(va).address == 0x1234_5000
    _entry(gfx11, 0x5000, 5, 0x0000_0000_0BBB_B071)  # a second PTB with another page at the same index
    _entry(gfx11, PDB0_TABLE, 3, 0x5001)  # the PDB0 entry now points at it
    gfx11.write_register(Hub.GC, AMRegister.VM_INVALIDATE_ENG17_REQ, 0x0088_0001)  # PTEs only: PDE0 still cached
    assert gfx11.mmu.translate(va).address == 0x1234_5000
    gfx11.write_register(Hub.GC, AMRegister.VM_INVALIDATE_ENG17_REQ, 0x0098_0001)  # + PDE0
    assert gfx11.mmu.translate(va).address == 0x0BBB_B000


@pytest.fixture
def gfx9_4() -> SimulatedAMHardware:
    hardware = SimulatedAMHardware(SimulatedPlatform(), 1 << 30, GfxGeneration.GFX9_4)
    _set_context(hardware, ROOT, CNTL_GFX9_4)
    _entry(hardware, ROOT, 0, 0x2001)
    _entry(hardware, PDB1_TABLE, 2, 0x4800_0000_0000_3001)  # PDE with block fragment size 9 (63:59)
    _entry(hardware, PDB0_TABLE, 3, 0x0100_0000_0000_4001)  # PTE with F (bit 56): translate further to the PTB
    _entry(hardware, PTB_TABLE, 5, 0x0600_0000_1234_5071)  # 4 KiB page, MTYPE UC at 58:57
    _entry(hardware, PDB0_TABLE, 4, 0x0000_0004_0000_04F1)  # 2 MiB page: no P, no F
    _entry(hardware, PDB1_TABLE, 5, 0x0040_0000_8000_0071)  # 1 GiB page: P
    return hardware


def test_gfx9_4_translate_further(gfx9_4: SimulatedAMHardware) -> None:
    small = gfx9_4.mmu.translate(_va(0, 2, 3, 5, 0x10))
    assert (small.address, small.level, small.flags.mtype) == (0x1234_5010, 3, 3)
    huge = gfx9_4.mmu.translate(_va(0, 2, 4, 1))
    assert (huge.address, huge.level, huge.flags.fragment) == (0x4_0000_1000, 2, 9)
    giant = gfx9_4.mmu.translate(_va(0, 5, 1, 0))
    assert (giant.address, giant.level) == (0x8000_0000 + (1 << 21), 1)


def test_gfx9_4_malformed_entries(gfx9_4: SimulatedAMHardware) -> None:
    _entry(gfx9_4, PDB1_TABLE, 2, 0x3001)  # block fragment size missing above a translate-further PDB0 entry
    with pytest.raises(WalkerError, match="block fragment size 9"):
        gfx9_4.mmu.translate(_va(0, 2, 3, 5))
    _entry(gfx9_4, PDB0_TABLE, 4, 0x0040_0004_0000_04F1)  # P bit at PDB0 is not how TF mode marks a leaf
    with pytest.raises(WalkerError, match="P bit"):
        gfx9_4.mmu.translate(_va(0, 2, 4, 0))


def test_tables_found_through_the_fabric_address() -> None:
    # Node 1 of a hive with 32 GiB segments: its VRAM offset 0 is fabric address 0x8_0000_0000, and table pointers
    # hold fabric addresses (LFB_CNTL = region 1 | max region 1 << 4, LFB_SIZE = 32 GiB / 16 MiB = 0x800).
    platform = SimulatedPlatform()
    hive = SimulatedHive(node_count=2, segment_size=32 << 30)
    SimulatedAMHardware(platform, 1 << 30, hive=hive)
    node1 = SimulatedAMHardware(platform, 1 << 30, hive=hive)
    assert node1.read_register(Hub.GC, AMRegister.MC_VM_XGMI_LFB_CNTL) == 0x11
    assert node1.read_register(Hub.GC, AMRegister.MC_VM_XGMI_LFB_SIZE) == 0x800
    fabric = 0x8_0000_0000
    _set_context(node1, fabric + ROOT, CNTL_GFX11)
    _entry(node1, ROOT, 0, fabric + 0x2001)
    _entry(node1, PDB1_TABLE, 0, fabric + 0x3001)
    _entry(node1, PDB0_TABLE, 0, 0x0040_0008_0020_0071)  # 2 MiB page at fabric 0x8_0020_0000: own VRAM
    translation = node1.mmu.translate(_va(0, 0, 0, 3))
    assert (translation.address, translation.level) == (0x8_0020_3000, 2)
    node1.vram.write(0x20_3000, b"local")
    assert node1.read_virtual(_va(0, 0, 0, 3), 5) == b"local"
    _entry(node1, ROOT, 0, 0x2001)  # a table pointer without the fabric base lands outside local VRAM
    node1.write_register(Hub.GC, AMRegister.VM_INVALIDATE_ENG17_REQ, 0x00F8_0001)
    with pytest.raises(WalkerError, match="outside local VRAM"):
        node1.mmu.translate(_va(0, 0, 0, 3))
