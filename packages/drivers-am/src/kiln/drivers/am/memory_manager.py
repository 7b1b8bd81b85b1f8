"""AMMemoryManager: the runtime's generic memory manager driving an AMD GPU's VM context 0.

It adds to the generic manager what is AMD's: the page-table format of the GPU's generation, the placement of its
VRAM in the XGMI fabric (read from the hub), programming of VM context 0 on both hubs, TLB invalidation after every
change, a VA allocator shared by every AM device (so one buffer has one VA on all GPUs), and the rules for mapping
another GPU's VRAM (XGMI when both are in one hive, otherwise through the owner's PCIe BAR) or host memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.hardware import AMHardware
from kiln.drivers.am.page_table_format import AMPageTableFormat
from kiln.drivers.am.registers import VMID, AMRegister, Hub, context_cntl, invalidate_request, pack, unpack
from kiln.drivers.am.xgmi import XgmiNode
from kiln.runtime.memory import AddrSpace, MemoryManager, TLSFAllocator, VirtMapping

#: First VA of the shared AM VA space; programmed as PAGE_TABLE_START_ADDR (tinygrad's AM driver uses the same base).
AM_VA_BASE = 0x2000_0000_0000
#: Bytes of VA the shared allocator hands out (16 TiB).
AM_VA_SIZE = 1 << 44
#: Last VA the VM context covers: 48-bit VA space, kept in the canonical lower half (bit 47 clear).
AM_VA_END = min(AM_VA_BASE + (1 << 48) - 1, 0x7FFF_FFFF_FFFF)
#: Boot region at the bottom of VRAM: the root table (and firmware, on hardware).
AM_BOOT_SIZE = 32 << 20
#: VRAM at the top left to firmware (tinygrad reserves 64 MiB on RDNA, more on MI300 for its TMR).
FIRMWARE_RESERVED = {GfxGeneration.GFX11: 64 << 20, GfxGeneration.GFX9_4: 384 << 20}
#: valloc chunk sizes: every power of two from 512 GiB down to 4 KiB; chunks of 2 MiB and more are aligned to their
#: size (up to 1 GiB) so they can be mapped with 2 MiB / 1 GiB pages.
AM_PALLOC_RANGES: tuple[tuple[int, int], ...] = tuple(
    (1 << shift, min(1 << shift, 1 << 30) if shift >= 21 else 4096) for shift in range(39, 11, -1)
)
#: How many times the semaphore / ACK register is polled before a TLB invalidation is declared lost.
INVALIDATE_POLL_LIMIT = 100_000


class AMMemoryManager(MemoryManager):
    """Memory manager of one AMD GPU: VRAM allocation, the GPU's page tables and its VM context registers.

    Args:
        hardware: the GPU (simulated or real) whose VRAM and registers are used.
        boot_size: bytes of the boot region at the bottom of VRAM.
        firmware_reserved: bytes at the top of VRAM left unmanaged (default per generation).

    Example:
        >>> manager = AMMemoryManager(SimulatedAMHardware(SimulatedPlatform(), 1 << 30))  # doctest: +SKIP
        >>> buffer = manager.valloc(5 << 20)  # VRAM, mapped with 2 MiB pages where possible
        >>> manager.vfree(buffer)
    """

    #: One VA allocator for every AM device, so a buffer can be mapped at the same VA into each GPU.
    shared_va_allocator: ClassVar[TLSFAllocator] = TLSFAllocator(AM_VA_SIZE, base=AM_VA_BASE, block_size=4096)

    def __init__(
        self, hardware: AMHardware, *, boot_size: int = AM_BOOT_SIZE, firmware_reserved: int | None = None
    ) -> None:
        self.hardware = hardware
        generation = hardware.generation
        reserved = FIRMWARE_RESERVED[generation] if firmware_reserved is None else firmware_reserved
        managed = hardware.vram_size - reserved
        if managed <= boot_size:
            raise ValueError(
                f"VRAM of {hardware.vram_size:#x} bytes is too small: {reserved:#x} reserved for firmware and "
                f"{boot_size:#x} for boot leave nothing to manage"
            )
        # The MM hub holds the XGMI placement registers tinygrad reads; both hubs see the same values.
        self.xgmi = XgmiNode.from_registers(
            hardware.read_register(Hub.MM, AMRegister.MC_VM_XGMI_LFB_CNTL),
            hardware.read_register(Hub.MM, AMRegister.MC_VM_XGMI_LFB_SIZE),
        )
        self.tlb_invalidations = 0
        self.format = AMPageTableFormat(generation, self.xgmi.fabric_base)
        super().__init__(
            hardware.vram,
            self.format,
            managed,
            boot_size=boot_size,
            va_allocator=AMMemoryManager.shared_va_allocator,
            va_base=AM_VA_BASE,
            palloc_ranges=AM_PALLOC_RANGES,
            # Without a full-size BAR the CPU cannot reach all of VRAM: keep the tables where it can.
            reserve_ptable=hardware.bar_size < hardware.vram_size,
        )
        self._program_vm_context()

    @property
    def vram_base(self) -> int:
        """Fabric address of this GPU's VRAM offset 0 (what PHYS offsets become in entries)."""
        return self.format.vram_base

    def hub_instances(self) -> list[tuple[Hub, int]]:
        """Every hub instance the driver programs and flushes: each XCC's GC hub, then each MMHUB (each AID's)."""
        counts = {Hub.GC: self.hardware.xcc_count, Hub.MM: self.hardware.mmhub_count}
        return [(hub, instance) for hub in Hub for instance in range(counts[hub])]

    def _program_vm_context(self) -> None:
        """Point VM context 0 of every hub instance at the root table and enable it (tinygrad enable_vm_addressing).

        GFX11 walks 3 levels below the root with the default block size; GFX9.4 in translate-further mode is set
        up one level shallower with block size 9 (PDB0 entries act as 2 MiB PTEs that may translate further).
        """
        generation = self.hardware.generation
        depth, block_size = (2, 9) if generation.translate_further else (3, 0)
        base = self.vram_base + self.root_paddr | 1  # valid bit, as amdgpu_gmc_pd_addr adds it
        start, end = AM_VA_BASE >> 12, AM_VA_END >> 12
        write = self.hardware.write_register
        for hub, instance in self.hub_instances():
            # The LO32/HI32 registers are single 32-bit fields (PAGE_DIRECTORY_ENTRY_*, LOGICAL_PAGE_NUMBER_*).
            write(hub, AMRegister.VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32, base & 0xFFFF_FFFF, instance)
            write(hub, AMRegister.VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32, base >> 32, instance)
            write(hub, AMRegister.VM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32, start & 0xFFFF_FFFF, instance)
            write(hub, AMRegister.VM_CONTEXT0_PAGE_TABLE_START_ADDR_HI32, start >> 32, instance)
            write(hub, AMRegister.VM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32, end & 0xFFFF_FFFF, instance)
            write(hub, AMRegister.VM_CONTEXT0_PAGE_TABLE_END_ADDR_HI32, end >> 32, instance)
            cntl = context_cntl(generation, hub, enable=True, depth=depth, block_size=block_size)
            write(hub, AMRegister.VM_CONTEXT0_CNTL, cntl, instance)
        self.invalidate_tlb()

    def _poll(self, hub: Hub, instance: int, register: AMRegister, field: str, bit: int, what: str) -> None:
        generation = self.hardware.generation
        for _ in range(INVALIDATE_POLL_LIMIT):
            value = self.hardware.read_register(hub, register, instance)
            if unpack(generation, hub, register, value, field) & bit:
                return
        raise RuntimeError(
            f"{what} on {hub.value} hub instance {instance} did not happen after {INVALIDATE_POLL_LIMIT} polls of "
            f"{register.value} (the GPU is hung or its registers are not reachable)"
        )

    def invalidate_tlb(self) -> None:
        """Drop cached translations of VMID 0 on every hub instance and wait for each acknowledgement.

        On an MMHUB the request is made under the engine's invalidation semaphore (read until SEMAPHORE=1, release
        by writing it 0), as Linux `gmc_v11_0_flush_gpu_tlb` and tinygrad's AM driver do; Linux `gmc_v9_0.c` skips
        it on GC 9.4.2+, tinygrad takes it on every MMHUB instance there too, and so does this driver.
        Raises RuntimeError if a hub never grants the semaphore or never acknowledges.
        """
        generation = self.hardware.generation
        for hub, instance in self.hub_instances():
            if hub is Hub.MM:
                self._poll(hub, instance, AMRegister.VM_INVALIDATE_ENG17_SEM, "SEMAPHORE", 1, "semaphore acquire")
            request = invalidate_request(generation, hub, VMID)
            self.hardware.write_register(hub, AMRegister.VM_INVALIDATE_ENG17_REQ, request, instance)
            ack_what = f"TLB invalidation acknowledgement of VMID {VMID}"
            self._poll(
                hub, instance, AMRegister.VM_INVALIDATE_ENG17_ACK, "PER_VMID_INVALIDATE_ACK", 1 << VMID, ack_what
            )
            if hub is Hub.MM:
                release = pack(generation, hub, AMRegister.VM_INVALIDATE_ENG17_SEM, SEMAPHORE=0)
                self.hardware.write_register(hub, AMRegister.VM_INVALIDATE_ENG17_SEM, release, instance)
        self.tlb_invalidations += 1

    def on_range_mapped(self) -> None:
        """New entries may replace cached 'invalid' ones: invalidate."""
        self.invalidate_tlb()

    def on_range_unmapped(self) -> None:
        """Cleared entries must not stay reachable through the TLB: invalidate."""
        self.invalidate_tlb()

    def check_reach(self, vaddr: int, size: int, paddrs: Sequence[tuple[int, int]], aspace: AddrSpace) -> None:
        """What the hub can reach, checked before `map_range` writes anything: ValueError when the range leaves the
        VM context (above AM_VA_END) or a chunk's device address does not fit the generation's address width."""
        if vaddr + size - 1 > AM_VA_END:
            raise ValueError(
                f"range [{vaddr:#x}, {vaddr + size:#x}) ends above the VM context's last VA {AM_VA_END:#x}"
            )
        generation = self.hardware.generation
        limit = 1 << generation.address_bits
        for paddr, length in paddrs:
            first = self.format.device_address(paddr, aspace)
            if first < 0 or first + length > limit:
                raise ValueError(
                    f"chunk ({paddr:#x}, {length:#x}) in {aspace.name} reaches device address {first + length:#x}, "
                    f"beyond the {generation.address_bits}-bit reach of {generation.value}"
                )

    # ---- other GPUs' and the host's memory -----------------------------------------------------------------------

    def peer_chunks(
        self, owner: AMMemoryManager, paddrs: Sequence[tuple[int, int]]
    ) -> tuple[AddrSpace, tuple[tuple[int, int], ...]]:
        """How this GPU reaches VRAM chunks `paddrs` (offsets) of `owner`: (address space, chunks to map).

        * the same GPU: PHYS, unchanged;
        * both GPUs in one XGMI hive: PEER, the owner's fabric addresses (`owner.vram_base + offset`);
        * otherwise: SYS, the owner's PCIe BAR bus addresses; RuntimeError if a chunk lies beyond the BAR.
        """
        chunks = tuple((int(paddr), int(size)) for paddr, size in paddrs)
        if owner is self:
            return AddrSpace.PHYS, chunks
        mine, theirs = self.hardware.hive_id, owner.hardware.hive_id
        if mine is not None and mine == theirs and self.xgmi.in_hive and owner.xgmi.in_hive:
            return AddrSpace.PEER, tuple((owner.vram_base + paddr, size) for paddr, size in chunks)
        bar_address, bar_size = owner.hardware.bar_address, owner.hardware.bar_size
        for paddr, size in chunks:
            if paddr + size > bar_size:
                raise RuntimeError(
                    f"VRAM chunk ({paddr:#x}, {size:#x}) is beyond the {bar_size:#x}-byte BAR of the owner: peers "
                    "outside its XGMI hive can reach only BAR-visible VRAM (enable resizable BAR)"
                )
        return AddrSpace.SYS, tuple((bar_address + paddr, size) for paddr, size in chunks)

    def map_peer(self, owner: AMMemoryManager, mapping: VirtMapping) -> VirtMapping:
        """Map `owner`'s VRAM mapping into this GPU at the same VA (snooped, keeping the owner's caching mode).

        The VA is free here too because every AM device allocates VAs from the one shared allocator.
        """
        if mapping.aspace is not AddrSpace.PHYS:
            raise ValueError(f"map_peer takes a VRAM (PHYS) mapping of the owner, got a {mapping.aspace.name} one")
        aspace, chunks = self.peer_chunks(owner, mapping.paddrs)
        return self.map_range(mapping.va_addr, mapping.size, chunks, aspace, uncached=mapping.uncached, snooped=True)

    def map_host(self, vaddr: int, size: int, bus_chunks: Sequence[tuple[int, int]]) -> VirtMapping:
        """Map pinned host memory (bus-address chunks) at `vaddr`: SYSTEM, snooped and uncached, as tinygrad does."""
        return self.map_range(vaddr, size, bus_chunks, AddrSpace.SYS, uncached=True, snooped=True)
