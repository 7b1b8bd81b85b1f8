"""A simulated NVIDIA GPU for tests: sparse VRAM, the BAR0 registers the memory manager touches, a software GMMU.

Nothing here runs kernels. The simulator models exactly what the memory manager depends on:
* VRAM of a chosen size (sparse: 16 GiB costs only the pages written);
* an instance block whose RAMIN page-directory words name the root page table (`bind_instance_block` is the step a
  real driver asks GSP to do when it schedules a channel on that address space);
* the MMU invalidate registers: translations are cached in a TLB and only dropped by an invalidate trigger, so a
  memory manager that forgets to invalidate is caught by stale translations;
* a software GMMU that decodes the page tables from raw bits (`software_mmu.py`), and routes accesses through
  the decoded aperture: VIDEO to this VRAM, PEER to the VRAM of the GPU connected under that peer id, SYSTEM_* to
  the bus: another GPU's BAR1 window when the address falls in one (`attach_bar_window`), else the shared host
  memory.
"""

from __future__ import annotations

from kiln.drivers.nv import registers
from kiln.drivers.nv.simulated_memory import SimulatedMemory
from kiln.drivers.nv.software_mmu import MemoryTarget, SoftwareMMU, Translation, TranslationFault

DEFAULT_HOST_MEMORY_BYTES = 1 << 40  # bus addresses a simulated host hands out; sparse, so the size is free


class SimulatedNVGPU:
    """One simulated NV GPU. `mmu_version` 2 is Ampere's page-table format (5 levels), 3 Hopper's (6 levels)."""

    def __init__(
        self,
        vram_size: int = 16 << 30,
        mmu_version: int = 2,
        *,
        host_memory: SimulatedMemory | None = None,
        name: str = "NV:sim",
    ) -> None:
        self.name = name
        self.vram = SimulatedMemory(vram_size, f"{name} VRAM")
        self.host_memory = host_memory if host_memory is not None else SimulatedMemory(DEFAULT_HOST_MEMORY_BYTES)
        self.mmu = SoftwareMMU(self.vram, mmu_version)
        self.peers: dict[int, SimulatedNVGPU] = {}
        self.bar_windows: list[tuple[int, SimulatedNVGPU]] = []  # (bus address, owner) of BAR1 windows on the bus
        self.registers: dict[int, int] = {}
        self.instance_block: int | None = None
        self.page_directory_base: int | None = None
        self.invalidations = 0

    @property
    def mmu_version(self) -> int:
        """The GMMU page-table format version this GPU walks."""
        return self.mmu.version

    # -- registers ----------------------------------------------------------------------------------------------------

    def write_register(self, offset: int, value: int) -> None:
        """A 32-bit BAR0 register write."""
        if not 0 <= value < 1 << 32:
            raise ValueError(f"register {offset:#x} value {value:#x} is not a 32-bit word")
        self.registers[offset] = value
        if offset == registers.MMU_INVALIDATE and value & registers.INVALIDATE_TRIGGER:
            self._invalidate(value)

    def read_register(self, offset: int) -> int:
        """A 32-bit BAR0 register read (unwritten registers read 0)."""
        return self.registers.get(offset, 0)

    def _invalidate(self, command: int) -> None:
        self.invalidations += 1
        if command & registers.INVALIDATE_ALL_PDB:
            self.mmu.invalidate()
        else:
            root, in_system_memory = registers.decode_invalidate_pdb(
                self.read_register(registers.MMU_INVALIDATE_PDB), self.read_register(registers.MMU_INVALIDATE_UPPER_PDB)
            )
            if not in_system_memory:
                self.mmu.invalidate(root)
        # TRIGGER reads back 0 once the invalidate has completed (it is instant here).
        self.registers[registers.MMU_INVALIDATE] = command & ~registers.INVALIDATE_TRIGGER

    def bind_instance_block(self, paddr: int) -> None:
        """Make the address space described by the instance block at VRAM `paddr` the one this GPU translates in."""
        low = self.vram.read_u32(paddr + registers.RAMIN_PAGE_DIR_BASE_LO_BYTE)
        high = self.vram.read_u32(paddr + registers.RAMIN_PAGE_DIR_BASE_HI_BYTE)
        base = registers.decode_page_directory_base(low, high)
        if not base.new_format:
            raise RuntimeError(f"instance block at {paddr:#x} asks for the pre-Pascal page-table format")
        if base.target != 0:
            raise RuntimeError(f"instance block at {paddr:#x} puts the root table in system memory; not simulated")
        self.instance_block = paddr
        self.page_directory_base = base.address

    # -- translation and virtual access -------------------------------------------------------------------------------

    def connect_peer(self, peer_id: int, other: SimulatedNVGPU) -> None:
        """Wire PEER aperture `peer_id` of this GPU to `other`'s VRAM (what an NVLink / P2P setup does)."""
        if not 0 <= peer_id < 8:
            raise ValueError(f"peer id {peer_id} must be in 0..7")
        self.peers[peer_id] = other

    def translate(self, vaddr: int) -> Translation:
        """Translate through the bound address space (raises TranslationFault when unmapped)."""
        if self.page_directory_base is None:
            raise RuntimeError(f"{self.name}: no instance block bound; nothing to translate with")
        return self.mmu.translate(self.page_directory_base, vaddr)

    def attach_bar_window(self, bus_address: int, owner: SimulatedNVGPU) -> None:
        """Make `owner`'s VRAM visible to this GPU's system-aperture accesses at `bus_address` (its BAR1 window)."""
        if bus_address < 0 or bus_address % 4096:
            raise ValueError(f"BAR1 window address {bus_address:#x} must be a non-negative multiple of 4 KiB")
        self.bar_windows.append((bus_address, owner))

    def memory_for(self, translation: Translation) -> tuple[SimulatedMemory, int]:
        """The memory a translation lands in, and the byte address inside it."""
        if translation.target is MemoryTarget.VIDEO:
            return self.vram, translation.address
        if translation.target is MemoryTarget.PEER:
            peer = self.peers.get(translation.peer_id)
            if peer is None:
                raise TranslationFault(translation.address, translation.level, f"peer {translation.peer_id} absent")
            return peer.vram, translation.address
        for bus_address, owner in self.bar_windows:
            if bus_address <= translation.address < bus_address + owner.vram.size:
                return owner.vram, translation.address - bus_address
        return self.host_memory, translation.address

    def read_virtual(self, vaddr: int, size: int) -> bytes:
        """Read `size` bytes at GPU virtual address `vaddr`, page by page through the MMU."""
        out = bytearray()
        while size > 0:
            translation = self.translate(vaddr)
            take = min(size, 4096 - (vaddr & 0xFFF))
            memory, address = self.memory_for(translation)
            out += memory.read(address, take)
            vaddr += take
            size -= take
        return bytes(out)

    def write_virtual(self, vaddr: int, data: bytes) -> None:
        """Write `data` at GPU virtual address `vaddr`, page by page through the MMU."""
        view = memoryview(data)
        while len(view):
            translation = self.translate(vaddr)
            take = min(len(view), 4096 - (vaddr & 0xFFF))
            if translation.read_only:
                raise TranslationFault(vaddr, translation.level, "write to a read-only page")
            memory, address = self.memory_for(translation)
            memory.write(address, bytes(view[:take]))
            vaddr += take
            view = view[take:]
