"""Simulated AMD GPUs for tests: sparse VRAM, the hub registers the driver touches, and a software MMU.

A `SimulatedPlatform` is the host: system RAM at bus addresses, the PCIe BAR window of every simulated GPU, and any
number of XGMI hives. A `SimulatedAMHardware` is one GPU on it. Reading or writing through a GPU's virtual address
space (`read_virtual` / `write_virtual`) translates each page with that GPU's software MMU and then follows the
address where the hardware would: SYSTEM-bit addresses go over the bus (host RAM or some GPU's BAR), fabric addresses
go to the hive node that owns them (or to local VRAM when the GPU is in no hive).
"""

from __future__ import annotations

import itertools

from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.hub_spec import HUB_REGISTER_MASKS, field_place, field_value
from kiln.drivers.am.registers import AMRegister, Hub
from kiln.drivers.am.software_mmu import SoftwareMMU
from kiln.drivers.am.xgmi import XgmiNode
from kiln.runtime.memory import SparseMemory, TLSFAllocator

#: Bus addresses of simulated VRAM BARs start here (8 TiB, inside the 44-bit reach of every generation).
BAR_WINDOW_BASE = 0x0800_0000_0000
#: Bus address where simulated host RAM starts (below it: nothing, so a zero bus address faults).
HOST_MEMORY_BASE = 0x1_0000_0000


class BusError(RuntimeError):
    """An access to a bus or fabric address that nothing answers."""


class HubProtocolError(RuntimeError):
    """The driver broke the invalidation protocol of a hub (semaphore, request, acknowledgement order)."""


class SimulatedHive:
    """An XGMI hive of `node_count` simulated GPUs, each owning `segment_size` bytes of fabric address space."""

    _ids = itertools.count(1)

    def __init__(self, node_count: int, segment_size: int) -> None:
        XgmiNode(node_id=0, node_count=node_count, segment_size=segment_size)  # validates the geometry
        if node_count < 2 or segment_size == 0:
            raise ValueError(f"a hive needs at least 2 nodes and a segment size, got {node_count} x {segment_size:#x}")
        self.hive_id = next(SimulatedHive._ids)
        self.node_count = node_count
        self.segment_size = segment_size
        self.nodes: list[SimulatedAMHardware] = []

    def join(self, device: SimulatedAMHardware) -> XgmiNode:
        """Adds `device` as the next node; returns its placement."""
        if len(self.nodes) == self.node_count:
            raise ValueError(f"hive {self.hive_id} already has all of its {self.node_count} nodes")
        if device.vram_size > self.segment_size:
            raise ValueError(f"VRAM of {device.vram_size:#x} bytes does not fit a segment of {self.segment_size:#x}")
        self.nodes.append(device)
        return XgmiNode(node_id=len(self.nodes) - 1, node_count=self.node_count, segment_size=self.segment_size)

    def _node(self, fabric_address: int, size: int) -> tuple[SimulatedAMHardware, int]:
        node_id, offset = divmod(fabric_address, self.segment_size)
        if node_id >= len(self.nodes) or offset + size > self.nodes[node_id].vram_size:
            raise BusError(f"fabric address {fabric_address:#x} (+{size:#x}) reaches no VRAM in hive {self.hive_id}")
        return self.nodes[node_id], offset

    def read(self, fabric_address: int, size: int) -> bytes:
        """Read VRAM of whichever node owns `fabric_address`."""
        node, offset = self._node(fabric_address, size)
        return node.vram.read(offset, size)

    def write(self, fabric_address: int, data: bytes) -> None:
        """Write VRAM of whichever node owns `fabric_address`."""
        node, offset = self._node(fabric_address, len(data))
        node.vram.write(offset, data)


