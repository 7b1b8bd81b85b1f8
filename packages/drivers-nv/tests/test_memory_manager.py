"""NVMemoryManager on simulated GPUs: large pages, registers, peer and host mappings, and complete clean-up."""

from __future__ import annotations

import pytest

from kiln.drivers.nv import registers
from kiln.drivers.nv.memory_manager import FIRMWARE_RESERVED_BYTES, VA_BASE, NVMemoryManager, PeerLink
from kiln.drivers.nv.simulated_hardware import SimulatedNVGPU
from kiln.drivers.nv.simulated_memory import SimulatedMemory
from kiln.drivers.nv.software_mmu import MemoryTarget, TranslationFault
from kiln.runtime.memory import AddrSpace, MappingError, TLSFAllocator

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def make(
    version: int = 2, vram: int = 16 * GIB, host: SimulatedMemory | None = None
) -> tuple[SimulatedNVGPU, NVMemoryManager]:
    gpu = SimulatedNVGPU(vram, version, host_memory=host)
    return gpu, NVMemoryManager(gpu, vram, mmu_version=version, va_allocator=TLSFAllocator(1 << 40, VA_BASE))


@pytest.mark.parametrize("version", [2, 3])
def test_page_directory_base_is_bound_through_the_instance_block(version: int) -> None:
    gpu, mm = make(version)
    assert gpu.instance_block == mm.instance_block
    assert gpu.page_directory_base == mm.root_paddr
    low = gpu.vram.read_u32(mm.instance_block + 0x200)  # RAMIN word 128
    # root 0 | USE_NEW_PT_FORMAT (bit 10) | BIG_PAGE_SIZE 64 KiB (bit 11), target VID_MEM 0
    assert (low, gpu.vram.read_u32(mm.instance_block + 0x204)) == (mm.root_paddr | 0xC00, 0)
    # the manager owns VRAM below the firmware reserve only
    assert mm.vram_size == 16 * GIB - FIRMWARE_RESERVED_BYTES


@pytest.mark.parametrize("version", [2, 3])
def test_large_pages_are_used_when_alignment_allows(version: int) -> None:
    gpu, mm = make(version)
    levels = mm.nv_format.levels
    va = VA_BASE + 3 * 512 * MIB
    # 1 GiB at a 512 MiB-aligned VA and PA: two 512 MiB PTEs at PDE1
    mm.map_range(va, GIB, [(512 * MIB, GIB)], AddrSpace.PHYS)
    for offset in (0, 512 * MIB - 4 * KIB, 512 * MIB, GIB - 1):
        translation = gpu.translate(va + offset)
        assert (translation.level, translation.page_size) == (levels - 3, 512 * MIB)
        assert translation.address == 512 * MIB + offset
    mm.unmap_range(va, GIB)
    # same VA, PA only 2 MiB aligned: 2 MiB PTEs in the dual PDE0 slot
    mm.map_range(va, GIB, [(514 * MIB, GIB)], AddrSpace.PHYS)
    assert (gpu.translate(va).level, gpu.translate(va).page_size) == (levels - 2, 2 * MIB)
    mm.unmap_range(va, GIB)
    # 4 KiB head, 2 MiB middle, 4 KiB tail (the walk from VA 0x1FF000 of 0x402000 bytes)
    va2 = VA_BASE + 0x1F_F000
    mm.map_range(va2, 0x40_2000, [(0x1F_F000, 0x40_2000)], AddrSpace.PHYS)
    sizes = [gpu.translate(va2 + offset).page_size for offset in (0, 0x1000, 0x20_1000, 0x40_1000)]
    assert sizes == [4 * KIB, 2 * MIB, 2 * MIB, 4 * KIB]
    mm.unmap_range(va2, 0x40_2000)
    assert mm.page_table_pages() == {mm.root_paddr}


