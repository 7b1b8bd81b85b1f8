"""NVMemoryManager: the runtime's generic MemoryManager on NVIDIA GMMU page tables and registers.

What NV adds to the generic manager:
* the page-table format (ver2 Ampere / ver3 Hopper) and NV's VRAM layout: a 2 MiB boot region (root table, instance
  block), the top 64 MiB left to firmware (as tinygrad's NV driver does for its falcon structures), and `valloc`
  chunks of 512 MiB, 2 MiB and 4 KiB aligned to their size so that large pages apply;
* one class-level VA allocator shared by every NV device (2**44 bytes at 0x10_0000_0000), so a buffer has the same VA
  on every GPU and can be mapped into a peer at that VA;
* the page-directory base: an instance block whose RAMIN words point at the root table, bound on the hardware;
* TLB invalidation after every map and unmap through the MMU_INVALIDATE registers;
* mapping another GPU's buffer and host memory (SYS aperture, coherent when snooped). A peer GPU is reached through
  the PEER aperture with its peer id when the kernel driver / GSP set up a peer-table entry for it (NVLink or PCIe
  P2P: `dev_mmu.h` NV_MMU_VER2_PTE_APERTURE_PEER_MEMORY + ADDRESS_VID_PEER, ver3 PEER_ID), and otherwise through its
  PCIe BAR1 window as SYSTEM_NON_COHERENT memory, as NVIDIA's UVM does for BAR1 P2P (`uvm_pascal_mmu.c`,
  "sys non-coherent for some BAR1 P2P addresses"). The same rule as the AM driver: inside the fabric group the peer
  aperture, outside it the owner's BAR.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from kiln.drivers.nv import registers
from kiln.drivers.nv.page_table_format import NVPageTableFormat, page_table_format, peer_address
from kiln.runtime.memory import AddrSpace, MemoryManager, PhysicalMemory, TLSFAllocator, VirtMapping

KIB, MIB = 1 << 10, 1 << 20
BOOT_BYTES = 2 * MIB  # root table and instance block
FIRMWARE_RESERVED_BYTES = 64 * MIB  # top of VRAM kept for firmware (GSP / falcon structures)
VA_BASE = 0x10_0000_0000  # the shared VA window kiln's NV devices allocate from
VA_BYTES = 1 << 44
PALLOC_RANGES = ((512 * MIB, 512 * MIB), (2 * MIB, 2 * MIB), (4 * KIB, 4 * KIB))
INVALIDATE_POLLS = 1000  # register reads before a TLB invalidate that never completes is reported


class NVHardware(Protocol):
    """What the memory manager needs from an NV GPU (the simulator, or a real one behind BAR0/BAR1 and GSP)."""

    @property
    def vram(self) -> PhysicalMemory:
        """The GPU's VRAM, by physical address."""
        ...

    def write_register(self, offset: int, value: int) -> None:
        """Write a 32-bit BAR0 register."""
        ...

    def read_register(self, offset: int) -> int:
        """Read a 32-bit BAR0 register."""
        ...

    def bind_instance_block(self, paddr: int) -> None:
        """Make the address space of the instance block at VRAM `paddr` current (GSP does this on real GPUs)."""
        ...


@dataclass(frozen=True)
class PeerLink:
    """How this GPU reaches one other GPU's VRAM.

    Attributes:
        peer_id: the peer-table slot (0..7) the kernel driver / GSP programmed for the owner over NVLink or PCIe P2P;
            None when the two GPUs share no peer entry.
        bar_address: bus address of the owner's BAR1 window (VRAM offset 0, statically mapped).
        bar_size: bytes of the owner's VRAM visible through BAR1.
    """

    peer_id: int | None = None
    bar_address: int = 0
    bar_size: int = 0


