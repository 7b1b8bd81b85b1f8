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

import re
from dataclasses import dataclass, field
from typing import Any

from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.memory_manager import AMMemoryManager
from kiln.drivers.am.simulated_hardware import SimulatedAMHardware, SimulatedHive, SimulatedPlatform
from kiln.runtime import Allocator, BufferSpec, DeviceBase, DeviceUnavailable, LRUAllocator
from kiln.runtime.memory import VirtMapping
from kiln.uops import register_knob

SIM_VRAM_MIB = register_knob(
    "AM_SIM_VRAM_MIB", int, 16384, "VRAM of each simulated AM GPU (AM:sim...), in MiB.", owner="kiln.drivers.am"
)
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

_SIM_NAME = re.compile(r"sim(\d*)")
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


@dataclass
class AMAllocation:
    """One block of VRAM or pinned host memory, and the devices it is mapped into (always at the same VA)."""

    owner: AMDevice
    mapping: VirtMapping
    host_bus_address: int | None = None  # set for pinned host memory
    imports: dict[str, VirtMapping] = field(default_factory=dict)  # device name -> its mapping of this block


@dataclass(frozen=True)
class AMBuffer:
    """The AM allocator's handle: `size` bytes at `offset` of an allocation (sub-buffers share the allocation)."""

    allocation: AMAllocation
    offset: int
    size: int

    @property
    def va_addr(self) -> int:
        """GPU virtual address of the first byte, the same on every device the allocation is mapped into."""
        return self.allocation.mapping.va_addr + self.offset


class AMAllocator(LRUAllocator[AMBuffer]):
    """Allocates through the device's AMMemoryManager and copies through its simulated MMU."""

    def __init__(self, name: str, device: AMDevice) -> None:
        super().__init__(name)
        self.am_device = device

    def _alloc(self, size: int, options: BufferSpec) -> AMBuffer:
        manager = self.am_device.memory_manager
        if not options.host:
            return AMBuffer(AMAllocation(self.am_device, manager.valloc(size, uncached=options.uncached)), 0, size)
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
        return AMBuffer(AMAllocation(self.am_device, mapping, bus_address), 0, size)

    def _free(self, opaque: AMBuffer, options: BufferSpec) -> None:
        allocation = opaque.allocation
        for name, imported in allocation.imports.items():
            SIMULATION.devices[name].memory_manager.unmap_range(imported.va_addr, imported.size)
        allocation.imports.clear()
        manager = self.am_device.memory_manager
        if allocation.host_bus_address is None:
            manager.vfree(allocation.mapping)
            return
        manager.unmap_range(allocation.mapping.va_addr, allocation.mapping.size)
        manager.free_vaddr(allocation.mapping.va_addr)
        SIMULATION.platform.free_host(allocation.host_bus_address)

    def _copyin(self, dest: AMBuffer, src: memoryview) -> None:
        self.am_device.hardware.write_virtual(dest.va_addr, src.tobytes())

    def _copyout(self, dest: memoryview, src: AMBuffer) -> None:
        dest[:] = self.am_device.hardware.read_virtual(src.va_addr, src.size)

    def _offset(self, opaque: AMBuffer, size: int, offset: int) -> AMBuffer:
        if offset < 0 or size <= 0 or offset + size > opaque.size:
            raise ValueError(f"sub-buffer [{offset}, +{size}) does not fit the {opaque.size}-byte buffer")
        return AMBuffer(opaque.allocation, opaque.offset + offset, size)

    def supports_transfer_from(self, source: Allocator[Any]) -> bool:
        """Copies straight from any simulated AM device: its buffer is mapped here (XGMI or BAR) and read."""
        return isinstance(source, AMAllocator)

    def _transfer(self, dest: AMBuffer, src: object, size: int, source: Allocator[Any]) -> None:
        if not isinstance(src, AMBuffer):
            raise TypeError(f"expected an AMBuffer to copy from, got {type(src).__name__}")
        self.am_device.map(src)
        hardware = self.am_device.hardware
        hardware.write_virtual(dest.va_addr, hardware.read_virtual(src.va_addr, size))


class AMDevice(DeviceBase):
    """An AM device. Simulated GPUs ("AM:sim", "AM:sim<N>") open; real ones raise DeviceUnavailable.

    Example:
        >>> device = Device["AM:sim"]  # doctest: +SKIP
        >>> buffer = device.allocator.alloc(4096)
    """

    allocator: AMAllocator

    def __init__(self, name: str) -> None:
        kind, _, suffix = name.partition(":")
        if _SIM_NAME.fullmatch(suffix) is None:
            raise DeviceUnavailable(
                f"{name}: kiln's AM driver cannot open real AMD GPUs yet (no PCI backend: firmware boot and IP "
                f"discovery are not built); open a simulated one instead, e.g. '{kind}:sim' "
                "(knobs AM_SIM_VRAM_MIB, AM_SIM_GFX, AM_SIM_HIVE)"
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
        super().__init__(name, AMAllocator(name, self))
        SIMULATION.devices[name] = self

    def map(self, buffer: AMBuffer) -> VirtMapping:
        """Make `buffer` (VRAM of any simulated AM device, or pinned host memory) usable here, at its own VA."""
        allocation = buffer.allocation
        if allocation.owner is self:
            return allocation.mapping
        existing = allocation.imports.get(self.name)
        if existing is not None:
            return existing
        if allocation.host_bus_address is not None:
            mapping = self.memory_manager.map_host(
                allocation.mapping.va_addr, allocation.mapping.size, allocation.mapping.paddrs
            )
        else:
            mapping = self.memory_manager.map_peer(allocation.owner.memory_manager, allocation.mapping)
        allocation.imports[self.name] = mapping
        return mapping
