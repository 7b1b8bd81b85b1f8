"""The hub registers the AM memory manager programs, and the layout of their fields.

Registers are named, not numbered: on real hardware their MMIO offsets come from the IP-discovery table of each
ASIC (`gc_11_0_0_offset.h`, `mmhub_3_0_0_offset.h`, ...), which this package does not parse. Every field position
below is from the Linux `asic_reg/*_sh_mask.h` headers of the named register.
"""

from __future__ import annotations

import enum
from typing import Protocol


class Hub(enum.Enum):
    """The two VM hubs of an AMD GPU; each has its own page-table context registers and TLB."""

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
    VM_INVALIDATE_ENG17_REQ = "VM_INVALIDATE_ENG17_REQ"
    VM_INVALIDATE_ENG17_ACK = "VM_INVALIDATE_ENG17_ACK"
    MC_VM_XGMI_LFB_CNTL = "MC_VM_XGMI_LFB_CNTL"
    MC_VM_XGMI_LFB_SIZE = "MC_VM_XGMI_LFB_SIZE"


class RegisterAccess(Protocol):
    """32-bit register reads and writes on one device (MMIO on hardware, a dictionary in the simulator)."""

    def read_register(self, hub: Hub, register: AMRegister) -> int: ...

    def write_register(self, hub: Hub, register: AMRegister, value: int) -> None: ...


# --- VM_CONTEXT0_CNTL (GCVM_CONTEXT0_CNTL / MMVM_CONTEXT0_CNTL in *_sh_mask.h) ---
CONTEXT_CNTL_ENABLE_CONTEXT = 1 << 0  # ENABLE_CONTEXT, bit 0
CONTEXT_CNTL_PAGE_TABLE_DEPTH_SHIFT = 1  # PAGE_TABLE_DEPTH, bits 2:1 (mask 0x6)
CONTEXT_CNTL_PAGE_TABLE_DEPTH_MASK = 0x3
CONTEXT_CNTL_PAGE_TABLE_BLOCK_SIZE_SHIFT = 4  # PAGE_TABLE_BLOCK_SIZE, bits 7:4 (mask 0xF0)
CONTEXT_CNTL_PAGE_TABLE_BLOCK_SIZE_MASK = 0xF

# --- VM_INVALIDATE_ENG*_REQ / _ACK (mmhub_3_0_0_sh_mask.h, gc_11_0_0_sh_mask.h) ---
INVALIDATE_REQ_PER_VMID_MASK = 0xFFFF  # PER_VMID_INVALIDATE_REQ, bits 15:0: one bit per VMID
INVALIDATE_REQ_FLUSH_TYPE_SHIFT = 16  # FLUSH_TYPE, bits 18:16 (0 = legacy)
INVALIDATE_REQ_L2_PTES = 1 << 19  # INVALIDATE_L2_PTES
INVALIDATE_REQ_L2_PDE0 = 1 << 20  # INVALIDATE_L2_PDE0
INVALIDATE_REQ_L2_PDE1 = 1 << 21  # INVALIDATE_L2_PDE1
INVALIDATE_REQ_L2_PDE2 = 1 << 22  # INVALIDATE_L2_PDE2
INVALIDATE_REQ_L1_PTES = 1 << 23  # INVALIDATE_L1_PTES
INVALIDATE_REQ_ALL_LEVELS = (
    INVALIDATE_REQ_L2_PTES | INVALIDATE_REQ_L2_PDE0 | INVALIDATE_REQ_L2_PDE1 | INVALIDATE_REQ_L2_PDE2
) | INVALIDATE_REQ_L1_PTES
INVALIDATE_ACK_PER_VMID_MASK = 0xFFFF  # PER_VMID_INVALIDATE_ACK, bits 15:0

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


def context_cntl(*, enable: bool, depth: int, block_size: int) -> int:
    """The VM_CONTEXT0_CNTL value enabling a `depth`-level walk (levels below the root) with `block_size`."""
    if not 0 <= depth <= CONTEXT_CNTL_PAGE_TABLE_DEPTH_MASK:
        raise ValueError(f"page-table depth must be 0..3, got {depth}")
    if not 0 <= block_size <= CONTEXT_CNTL_PAGE_TABLE_BLOCK_SIZE_MASK:
        raise ValueError(f"page-table block size must be 0..15, got {block_size}")
    value = depth << CONTEXT_CNTL_PAGE_TABLE_DEPTH_SHIFT | block_size << CONTEXT_CNTL_PAGE_TABLE_BLOCK_SIZE_SHIFT
    return value | (CONTEXT_CNTL_ENABLE_CONTEXT if enable else 0)


def invalidate_request(vmid: int) -> int:
    """A legacy-flush VM_INVALIDATE_ENG*_REQ value dropping every cached level of `vmid`'s translations."""
    if not 0 <= vmid < 16:
        raise ValueError(f"vmid must be 0..15, got {vmid}")
    return (1 << vmid) | INVALIDATE_REQ_ALL_LEVELS
