"""What the AM memory manager needs from a device: its VRAM, its registers and where it sits on the bus and fabric."""

from __future__ import annotations

from typing import Protocol

from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.registers import AMRegister, Hub
from kiln.runtime.memory import PhysicalMemory


class AMHardware(Protocol):
    """One AMD GPU as the driver sees it (the simulator implements this; a PCI-backed device would too).

    Attributes:
        generation: the GC IP generation (selects the page-table layout).
        vram: byte access to VRAM by offset (a BAR mapping on hardware).
        vram_size: bytes of VRAM.
        bar_address: bus address of the VRAM BAR (how peers without XGMI and the host reach this VRAM).
        bar_size: bytes of VRAM visible through the BAR.
        hive_id: identifies the XGMI hive this GPU belongs to; None when it is in none.
        xcc_count: GC hub instances, one per XCC (8 on MI300X, 1 on RDNA3); each has its own VM context and TLB.
        mmhub_count: MMHUB instances, one per AID on MI300 (4 on MI300X), 1 on RDNA3.
    """

    generation: GfxGeneration
    vram_size: int
    bar_address: int
    bar_size: int
    hive_id: int | None
    xcc_count: int
    mmhub_count: int

    @property
    def vram(self) -> PhysicalMemory: ...  # read-only: an implementation's own memory class is a PhysicalMemory

    def read_register(self, hub: Hub, register: AMRegister, instance: int = 0) -> int:
        """Read a 32-bit register of instance `instance` of `hub`."""
        ...

    def write_register(self, hub: Hub, register: AMRegister, value: int, instance: int = 0) -> None:
        """Write a 32-bit register of instance `instance` of `hub`."""
        ...