def test_unmapping_part_of_a_large_page_or_mapping_inside_it_raises() -> None:
    gpu, mm = make()
    va = VA_BASE + 2 * MIB
    mm.map_range(va, 2 * MIB, [(4 * MIB, 2 * MIB)], AddrSpace.PHYS)
    with pytest.raises(MappingError):
        mm.unmap_range(va + 4 * KIB, 4 * KIB)
    for offset in (0, MIB, 2 * MIB - 4 * KIB):
        with pytest.raises(MappingError):
            mm.map_range(va + offset, 4 * KIB, [(0, 4 * KIB)], AddrSpace.PHYS)
    assert gpu.translate(va + MIB).address == 5 * MIB  # untouched by the failed calls


def test_every_map_and_unmap_invalidates_the_tlb() -> None:
    gpu, mm = make()
    va = VA_BASE + 64 * KIB
    before = gpu.invalidations
    mm.map_range(va, 4 * KIB, [(0x1234_5000, 4 * KIB)], AddrSpace.PHYS)
    assert gpu.translate(va).address == 0x1234_5000  # now cached in the simulated TLB
    mm.unmap_range(va, 4 * KIB)
    mm.map_range(va, 4 * KIB, [(0x7000, 4 * KIB)], AddrSpace.PHYS)
    assert gpu.translate(va).address == 0x7000
    assert gpu.invalidations - before == 3
    # the command names this address space's PDB: ALL_VA | SYS_MEMBAR, TRIGGER read back as done
    assert gpu.read_register(registers.MMU_INVALIDATE) == registers.INVALIDATE_ALL_VA | registers.INVALIDATE_SYS_MEMBAR
    assert registers.decode_invalidate_pdb(
        gpu.read_register(registers.MMU_INVALIDATE_PDB), gpu.read_register(registers.MMU_INVALIDATE_UPPER_PDB)
    ) == (mm.root_paddr, False)


def test_a_manager_that_skips_invalidation_reads_stale_translations() -> None:
    # shows the simulated TLB is real, so the test above is meaningful
    gpu, mm = make()
    va = VA_BASE
    mm.map_range(va, 4 * KIB, [(0x1234_5000, 4 * KIB)], AddrSpace.PHYS)
    gpu.translate(va)
    mm.on_range_unmapped = lambda: None  # type: ignore[method-assign]
    mm.unmap_range(va, 4 * KIB)
    assert gpu.translate(va).address == 0x1234_5000  # stale
    mm.invalidate_tlb()
    with pytest.raises(TranslationFault):
        gpu.translate(va)


def test_invalidate_that_never_completes_is_reported() -> None:
    gpu, mm = make()

    class StuckGPU:
        vram = gpu.vram
        write_register = gpu.write_register
        bind_instance_block = gpu.bind_instance_block

        def read_register(self, offset: int) -> int:
            return registers.INVALIDATE_TRIGGER

    mm.hardware = StuckGPU()
    with pytest.raises(RuntimeError, match="did not complete"):
        mm.invalidate_tlb()


