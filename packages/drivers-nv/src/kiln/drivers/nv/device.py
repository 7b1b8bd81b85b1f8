"""The NV device kind: simulated NVIDIA GPUs ("NV:sim", "NV:sim1", ...) behind kiln's Device registry.

A simulated device holds buffers (it cannot run kernels): allocation, copies and cross-device mappings go through
the real NVMemoryManager and the simulated GPU's MMU, so every byte copied in or out is translated by decoding the
page tables the manager wrote. All simulated NV devices of a process sit in one simulated machine: they share the
host memory (bus addresses) and reach each other's VRAM through the PEER aperture, each pair under a peer id, when
both are in the machine's NVLink / P2P group; a GPU opened outside it (NV_SIM_P2P=0) has no peer-table entries, and
it and the others reach each other's VRAM through their BAR1 windows as system non-coherent memory.

Real NVIDIA GPUs ("NV", "NV:0", ...) are not supported by kiln's NV driver yet (it would need GSP firmware boot and
RM calls); opening one raises DeviceUnavailable.

Knobs: NV_SIM_VRAM_MIB (VRAM of each simulated GPU, MiB, default 16384) and NV_SIM_MMU (page-table format version,
2 = Ampere, 3 = Hopper; default 2) and NV_SIM_P2P (1: join the peer group, default; 0: peers only through BAR1),
read when a device opens.
"""

from __future__ import annotations

from kiln.drivers.nv.memory_manager import NVMemoryManager, PeerLink
from kiln.drivers.nv.simulated_hardware import DEFAULT_HOST_MEMORY_BYTES, SimulatedNVGPU
from kiln.drivers.nv.simulated_memory import SimulatedMemory
from kiln.runtime import DeviceBase, DeviceUnavailable
from kiln.runtime.device import require_simulated, simulated_vram_knob
from kiln.runtime.memory import MappedAllocation, MappedAllocator, MappedBuffer, TLSFAllocator, VirtMapping
from kiln.uops import register_knob

__all__ = ["NVAllocation", "NVAllocator", "NVBuffer", "NVDevice", "SimulatedMachine"]

SIM_VRAM_MIB = simulated_vram_knob("NV")
SIM_MMU = register_knob(
    "NV_SIM_MMU",
    int,
    2,
    "Page-table format of simulated NV GPUs: 2 = Ampere (5 levels), 3 = Hopper (6 levels).",
    owner="kiln.drivers.nv",
    choices=(2, 3),
)
SIM_P2P = register_knob(
    "NV_SIM_P2P",
    int,
    1,
    "1: a simulated NV GPU joins the machine's NVLink/P2P group (peers use the PEER aperture); 0: it has no peer "
    "entries and peers reach it (and it them) through BAR1 as system non-coherent memory.",
    owner="kiln.drivers.nv",
)

MAX_SIMULATED_GPUS = 9  # peer ids are 3 bits: each GPU can reach 8 others
HOST_BUS_BASE = 1 << 32  # where the simulated host hands out bus addresses for pinned buffers
BAR1_BUS_BASE = 2 * DEFAULT_HOST_MEMORY_BYTES  # BAR1 windows of simulated GPUs sit above all host bus addresses


