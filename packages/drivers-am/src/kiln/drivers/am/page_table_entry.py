"""Raw AMD page-table entries: the bit layout of PDEs and PTEs on GFX11 and GFX9.4, and functions that build them.

Sources (Linux amdgpu, cited per field below):
* `drivers/gpu/drm/amd/amdgpu/amdgpu_vm.h`: the `AMDGPU_PTE_*` / `AMDGPU_PDE_*` bit macros and `enum amdgpu_vm_level`.
* `drivers/gpu/drm/amd/amdgpu/gmc_v9_0.c`: "PTE format on VEGA 10" / "PDE format on VEGA 10" comments and
  `gmc_v9_0_get_vm_pde` (translate-further rules).
* `drivers/gpu/drm/amd/amdgpu/gmc_v11_0.c` (same comments as gmc_v10_0.c, "PTE format on NAVI 10").

This module only builds entries. The simulated MMU (`software_mmu`) decodes them with its own code.
"""

from __future__ import annotations

import enum

from kiln.drivers.am.gfx_generation import GfxGeneration


class PageTableLevel(enum.IntEnum):
    """The four levels of the tree, root first (`enum amdgpu_vm_level` in amdgpu_vm.h)."""

    PDB2 = 0
    PDB1 = 1
    PDB0 = 2
    PTB = 3


#: VA shift of one entry at each level, root first: 512 GiB, 1 GiB, 2 MiB, 4 KiB. Nine VA bits per level
#: (`amdgpu_vm_pt_level_shift` = 9 * (PDB0 - level) + block_size 9; gmc_v11_0_sw_init: "4-level, 48 bit").
LEVEL_SHIFTS: tuple[int, ...] = (39, 30, 21, 12)
#: The root covers 2**48 bytes of VA.
VA_BITS = 48
#: Every table of the tree holds 512 eight-byte entries in one 4 KiB page.
ENTRIES_PER_TABLE = 512
ENTRY_BYTES = 8
TABLE_BYTES = 4096

# --- bits shared by PTEs of every generation (amdgpu_vm.h) ---
PTE_VALID = 1 << 0  # AMDGPU_PTE_VALID
PTE_SYSTEM = 1 << 1  # AMDGPU_PTE_SYSTEM: the address is a host bus address, not the GPU's fabric/VRAM space
PTE_SNOOPED = 1 << 2  # AMDGPU_PTE_SNOOPED: coherent with CPU caches
PTE_TMZ = 1 << 3  # AMDGPU_PTE_TMZ ("Z" in the format comments): encrypted memory
PTE_EXECUTABLE = 1 << 4  # AMDGPU_PTE_EXECUTABLE
PTE_READABLE = 1 << 5  # AMDGPU_PTE_READABLE
PTE_WRITEABLE = 1 << 6  # AMDGPU_PTE_WRITEABLE
PTE_FRAGMENT_SHIFT = 7  # AMDGPU_PTE_FRAG(x) = (x & 0x1f) << 7: bits 11:7
PTE_FRAGMENT_MAX = 0x1F
#: PTE physical page base, bits 47:12 ("47:12 4k physical page base address").
PTE_ADDRESS_MASK = 0x0000_FFFF_FFFF_F000
PTE_PRT = 1 << 51  # AMDGPU_PTE_PRT ("T", tiled/partially-resident); never set here
#: AMDGPU_PDE_PTE: "PDE is handled as PTE" (PDE format bit 54 "P"): a directory entry that is really a huge page.
PDE_IS_PTE = 1 << 54
PTE_TRANSLATE_FURTHER = 1 << 56  # AMDGPU_PTE_TF ("F"): a PDB0 "PTE" that points to a PTB (GFX9 TF mode)

# --- directory entries (PDE format comments in gmc_v9_0.c / gmc_v10_0.c) ---
PDE_VALID = 1 << 0
#: PDE base of the next PD or PT, bits 47:6 ("47:6 physical base address of PD or PTE").
PDE_ADDRESS_MASK = 0x0000_FFFF_FFFF_FFC0
PDE_BLOCK_FRAGMENT_SIZE_SHIFT = 59  # AMDGPU_PDE_BFS(a) = a << 59: bits 63:59
#: Block fragment size Linux writes into PDB1 table entries in translate-further mode (gmc_v9_0_get_vm_pde).
TRANSLATE_FURTHER_BLOCK_FRAGMENT_SIZE = 9

# --- MTYPE: where it lives per generation, and the two values used here ---
MTYPE_SHIFT_GFX9 = 57  # AMDGPU_PTE_MTYPE_VG10: bits 58:57 ("58:57 mtype" in the VEGA 10 PTE format)
MTYPE_SHIFT_GFX11 = 48  # AMDGPU_PTE_MTYPE_NV10: bits 50:48 ("50:48 mtype" in the NAVI 10 PTE format)
#: MTYPE values from the MTYPE enum (vega10_enum.h / soc21_enum.h): NC (non-coherent, cached) is Linux's default;
#: UC (uncached) is what Linux picks for AMDGPU_GEM_CREATE_UNCACHED (gmc_v11_0_get_vm_pte).
MTYPE_NC = 0
MTYPE_UC = 3

