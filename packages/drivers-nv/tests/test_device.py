"""The NV device kind through kiln's Device registry: simulated GPUs hold buffers, real ones refuse to open."""

from __future__ import annotations

import pytest

from kiln.drivers.nv.device import MACHINE, NVBuffer, NVDevice
from kiln.drivers.nv.software_mmu import MemoryTarget, TranslationFault
from kiln.runtime import Buffer, BufferSpec, Device, DeviceRegistry, DeviceUnavailable, copy_between
from kiln.uops import Context, dtypes

NOLRU = BufferSpec(nolru=True)


def nv(name: str) -> NVDevice:
    device = Device[name]
    assert isinstance(device, NVDevice)
    return device


def handle(buffer: Buffer) -> NVBuffer:
    opaque = buffer.base._opaque if buffer._opaque is None else buffer._opaque
    assert isinstance(opaque, NVBuffer)
    return opaque


def vram_bytes(device: NVDevice, opaque: NVBuffer) -> bytes:
    """The buffer's bytes read straight from simulated VRAM through its physical chunks (no MMU involved)."""
    out, skip, want = bytearray(), opaque.offset, opaque.size
    for paddr, size in opaque.allocation.mapping.paddrs:
        if skip >= size:
            skip -= size
            continue
        take = min(size - skip, want - len(out))
        out += device.gpu.vram.read(paddr + skip, take)
        skip = 0
        if len(out) == want:
            break
    return bytes(out)


def test_nv_is_a_registered_kind() -> None:
    assert "NV" in Device.kinds()
    assert Device.canonicalize("nv:sim") == "NV:sim"
    assert "entry point" in Device.kind_info("NV").origin


@pytest.mark.parametrize("name", ["NV", "NV:0", "NV:1", "nv:gpu"])
def test_real_devices_are_unavailable(name: str) -> None:
    with pytest.raises(DeviceUnavailable, match="cannot open real NVIDIA GPUs"):
        Device[name]


def test_buffer_round_trip_lands_in_vram_through_the_page_tables() -> None:
    device = nv("NV:sim")
    payload = bytes((index * 7 + 3) % 256 for index in range(3 * 1024 * 1024 + 100))
    buffer = Buffer("NV:sim", len(payload), dtypes.uint8, options=NOLRU).allocate()
    buffer.copyin(payload)
    opaque = handle(buffer)
    assert vram_bytes(device, opaque) == payload  # the bytes sit at the physical chunks the manager allocated
    translation = device.gpu.translate(opaque.va_addr)
    assert translation.target is MemoryTarget.VIDEO and translation.page_size == 2 << 20
    out = bytearray(len(payload))
    buffer.copyout(out)
    assert bytes(out) == payload
    view = buffer.view(1000, dtypes.uint8, offset=2 * 1024 * 1024 + 5)
    view_out = bytearray(1000)
    view.copyout(view_out)
    assert bytes(view_out) == payload[2 * 1024 * 1024 + 5 : 2 * 1024 * 1024 + 1005]
    view.copyin(bytes(1000))
    buffer.copyout(out)
    assert bytes(out) == payload[: 2 * 1024 * 1024 + 5] + bytes(1000) + payload[2 * 1024 * 1024 + 1005 :]