class SimulatedMachine:
    """The simulated host of all NV:sim devices of a process: shared host memory and the peer-id wiring."""

    def __init__(self) -> None:
        self.host_memory = SimulatedMemory(DEFAULT_HOST_MEMORY_BYTES, "host memory")
        self.host_allocator = TLSFAllocator(DEFAULT_HOST_MEMORY_BYTES - HOST_BUS_BASE, base=HOST_BUS_BASE)
        self.devices: list[NVDevice] = []
        self.peer_ids: dict[tuple[str, str], int] = {}  # (importer, owner) -> peer id in the importer's PTEs
        self.bar_addresses: dict[str, int] = {}  # device name -> bus address of its BAR1 window
        self.p2p_group: set[str] = set()
        self._next_bar = BAR1_BUS_BASE

    def attach(self, device: NVDevice, *, p2p: bool = True) -> None:
        """Connect a new GPU to every GPU already present, both ways: peer ids inside the P2P group, else BAR1."""
        if len(self.devices) >= MAX_SIMULATED_GPUS:
            raise DeviceUnavailable(f"{device.name}: at most {MAX_SIMULATED_GPUS} simulated NV GPUs (3-bit peer ids)")
        window = 1 << (device.gpu.vram.size - 1).bit_length()  # naturally aligned, as PCI BARs are
        self.bar_addresses[device.name] = self._next_bar = -(-self._next_bar // window) * window
        self._next_bar += window
        for other in self.devices:
            if p2p and other.name in self.p2p_group:
                self._connect(device, other)
                self._connect(other, device)
            else:
                device.gpu.attach_bar_window(self.bar_addresses[other.name], other.gpu)
                other.gpu.attach_bar_window(self.bar_addresses[device.name], device.gpu)
        if p2p:
            self.p2p_group.add(device.name)
        self.devices.append(device)

    def peer_link(self, importer: NVDevice, owner: NVDevice) -> PeerLink:
        """How `importer` reaches `owner`'s VRAM: its peer id when both are in the P2P group, else owner's BAR1."""
        return PeerLink(
            peer_id=self.peer_ids.get((importer.name, owner.name)),
            bar_address=self.bar_addresses[owner.name],
            bar_size=owner.gpu.vram.size,
        )

    def device(self, name: str) -> NVDevice:
        """The simulated NV device called `name`."""
        for device in self.devices:
            if device.name == name:
                return device
        raise KeyError(f"no simulated NV device {name!r}")

    def _connect(self, importer: NVDevice, owner: NVDevice) -> None:
        peer_id = len(importer.gpu.peers)
        importer.gpu.connect_peer(peer_id, owner.gpu)
        self.peer_ids[(importer.name, owner.name)] = peer_id


MACHINE = SimulatedMachine()


NVAllocation = MappedAllocation
"""One block of device or pinned host memory of an NV device (kiln.runtime.memory's shared allocator types)."""
NVBuffer = MappedBuffer
"""The NV allocator's handle: a byte range of an allocation."""


class NVAllocator(MappedAllocator):
    """Allocates through the device's NVMemoryManager and copies through its simulated MMU (kiln.runtime's shared
    `MappedAllocator`); pinned host memory comes from the simulated machine and is mapped as snooped SYS pages."""

    owner: NVDevice

    def _map_host_memory(self, size: int, uncached: bool) -> tuple[VirtMapping, tuple[tuple[int, int], ...]]:
        size = -(-size // 4096) * 4096
        bus_address = MACHINE.host_allocator.alloc(size, 4096)
        try:
            mapping = self.memory_manager.map_system([(bus_address, size)], snooped=True, uncached=uncached)
        except BaseException:
            MACHINE.host_allocator.free(bus_address)
            raise
        return mapping, ((bus_address, size),)

    def _release_host_memory(self, allocation: MappedAllocation) -> None:
        self.memory_manager.vfree(allocation.mapping)
        for bus_address, _ in allocation.host_chunks:
            MACHINE.host_allocator.free(bus_address)

    def _unmap_import(self, device_name: str, mapping: VirtMapping) -> None:
        MACHINE.device(device_name).memory_manager.unmap(mapping)

    def _import(self, allocation: MappedAllocation) -> VirtMapping:
        manager, mapping = self.owner.memory_manager, allocation.mapping
        if allocation.host_chunks:
            return manager.map_system(allocation.host_chunks, vaddr=mapping.va_addr, uncached=mapping.uncached)
        return manager.map_peer(mapping, MACHINE.peer_link(self.owner, allocation.owner))


class NVDevice(DeviceBase):
    """An NV device. Only simulated GPUs ("NV:sim", "NV:sim<N>") open; real ones raise DeviceUnavailable."""

    allocator: NVAllocator

    def __init__(self, name: str) -> None:
        require_simulated(
            name, "NVIDIA GPUs", "it has no GSP boot / RM support", "VRAM from NV_SIM_VRAM_MIB, format from NV_SIM_MMU"
        )
        vram_mib, version, p2p = SIM_VRAM_MIB.value(), SIM_MMU.value(), SIM_P2P.value()
        if p2p not in (0, 1):
            raise ValueError(f"NV_SIM_P2P={p2p} must be 0 (peers through BAR1) or 1 (join the P2P group)")
        if version not in (2, 3):
            raise ValueError(f"NV_SIM_MMU={version} is not a page-table format; expected 2 (Ampere) or 3 (Hopper)")
        if vram_mib < 128:
            raise ValueError(f"NV_SIM_VRAM_MIB={vram_mib} is too small; a simulated NV GPU needs at least 128 MiB")
        self.gpu = SimulatedNVGPU(vram_mib << 20, version, host_memory=MACHINE.host_memory, name=name)
        self.memory_manager = NVMemoryManager(self.gpu, vram_mib << 20, mmu_version=version)
        super().__init__(name, NVAllocator(name, self, self.gpu))
        MACHINE.attach(self, p2p=bool(p2p))

    def map(self, buffer: NVBuffer) -> VirtMapping:
        """Make `buffer` (of any simulated NV device, or pinned host memory) usable here, at its own VA."""
        return self.allocator.map(buffer)

    def peer_id(self, owner: NVDevice) -> int | None:
        """The peer id under which this GPU's PTEs reach `owner`'s VRAM (None: no peer entry, BAR1 is used)."""
        return MACHINE.peer_ids.get((self.name, owner.name))
