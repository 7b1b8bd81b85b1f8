"""The AMD page-table format as the runtime's generic walker sees it, with the AM address-space rules.

Address-space rules (what the address in a leaf means; facts from Linux `gmc_v9_0_get_vm_pde`,
`amdgpu_vm_bo_update` and `amdgpu_ttm_tt_pde_flags`):
* PHYS: an offset into this GPU's VRAM. The hub wants the VRAM's fabric address, so the entry holds
  `vram_base + offset`, where `vram_base = fb_offset + node_id * segment_size` (0 outside an XGMI hive).
  Directory entries point to tables the same way.
* SYS: a host bus address (pinned host RAM, or a GPU's PCIe BAR); the SYSTEM bit is set, SNOOPED as asked.
* PEER: another GPU's VRAM over XGMI, already converted by its owner into a fabric address; the SYSTEM bit is clear
  and nothing is added (the owner's `vram_base` is in the address).
"""

from __future__ import annotations

from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.page_table_entry import (
    LEVEL_SHIFTS,
    PTE_ADDRESS_MASK,
    PTE_FRAGMENT_MAX,
    PTE_FRAGMENT_SHIFT,
    PTE_VALID,
    VA_BITS,
    PageTableLevel,
    encode_directory_entry,
    encode_leaf_entry,
    entry_address,
    is_leaf_entry,
    level_page_size,
)
from kiln.runtime.memory import AddrSpace, DecodedEntry, PageTableFormat


class AMPageTableFormat(PageTableFormat):
    """AMD GFX11 / GFX9.4 page tables: 4 levels of 512 eight-byte entries over a 48-bit VA.

    Args:
        generation: the GC generation (MTYPE field, huge-page marker, translate-further, address width).
        vram_base: the fabric address of this GPU's VRAM offset 0 (`XgmiNode.fabric_base` plus the FB offset).

    Huge pages: a leaf may sit at PDB0 (2 MiB) or PDB1 (1 GiB) when the address it maps is aligned to that size;
    never at the root (Linux's `amdgpu_vm_ptes_update` stops ascending below the root level).
    """

    level_shifts = LEVEL_SHIFTS
    va_bits = VA_BITS
    max_fragment = PTE_FRAGMENT_MAX

    def __init__(self, generation: GfxGeneration, vram_base: int = 0) -> None:
        if vram_base < 0 or vram_base % 4096 or vram_base >> generation.address_bits:
            raise ValueError(f"VRAM base {vram_base:#x} is not a 4 KiB-aligned {generation.address_bits}-bit address")
        self.generation = generation
        self.vram_base = vram_base
        self._address_bits = generation.address_bits
        self._page_offset_masks = [level_page_size(level) - 1 for level in range(len(LEVEL_SHIFTS))]
        # Walks touch every entry, so the hot paths below reuse per-flag-combination templates built by the
        # reference encoder (`encode_leaf_entry` with address 0 and fragment 0); fields are disjoint, so OR-ing the
        # address and fragment in gives the same entry.
        self._leaf_templates: dict[tuple[int, bool, bool, bool], int] = {}
        self._cleared = [
            DecodedEntry(valid=False, is_page=level == PageTableLevel.PTB, address=0) for level in range(4)
        ]

    def device_address(self, paddr: int, aspace: AddrSpace) -> int:
        """The address a leaf holds for `paddr` in `aspace` (PHYS offsets move to the fabric address of VRAM)."""
        return self.vram_base + paddr if aspace is AddrSpace.PHYS else paddr

    def encode_table(self, level: int, child_paddr: int) -> int:
        """A PDE at `level` pointing to the table at VRAM offset `child_paddr`."""
        return encode_directory_entry(self.generation, level, self.vram_base + child_paddr)

    def encode_page(
        self, level: int, paddr: int, aspace: AddrSpace, uncached: bool, snooped: bool, fragment: int
    ) -> int:
        """A leaf at `level`: SYSTEM for SYS addresses, the fabric address for PHYS, the address as given for PEER."""
        address = self.vram_base + paddr if aspace is AddrSpace.PHYS else paddr
        system = aspace is AddrSpace.SYS
        fits = address >= 0 and not address & self._page_offset_masks[level] and not address >> self._address_bits
        if not fits or not 0 <= fragment <= PTE_FRAGMENT_MAX:
            encode_leaf_entry(  # raises the ValueError naming what is wrong
                self.generation, level, address, system=system, snooped=snooped, uncached=uncached, fragment=fragment
            )
        key = (level, system, snooped, uncached)
        template = self._leaf_templates.get(key)
        if template is None:
            template = encode_leaf_entry(
                self.generation, level, 0, system=system, snooped=snooped, uncached=uncached, fragment=0
            )
            self._leaf_templates[key] = template
        return template | address | fragment << PTE_FRAGMENT_SHIFT

    def encode_invalid(self, level: int, previous: int) -> int:
        """A cleared entry is all zero: with the VALID bit clear any access faults, on every generation.

        Nothing of the old entry is kept (tinygrad keeps the permission bits, which only its own walker reads).
        """
        return 0

    def decode(self, level: int, raw: int) -> DecodedEntry:
        """Valid bit, leaf marker (P bit, TF clear at PDB0 in translate-further mode, always at PTB) and address.

        A table's address is returned as a VRAM offset; a leaf's address as the device address it holds.
        """
        if raw == 0:
            return self._cleared[level]
        valid = bool(raw & PTE_VALID)
        if level == PageTableLevel.PTB:
            return DecodedEntry(valid, True, raw & PTE_ADDRESS_MASK)
        leaf = is_leaf_entry(self.generation, level, raw)
        address = entry_address(level, raw, leaf)
        if valid and not leaf:
            address -= self.vram_base
        return DecodedEntry(valid, leaf, address)

    def can_map_page(self, level: int, paddr: int, aspace: AddrSpace) -> bool:
        """A leaf fits PTB always; PDB0/PDB1 when the device address is aligned to the page size; never the root."""
        if level == PageTableLevel.PTB:
            return True
        if level == PageTableLevel.PDB2:
            return False
        return self.device_address(paddr, aspace) % level_page_size(level) == 0
