"""The hub registers the AM memory manager programs, and one per-generation table of their fields.

Registers are named, not numbered: on real hardware their MMIO offsets come from the IP-discovery table of each
ASIC (`gc_11_0_0_offset.h`, `mmhub_3_0_0_offset.h`, ...), which this package does not parse. Field positions differ
between generations, so every field lives in `REGISTER_FIELDS`, keyed by (generation, hub), each entry citing the
Linux `asic_reg/*_sh_mask.h` header and the `<REG>__<FIELD>_MASK` define it was read from. Registers are packed by
field name through `pack`; nothing else in the driver knows a bit position.

The two generations disagree in exactly the places that matter for MI300:

* VM_CONTEXT0_CNTL.PAGE_TABLE_BLOCK_SIZE is bits 6:3 (mask 0x78) on GC 11.0 / MMHUB 3.0 and on GC 9.4.3 /
  MMHUB 1.8 (bit 7 is RETRY_PERMISSION_OR_INVALID_PAGE_FAULT); only GC 12 moved it to 7:4.
* VM_INVALIDATE_ENG*_REQ: GC 9.4.3 / MMHUB 1.8 have a 2-bit FLUSH_TYPE (17:16) and the level bits one lower
  (L2 PTEs 18, PDE0..2 19..21, L1 PTEs 22, CLEAR_PROTECTION_FAULT_STATUS_ADDR 23); GC 11 / MMHUB 3.0 have a 3-bit
  FLUSH_TYPE (18:16), L2 PTEs 19, PDE0..2 20..22, L1 PTEs 23 and the clear bit at 24.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kiln.drivers.am.gfx_generation import GfxGeneration


class Hub(enum.Enum):
    """The two kinds of VM hub of an AMD GPU; each instance has its own page-table context registers and TLB.

    MI300 (GC 9.4.3) has one GC hub per XCC and one MMHUB per AID; RDNA3 has one of each.
    """

    GC = "gc"  # graphics/compute hub (GCVM_* registers): what shaders and compute queues translate through
    MM = "mm"  # multimedia hub (MMVM_* registers): SDMA engines and video blocks


class AMRegister(enum.Enum):
    """Per-hub registers the memory manager touches (GCVM_*/MMVM_* or GCMC_*/MMMC_* per hub)."""

    VM_CONTEXT0_CNTL = "VM_CONTEXT0_CNTL"
    VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32 = "VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32"
    VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32 = "VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32"
    VM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32 = "VM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32"
    VM_CONTEXT0_PAGE_TABLE_START_ADDR_HI32 = "VM_CONTEXT0_PAGE_TABLE_START_ADDR_HI32"
    VM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32 = "VM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32"
    VM_CONTEXT0_PAGE_TABLE_END_ADDR_HI32 = "VM_CONTEXT0_PAGE_TABLE_END_ADDR_HI32"
    VM_INVALIDATE_ENG17_SEM = "VM_INVALIDATE_ENG17_SEM"
    VM_INVALIDATE_ENG17_REQ = "VM_INVALIDATE_ENG17_REQ"
    VM_INVALIDATE_ENG17_ACK = "VM_INVALIDATE_ENG17_ACK"
    MC_VM_XGMI_LFB_CNTL = "MC_VM_XGMI_LFB_CNTL"
    MC_VM_XGMI_LFB_SIZE = "MC_VM_XGMI_LFB_SIZE"


class RegisterAccess(Protocol):
    """32-bit register reads and writes on one device (MMIO on hardware, a dictionary in the simulator).

    `instance` picks the hub instance: the XCC for GC, the AID's MMHUB for MM (0 on single-instance GPUs).
    """

    def read_register(self, hub: Hub, register: AMRegister, instance: int = 0) -> int: ...

    def write_register(self, hub: Hub, register: AMRegister, value: int, instance: int = 0) -> None: ...


@dataclass(frozen=True)
class Field:
    """One register field: bits high:low (inclusive) and where that position was read."""

    high: int
    low: int
    source: str

    @property
    def mask(self) -> int:
        """The field's mask in the register (the header's `_MASK` value)."""
        return ((1 << (self.high - self.low + 1)) - 1) << self.low


RegisterLayout = dict[AMRegister, dict[str, Field]]


def _gc11(field: str, high: int, low: int, register: str) -> Field:
    return Field(high, low, f"gc_11_0_0_sh_mask.h GCVM_{register}__{field}_MASK")


def _mmhub3(field: str, high: int, low: int, register: str) -> Field:
    return Field(high, low, f"mmhub_3_0_0_sh_mask.h MMVM_{register}__{field}_MASK")


def _gc943(field: str, high: int, low: int, register: str) -> Field:
    return Field(high, low, f"gc_9_4_3_sh_mask.h VM_{register}__{field}_MASK")


def _mmhub18(field: str, high: int, low: int, register: str) -> Field:
    return Field(high, low, f"mmhub_1_8_0_sh_mask.h VM_{register}__{field}_MASK")


def _layout(cite: Callable[[str, int, int, str], Field], flush_type_high: int, level_base: int) -> RegisterLayout:
    """The four registers' fields for one header (`cite` builds the citation), given where the REQ layouts differ."""
    cntl, sem, req, ack = "CONTEXT0_CNTL", "INVALIDATE_ENG17_SEM", "INVALIDATE_ENG17_REQ", "INVALIDATE_ENG17_ACK"
    return {
        AMRegister.VM_CONTEXT0_CNTL: {
            "ENABLE_CONTEXT": cite("ENABLE_CONTEXT", 0, 0, cntl),
            "PAGE_TABLE_DEPTH": cite("PAGE_TABLE_DEPTH", 2, 1, cntl),
            "PAGE_TABLE_BLOCK_SIZE": cite("PAGE_TABLE_BLOCK_SIZE", 6, 3, cntl),
        },
        AMRegister.VM_INVALIDATE_ENG17_SEM: {"SEMAPHORE": cite("SEMAPHORE", 0, 0, sem)},
        AMRegister.VM_INVALIDATE_ENG17_REQ: {
            "PER_VMID_INVALIDATE_REQ": cite("PER_VMID_INVALIDATE_REQ", 15, 0, req),
            "FLUSH_TYPE": cite("FLUSH_TYPE", flush_type_high, 16, req),
            "INVALIDATE_L2_PTES": cite("INVALIDATE_L2_PTES", level_base, level_base, req),
            "INVALIDATE_L2_PDE0": cite("INVALIDATE_L2_PDE0", level_base + 1, level_base + 1, req),
            "INVALIDATE_L2_PDE1": cite("INVALIDATE_L2_PDE1", level_base + 2, level_base + 2, req),
            "INVALIDATE_L2_PDE2": cite("INVALIDATE_L2_PDE2", level_base + 3, level_base + 3, req),
            "INVALIDATE_L1_PTES": cite("INVALIDATE_L1_PTES", level_base + 4, level_base + 4, req),
            "CLEAR_PROTECTION_FAULT_STATUS_ADDR": cite(
                "CLEAR_PROTECTION_FAULT_STATUS_ADDR", level_base + 5, level_base + 5, req
            ),
        },
        AMRegister.VM_INVALIDATE_ENG17_ACK: {"PER_VMID_INVALIDATE_ACK": cite("PER_VMID_INVALIDATE_ACK", 15, 0, ack)},
    }