#: Permissions every leaf gets: the driver maps buffers readable, writeable and executable (kernels live in them).
LEAF_PERMISSIONS = PTE_READABLE | PTE_WRITEABLE | PTE_EXECUTABLE


def level_page_size(level: int) -> int:
    """Bytes covered by one entry at `level` (4 KiB at PTB, 2 MiB at PDB0, 1 GiB at PDB1, 512 GiB at PDB2)."""
    return 1 << LEVEL_SHIFTS[level]


def mtype_shift(generation: GfxGeneration) -> int:
    """Bit position of the MTYPE field of a PTE on `generation`."""
    return MTYPE_SHIFT_GFX9 if generation is GfxGeneration.GFX9_4 else MTYPE_SHIFT_GFX11


def _check_address(generation: GfxGeneration, address: int, alignment: int, what: str) -> None:
    if address < 0 or address >> generation.address_bits:
        raise ValueError(
            f"{what} address {address:#x} does not fit the {generation.address_bits}-bit address space of "
            f"{generation.value}"
        )
    if address % alignment:
        raise ValueError(f"{what} address {address:#x} is not aligned to {alignment:#x} bytes")


def encode_directory_entry(generation: GfxGeneration, level: int, table_address: int) -> int:
    """A valid PDE at `level` that points to the child table at device address `table_address`.

    In translate-further mode (GFX9.4) a PDB1 entry carries block-fragment-size 9 and a PDB0 entry is a "PTE" with
    the TF bit, exactly as `gmc_v9_0_get_vm_pde` writes them.
    """
    if not PageTableLevel.PDB2 <= level < PageTableLevel.PTB:
        raise ValueError(f"a directory entry lives at levels PDB2..PDB0 (0..2), got level {level}")
    _check_address(generation, table_address, TABLE_BYTES, "page-table")
    raw = PDE_VALID | (table_address & PDE_ADDRESS_MASK)
    if generation.translate_further:
        if level == PageTableLevel.PDB1:
            raw |= TRANSLATE_FURTHER_BLOCK_FRAGMENT_SIZE << PDE_BLOCK_FRAGMENT_SIZE_SHIFT
        elif level == PageTableLevel.PDB0:
            raw |= PTE_TRANSLATE_FURTHER
    return raw


def encode_leaf_entry(
    generation: GfxGeneration,
    level: int,
    address: int,
    *,
    system: bool,
    snooped: bool,
    uncached: bool,
    fragment: int,
) -> int:
    """A valid leaf (PTE, or a huge page at a directory level) mapping the page at device/bus `address`.

    Args:
        generation: selects the MTYPE field and the huge-page marker.
        level: PTB for a 4 KiB page; PDB0 (2 MiB) or PDB1 (1 GiB) for a huge page (PDE-as-PTE).
        address: the address the hub sees: a fabric/VRAM address, or a bus address when `system` is set. It must
            be aligned to the page size of `level`.
        system: set the SYSTEM bit (host memory or a PCIe BAR reached over the bus).
        snooped: set the SNOOPED bit (coherent with the CPU caches).
        uncached: MTYPE UC instead of the default NC.
        fragment: the 5-bit fragment field: a TLB may treat the naturally aligned 2**(12+fragment)-byte block
            around this page as one mapping (amdgpu_vm_pt.c, amdgpu_vm_pte_fragment).
    """
    if not PageTableLevel.PDB2 <= level <= PageTableLevel.PTB:
        raise ValueError(f"page-table level must be 0..3 (PDB2..PTB), got {level}")
    if not 0 <= fragment <= PTE_FRAGMENT_MAX:
        raise ValueError(f"fragment must be in 0..{PTE_FRAGMENT_MAX}, got {fragment}")
    _check_address(generation, address, level_page_size(level), "page")
    raw = PTE_VALID | LEAF_PERMISSIONS | (address & PTE_ADDRESS_MASK) | (fragment << PTE_FRAGMENT_SHIFT)
    if system:
        raw |= PTE_SYSTEM
    if snooped:
        raw |= PTE_SNOOPED
    raw |= (MTYPE_UC if uncached else MTYPE_NC) << mtype_shift(generation)
    if level != PageTableLevel.PTB and not (generation.translate_further and level == PageTableLevel.PDB0):
        # A huge page at a directory level says so with bit 54. In TF mode a PDB0 entry is a PTE already, and
        # gmc_v9_0_get_vm_pde clears the bit there: "TF clear" is what marks the 2 MiB leaf.
        raw |= PDE_IS_PTE
    return raw


def is_leaf_entry(generation: GfxGeneration, level: int, raw: int) -> bool:
    """Whether the valid entry `raw` at `level` maps a page (True) or points to a child table (False)."""
    if level == PageTableLevel.PTB:
        return True
    if generation.translate_further and level == PageTableLevel.PDB0:
        return not raw & PTE_TRANSLATE_FURTHER
    return bool(raw & PDE_IS_PTE)


def entry_address(level: int, raw: int, leaf: bool) -> int:
    """The address field of `raw`: the page base of a leaf, or the child-table base of a directory entry."""
    if leaf:
        return raw & PTE_ADDRESS_MASK & ~(level_page_size(level) - 1)
    return raw & PDE_ADDRESS_MASK
