"""The AM device kind: simulated AMD GPUs ("AM:sim", "AM:sim1", ...) behind kiln's Device registry.

A simulated AM device holds buffers but cannot run kernels. Allocation goes through the real AMMemoryManager;
copies in and out go through the simulated GPU's MMU, so every byte is translated by decoding the page tables the
manager wrote. All simulated AM devices of a process sit on one simulated host (`SIMULATION`): they share host
memory and reach each other's VRAM through their PCIe BARs, or over XGMI for the first AM_SIM_HIVE devices.

Opening a real GPU ("AM", "AM:0", "AM:1", ...) raises DeviceUnavailable: kiln's AM driver has no PCI backend
(firmware boot, IP discovery) yet.

Knobs, read when a device opens: AM_SIM_VRAM_MIB (VRAM per simulated GPU in MiB, default 16384; the VRAM is
sparse, so 16 GiB costs only the pages written), AM_SIM_GFX ("gfx11" or "gfx9.4"), AM_SIM_HIVE (how many of the
first simulated GPUs form one XGMI hive; 0 = none).
"""

from __future__ import annotations

from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.memory_manager import AMMemoryManager
from kiln.drivers.am.simulated_hardware import SimulatedAMHardware, SimulatedHive, SimulatedPlatform
from kiln.runtime import DeviceBase
from kiln.runtime.device import require_simulated, simulated_vram_knob
from kiln.runtime.memory import MappedAllocation, MappedAllocator, MappedBuffer, VirtMapping
from kiln.uops import register_knob

SIM_VRAM_MIB = simulated_vram_knob("AM")
SIM_GFX = register_knob(
    "AM_SIM_GFX",
    str,
    "gfx11",
    "GFX generation of simulated AM GPUs: gfx11 (RDNA3) or gfx9.4 (MI300).",
    owner="kiln.drivers.am",
    normalize=lambda text: text.strip().lower(),
    choices=("gfx11", "gfx9.4"),
)
SIM_HIVE = register_knob(
    "AM_SIM_HIVE",
    int,
    0,
    "Number of simulated AM GPUs (in opening order) joined in one XGMI hive; 0 or 1: no hive, peers use PCIe BARs.",
    owner="kiln.drivers.am",
)

_SEGMENT_UNIT = 16 << 20  # XGMI segment sizes are multiples of 16 MiB


class SimulatedSystem:
    """The simulated host of every AM:sim device of a process: one platform, an optional hive, the open devices."""

    def __init__(self) -> None:
        self.platform = SimulatedPlatform()
        self.hive: SimulatedHive | None = None
        self.devices: dict[str, AMDevice] = {}

    def hive_for(self, vram_size: int) -> SimulatedHive | None:
        """The hive a newly opened GPU joins, per AM_SIM_HIVE (None once the hive is full or when there is none)."""
        size = SIM_HIVE.value()
        if size < 2:
            return None
        if self.hive is None:
            self.hive = SimulatedHive(size, -(-vram_size // _SEGMENT_UNIT) * _SEGMENT_UNIT)
        return self.hive if len(self.hive.nodes) < self.hive.node_count else None


SIMULATION = SimulatedSystem()


AMAllocation = MappedAllocation
"""One block of VRAM or pinned host memory of an AM device (kiln.runtime.memory's shared allocator types)."""
AMBuffer = MappedBuffer
"""The AM allocator's handle: a byte range of an allocation."""


class AMAllocator(MappedAllocator):
    """Allocates through the device's AMMemoryManager and copies through its simulated MMU (kiln.runtime's shared
    `MappedAllocator`); pinned host memory comes from the simulated platform and is mapped as SYS pages."""

    owner: AMDevice

    def _map_host_memory(self, size: int, uncached: bool) -> tuple[VirtMapping, tuple[tuple[int, int], ...]]:
        manager = self.memory_manager
        pages = -(-size // 4096) * 4096
        platform = SIMULATION.platform
        bus_address = platform.alloc_host(pages)
        vaddr = None
        try:
            vaddr = manager.alloc_vaddr(pages)
            mapping = manager.map_host(vaddr, pages, [(bus_address, pages)])
        except BaseException:
            if vaddr is not None:
                manager.free_vaddr(vaddr)
            platform.free_host(bus_address)
            raise
        return mapping, ((bus_address, pages),)

    def _release_host_memory(self, allocation: MappedAllocation) -> None:
        manager = self.memory_manager
        manager.unmap_range(allocation.mapping.va_addr, allocation.mapping.size)
        manager.free_vaddr(allocation.mapping.va_addr)
        for bus_address, _ in allocation.host_chunks:
            SIMULATION.platform.free_host(bus_address)

    def _unmap_import(self, device_name: str, mapping: VirtMapping) -> None:
        SIMULATION.devices[device_name].memory_manager.unmap_range(mapping.va_addr, mapping.size)

    def _import(self, allocation: MappedAllocation) -> VirtMapping:
        manager, mapping = self.owner.memory_manager, allocation.mapping
        if allocation.host_chunks:
            return manager.map_host(mapping.va_addr, mapping.size, mapping.paddrs)
        return manager.map_peer(allocation.owner.memory_manager, mapping)


class AMDevice(DeviceBase):
    """An AM device. Simulated GPUs ("AM:sim", "AM:sim<N>") open; real ones raise DeviceUnavailable.

    Example:
        >>> device = Device["AM:sim"]  # doctest: +SKIP
        >>> buffer = device.allocator.alloc(4096)
    """

    allocator: AMAllocator

    def __init__(self, name: str) -> None:
        require_simulated(
            name,
            "AMD GPUs",
            "no PCI backend: firmware boot and IP discovery are not built",
            "knobs AM_SIM_VRAM_MIB, AM_SIM_GFX, AM_SIM_HIVE",
        )
        vram_mib = SIM_VRAM_MIB.value()
        generation = GfxGeneration.parse(SIM_GFX.value())
        if vram_mib < 512 or vram_mib % 2:
            raise ValueError(f"AM_SIM_VRAM_MIB={vram_mib}: a simulated AM GPU needs an even number >= 512 of MiB")
        vram_size = vram_mib << 20
        self.hardware = SimulatedAMHardware(
            SIMULATION.platform, vram_size, generation, hive=SIMULATION.hive_for(vram_size)
        )
        self.memory_manager = AMMemoryManager(self.hardware)
        super().__init__(name, AMAllocator(name, self, self.hardware))
        SIMULATION.devices[name] = self

    def map(self, buffer: AMBuffer) -> VirtMapping:
        """Make `buffer` (VRAM of any simulated AM device, or pinned host memory) usable here, at its own VA."""
        return self.allocator.map(buffer)