#: Field positions per (generation, hub). GC 11 / MMHUB 3.0: FLUSH_TYPE mask 0x70000, INVALIDATE_L2_PTES 0x80000.
#: GC 9.4.3 / MMHUB 1.8: FLUSH_TYPE mask 0x30000, INVALIDATE_L2_PTES 0x40000. Both: PAGE_TABLE_BLOCK_SIZE mask 0x78.
REGISTER_FIELDS: dict[tuple[GfxGeneration, Hub], RegisterLayout] = {
    (GfxGeneration.GFX11, Hub.GC): _layout(_gc11, 18, 19),
    (GfxGeneration.GFX11, Hub.MM): _layout(_mmhub3, 18, 19),
    (GfxGeneration.GFX9_4, Hub.GC): _layout(_gc943, 17, 18),
    (GfxGeneration.GFX9_4, Hub.MM): _layout(_mmhub18, 17, 18),
}


def register_field(generation: GfxGeneration, hub: Hub, register: AMRegister, name: str) -> Field:
    """The position of field `name` of `register` on `hub` of `generation`; ValueError if it has no such field."""
    fields = REGISTER_FIELDS[generation, hub].get(register, {})
    if name not in fields:
        raise ValueError(f"{generation.value} {hub.value} register {register.value} has no field {name!r}")
    return fields[name]


