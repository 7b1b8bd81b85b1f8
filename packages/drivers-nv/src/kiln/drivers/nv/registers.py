"""The GPU registers and in-memory structures the NV memory manager touches, with their public layouts.

* MMU invalidate registers: `ogkm:src/common/inc/swref/published/turing/tu102/dev_vm.h` (same offsets and fields in
  `.../ampere/ga100/dev_vm.h`), `NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE*`. Offsets there are relative to
  `NV_VIRTUAL_FUNCTION_FULL_PHYS_OFFSET` = 0x00B80000 in BAR0 (same file).
* Instance block (RAMIN) page-directory words: `ogkm:src/common/inc/swref/published/pascal/gp100/dev_ram.h`,
  `NV_RAMIN_PAGE_DIR_BASE_*`, `NV_RAMIN_USE_NEW_PT_FORMAT`, `NV_RAMIN_BIG_PAGE_SIZE`.

(`ogkm` = github.com/NVIDIA/open-gpu-kernel-modules.)
"""

from __future__ import annotations

from dataclasses import dataclass

VIRTUAL_FUNCTION_BASE = 0x00B80000  # NV_VIRTUAL_FUNCTION_FULL_PHYS_OFFSET 0x00BBFFFF:0x00B80000

MMU_INVALIDATE_PDB = VIRTUAL_FUNCTION_BASE + 0x30A0  # NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB
MMU_INVALIDATE_UPPER_PDB = VIRTUAL_FUNCTION_BASE + 0x30A4  # NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_UPPER_PDB
MMU_INVALIDATE = VIRTUAL_FUNCTION_BASE + 0x30B0  # NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE

# MMU_INVALIDATE_PDB fields: APERTURE 1:1 (0 video, 1 system), ADDR 31:4 holding pdb >> ADDR_ALIGNMENT (0xc).
INVALIDATE_PDB_APERTURE_SHIFT = 1
INVALIDATE_PDB_ADDRESS_SHIFT = 4
INVALIDATE_PDB_ADDRESS_BITS = 28
INVALIDATE_PDB_ALIGNMENT = 12
# MMU_INVALIDATE_UPPER_PDB: ADDR 19:0, the page-number bits above the 28 that MMU_INVALIDATE_PDB holds.
INVALIDATE_UPPER_PDB_ADDRESS_BITS = 20

# MMU_INVALIDATE fields.
INVALIDATE_ALL_VA = 1 << 0  # ALL_VA 0:0
INVALIDATE_ALL_PDB = 1 << 1  # ALL_PDB 1:1
INVALIDATE_HUBTLB_ONLY = 1 << 2  # HUBTLB_ONLY 2:2
INVALIDATE_SYS_MEMBAR = 1 << 6  # SYS_MEMBAR 6:6
INVALIDATE_TRIGGER = 1 << 31  # TRIGGER 31:31

# Instance block: NV_RAMIN_ALLOC_SIZE 4096, base shift 12. PAGE_DIR_BASE lives in 32-bit words 128 and 129.
RAMIN_SIZE = 4096
RAMIN_PAGE_DIR_BASE_LO_BYTE = 128 * 4
RAMIN_PAGE_DIR_BASE_HI_BYTE = 129 * 4
RAMIN_TARGET_MASK = 0b11  # PAGE_DIR_BASE_TARGET (128*32+1):(128*32+0): 0 VID_MEM, 2 SYS coherent, 3 SYS non-coherent
RAMIN_VOL = 1 << 2  # PAGE_DIR_BASE_VOL (128*32+2)
RAMIN_USE_NEW_PT_FORMAT = 1 << 10  # USE_NEW_PT_FORMAT (128*32+10): the 5/6-level formats, not the old 2-level one
RAMIN_BIG_PAGE_SIZE_64KB = 1 << 11  # BIG_PAGE_SIZE (128*32+11): 1 = 64 KiB big pages
RAMIN_PAGE_DIR_BASE_LO_SHIFT = 12  # PAGE_DIR_BASE_LO (128*32+31):(128*32+12) holds pdb bits 31:12 in place


@dataclass(frozen=True)
class PageDirectoryBase:
    """What an instance block says about its address space's root table."""

    address: int
    target: int
    volatile: bool
    new_format: bool
    big_page_64kb: bool


def encode_page_directory_base(root_paddr: int, *, volatile: bool = False) -> tuple[int, int]:
    """The two RAMIN words (128, 129) that point an instance block at a root table in VRAM (target VID_MEM)."""
    if root_paddr < 0 or root_paddr % RAMIN_SIZE or root_paddr >= 1 << 64:
        raise ValueError(f"root table address {root_paddr:#x} must be a 4 KiB-aligned 64-bit address")
    low = (root_paddr & 0xFFFF_F000) | RAMIN_USE_NEW_PT_FORMAT | RAMIN_BIG_PAGE_SIZE_64KB
    if volatile:
        low |= RAMIN_VOL
    return low, root_paddr >> 32


def decode_page_directory_base(low: int, high: int) -> PageDirectoryBase:
    """Read the RAMIN page-directory words back."""
    return PageDirectoryBase(
        address=(high << 32) | (low & 0xFFFF_F000),
        target=low & RAMIN_TARGET_MASK,
        volatile=bool(low & RAMIN_VOL),
        new_format=bool(low & RAMIN_USE_NEW_PT_FORMAT),
        big_page_64kb=bool(low & RAMIN_BIG_PAGE_SIZE_64KB),
    )


def encode_invalidate_pdb(root_paddr: int) -> tuple[int, int]:
    """(MMU_INVALIDATE_PDB, MMU_INVALIDATE_UPPER_PDB) values naming a root table in video memory."""
    page = root_paddr >> INVALIDATE_PDB_ALIGNMENT
    if root_paddr % (1 << INVALIDATE_PDB_ALIGNMENT) or page >> (
        INVALIDATE_PDB_ADDRESS_BITS + INVALIDATE_UPPER_PDB_ADDRESS_BITS
    ):
        raise ValueError(f"root table address {root_paddr:#x} must be 4 KiB aligned and below 2**60")
    low = (page & ((1 << INVALIDATE_PDB_ADDRESS_BITS) - 1)) << INVALIDATE_PDB_ADDRESS_SHIFT  # APERTURE 0 = video
    return low, page >> INVALIDATE_PDB_ADDRESS_BITS


def decode_invalidate_pdb(low: int, upper: int) -> tuple[int, bool]:
    """(root table address, is system memory) from the two invalidate-PDB registers."""
    page = (low >> INVALIDATE_PDB_ADDRESS_SHIFT) & ((1 << INVALIDATE_PDB_ADDRESS_BITS) - 1)
    page |= (upper & ((1 << INVALIDATE_UPPER_PDB_ADDRESS_BITS) - 1)) << INVALIDATE_PDB_ADDRESS_BITS
    return page << INVALIDATE_PDB_ALIGNMENT, bool((low >> INVALIDATE_PDB_APERTURE_SHIFT) & 1)
