"""Register values against numbers computed by hand from the header masks (not from the encoder's table).

GC 11.0 / MMHUB 3.0 (gc_11_0_0_sh_mask.h, mmhub_3_0_0_sh_mask.h), *VM_INVALIDATE_ENG17_REQ masks:
PER_VMID_INVALIDATE_REQ 0xFFFF, FLUSH_TYPE 0x70000, INVALIDATE_L2_PTES 0x80000, L2_PDE0 0x100000, L2_PDE1 0x200000,
L2_PDE2 0x400000, L1_PTES 0x800000, CLEAR_PROTECTION_FAULT_STATUS_ADDR 0x1000000.
GC 9.4.3 / MMHUB 1.8 (gc_9_4_3_sh_mask.h, mmhub_1_8_0_sh_mask.h), VM_INVALIDATE_ENG17_REQ masks:
PER_VMID_INVALIDATE_REQ 0xFFFF, FLUSH_TYPE 0x30000, INVALIDATE_L2_PTES 0x40000, L2_PDE0 0x80000, L2_PDE1 0x100000,
L2_PDE2 0x200000, L1_PTES 0x400000, CLEAR_PROTECTION_FAULT_STATUS_ADDR 0x800000.
Both: *VM_CONTEXT0_CNTL ENABLE_CONTEXT 0x1, PAGE_TABLE_DEPTH 0x6, PAGE_TABLE_BLOCK_SIZE 0x78; ENG17_SEM SEMAPHORE 0x1;
ENG17_ACK PER_VMID_INVALIDATE_ACK 0xFFFF.


The second half runs the driver against the simulated hubs, which decode registers with their own masks
(`hub_spec`): per-level TLB caches, every hub instance, the MMHUB semaphore, and a mutation check moving every field
of the encoder's table by one bit.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from kiln.drivers.am import memory_manager as memory_manager_module
from kiln.drivers.am import registers as registers_module
from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.memory_manager import AM_VA_BASE, AMMemoryManager
from kiln.drivers.am.registers import (
    REGISTER_FIELDS,
    AMRegister,
    Hub,
    RegisterLayout,
    context_cntl,
    invalidate_request,
    pack,
    unpack,
)
from kiln.drivers.am.simulated_hardware import HubProtocolError, SimulatedAMHardware, SimulatedPlatform
from kiln.drivers.am.software_mmu import PageFault
from kiln.runtime.memory import AddrSpace

GFX11, GFX9_4 = GfxGeneration.GFX11, GfxGeneration.GFX9_4
CNTL, REQ = AMRegister.VM_CONTEXT0_CNTL, AMRegister.VM_INVALIDATE_ENG17_REQ
SEM, ACK = AMRegister.VM_INVALIDATE_ENG17_SEM, AMRegister.VM_INVALIDATE_ENG17_ACK

#: (generation, register, fields, value by hand). Every field of every register appears with a non-zero value.
GOLDEN: list[tuple[GfxGeneration, AMRegister, dict[str, int], int]] = [
    (GFX11, CNTL, {"ENABLE_CONTEXT": 1, "PAGE_TABLE_DEPTH": 3, "PAGE_TABLE_BLOCK_SIZE": 0}, 0x7),
    (GFX11, CNTL, {"ENABLE_CONTEXT": 1, "PAGE_TABLE_DEPTH": 2, "PAGE_TABLE_BLOCK_SIZE": 9}, 0x4D),
    (GFX11, CNTL, {"ENABLE_CONTEXT": 0, "PAGE_TABLE_DEPTH": 1, "PAGE_TABLE_BLOCK_SIZE": 15}, 0x7A),
    (GFX9_4, CNTL, {"ENABLE_CONTEXT": 1, "PAGE_TABLE_DEPTH": 2, "PAGE_TABLE_BLOCK_SIZE": 9}, 0x4D),  # MI300
    (GFX9_4, CNTL, {"ENABLE_CONTEXT": 0, "PAGE_TABLE_DEPTH": 1, "PAGE_TABLE_BLOCK_SIZE": 15}, 0x7A),
    (
        GFX11,
        REQ,
        {"PER_VMID_INVALIDATE_REQ": 0x8001, "FLUSH_TYPE": 5, "CLEAR_PROTECTION_FAULT_STATUS_ADDR": 1},
        0x0105_8001,
    ),
    (
        GFX9_4,
        REQ,
        {"PER_VMID_INVALIDATE_REQ": 0x8001, "FLUSH_TYPE": 3, "CLEAR_PROTECTION_FAULT_STATUS_ADDR": 1},
        0x0083_8001,
    ),
    (GFX11, REQ, {"INVALIDATE_L2_PTES": 1, "INVALIDATE_L2_PDE1": 1, "INVALIDATE_L1_PTES": 1}, 0x00A8_0000),
    (GFX11, REQ, {"INVALIDATE_L2_PDE0": 1, "INVALIDATE_L2_PDE2": 1}, 0x0050_0000),
    (GFX9_4, REQ, {"INVALIDATE_L2_PTES": 1, "INVALIDATE_L2_PDE1": 1, "INVALIDATE_L1_PTES": 1}, 0x0054_0000),
    (GFX9_4, REQ, {"INVALIDATE_L2_PDE0": 1, "INVALIDATE_L2_PDE2": 1}, 0x0028_0000),
    (GFX11, SEM, {"SEMAPHORE": 1}, 0x1),
    (GFX9_4, SEM, {"SEMAPHORE": 1}, 0x1),
    (GFX11, ACK, {"PER_VMID_INVALIDATE_ACK": 0xFFFF}, 0xFFFF),
    (GFX9_4, ACK, {"PER_VMID_INVALIDATE_ACK": 0xFFFF}, 0xFFFF),
]


def check_golden_values() -> None:
    """Every golden value, on both hubs (their headers agree on these registers); AssertionError on a mismatch."""
    for generation, register, fields, expected in GOLDEN:
        for hub in Hub:
            packed = pack(generation, hub, register, **fields)
            assert packed == expected, f"{generation.value} {hub.value} {register.value} {fields}: {packed:#x}"
            for name, value in fields.items():
                assert unpack(generation, hub, register, expected, name) == value
    for hub in Hub:
        # the full legacy flush of VMID 0 / 5: all five INVALIDATE_* bits, flush type 0, fault address untouched
        assert invalidate_request(GFX11, hub, 0) == 0x00F8_0001
        assert invalidate_request(GFX11, hub, 5) == 0x00F8_0020
        assert invalidate_request(GFX9_4, hub, 0) == 0x007C_0001  # not GFX11's 0x00F8_0001: L2 PTEs are bit 18
        assert invalidate_request(GFX9_4, hub, 5) == 0x007C_0020
        assert context_cntl(GFX9_4, hub, enable=True, depth=2, block_size=9) == 0x4D  # not 0x95
        assert context_cntl(GFX11, hub, enable=True, depth=3, block_size=0) == 0x7


def test_golden_register_values() -> None:
    check_golden_values()


def test_every_field_cites_its_header() -> None:
    headers = {
        (GFX11, Hub.GC): "gc_11_0_0_sh_mask.h",
        (GFX11, Hub.MM): "mmhub_3_0_0_sh_mask.h",
        (GFX9_4, Hub.GC): "gc_9_4_3_sh_mask.h",
        (GFX9_4, Hub.MM): "mmhub_1_8_0_sh_mask.h",
    }
    for key, layout in REGISTER_FIELDS.items():
        for register, fields in layout.items():
            for name, field in fields.items():
                assert field.source.startswith(headers[key]), field.source
                assert f"{register.value[3:]}__{name}_MASK" in field.source, field.source


def test_bad_field_values() -> None:
    with pytest.raises(ValueError, match="depth"):
        context_cntl(GFX11, Hub.GC, enable=True, depth=4, block_size=0)
    with pytest.raises(ValueError, match="block size"):
        context_cntl(GFX11, Hub.GC, enable=True, depth=0, block_size=16)
    with pytest.raises(ValueError, match="vmid"):
        invalidate_request(GFX9_4, Hub.MM, 16)
    with pytest.raises(ValueError, match="2 bits wide"):
        pack(GFX9_4, Hub.GC, REQ, FLUSH_TYPE=4)  # FLUSH_TYPE is 17:16 on GC 9.4.3 ...
    assert pack(GFX11, Hub.GC, REQ, FLUSH_TYPE=4) == 0x4_0000  # ... and 18:16 on GC 11
    with pytest.raises(ValueError, match="no field 'RETRY'"):
        pack(GFX11, Hub.GC, CNTL, RETRY=1)


# ---- the driver against the simulated hubs ----------------------------------------------------------------------

KIB4 = 4096
# Two 4 KiB pages with the same PDB1 / PDB0 / PTB indices but different root (PDB2) entries.
VA1 = AM_VA_BASE + (3 << 30) + (5 << 21) + (7 << 12)
VA2 = VA1 + (1 << 39)


def remap_scenario(generation: GfxGeneration, xcc_count: int = 2, mmhub_count: int = 2) -> None:
    """Map, read, unmap, remap a 4 KiB page through every hub instance; AssertionError/PageFault on a stale read.

    After the unmap the page must fault; then VA2 is mapped first (its tables reuse the freed table pages) and VA1
    is mapped again to another page: a hub that kept any cached level of VA1's old walk reads the wrong bytes.
    """
    hardware = SimulatedAMHardware(
        SimulatedPlatform(), 1 << 30, generation, xcc_count=xcc_count, mmhub_count=mmhub_count
    )
    manager = AMMemoryManager(hardware)
    pages = [manager.palloc(KIB4) for _ in range(3)]
    for number, page in enumerate(pages):
        hardware.vram.write(page, bytes([0xA0 + number]) * 8)
    instances = hardware.hub_instances()
    assert len(instances) == xcc_count + mmhub_count

    manager.map_range(VA1, KIB4, [(pages[0], KIB4)], AddrSpace.PHYS)
    for hub, instance in instances:
        assert hardware.read_virtual(VA1, 8, hub, instance) == b"\xa0" * 8, (hub, instance)
    manager.unmap_range(VA1, KIB4)
    for hub, instance in instances:
        try:
            stale = hardware.read_virtual(VA1, 8, hub, instance)
        except PageFault:
            continue
        raise AssertionError(f"{hub.value} hub {instance} still translates the unmapped page (read {stale!r})")
    manager.map_range(VA2, KIB4, [(pages[2], KIB4)], AddrSpace.PHYS)
    manager.map_range(VA1, KIB4, [(pages[1], KIB4)], AddrSpace.PHYS)
    for hub, instance in instances:
        assert hardware.read_virtual(VA1, 8, hub, instance) == b"\xa1" * 8, (hub, instance)
        assert hardware.read_virtual(VA2, 8, hub, instance) == b"\xa2" * 8, (hub, instance)
    assert hardware.fault_address_clears == 0  # the driver never asks to clear the protection-fault address


@pytest.mark.parametrize("generation", list(GfxGeneration))
def test_unmap_remap_is_seen_by_every_hub_instance(generation: GfxGeneration) -> None:
    remap_scenario(generation, xcc_count=8 if generation is GfxGeneration.GFX9_4 else 1, mmhub_count=4)


def _with_layout(monkeypatch: pytest.MonkeyPatch, table: dict[tuple[GfxGeneration, Hub], RegisterLayout]) -> None:
    monkeypatch.setattr(registers_module, "REGISTER_FIELDS", table)
    monkeypatch.setattr(memory_manager_module, "INVALIDATE_POLL_LIMIT", 64)


def test_gfx11_request_layout_on_mi300_leaves_stale_l2_ptes(monkeypatch: pytest.MonkeyPatch) -> None:
    # The old driver used GC 11's VM_INVALIDATE_ENG17_REQ layout everywhere: on GC 9.4.3 its bits 19..23 mean
    # PDE0, PDE1, PDE2, L1 PTEs and clear-fault-address, so the L2 PTE cache (bit 18) keeps the unmapped page.
    table = copy.deepcopy(REGISTER_FIELDS)
    for hub in Hub:
        table[GfxGeneration.GFX9_4, hub][AMRegister.VM_INVALIDATE_ENG17_REQ] = copy.deepcopy(
            REGISTER_FIELDS[GfxGeneration.GFX11, hub][AMRegister.VM_INVALIDATE_ENG17_REQ]
        )
    _with_layout(monkeypatch, table)
    hardware = SimulatedAMHardware(SimulatedPlatform(), 1 << 30, GfxGeneration.GFX9_4)
    manager = AMMemoryManager(hardware)
    old, new = manager.palloc(KIB4), manager.palloc(KIB4)
    hardware.vram.write(old, b"old page")
    hardware.vram.write(new, b"new page")
    manager.map_range(VA1, KIB4, [(old, KIB4)], AddrSpace.PHYS)
    assert hardware.read_virtual(VA1, 8) == b"old page"
    manager.unmap_range(VA1, KIB4)
    manager.map_range(VA1, KIB4, [(new, KIB4)], AddrSpace.PHYS)
    assert hardware.read_virtual(VA1, 8) == b"old page"  # stale: served from the simulated L2 PTE cache
    assert hardware.fault_address_clears > 0
    monkeypatch.undo()
    remap_scenario(GfxGeneration.GFX9_4)  # the real table passes the same scenario


def test_old_block_size_position_is_rejected_on_mi300(monkeypatch: pytest.MonkeyPatch) -> None:
    # PAGE_TABLE_BLOCK_SIZE at 7:4 (GC 12's position) makes VM_CONTEXT0_CNTL 0x95 on MI300: block size 2 + retry.
    table = copy.deepcopy(REGISTER_FIELDS)
    for hub in Hub:
        fields = table[GfxGeneration.GFX9_4, hub][AMRegister.VM_CONTEXT0_CNTL]
        fields["PAGE_TABLE_BLOCK_SIZE"] = dataclasses.replace(fields["PAGE_TABLE_BLOCK_SIZE"], high=7, low=4)
    _with_layout(monkeypatch, table)
    with pytest.raises(Exception, match="block size 2"):
        remap_scenario(GfxGeneration.GFX9_4)


def test_every_instance_is_programmed_and_flushed() -> None:
    hardware = SimulatedAMHardware(SimulatedPlatform(), 1 << 30, GfxGeneration.GFX9_4, xcc_count=8, mmhub_count=4)
    manager = AMMemoryManager(hardware)
    for hub, instance in hardware.hub_instances():
        assert hardware.read_register(hub, AMRegister.VM_CONTEXT0_CNTL, instance) == 0x4D
    del hardware.hub_events[:]
    manager.invalidate_tlb()
    requests = [(hub, instance) for hub, instance, event in hardware.hub_events if event == "request"]
    assert requests == [(Hub.GC, i) for i in range(8)] + [(Hub.MM, i) for i in range(4)]
    with pytest.raises(ValueError, match="instance 8 does not exist"):
        hardware.read_register(Hub.GC, AMRegister.VM_CONTEXT0_CNTL, 8)


@pytest.mark.parametrize("generation", list(GfxGeneration))
def test_semaphore_is_taken_around_each_mmhub_invalidation(generation: GfxGeneration) -> None:
    hardware = SimulatedAMHardware(SimulatedPlatform(), 1 << 30, generation, xcc_count=2, mmhub_count=3)
    manager = AMMemoryManager(hardware)
    del hardware.hub_events[:]
    manager.invalidate_tlb()
    for hub, instance in hardware.hub_instances():
        events = [event for h, i, event in hardware.hub_events if (h, i) == (hub, instance)]
        expected = ["acquire", "request", "ack", "release"] if hub is Hub.MM else ["request", "ack"]
        assert events == expected, (hub, instance, events)


def test_simulated_semaphore_protocol() -> None:
    hardware = SimulatedAMHardware(SimulatedPlatform(), 1 << 30, GfxGeneration.GFX11, mmhub_count=2)
    sem, req, ack = (
        AMRegister.VM_INVALIDATE_ENG17_SEM,
        AMRegister.VM_INVALIDATE_ENG17_REQ,
        AMRegister.VM_INVALIDATE_ENG17_ACK,
    )
    with pytest.raises(HubProtocolError, match="without holding"):
        hardware.write_register(Hub.MM, req, 0x00F8_0001, 1)
    with pytest.raises(HubProtocolError, match="released but not held"):
        hardware.write_register(Hub.MM, sem, 0, 1)
    assert hardware.read_register(Hub.MM, sem, 1) == 1  # taken
    assert hardware.read_register(Hub.MM, sem, 1) == 0  # held: a second reader waits
    assert hardware.read_register(Hub.MM, sem, 0) == 1  # instances have their own semaphore
    hardware.write_register(Hub.MM, req, 0x00F8_0001, 1)
    with pytest.raises(HubProtocolError, match="before the ACK"):
        hardware.write_register(Hub.MM, sem, 0, 1)
    assert hardware.read_register(Hub.MM, ack, 1) == 1
    hardware.write_register(Hub.MM, sem, 0, 1)
    assert hardware.read_register(Hub.MM, sem, 1) == 1  # free again


def _shifted(
    table: dict[tuple[GfxGeneration, Hub], RegisterLayout],
    key: tuple[GfxGeneration, Hub],
    register: AMRegister,
    name: str,
) -> dict[tuple[GfxGeneration, Hub], RegisterLayout]:
    scratch = copy.deepcopy(table)
    field = scratch[key][register][name]
    step = 1 if field.high < 31 else -1
    scratch[key][register][name] = dataclasses.replace(field, high=field.high + step, low=field.low + step)
    return scratch


def _driver_writes(generation: GfxGeneration, hub: Hub) -> tuple[int, int]:
    return (
        registers_module.context_cntl(
            generation,
            hub,
            enable=True,
            depth=2 if generation is GfxGeneration.GFX9_4 else 3,
            block_size=9 if generation is GfxGeneration.GFX9_4 else 0,
        ),
        registers_module.invalidate_request(generation, hub, 0),
    )


MUTATIONS = [
    (key, register, name)
    for key, layout in REGISTER_FIELDS.items()
    for register, fields in layout.items()
    for name in fields
]


@pytest.mark.parametrize(("key", "register", "name"), MUTATIONS, ids=lambda v: getattr(v, "value", str(v)))
def test_moving_any_field_by_one_bit_fails_a_test(
    monkeypatch: pytest.MonkeyPatch, key: tuple[GfxGeneration, Hub], register: AMRegister, name: str
) -> None:
    generation, hub = key
    original = _driver_writes(generation, hub)
    _with_layout(monkeypatch, _shifted(REGISTER_FIELDS, key, register, name))
    with pytest.raises(AssertionError):
        check_golden_values()
    mutated = _driver_writes(generation, hub)
    # A field the driver reads (ACK, SEM) or writes non-zero changes what reaches the hardware: the simulator,
    # decoding with its own masks, must then fail the scenario too. (Fields written as 0, such as FLUSH_TYPE, are
    # invisible on the bus; the golden values above cover them.)
    driver_reads = register is AMRegister.VM_INVALIDATE_ENG17_ACK or (
        register is AMRegister.VM_INVALIDATE_ENG17_SEM and hub is Hub.MM  # the GC hubs' semaphores are not used
    )
    if driver_reads or mutated != original:
        with pytest.raises((AssertionError, RuntimeError, ValueError)):
            remap_scenario(generation, xcc_count=2, mmhub_count=2)
