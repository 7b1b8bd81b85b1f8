"""NVIDIA user-space driver: GMMU page-table formats (ver2 Ampere, ver3 Hopper), memory manager, simulated GPU.

Public pieces:
* `page_table_entry`: the raw bit layouts (`VER2_LAYOUT`, `VER3_LAYOUT`, `PteFields`, `Aperture`).
* `NVPageTableFormatVer2` / `NVPageTableFormatVer3` (`page_table_format(version)`): the runtime `PageTableFormat`s,
  with the PHYS / SYS / PEER address-space rules; `peer_address` builds PEER addresses.
* `NVMemoryManager`: VRAM and VA allocation, mapping own, peer and host memory, TLB invalidation.
* `SimulatedNVGPU` (sparse VRAM, registers, `SoftwareMMU` decoding the page tables independently) for tests.
* `NVDevice`: the "NV" device kind of kiln's Device registry ("NV:sim", "NV:sim1", ... are simulated GPUs).
"""

from kiln.drivers.nv.device import NVAllocator, NVBuffer, NVDevice
from kiln.drivers.nv.memory_manager import NVHardware, NVMemoryManager, PeerLink
from kiln.drivers.nv.page_table_entry import (
    VER2_LAYOUT,
    VER3_LAYOUT,
    Aperture,
    DirectoryAperture,
    EntryLayout,
    PteFields,
)
from kiln.drivers.nv.page_table_format import (
    NVPageTableFormat,
    NVPageTableFormatVer2,
    NVPageTableFormatVer3,
    page_table_format,
    peer_address,
    split_peer_address,
)
from kiln.drivers.nv.simulated_hardware import SimulatedNVGPU
from kiln.drivers.nv.simulated_memory import SimulatedMemory
from kiln.drivers.nv.software_mmu import MemoryTarget, SoftwareMMU, Translation, TranslationFault

__all__ = [
    "VER2_LAYOUT",
    "VER3_LAYOUT",
    "PeerLink",
    "Aperture",
    "DirectoryAperture",
    "EntryLayout",
    "MemoryTarget",
    "NVAllocator",
    "NVBuffer",
    "NVDevice",
    "NVHardware",
    "NVMemoryManager",
    "NVPageTableFormat",
    "NVPageTableFormatVer2",
    "NVPageTableFormatVer3",
    "PteFields",
    "SimulatedMemory",
    "SimulatedNVGPU",
    "SoftwareMMU",
    "Translation",
    "TranslationFault",
    "page_table_format",
    "peer_address",
    "split_peer_address",
]
