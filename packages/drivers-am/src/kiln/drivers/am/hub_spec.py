"""The simulator's own reading of the hub register headers: field masks per generation, as the headers print them.

This is deliberately a second, independent transcription of the AMD `asic_reg` headers, kept apart from the
driver's encoder table (`registers.REGISTER_FIELDS`): the simulated hub and the software MMU decode what the driver
wrote with these masks, so an encoder that packs a field at the wrong position produces a register value the
simulated hardware reads differently, and a test fails. Values are the `<REG>__<FIELD>_MASK` defines of:

* GFX11: `gc_11_0_0_sh_mask.h` (GCVM_*) and `mmhub_3_0_0_sh_mask.h` (MMVM_*), which agree on these registers;
* GFX9_4 (MI300, GC 9.4.3): `gc_9_4_3_sh_mask.h` (VM_*) and `mmhub_1_8_0_sh_mask.h` (VM_*), which agree too.

Checked against header text for this package: `mmhub_1_8_0_sh_mask.h` (torvalds/linux) VM_CONTEXT0_CNTL (block size
0x78, RETRY_PERMISSION_OR_INVALID_PAGE_FAULT 0x80), VM_INVALIDATE_ENG17_REQ (FLUSH_TYPE 0x30000 ... CLEAR 0x800000)
and _ACK (0xFFFF); an MMHUB 3.x `MMVM_*` header for the GFX11 column (REQ FLUSH_TYPE 0x70000 ... CLEAR 0x1000000,
SEM 0x1, CNTL block size 0x78). The GC hubs' UTCL2 uses the same layouts as the MMHUB of its generation.

(GC 12 is not modelled; its PAGE_TABLE_BLOCK_SIZE sits at 7:4, the position the driver once wrongly used here.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kiln.drivers.am.gfx_generation import GfxGeneration


@dataclass(frozen=True)
class HubRegisterMasks:
    """Masks of the fields the simulated hub decodes (each named after its header define)."""

    CONTEXT0_CNTL__ENABLE_CONTEXT: int
    CONTEXT0_CNTL__PAGE_TABLE_DEPTH: int
    CONTEXT0_CNTL__PAGE_TABLE_BLOCK_SIZE: int
    INVALIDATE_ENG17_SEM__SEMAPHORE: int
    INVALIDATE_ENG17_REQ__PER_VMID_INVALIDATE_REQ: int
    INVALIDATE_ENG17_REQ__FLUSH_TYPE: int
    INVALIDATE_ENG17_REQ__INVALIDATE_L2_PTES: int
    INVALIDATE_ENG17_REQ__INVALIDATE_L2_PDE0: int
    INVALIDATE_ENG17_REQ__INVALIDATE_L2_PDE1: int
    INVALIDATE_ENG17_REQ__INVALIDATE_L2_PDE2: int
    INVALIDATE_ENG17_REQ__INVALIDATE_L1_PTES: int
    INVALIDATE_ENG17_REQ__CLEAR_PROTECTION_FAULT_STATUS_ADDR: int
    INVALIDATE_ENG17_ACK__PER_VMID_INVALIDATE_ACK: int


def field_value(raw: int, mask: int) -> int:
    """The field under `mask` in `raw`, shifted down to bit 0."""
    return (raw & mask) >> ((mask & -mask).bit_length() - 1)


def field_place(value: int, mask: int) -> int:
    """`value` moved into the field under `mask` (bits beyond the field dropped)."""
    return (value << ((mask & -mask).bit_length() - 1)) & mask


# GCVM_/MMVM_CONTEXT0_CNTL: ENABLE_CONTEXT 0x00000001, PAGE_TABLE_DEPTH 0x00000006, PAGE_TABLE_BLOCK_SIZE 0x00000078
# (RETRY_PERMISSION_OR_INVALID_PAGE_FAULT is 0x00000080). GCVM_/MMVM_INVALIDATE_ENG17_REQ as listed below.
_GFX11 = HubRegisterMasks(
    CONTEXT0_CNTL__ENABLE_CONTEXT=0x00000001,
    CONTEXT0_CNTL__PAGE_TABLE_DEPTH=0x00000006,
    CONTEXT0_CNTL__PAGE_TABLE_BLOCK_SIZE=0x00000078,
    INVALIDATE_ENG17_SEM__SEMAPHORE=0x00000001,
    INVALIDATE_ENG17_REQ__PER_VMID_INVALIDATE_REQ=0x0000FFFF,
    INVALIDATE_ENG17_REQ__FLUSH_TYPE=0x00070000,
    INVALIDATE_ENG17_REQ__INVALIDATE_L2_PTES=0x00080000,
    INVALIDATE_ENG17_REQ__INVALIDATE_L2_PDE0=0x00100000,
    INVALIDATE_ENG17_REQ__INVALIDATE_L2_PDE1=0x00200000,
    INVALIDATE_ENG17_REQ__INVALIDATE_L2_PDE2=0x00400000,
    INVALIDATE_ENG17_REQ__INVALIDATE_L1_PTES=0x00800000,
    INVALIDATE_ENG17_REQ__CLEAR_PROTECTION_FAULT_STATUS_ADDR=0x01000000,
    INVALIDATE_ENG17_ACK__PER_VMID_INVALIDATE_ACK=0x0000FFFF,
)

# VM_CONTEXT0_CNTL, the semaphore and the ack as above; VM_INVALIDATE_ENG17_REQ with the 2-bit FLUSH_TYPE of the GFX9
# family, so its flags sit one bit lower.
_GFX9_4_3 = replace(
    _GFX11,
    INVALIDATE_ENG17_REQ__FLUSH_TYPE=0x00030000,
    INVALIDATE_ENG17_REQ__INVALIDATE_L2_PTES=0x00040000,
    INVALIDATE_ENG17_REQ__INVALIDATE_L2_PDE0=0x00080000,
    INVALIDATE_ENG17_REQ__INVALIDATE_L2_PDE1=0x00100000,
    INVALIDATE_ENG17_REQ__INVALIDATE_L2_PDE2=0x00200000,
    INVALIDATE_ENG17_REQ__INVALIDATE_L1_PTES=0x00400000,
    INVALIDATE_ENG17_REQ__CLEAR_PROTECTION_FAULT_STATUS_ADDR=0x00800000,
)

#: The simulator's masks per generation (both hubs of a generation share them).
HUB_REGISTER_MASKS: dict[GfxGeneration, HubRegisterMasks] = {
    GfxGeneration.GFX11: _GFX11,
    GfxGeneration.GFX9_4: _GFX9_4_3,
}
