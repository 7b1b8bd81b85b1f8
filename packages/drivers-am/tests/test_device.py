"""The AM device through kiln's Device registry: simulated GPUs hold buffers in VRAM reached through their MMU."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kiln.drivers.am.device import SIMULATION, AMBuffer, AMDevice
from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.runtime import Buffer, BufferSpec, Device, DeviceUnavailable
from kiln.runtime.buffer import copy_between
from kiln.runtime.memory import AddrSpace
from kiln.uops import Context, dtypes

_names = itertools.count(100)


def _fresh(**knobs: object) -> AMDevice:
    """A newly opened simulated device with its own name (the registry caches devices per name)."""
    with Context(**knobs):
        return _open(f"AM:sim{next(_names)}")


def _open(name: str) -> AMDevice:
    device = Device[name]
    assert isinstance(device, AMDevice)
    return device


def test_registry_opens_the_simulated_device() -> None:
    assert "AM" in Device.kinds()
    device = Device["am:sim"]
    assert isinstance(device, AMDevice) and device.name == "AM:sim"
    assert Device["AM:sim"] is device


@pytest.mark.parametrize("name", ["AM", "AM:0", "AM:1", "AM:gpu"])
def test_real_devices_are_unavailable(name: str) -> None:
    with pytest.raises(DeviceUnavailable, match="cannot open real AMD GPUs"):
        Device[name]


def test_buffer_round_trip_lands_in_vram() -> None:
    device = _open("AM:sim")
    values = np.arange(3 * 1024 + 7, dtype=np.float32) * 1.5
    buffer = Buffer("AM:sim", values.size, dtypes.float32).allocate()
    buffer.copyin(memoryview(values.tobytes()))
    np.testing.assert_array_equal(buffer.numpy(), values)
    handle = buffer.opaque
    assert isinstance(handle, AMBuffer)
    manager = device.memory_manager
    # The bytes sit in VRAM where the mapping's first chunk says: the copy went through the page tables.
    first_paddr = handle.allocation.mapping.paddrs[0][0]
    assert device.hardware.vram.read(first_paddr + 40, 8) == values.tobytes()[40:48]
    assert manager.physical_address(handle.va_addr + 40) == manager.vram_base + first_paddr + 40


def test_sub_buffer_views() -> None:
    values = np.arange(2048, dtype=np.int32)
    base = Buffer("AM:sim", values.size, dtypes.int32).allocate()
    base.copyin(memoryview(values.tobytes()))
    view = base.view(100, dtypes.int32, offset=4 * 1000)
    np.testing.assert_array_equal(view.numpy(), values[1000:1100])
    view.copyin(memoryview(np.full(100, -1, dtype=np.int32).tobytes()))
    expected = values.copy()
    expected[1000:1100] = -1
    np.testing.assert_array_equal(base.numpy(), expected)


def test_host_buffers_live_in_host_memory() -> None:
    device = _open("AM:sim")
    payload = bytes(range(200)) * 30
    buffer = Buffer("AM:sim", len(payload), dtypes.uint8, options=BufferSpec(host=True)).allocate()
    buffer.copyin(memoryview(payload))
    handle = buffer.opaque
    assert handle.allocation.mapping.aspace is AddrSpace.SYS
    ((bus_address, pages),) = handle.allocation.host_chunks
    assert pages == 8192 and SIMULATION.platform.bus_read(bus_address, len(payload)) == payload
    assert device.hardware.mmu.translate(handle.va_addr).system


@pytest.mark.parametrize("hive", [0, 2])
def test_transfer_between_devices(hive: int) -> None:
    if hive:
        SIMULATION.hive = None  # start a new hive for this pair
    source, dest = _fresh(AM_SIM_VRAM_MIB=1024, AM_SIM_HIVE=hive), _fresh(AM_SIM_VRAM_MIB=1024, AM_SIM_HIVE=hive)
    assert (source.hardware.hive is not None) == bool(hive) and source.hardware.hive is dest.hardware.hive
    values = np.random.default_rng(0).integers(0, 255, size=3 * 4096 + 11, dtype=np.uint8)
    source_buffer = source.allocator.alloc(values.size)
    source.allocator._copyin(source_buffer, memoryview(values.tobytes()))
    dest_buffer = dest.allocator.alloc(values.size)
    assert dest.allocator.supports_transfer_from(source.allocator)
    dest.allocator._transfer(dest_buffer, source_buffer, values.size, source.allocator)
    out = bytearray(values.size)
    dest.allocator._copyout(memoryview(out), dest_buffer)
    assert bytes(out) == values.tobytes()
    imported = source_buffer.allocation.imports[dest.name]
    assert imported.aspace is (AddrSpace.PEER if hive else AddrSpace.SYS)
    # Freeing the source unmaps its import on the destination too, and each device is left with its root only.
    source.allocator.free(source_buffer, values.size, BufferSpec(nolru=True))
    dest.allocator.free(dest_buffer, values.size, BufferSpec(nolru=True))
    for device in (source, dest):
        assert device.memory_manager.page_table_pages() == {device.memory_manager.root_paddr}


def test_copy_between_uses_the_transfer() -> None:
    source, dest = _fresh(AM_SIM_VRAM_MIB=512), _fresh(AM_SIM_VRAM_MIB=512)
    values = np.arange(1000, dtype=np.int16)
    first = Buffer(source.name, values.size, dtypes.int16).allocate()
    second = Buffer(dest.name, values.size, dtypes.int16).allocate()
    first.copyin(memoryview(values.tobytes()))
    copy_between(second, first)
    np.testing.assert_array_equal(second.numpy(), values)
    assert dest.name in first.opaque.allocation.imports  # the copy read the source through dest's page tables


def test_knobs_choose_vram_and_generation() -> None:
    device = _fresh(AM_SIM_VRAM_MIB=1024, AM_SIM_GFX="gfx9.4")
    assert device.hardware.vram_size == 1 << 30
    assert device.hardware.generation is GfxGeneration.GFX9_4
    with pytest.raises(ValueError, match="AM_SIM_VRAM_MIB=100"):
        _fresh(AM_SIM_VRAM_MIB=100)
    with pytest.raises(ValueError, match="gfx12"):
        _fresh(AM_SIM_GFX="gfx12")


def test_freeing_everything_leaves_nothing_behind() -> None:
    device = _fresh(AM_SIM_VRAM_MIB=1024)
    manager = device.memory_manager
    free_before = manager.pa_allocator.free_bytes
    sizes = [1, 4096, 5 << 20, 3 * 4096 + 1, 2 << 20]
    handles = [device.allocator.alloc(size) for size in sizes]
    assert manager.pa_allocator.free_bytes < free_before
    for handle, size in zip(handles, sizes, strict=True):
        device.allocator.free(handle, size)  # into the LRU cache
    device.allocator.free_cache()
    assert manager.pa_allocator.free_bytes == free_before
    assert manager.page_table_pages() == {manager.root_paddr}
    assert device.hardware.vram.resident_pages() == 0