def test_copies_between_devices_go_through_peer_mappings_and_free_cleanly() -> None:
    source_device, dest_device = nv("NV:sim"), nv("NV:sim1")
    source_free = source_device.memory_manager.pa_allocator.free_bytes
    dest_free = dest_device.memory_manager.pa_allocator.free_bytes
    payload = bytes(range(256)) * 40
    source = Buffer("NV:sim", len(payload), dtypes.uint8, options=NOLRU).copyin(payload)
    dest = Buffer("NV:sim1", len(payload), dtypes.uint8, options=NOLRU)
    copy_between(dest, source)
    assert vram_bytes(dest_device, handle(dest)) == payload
    # the destination GPU now reaches the source buffer at the same VA through the PEER aperture
    translation = dest_device.gpu.translate(handle(source).va_addr + 300)
    assert translation.target is MemoryTarget.PEER
    assert translation.peer_id == dest_device.peer_id(source_device)
    assert dest_device.gpu.peers[translation.peer_id] is source_device.gpu
    assert source_device.gpu.vram.read(translation.address, 1) == payload[300:301]
    source_va = handle(source).va_addr
    source.deallocate()
    dest.deallocate()
    with pytest.raises(TranslationFault):  # freeing the source removed its import on the destination too
        dest_device.gpu.translate(source_va)
    for device, free in ((source_device, source_free), (dest_device, dest_free)):
        assert device.memory_manager.pa_allocator.free_bytes == free
        assert device.memory_manager.page_table_pages() == {device.memory_manager.root_paddr}


def test_pinned_host_buffers_live_in_host_memory() -> None:
    device = nv("NV:sim")
    buffer = Buffer("NV:sim", 5000, dtypes.uint8, options=BufferSpec(host=True, nolru=True)).copyin(b"\x5a" * 5000)
    opaque = handle(buffer)
    ((bus_address, _),) = opaque.allocation.host_chunks
    assert MACHINE.host_memory.read(bus_address, 5000) == b"\x5a" * 5000
    assert device.gpu.translate(opaque.va_addr).target is MemoryTarget.SYSTEM_COHERENT
    other = nv("NV:sim1")
    other.map(opaque)  # host memory maps into another GPU at the same VA through the system aperture
    assert other.gpu.read_virtual(opaque.va_addr + 4990, 10) == b"\x5a" * 10
    used = MACHINE.host_allocator.used_bytes
    buffer.deallocate()
    assert MACHINE.host_allocator.used_bytes == used - 8192
    with pytest.raises(TranslationFault):
        other.gpu.translate(opaque.va_addr)


def test_a_gpu_outside_the_p2p_group_is_reached_through_bar1() -> None:
    registry = DeviceRegistry(builtins={})
    with Context(NV_SIM_VRAM_MIB=1024, NV_SIM_P2P=0):
        isolated = registry["NV:sim7"]
    assert isinstance(isolated, NVDevice)
    source_device = nv("NV:sim")
    assert isolated.peer_id(source_device) is None and source_device.peer_id(isolated) is None
    payload = bytes(range(200)) * 50
    source = Buffer("NV:sim", len(payload), dtypes.uint8, options=NOLRU).copyin(payload)
    opaque = handle(source)
    isolated.map(opaque)
    translation = isolated.gpu.translate(opaque.va_addr + 123)
    assert translation.target is MemoryTarget.SYSTEM_NON_COHERENT  # BAR1 P2P, as UVM maps it
    assert translation.address == MACHINE.bar_addresses["NV:sim"] + opaque.allocation.mapping.paddrs[0][0] + 123
    assert isolated.gpu.read_virtual(opaque.va_addr, len(payload)) == payload
    source.deallocate()
    with pytest.raises(TranslationFault):
        isolated.gpu.translate(opaque.va_addr)
    with Context(NV_SIM_P2P=2), pytest.raises(ValueError, match="NV_SIM_P2P=2"):
        registry["NV:sim8"]


def test_knobs_choose_vram_size_and_format() -> None:
    registry = DeviceRegistry(builtins={})
    with Context(NV_SIM_VRAM_MIB=1024, NV_SIM_MMU=3):
        device = registry["NV:sim5"]
    assert isinstance(device, NVDevice)
    assert device.gpu.vram.size == 1 << 30 and device.gpu.mmu_version == 3
    assert device.memory_manager.nv_format.levels == 6
    with pytest.raises(ValueError, match="NV_SIM_MMU=4"), Context(NV_SIM_MMU=4):  # rejected when set, listing 2, 3
        registry["NV:sim6"]
