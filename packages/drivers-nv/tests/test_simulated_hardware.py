"""The simulated GPU: sparse memory, instance-block binding, invalidate registers, routing by aperture."""

from __future__ import annotations

import pytest

from kiln.drivers.nv import registers
from kiln.drivers.nv.simulated_hardware import SimulatedNVGPU
from kiln.drivers.nv.simulated_memory import SimulatedMemory
from kiln.drivers.nv.software_mmu import TranslationFault


def test_sparse_memory_reads_zero_and_stores_only_written_pages() -> None:
    memory = SimulatedMemory(16 << 30)
    assert memory.read(12 << 30, 10) == bytes(10)
    memory.write(0x1FFE, b"abcd")  # straddles two pages
    assert memory.read(0x1FFC, 8) == b"\0\0abcd\0\0"
    assert memory.resident_pages() == {0x1000, 0x2000}
    memory.write_u64(0x3000, 0x1122_3344_5566_7788)
    assert memory.read(0x3000, 2) == b"\x88\x77" and memory.read_u32(0x3004) == 0x1122_3344
    with pytest.raises(ValueError, match="outside"):
        memory.read((16 << 30) - 4, 8)
    with pytest.raises(ValueError, match="multiple of 4096"):
        SimulatedMemory(1000)


def ver2_gpu_with_one_page() -> SimulatedNVGPU:
    """Root at 0x1000 mapping VA 0x5000 to VRAM 0x9000 (raw entries written by hand), instance block at 0x20000."""
    gpu = SimulatedNVGPU(1 << 30, 2)
    gpu.vram.write_u64(0x1000, 0x202)  # PDE3[0] -> 0x2000 (aperture video)
    gpu.vram.write_u64(0x2000, 0x302)  # PDE2[0] -> 0x3000
    gpu.vram.write_u64(0x3000, 0x402)  # PDE1[0] -> 0x4000
    gpu.vram.write_u64(0x4008, 0x502)  # PDE0[0] small half -> 0x5000
    gpu.vram.write_u64(0x5000 + 5 * 8, 0x0600_0000_0000_0901)  # PT[5]: valid, page 0x9, kind 6
    gpu.vram.write_u32(0x20000 + 0x200, 0x1000 | 0x400)  # RAMIN PAGE_DIR_BASE_LO | USE_NEW_PT_FORMAT
    gpu.bind_instance_block(0x20000)
    return gpu


def test_translation_through_the_bound_instance_block_and_tlb_invalidation() -> None:
    gpu = ver2_gpu_with_one_page()
    assert gpu.page_directory_base == 0x1000
    gpu.vram.write(0x9010, b"data")
    assert gpu.read_virtual(0x5010, 4) == b"data"
    gpu.vram.write_u64(0x5000 + 5 * 8, 0)  # unmap behind the TLB's back
    assert gpu.read_virtual(0x5010, 4) == b"data"  # stale until invalidated
    # a targeted invalidate of another PDB leaves this address space cached
    gpu.write_register(registers.MMU_INVALIDATE_PDB, 0x7 << 4)
    gpu.write_register(registers.MMU_INVALIDATE, registers.INVALIDATE_ALL_VA | registers.INVALIDATE_TRIGGER)
    assert gpu.read_virtual(0x5010, 4) == b"data"
    assert gpu.read_register(registers.MMU_INVALIDATE) == registers.INVALIDATE_ALL_VA  # TRIGGER reads back done
    gpu.write_register(registers.MMU_INVALIDATE, registers.INVALIDATE_ALL_PDB | registers.INVALIDATE_TRIGGER)
    with pytest.raises(TranslationFault, match="not valid"):
        gpu.read_virtual(0x5010, 4)
    assert gpu.invalidations == 2


def test_read_only_pages_refuse_writes() -> None:
    gpu = ver2_gpu_with_one_page()
    gpu.vram.write_u64(0x5000 + 5 * 8, 0x0600_0000_0000_0941)  # READ_ONLY bit 6
    with pytest.raises(TranslationFault, match="read-only"):
        gpu.write_virtual(0x5000, b"x")


def test_bad_instance_blocks_and_register_values_are_rejected() -> None:
    gpu = SimulatedNVGPU(1 << 30, 3)
    with pytest.raises(RuntimeError, match="no instance block"):
        gpu.translate(0)
    gpu.vram.write_u32(0x200, 0x1000)  # USE_NEW_PT_FORMAT clear
    with pytest.raises(RuntimeError, match="pre-Pascal"):
        gpu.bind_instance_block(0)
    gpu.vram.write_u32(0x200, 0x1000 | 0x400 | 2)  # TARGET system coherent
    with pytest.raises(RuntimeError, match="system memory"):
        gpu.bind_instance_block(0)
    with pytest.raises(ValueError, match="32-bit"):
        gpu.write_register(registers.MMU_INVALIDATE, 1 << 32)
    with pytest.raises(ValueError, match="peer id 8"):
        gpu.connect_peer(8, gpu)
