"""The simulated platform, hive and GPU: where bus and fabric addresses lead, and register behaviour."""

from __future__ import annotations

import pytest

from kiln.drivers.am.registers import AMRegister, Hub
from kiln.drivers.am.simulated_hardware import (
    BAR_WINDOW_BASE,
    HOST_MEMORY_BASE,
    BusError,
    SimulatedAMHardware,
    SimulatedHive,
    SimulatedPlatform,
)


def test_bars_are_naturally_aligned_windows_onto_vram() -> None:
    platform = SimulatedPlatform()
    first = SimulatedAMHardware(platform, 1 << 30)
    second = SimulatedAMHardware(platform, 3 << 30)  # a 3 GiB BAR occupies a 4 GiB-aligned window
    assert first.bar_address == BAR_WINDOW_BASE
    assert second.bar_address == BAR_WINDOW_BASE + (4 << 30)
    platform.bus_write(second.bar_address + 0x1234, b"via the bar")
    assert second.vram.read(0x1234, 11) == b"via the bar"
    assert first.vram.read(0x1234, 11) == bytes(11)
    with pytest.raises(BusError):
        platform.bus_read(first.bar_address + (1 << 30), 1)  # the gap after the first BAR


def test_host_memory_on_the_bus() -> None:
    platform = SimulatedPlatform(host_memory_size=1 << 30)
    address = platform.alloc_host(10)
    assert address >= HOST_MEMORY_BASE and address % 4096 == 0
    platform.bus_write(address, b"pinned")
    assert platform.host_memory.read(address - HOST_MEMORY_BASE, 6) == b"pinned"
    with pytest.raises(BusError):
        platform.bus_read(HOST_MEMORY_BASE - 8, 4)
    platform.free_host(address)


def test_hive_fabric_addresses() -> None:
    platform = SimulatedPlatform()
    hive = SimulatedHive(node_count=3, segment_size=2 << 30)
    nodes = [SimulatedAMHardware(platform, 1 << 30, hive=hive) for _ in range(3)]
    assert [node.xgmi.fabric_base for node in nodes] == [0, 2 << 30, 4 << 30]
    hive.write((2 << 30) + 0x40, b"node one")
    assert nodes[1].vram.read(0x40, 8) == b"node one"
    with pytest.raises(BusError):
        hive.read((1 << 30) + 0x40, 4)  # between node 0's VRAM end and node 1's segment
    with pytest.raises(ValueError, match="already has all"):
        SimulatedAMHardware(platform, 1 << 30, hive=hive)
    with pytest.raises(ValueError, match="does not fit a segment"):
        SimulatedAMHardware(platform, 4 << 30, hive=SimulatedHive(node_count=2, segment_size=2 << 30))


def test_registers() -> None:
    device = SimulatedAMHardware(SimulatedPlatform(), 1 << 30)
    device.write_register(Hub.MM, AMRegister.VM_CONTEXT0_CNTL, 0x7)
    assert device.read_register(Hub.MM, AMRegister.VM_CONTEXT0_CNTL) == 0x7
    assert device.read_register(Hub.GC, AMRegister.VM_CONTEXT0_CNTL) == 0  # hubs have separate registers
    with pytest.raises(ValueError, match="read-only"):
        device.write_register(Hub.GC, AMRegister.MC_VM_XGMI_LFB_CNTL, 1)
    with pytest.raises(ValueError, match="32-bit"):
        device.write_register(Hub.GC, AMRegister.VM_CONTEXT0_CNTL, 1 << 32)
    assert device.read_register(Hub.MM, AMRegister.VM_INVALIDATE_ENG17_SEM) == 1  # MMHUB requests need the semaphore
    device.write_register(Hub.MM, AMRegister.VM_INVALIDATE_ENG17_REQ, 0x00F8_0004)
    assert device.read_register(Hub.MM, AMRegister.VM_INVALIDATE_ENG17_ACK) == 0x4
    assert device.invalidation_requests == {Hub.GC: 0, Hub.MM: 1}
    with pytest.raises(ValueError, match=r"xcc_count must be 1\.\.16"):
        SimulatedAMHardware(SimulatedPlatform(), 1 << 30, xcc_count=0)
    with pytest.raises(ValueError, match="multiple of 2 MiB"):
        SimulatedAMHardware(SimulatedPlatform(), (1 << 30) + 4096)
