"""The software GMMU against page tables written by hand, entry by entry, as raw hexadecimal words.

Nothing here uses the encoder: each raw value is assembled in a comment from the dev_mmu.h field positions, so these
tests pin the decoder to the hardware layout on its own. (The memory-manager tests then use this decoder as oracle.)
"""

from __future__ import annotations

import pytest

from kiln.drivers.nv.simulated_memory import SimulatedMemory
from kiln.drivers.nv.software_mmu import MemoryTarget, SoftwareMMU, TranslationFault

# A VA whose index is non-zero at every ver2 level: PDE3 1, PDE2 0x81, PDE1 0x102, PDE0 0x83, PT 0x104.
VA = (1 << 47) | (0x81 << 38) | (0x102 << 29) | (0x83 << 21) | (0x104 << 12)


def ver2_tree(memory: SimulatedMemory) -> None:
    """Root 0x1000 -> PDE2 0x2000 -> PDE1 0x3000 -> dual PDE0 0x4000 -> small PT 0x5000 for VA."""
    memory.write_u64(0x1000 + 1 * 8, 0x202)  # aperture video (1 << 1) | page 0x2 << 8
    memory.write_u64(0x2000 + 0x81 * 8, 0x302)  # -> 0x3000
    memory.write_u64(0x3000 + 0x102 * 8, 0x402)  # -> 0x4000
    memory.write_u64(0x4000 + 0x83 * 16 + 8, 0x502)  # small half: aperture video | page 0x5 << 8
    # valid | VOL << 3 | page 0xABCD5 << 8 | kind 6 << 56
    memory.write_u64(0x5000 + 0x104 * 8, 0x0600_0000_0ABC_D509)


def test_ver2_four_kib_walk() -> None:
    memory = SimulatedMemory(1 << 30)
    ver2_tree(memory)
    mmu = SoftwareMMU(memory, 2)
    translation = mmu.translate(0x1000, VA + 0x123)
    assert translation.address == 0xABCD_5123
    assert translation.target is MemoryTarget.VIDEO
    assert (translation.level, translation.page_size) == (4, 0x1000)
    assert translation.volatile and not translation.read_only and translation.kind == 6


def test_ver2_two_mib_page_in_the_big_slot_of_the_dual_entry() -> None:
    memory = SimulatedMemory(1 << 30)
    ver2_tree(memory)
    # bytes 0-7 of the dual entry: valid (= IS_PTE) | page 0x400 << 8 (4 MiB) | kind 6 << 56
    memory.write_u64(0x4000 + 0x83 * 16, 0x0600_0000_0004_0001)
    translation = SoftwareMMU(memory, 2).translate(0x1000, VA + 0x5678)
    assert translation.address == 0x40_0000 + (VA & 0x1F_FFFF) + 0x5678
    assert (translation.level, translation.page_size) == (3, 2 << 20)


def test_ver2_512_mib_page_at_pde1_in_system_memory() -> None:
    memory = SimulatedMemory(1 << 30)
    ver2_tree(memory)
    # valid | aperture SYSTEM_COHERENT (2 << 1) | page 0x120000 << 8 (0x1_2000_0000 = 9 * 512 MiB) | kind
    memory.write_u64(0x3000 + 0x102 * 8, 0x0600_0000_1200_0005)
    translation = SoftwareMMU(memory, 2).translate(0x1000, VA)
    assert translation.address == 0x1_2000_0000 + (VA & 0x1FFF_FFFF)
    assert translation.target is MemoryTarget.SYSTEM_COHERENT
    assert (translation.level, translation.page_size) == (2, 512 << 20)


def test_ver2_big_page_table_wins_over_small_when_valid() -> None:
    memory = SimulatedMemory(1 << 30)
    ver2_tree(memory)
    # big half: aperture video | (0x6000 >> 8) << 4; small half stays -> 0x5000
    memory.write_u64(0x4000 + 0x83 * 16, 0x602)
    big_index = (VA >> 16) & 31
    # valid | aperture PEER (1 << 1) | page 0x30 << 8 (0x30000, 64 KiB aligned) | peer id 2 << 33
    memory.write_u64(0x6000 + big_index * 8, (2 << 33) | 0x3003)
    mmu = SoftwareMMU(memory, 2)
    translation = mmu.translate(0x1000, VA + 0x10)
    assert (translation.target, translation.peer_id) == (MemoryTarget.PEER, 2)
    assert translation.address == 0x30000 + (VA & 0xFFFF) + 0x10
    assert (translation.level, translation.page_size) == (4, 0x10000)
    memory.write_u64(0x6000 + big_index * 8, 0)  # invalid big PTE: the small PTE is used
    assert mmu.translate(0x1000, VA, use_tlb=False).address == 0xABCD_5000