class SimulatedPlatform:
    """The host of a simulation: system RAM on the bus, BAR windows of simulated GPUs, and host-memory allocation.

    Args:
        host_memory_size: bytes of simulated (sparse) host RAM, at bus addresses from HOST_MEMORY_BASE.
    """

    def __init__(self, host_memory_size: int = 1 << 36) -> None:
        self.host_memory = SparseMemory(host_memory_size)
        self.host_allocator = TLSFAllocator(host_memory_size, base=HOST_MEMORY_BASE, block_size=4096)
        self.devices: list[SimulatedAMHardware] = []
        self._next_bar = BAR_WINDOW_BASE

    def attach(self, device: SimulatedAMHardware) -> int:
        """Gives `device` a BAR window on the bus (naturally aligned, as PCI BARs are); returns its bus address."""
        size = 1 << (device.vram_size - 1).bit_length()
        address = -(-self._next_bar // size) * size
        self._next_bar = address + size
        self.devices.append(device)
        return address

    def alloc_host(self, size: int, align: int = 4096) -> int:
        """Pinned host memory: the bus address of `size` fresh bytes (4 KiB-granular)."""
        return self.host_allocator.alloc(-(-size // 4096) * 4096, align)

    def free_host(self, bus_address: int) -> None:
        """Releases host memory from `alloc_host`."""
        self.host_allocator.free(bus_address)

    def _route(self, bus_address: int, size: int) -> tuple[SparseMemory, int]:
        host_end = HOST_MEMORY_BASE + self.host_memory.size
        if bus_address >= HOST_MEMORY_BASE and bus_address + size <= host_end:
            return self.host_memory, bus_address - HOST_MEMORY_BASE
        for device in self.devices:
            if device.bar_address <= bus_address and bus_address + size <= device.bar_address + device.bar_size:
                return device.vram, bus_address - device.bar_address
        raise BusError(f"bus address {bus_address:#x} (+{size:#x}) reaches neither host RAM nor a BAR")

    def bus_read(self, bus_address: int, size: int) -> bytes:
        """Read host RAM or a GPU's BAR at `bus_address`."""
        memory, offset = self._route(bus_address, size)
        return memory.read(offset, size)

    def bus_write(self, bus_address: int, data: bytes) -> None:
        """Write host RAM or a GPU's BAR at `bus_address`."""
        memory, offset = self._route(bus_address, len(data))
        memory.write(offset, data)


class SimulatedAMHardware:
    """One simulated AMD GPU: sparse VRAM, hub instances with registers and a software MMU each, a BAR on the bus.

    Register behaviour, decoded with the simulator's own masks (`hub_spec`), per hub instance:

    * plain registers store what is written; the XGMI placement registers are read-only and describe the hive slot;
    * VM_INVALIDATE_ENG17_SEM is a hardware semaphore: a read returns SEMAPHORE=1 and takes it when it is free,
      0 while it is held; writing SEMAPHORE=0 releases it;
    * a write to VM_INVALIDATE_ENG17_REQ drops, in that instance's MMU, exactly the caches its INVALIDATE_* bits
      name (when it names VMID 0) and acknowledges the named VMIDs in VM_INVALIDATE_ENG17_ACK. On an MMHUB the
      request must be made while holding the semaphore and the semaphore released only after the acknowledgement
      was read (HubProtocolError otherwise), the order Linux `gmc_v11_0_flush_gpu_tlb` and tinygrad follow;
    * `hub_events` logs (hub, instance, "acquire" / "request" / "ack" / "release") in order.

    Args:
        platform: the host this GPU sits on.
        vram_size: bytes of VRAM (sparse: only written pages cost host memory).
        generation: the GC generation, which picks the page-table and register layouts.
        hive: join this XGMI hive as its next node.
        xcc_count: GC hub instances (MI300X: 8 XCCs; RDNA3: 1).
        mmhub_count: MMHUB instances (MI300X: one per AID, 4; RDNA3: 1).
    """

    def __init__(
        self,
        platform: SimulatedPlatform,
        vram_size: int,
        generation: GfxGeneration = GfxGeneration.GFX11,
        hive: SimulatedHive | None = None,
        *,
        xcc_count: int = 1,
        mmhub_count: int = 1,
    ) -> None:
        if vram_size <= 0 or vram_size % (2 << 20):
            raise ValueError(f"simulated VRAM size must be a positive multiple of 2 MiB, got {vram_size:#x}")
        for name, count in (("xcc_count", xcc_count), ("mmhub_count", mmhub_count)):
            if not 1 <= count <= 16:
                raise ValueError(f"{name} must be 1..16, got {count}")
        self.platform = platform
        # the AMHardware protocol's attributes, with the masks and hub counts read below
        self.generation = generation
        self._masks = HUB_REGISTER_MASKS[generation]
        self.vram = SparseMemory(vram_size)
        self.vram_size = self.bar_size = vram_size  # the whole VRAM is visible through the BAR (resizable BAR)
        self.xcc_count, self.mmhub_count = xcc_count, mmhub_count
        self._counts = {Hub.GC: xcc_count, Hub.MM: mmhub_count}
        self.hive = hive
        self.hive_id = None if hive is None else hive.hive_id
        self.xgmi = hive.join(self) if hive is not None else XgmiNode()
        self.bar_address = platform.attach(self)
        self._registers: dict[tuple[Hub, int, AMRegister], int] = {}
        lfb_cntl, lfb_size = self.xgmi.to_registers()
        self.mmus: dict[tuple[Hub, int], SoftwareMMU] = {}
        self._semaphore_held: dict[tuple[Hub, int], bool] = {}
        self._ack_unread: dict[tuple[Hub, int], bool] = {}
        for hub, instance in self.hub_instances():
            self._registers[hub, instance, AMRegister.MC_VM_XGMI_LFB_CNTL] = lfb_cntl
            self._registers[hub, instance, AMRegister.MC_VM_XGMI_LFB_SIZE] = lfb_size
            self.mmus[hub, instance] = SoftwareMMU(generation, self, self.vram.read, vram_size, hub, instance)
            self._semaphore_held[hub, instance] = False
            self._ack_unread[hub, instance] = False
        self.invalidation_requests: dict[Hub, int] = dict.fromkeys(Hub, 0)
        self.fault_address_clears = 0
        self.hub_events: list[tuple[Hub, int, str]] = []
        self.mmu = self.mmus[Hub.GC, 0]

    def hub_instances(self) -> list[tuple[Hub, int]]:
        """Every (hub, instance) of this GPU: each XCC's GC hub, then each MMHUB."""
        return [(hub, instance) for hub in Hub for instance in range(self._counts[hub])]

    def _key(self, hub: Hub, instance: int) -> tuple[Hub, int]:
        if not 0 <= instance < self._counts[hub]:
            raise ValueError(f"{hub.value} hub instance {instance} does not exist; expected 0..{self._counts[hub] - 1}")
        return hub, instance

    def read_register(self, hub: Hub, register: AMRegister, instance: int = 0) -> int:
        """The register's value (0 if never written); reading the semaphore register may take it."""
        key = self._key(hub, instance)
        if register is AMRegister.VM_INVALIDATE_ENG17_SEM:
            if self._semaphore_held[key]:
                return 0
            self._semaphore_held[key] = True
            self.hub_events.append((hub, instance, "acquire"))
            return self._masks.INVALIDATE_ENG17_SEM__SEMAPHORE
        value = self._registers.get((hub, instance, register), 0)
        if register is AMRegister.VM_INVALIDATE_ENG17_ACK and self._ack_unread[key] and value:
            self._ack_unread[key] = False
            self.hub_events.append((hub, instance, "ack"))
        return value

    def write_register(self, hub: Hub, register: AMRegister, value: int, instance: int = 0) -> None:
        """Store a register write and run its side effects."""
        key = self._key(hub, instance)
        if not 0 <= value < 1 << 32:
            raise ValueError(f"register {hub.value}:{register.value} is 32-bit, got {value:#x}")
        if register in (AMRegister.MC_VM_XGMI_LFB_CNTL, AMRegister.MC_VM_XGMI_LFB_SIZE):
            raise ValueError(f"register {register.value} is read-only")
        masks = self._masks
        if register is AMRegister.VM_INVALIDATE_ENG17_SEM:
            if field_value(value, masks.INVALIDATE_ENG17_SEM__SEMAPHORE) == 0:
                if not self._semaphore_held[key]:
                    raise HubProtocolError(f"{hub.value} hub {instance}: semaphore released but not held")
                if self._ack_unread[key]:
                    raise HubProtocolError(f"{hub.value} hub {instance}: semaphore released before the ACK was seen")
                self._semaphore_held[key] = False
                self.hub_events.append((hub, instance, "release"))
            return
        self._registers[hub, instance, register] = value
        if register is AMRegister.VM_INVALIDATE_ENG17_REQ:
            if hub is Hub.MM and not self._semaphore_held[key]:
                raise HubProtocolError(
                    f"mm hub {instance}: invalidation requested without holding VM_INVALIDATE_ENG17_SEM"
                )
            self.hub_events.append((hub, instance, "request"))
            self.invalidation_requests[hub] += 1
            vmids = field_value(value, masks.INVALIDATE_ENG17_REQ__PER_VMID_INVALIDATE_REQ)
            if field_value(value, masks.INVALIDATE_ENG17_REQ__CLEAR_PROTECTION_FAULT_STATUS_ADDR):
                self.fault_address_clears += 1
            ack = field_place(vmids, masks.INVALIDATE_ENG17_ACK__PER_VMID_INVALIDATE_ACK)
            self._registers[hub, instance, AMRegister.VM_INVALIDATE_ENG17_ACK] = ack
            self._ack_unread[key] = vmids != 0
            if vmids & 1:  # VMID 0 is the context the MMUs model
                self.mmus[key].invalidate(
                    l1_ptes=bool(field_value(value, masks.INVALIDATE_ENG17_REQ__INVALIDATE_L1_PTES)),
                    l2_ptes=bool(field_value(value, masks.INVALIDATE_ENG17_REQ__INVALIDATE_L2_PTES)),
                    pde0=bool(field_value(value, masks.INVALIDATE_ENG17_REQ__INVALIDATE_L2_PDE0)),
                    pde1=bool(field_value(value, masks.INVALIDATE_ENG17_REQ__INVALIDATE_L2_PDE1)),
                    pde2=bool(field_value(value, masks.INVALIDATE_ENG17_REQ__INVALIDATE_L2_PDE2)),
                )

    # ---- accesses through the GPU's virtual address space --------------------------------------------------------

    def _access(self, address: int, system: bool, size: int) -> tuple[str, int]:
        if system:
            return "bus", address
        if self.hive is not None:
            return "fabric", address
        if address + size > self.vram_size:
            raise BusError(f"device address {address:#x} (+{size:#x}) is outside local VRAM")
        return "local", address

    def _pieces(self, va: int, size: int, hub: Hub, instance: int) -> list[tuple[str, int, int]]:
        """Translate [va, va+size) page by page, through one hub instance, into (target, address, length) pieces."""
        mmu = self.mmus[self._key(hub, instance)]
        pieces: list[tuple[str, int, int]] = []
        end = va + size
        while va < end:
            length = min(4096 - (va & 0xFFF), end - va)
            translation = mmu.translate(va)
            target, address = self._access(translation.address, translation.system, length)
            pieces.append((target, address, length))
            va += length
        return pieces

    def read_virtual(self, va: int, size: int, hub: Hub = Hub.GC, instance: int = 0) -> bytes:
        """Read `size` bytes at GPU virtual address `va`, as a client of that hub instance (default: XCC 0) would."""
        parts: list[bytes] = []
        for target, address, length in self._pieces(va, size, hub, instance):
            if target == "bus":
                parts.append(self.platform.bus_read(address, length))
            elif target == "fabric":
                assert self.hive is not None
                parts.append(self.hive.read(address, length))
            else:
                parts.append(self.vram.read(address, length))
        return b"".join(parts)

    def write_virtual(self, va: int, data: bytes, hub: Hub = Hub.GC, instance: int = 0) -> None:
        """Write `data` at GPU virtual address `va`, as a client of that hub instance (default: XCC 0) would."""
        position = 0
        for target, address, length in self._pieces(va, len(data), hub, instance):
            piece = data[position : position + length]
            if target == "bus":
                self.platform.bus_write(address, piece)
            elif target == "fabric":
                assert self.hive is not None
                self.hive.write(address, piece)
            else:
                self.vram.write(address, piece)
            position += length