def pack(generation: GfxGeneration, hub: Hub, register: AMRegister, **values: int) -> int:
    """The 32-bit value of `register` with each named field set (unnamed fields 0).

    Raises ValueError for an unknown field or a value that does not fit its field.
    """
    raw = 0
    for name, value in values.items():
        field = register_field(generation, hub, register, name)
        width = field.high - field.low + 1
        if not 0 <= value < 1 << width:
            raise ValueError(f"{register.value}.{name} is {width} bits wide, got {value:#x}")
        raw |= value << field.low
    return raw


def unpack(generation: GfxGeneration, hub: Hub, register: AMRegister, raw: int, name: str) -> int:
    """Field `name` of the value `raw` read from `register`."""
    field = register_field(generation, hub, register, name)
    return (raw & field.mask) >> field.low


# --- MC_VM_XGMI_LFB_CNTL / _SIZE (read in gfxhub_v1_1_get_xgmi_info) ---
XGMI_LFB_CNTL_REGION_MASK = 0xF  # PF_LFB_REGION, bits 3:0: this GPU's physical node id in the hive
XGMI_LFB_CNTL_MAX_REGION_SHIFT = 4  # PF_MAX_REGION, bits 7:4: node count - 1 (0: XGMI off)
XGMI_LFB_CNTL_MAX_REGION_MASK = 0xF
XGMI_LFB_SIZE_MASK = 0x1FFFF  # PF_LFB_SIZE, bits 16:0
XGMI_LFB_SIZE_UNIT_SHIFT = 24  # the size is in 16 MiB units (`<< 24` in gfxhub_v1_1_get_xgmi_info)

#: The invalidation engine this driver uses (engine 17, as tinygrad's AM driver does; Linux leaves it to KIQ/MES).
INVALIDATE_ENGINE = 17
#: The VM context this driver programs: context 0 covers the whole address space of the process.
VMID = 0


def context_cntl(generation: GfxGeneration, hub: Hub, *, enable: bool, depth: int, block_size: int) -> int:
    """The VM_CONTEXT0_CNTL value enabling a `depth`-level walk (levels below the root) with `block_size`."""
    if not 0 <= depth <= 3:
        raise ValueError(f"page-table depth must be 0..3, got {depth}")
    if not 0 <= block_size <= 15:
        raise ValueError(f"page-table block size must be 0..15, got {block_size}")
    return pack(
        generation,
        hub,
        AMRegister.VM_CONTEXT0_CNTL,
        ENABLE_CONTEXT=int(enable),
        PAGE_TABLE_DEPTH=depth,
        PAGE_TABLE_BLOCK_SIZE=block_size,
    )


def invalidate_request(generation: GfxGeneration, hub: Hub, vmid: int) -> int:
    """A legacy-flush VM_INVALIDATE_ENG*_REQ value dropping every cached level of `vmid`'s translations.

    The same request as Linux `gmc_v9_0_get_invalidate_req` / `gmc_v11_0_get_invalidate_req` build: flush type 0,
    L2 PTEs, PDE0, PDE1, PDE2 and L1 PTEs invalidated, protection-fault address left alone.
    """
    if not 0 <= vmid < 16:
        raise ValueError(f"vmid must be 0..15, got {vmid}")
    return pack(
        generation,
        hub,
        AMRegister.VM_INVALIDATE_ENG17_REQ,
        PER_VMID_INVALIDATE_REQ=1 << vmid,
        FLUSH_TYPE=0,
        INVALIDATE_L2_PTES=1,
        INVALIDATE_L2_PDE0=1,
        INVALIDATE_L2_PDE1=1,
        INVALIDATE_L2_PDE2=1,
        INVALIDATE_L1_PTES=1,
        CLEAR_PROTECTION_FAULT_STATUS_ADDR=0,
    )