@pytest.mark.parametrize("version", [2, 3])
def test_two_gpus_share_a_buffer_through_peer_mappings(version: int) -> None:
    shared = TLSFAllocator(1 << 40, VA_BASE)
    gpu_a, gpu_b = SimulatedNVGPU(16 * GIB, version), SimulatedNVGPU(16 * GIB, version)
    mm_a = NVMemoryManager(gpu_a, 16 * GIB, mmu_version=version, va_allocator=shared)
    mm_b = NVMemoryManager(gpu_b, 16 * GIB, mmu_version=version, va_allocator=shared)
    gpu_b.connect_peer(3, gpu_a)
    buffer = mm_a.valloc(5 * MIB + 12 * KIB)
    payload = bytes(range(256)) * (buffer.size // 256)
    gpu_a.write_virtual(buffer.va_addr, payload)
    peer_view = mm_b.map_peer(buffer, 3)
    assert peer_view.va_addr == buffer.va_addr and peer_view.aspace is AddrSpace.PEER
    # reads through B's MMU reach A's VRAM bytes
    assert gpu_b.read_virtual(buffer.va_addr, buffer.size) == payload
    translation = gpu_b.translate(buffer.va_addr + 5 * MIB)
    assert (translation.target, translation.peer_id) == (MemoryTarget.PEER, 3)
    first_chunk = buffer.paddrs[0][0]
    assert translation.address == next(
        paddr + (5 * MIB - offset)
        for offset, (paddr, size) in zip(_offsets(buffer.paddrs), buffer.paddrs)
        if offset <= 5 * MIB < offset + size
    )
    # writes through B land in A
    gpu_b.write_virtual(buffer.va_addr + 7, b"peer!")
    assert gpu_a.vram.read(first_chunk + 7, 5) == b"peer!"
    # B's own VRAM holds nothing but its page tables and instance block
    assert gpu_b.vram.resident_pages() <= mm_b.page_table_pages() | {mm_b.instance_block}
    # a VA allocated on B does not collide with A's buffer (one shared VA allocator)
    other = mm_b.valloc(4 * KIB)
    assert not buffer.va_addr <= other.va_addr < buffer.va_addr + buffer.size
    mm_b.unmap(peer_view)
    with pytest.raises(TranslationFault):
        gpu_b.translate(buffer.va_addr)
    assert gpu_a.read_virtual(buffer.va_addr, 16) == payload[:7] + b"peer!" + payload[12:16]  # owner still mapped
    with pytest.raises(ValueError, match="PHYS mapping"):
        mm_b.map_peer(peer_view, 3)
    mm_b.vfree(other)
    mm_a.vfree(buffer)
    assert shared.used_bytes == 0


BAR1_BUS_ADDRESS = 0x200_0000_0000  # 2 TiB: above the simulated host memory's bus addresses


@pytest.mark.parametrize("version", [2, 3])
def test_peer_without_a_peer_entry_is_reached_through_its_bar(version: int) -> None:
    shared = TLSFAllocator(1 << 40, VA_BASE)
    gpu_a, gpu_b = SimulatedNVGPU(1 * GIB, version), SimulatedNVGPU(1 * GIB, version)
    mm_a = NVMemoryManager(gpu_a, 1 * GIB, mmu_version=version, va_allocator=shared)
    mm_b = NVMemoryManager(gpu_b, 1 * GIB, mmu_version=version, va_allocator=shared)
    gpu_b.attach_bar_window(BAR1_BUS_ADDRESS, gpu_a)  # no connect_peer: A and B share no peer-table entry
    buffer = mm_a.valloc(2 * MIB + 8 * KIB)
    gpu_a.write_virtual(buffer.va_addr + 2 * MIB + 5, b"over the BAR")
    link = PeerLink(peer_id=None, bar_address=BAR1_BUS_ADDRESS, bar_size=1 * GIB)
    view = mm_b.map_peer(buffer, link)
    assert view.aspace is AddrSpace.SYS and not view.snooped
    assert view.paddrs == tuple((BAR1_BUS_ADDRESS + paddr, size) for paddr, size in buffer.paddrs)
    translation = gpu_b.translate(buffer.va_addr + 2 * MIB + 5)
    # dev_mmu.h APERTURE 2 = SYSTEM_COHERENT_MEMORY, 3 = SYSTEM_NON_COHERENT_MEMORY: BAR1 P2P is the latter
    assert translation.target is MemoryTarget.SYSTEM_NON_COHERENT
    assert gpu_b.read_virtual(buffer.va_addr + 2 * MIB + 5, 12) == b"over the BAR"
    gpu_b.write_virtual(buffer.va_addr, b"from B")
    assert gpu_a.read_virtual(buffer.va_addr, 6) == b"from B"
    mm_b.unmap(view)
    with pytest.raises(RuntimeError, match="beyond the 0x100000-byte BAR1"):
        mm_b.map_peer(buffer, PeerLink(bar_address=BAR1_BUS_ADDRESS, bar_size=1 * MIB))
    # with a peer id the same buffer goes through the PEER aperture
    gpu_b.connect_peer(2, gpu_a)
    peer_view = mm_b.map_peer(buffer, PeerLink(peer_id=2, bar_address=BAR1_BUS_ADDRESS, bar_size=1 * GIB))
    assert peer_view.aspace is AddrSpace.PEER and gpu_b.translate(buffer.va_addr).target is MemoryTarget.PEER
    assert gpu_b.read_virtual(buffer.va_addr, 6) == b"from B"
    mm_b.unmap(peer_view)
    mm_a.vfree(buffer)


def _offsets(chunks: tuple[tuple[int, int], ...]) -> list[int]:
    offsets, position = [], 0
    for _, size in chunks:
        offsets.append(position)
        position += size
    return offsets


def test_host_memory_mapping_uses_the_system_apertures() -> None:
    host = SimulatedMemory(1 << 40, "host memory")
    gpu, mm = make(host=host)
    host.write(0x80_0000_3000, b"from the host")
    coherent = mm.map_system([(0x80_0000_3000, 4 * KIB), (0x90_0000_0000, 8 * KIB)], snooped=True, uncached=True)
    assert gpu.read_virtual(coherent.va_addr, 13) == b"from the host"
    first, second = gpu.translate(coherent.va_addr), gpu.translate(coherent.va_addr + 4 * KIB)
    assert (first.target, first.volatile) == (MemoryTarget.SYSTEM_COHERENT, True)
    assert second.address == 0x90_0000_0000
    gpu.write_virtual(coherent.va_addr + 4 * KIB + 1, b"to host")
    assert host.read(0x90_0000_0001, 7) == b"to host"
    plain = mm.map_system([(0x1000, 4 * KIB)], vaddr=VA_BASE + 512 * GIB, snooped=False)
    assert gpu.translate(plain.va_addr).target is MemoryTarget.SYSTEM_NON_COHERENT
    mm.unmap(plain)
    mm.vfree(coherent)
    assert mm.va_allocator.used_bytes == 0
    assert mm.page_table_pages() == {mm.root_paddr}


def test_freeing_everything_leaves_nothing_behind() -> None:
    gpu, mm = make()
    general_free = mm.pa_allocator.free_bytes
    boot_used = mm.boot_allocator.used_bytes
    buffers = [mm.valloc(size) for size in (4 * KIB, 3 * MIB, 513 * MIB, 100 * KIB)]
    assert gpu.translate(buffers[2].va_addr).page_size == 512 * MIB  # 512 MiB chunk, naturally aligned VA
    host = mm.map_system([(1 << 38, 2 * MIB)])
    for buffer in reversed(buffers):
        mm.vfree(buffer)
    mm.vfree(host)
    assert mm.pa_allocator.free_bytes == general_free
    assert mm.boot_allocator.used_bytes == boot_used  # root table + instance block only
    assert mm.page_table_pages() == {mm.root_paddr}
    assert mm.va_allocator.used_bytes == 0
    with pytest.raises(TranslationFault):
        gpu.translate(buffers[0].va_addr)


def test_class_level_va_allocator_is_shared() -> None:
    gpu_a, gpu_b = SimulatedNVGPU(1 * GIB), SimulatedNVGPU(1 * GIB)
    mm_a, mm_b = NVMemoryManager(gpu_a, 1 * GIB), NVMemoryManager(gpu_b, 1 * GIB)
    assert mm_a.va_allocator is mm_b.va_allocator is NVMemoryManager.shared_va_allocator
    a, b = mm_a.valloc(2 * MIB), mm_b.valloc(2 * MIB)
    assert a.va_addr != b.va_addr
    assert min(a.va_addr, b.va_addr) >= VA_BASE
    mm_a.vfree(a)
    mm_b.vfree(b)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="firmware reserve"):
        NVMemoryManager(SimulatedNVGPU(64 * MIB), 64 * MIB)
    with pytest.raises(ValueError, match="version 4"):
        NVMemoryManager(SimulatedNVGPU(1 * GIB), 1 * GIB, mmu_version=4)
    _, mm = make()
    with pytest.raises(ValueError, match="peer id 9"):
        mm.map_peer(mm.valloc(4 * KIB), 9)