class NVMemoryManager(MemoryManager):
    """Memory manager of one NV GPU.

    Args:
        hardware: the GPU (registers, VRAM, instance-block binding).
        vram_size: bytes of VRAM on the GPU; the top 64 MiB stay with firmware.
        mmu_version: 2 (Ampere page tables, 49-bit VA) or 3 (Hopper, 57-bit VA).
        va_allocator: override the class-level shared VA allocator (tests that want an isolated VA space).
    """

    shared_va_allocator: ClassVar[TLSFAllocator] = TLSFAllocator(VA_BYTES, base=VA_BASE)

    def __init__(
        self,
        hardware: NVHardware,
        vram_size: int,
        *,
        mmu_version: int = 2,
        va_allocator: TLSFAllocator | None = None,
    ) -> None:
        if vram_size <= FIRMWARE_RESERVED_BYTES + BOOT_BYTES:
            raise ValueError(
                f"vram_size {vram_size:#x} must exceed the firmware reserve and boot region "
                f"({FIRMWARE_RESERVED_BYTES + BOOT_BYTES:#x} bytes)"
            )
        self.hardware = hardware
        self.nv_format: NVPageTableFormat = page_table_format(mmu_version)
        super().__init__(
            hardware.vram,
            self.nv_format,
            vram_size - FIRMWARE_RESERVED_BYTES,
            boot_size=BOOT_BYTES,
            va_allocator=va_allocator if va_allocator is not None else self.shared_va_allocator,
            va_base=0,
            palloc_ranges=PALLOC_RANGES,
        )
        self.instance_block = self.palloc(registers.RAMIN_SIZE, registers.RAMIN_SIZE, boot=True)
        low, high = registers.encode_page_directory_base(self.root_paddr)
        self.memory.write(self.instance_block + registers.RAMIN_PAGE_DIR_BASE_LO_BYTE, low.to_bytes(4, "little"))
        self.memory.write(self.instance_block + registers.RAMIN_PAGE_DIR_BASE_HI_BYTE, high.to_bytes(4, "little"))
        hardware.bind_instance_block(self.instance_block)
        self.invalidations = 0

    # ---- TLB ----------------------------------------------------------------------------------------------------

    def invalidate_tlb(self) -> None:
        """Invalidate every cached translation of this address space, and wait until the GPU reports it done."""
        pdb_low, pdb_upper = registers.encode_invalidate_pdb(self.root_paddr)
        self.hardware.write_register(registers.MMU_INVALIDATE_PDB, pdb_low)
        self.hardware.write_register(registers.MMU_INVALIDATE_UPPER_PDB, pdb_upper)
        command = registers.INVALIDATE_ALL_VA | registers.INVALIDATE_SYS_MEMBAR | registers.INVALIDATE_TRIGGER
        self.hardware.write_register(registers.MMU_INVALIDATE, command)
        for _ in range(INVALIDATE_POLLS):
            if not self.hardware.read_register(registers.MMU_INVALIDATE) & registers.INVALIDATE_TRIGGER:
                self.invalidations += 1
                return
        raise RuntimeError(
            f"MMU invalidate of PDB {self.root_paddr:#x} did not complete after {INVALIDATE_POLLS} polls"
        )

    def on_range_mapped(self) -> None:
        """New entries may replace cached faults or stale directory entries: invalidate."""
        self.invalidate_tlb()

    def on_range_unmapped(self) -> None:
        """Removed entries must not be served from the TLB any more: invalidate."""
        self.invalidate_tlb()

    # ---- mappings of memory this GPU does not own ---------------------------------------------------------------

    def peer_chunks(
        self, paddrs: Sequence[tuple[int, int]], link: PeerLink
    ) -> tuple[AddrSpace, tuple[tuple[int, int], ...]]:
        """How this GPU reaches the owner's VRAM chunks `paddrs` (offsets): (address space, chunks to map).

        With a peer id: PEER, `peer_address(peer_id, offset)`. Without: SYS, the owner's BAR1 bus addresses (mapped
        non-coherent); RuntimeError if a chunk lies beyond the BAR.
        """
        chunks = tuple((int(paddr), int(size)) for paddr, size in paddrs)
        if link.peer_id is not None:
            return AddrSpace.PEER, tuple((peer_address(link.peer_id, paddr), size) for paddr, size in chunks)
        for paddr, size in chunks:
            if paddr + size > link.bar_size:
                raise RuntimeError(
                    f"VRAM chunk ({paddr:#x}, {size:#x}) is beyond the {link.bar_size:#x}-byte BAR1 of the owner: a "
                    "peer without a peer-table entry reaches only BAR1-visible VRAM"
                )
        return AddrSpace.SYS, tuple((link.bar_address + paddr, size) for paddr, size in chunks)

    def map_peer(self, mapping: VirtMapping, link: int | PeerLink) -> VirtMapping:
        """Map another GPU's VRAM buffer (its PHYS `mapping`) at the same VA here.

        `link` is the owner's peer id (PEER aperture) or a `PeerLink`; a link without a peer id maps the owner's
        BAR1 window as SYSTEM_NON_COHERENT memory.
        """
        if mapping.aspace is not AddrSpace.PHYS:
            raise ValueError(f"map_peer needs the owner's PHYS mapping, got a {mapping.aspace.name} mapping")
        if isinstance(link, int):
            link = PeerLink(peer_id=link)
        aspace, chunks = self.peer_chunks(mapping.paddrs, link)
        return self.map_range(mapping.va_addr, mapping.size, chunks, aspace, uncached=mapping.uncached, snooped=False)

    def map_system(
        self,
        chunks: Sequence[tuple[int, int]],
        *,
        vaddr: int | None = None,
        snooped: bool = True,
        uncached: bool = False,
    ) -> VirtMapping:
        """Map host memory given as (bus address, size) chunks; at `vaddr`, or at a fresh shared VA when None.

        `snooped` picks the system-coherent aperture (else non-coherent). Undo with `vfree` when the VA was
        allocated here, with `unmap` otherwise.
        """
        size = sum(length for _, length in chunks)
        if vaddr is not None:
            return self.map_range(vaddr, size, chunks, AddrSpace.SYS, uncached=uncached, snooped=snooped)
        vaddr = self.alloc_vaddr(size)
        try:
            return self.map_range(vaddr, size, chunks, AddrSpace.SYS, uncached=uncached, snooped=snooped)
        except BaseException:
            self.free_vaddr(vaddr)
            raise

    def unmap(self, mapping: VirtMapping) -> None:
        """Remove a mapping made by `map_range` / `map_peer` / `map_system(vaddr=...)`, keeping its VA allocated."""
        self.unmap_range(mapping.va_addr, mapping.size)