@pytest.mark.parametrize(
    ("entry_paddr", "raw", "level", "reason"),
    [
        (0x2000 + 0x81 * 8, 0, 1, "invalid"),  # PDE2 cleared
        (0x2000 + 0x81 * 8, 0x0600_0000_0000_0001, 1, "IS_PTE"),  # PDE2 cannot be a page
        (0x2000 + 0x81 * 8, 0x304, 1, "system memory"),  # table in system memory
        (0x4000 + 0x83 * 16, 0x0600_0000_0004_0101, 3, "misaligned"),  # 2 MiB page at 4 MiB + 64 KiB
        (0x4000 + 0x83 * 16 + 8, 0, 3, "no valid small-page table"),
        (0x5000 + 0x104 * 8, 0x0600_0000_0ABC_D508, 4, "not valid"),  # VALID bit clear
    ],
)
def test_ver2_faults(entry_paddr: int, raw: int, level: int, reason: str) -> None:
    memory = SimulatedMemory(1 << 30)
    ver2_tree(memory)
    memory.write_u64(entry_paddr, raw)
    with pytest.raises(TranslationFault, match=reason) as info:
        SoftwareMMU(memory, 2).translate(0x1000, VA)
    assert info.value.level == level


def test_va_outside_the_format_faults() -> None:
    with pytest.raises(TranslationFault, match="49-bit"):
        SoftwareMMU(SimulatedMemory(1 << 20), 2).translate(0, 1 << 49)


def test_ver3_walk_through_six_levels() -> None:
    memory = SimulatedMemory(1 << 30)
    # PDE4 1, PDE3 0x1FF, PDE2 3, PDE1 4, PDE0 0xFF, PT 0x1FF
    va = (1 << 56) | (0x1FF << 47) | (3 << 38) | (4 << 29) | (0xFF << 21) | (0x1FF << 12)
    memory.write_u64(0x1000 + 1 * 8, 0x2012)  # aperture video | PCF 2 << 3 | address 0x2000 in place (51:12)
    memory.write_u64(0x2000 + 0x1FF * 8, 0x3012)
    memory.write_u64(0x3000 + 3 * 8, 0x4012)
    memory.write_u64(0x4000 + 4 * 8, 0x5012)
    memory.write_u64(0x5000 + 0xFF * 16, 0x10)  # big half: PCF_BIG 2, aperture invalid
    memory.write_u64(0x5000 + 0xFF * 16 + 8, 0x6012)  # small half: aperture video | PCF | address 0x6000
    # valid | aperture PEER | PCF (1 uncached + 4 read-only) << 3 | kind 6 << 8 | address 0x77_0000_0000 | peer 3 << 61
    memory.write_u64(0x6000 + 0x1FF * 8, (3 << 61) | 0x77_0000_0000 | 0x62B)
    translation = SoftwareMMU(memory, 3).translate(0x1000, va + 0xFFF)
    assert translation.address == 0x77_0000_0FFF
    assert (translation.target, translation.peer_id, translation.kind) == (MemoryTarget.PEER, 3, 6)
    assert translation.volatile and translation.read_only and not translation.privileged
    assert (translation.level, translation.page_size) == (5, 0x1000)
    # a 2 MiB page in the dual slot: valid | aperture SYSTEM_NON_COHERENT (3 << 1) | address 0x8020_0000
    memory.write_u64(0x5000 + 0xFF * 16, 0x8020_0007)
    translation = SoftwareMMU(memory, 3).translate(0x1000, va)
    assert translation.address == 0x8020_0000 + (va & 0x1F_FFFF)
    assert (translation.target, translation.level) == (MemoryTarget.SYSTEM_NON_COHERENT, 4)


def test_tlb_serves_stale_translations_until_invalidated() -> None:
    memory = SimulatedMemory(1 << 30)
    ver2_tree(memory)
    mmu = SoftwareMMU(memory, 2)
    assert mmu.translate(0x1000, VA).address == 0xABCD_5000
    memory.write_u64(0x5000 + 0x104 * 8, 0x0600_0000_0000_0701)  # page 0x7
    assert mmu.translate(0x1000, VA).address == 0xABCD_5000  # cached
    mmu.invalidate(0x9000)  # another address space: no effect
    assert mmu.translate(0x1000, VA).address == 0xABCD_5000
    mmu.invalidate(0x1000)
    assert mmu.translate(0x1000, VA).address == 0x7000
