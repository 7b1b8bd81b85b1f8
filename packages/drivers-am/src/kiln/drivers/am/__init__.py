"""AMD user-space driver: page tables in the hardware's bit layout, the AM memory manager, simulated GPUs.

Public API:
* `GfxGeneration`: GFX11 (RDNA3) or GFX9_4 (CDNA3 / MI300), what their page tables differ in.
* `page_table_entry` functions `encode_leaf_entry` / `encode_directory_entry` and `PageTableLevel`: raw entries.
* `AMPageTableFormat`: the runtime `PageTableFormat` for AMD GPUs, with the PHYS / SYS / PEER address rules.
* `AMMemoryManager`: VRAM allocation, mappings (own VRAM, peers over XGMI or PCIe BAR, host memory), VM context setup
  and TLB invalidation, on any `AMHardware`.
* `SimulatedPlatform`, `SimulatedHive`, `SimulatedAMHardware`, `SoftwareMMU`: simulated GPUs for tests.
* `AMDevice` (device kind "AM", registered through the `kiln.devices` entry point): "AM:sim", "AM:sim1", ...
"""

from kiln.drivers.am.device import AMAllocation, AMAllocator, AMBuffer, AMDevice
from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.hardware import AMHardware
from kiln.drivers.am.memory_manager import AM_VA_BASE, AM_VA_END, AM_VA_SIZE, AMMemoryManager
from kiln.drivers.am.page_table_entry import PageTableLevel, encode_directory_entry, encode_leaf_entry
from kiln.drivers.am.page_table_format import AMPageTableFormat
from kiln.drivers.am.registers import REGISTER_FIELDS, AMRegister, Field, Hub, RegisterAccess, pack, unpack
from kiln.drivers.am.simulated_hardware import (
    BusError,
    HubProtocolError,
    SimulatedAMHardware,
    SimulatedHive,
    SimulatedPlatform,
)
from kiln.drivers.am.software_mmu import PageFault, PageFlags, SoftwareMMU, Translation, WalkerError
from kiln.drivers.am.xgmi import XgmiNode

__all__ = [
    "AM_VA_BASE",
    "AM_VA_END",
    "AM_VA_SIZE",
    "REGISTER_FIELDS",
    "AMAllocation",
    "AMAllocator",
    "AMBuffer",
    "AMDevice",
    "AMHardware",
    "AMMemoryManager",
    "AMPageTableFormat",
    "AMRegister",
    "BusError",
    "Field",
    "GfxGeneration",
    "Hub",
    "HubProtocolError",
    "PageFault",
    "PageFlags",
    "PageTableLevel",
    "RegisterAccess",
    "SimulatedAMHardware",
    "SimulatedHive",
    "SimulatedPlatform",
    "SoftwareMMU",
    "Translation",
    "WalkerError",
    "XgmiNode",
    "encode_directory_entry",
    "encode_leaf_entry",
    "pack",
    "unpack",
]
