"""The AMD graphics IP generations whose page tables this driver writes, and what differs between them."""

from __future__ import annotations

import enum


class GfxGeneration(enum.Enum):
    """An AMD GC (graphics/compute) IP generation with its own page-table-entry layout.

    Both generations use the same four-level, 48-bit, 512-entry tree; they differ in where MTYPE lives, how a
    directory entry marks itself as a huge page, and how wide a physical address may be (see `page_table_entry`).
    """

    #: RDNA3 (GC 11.0.x, e.g. RX 7900): Linux `gmc_v11_0.c`.
    GFX11 = "gfx11"
    #: CDNA3 (GC 9.4.3, MI300): Linux `gmc_v9_0.c` with `translate_further` set.
    GFX9_4 = "gfx9.4"

    @property
    def address_bits(self) -> int:
        """Width of a device or bus address the hub accepts.

        Linux sets a 44-bit DMA mask in `gmc_v11_0_sw_init` and a 48-bit one for GC >= 9.4.2 in `gmc_v9_0_sw_init`.
        """
        return 48 if self is GfxGeneration.GFX9_4 else 44

    @property
    def translate_further(self) -> bool:
        """Whether PDB0 entries are 2 MiB PTEs that may 'translate further' to a PTB (GFX9 TF mode).

        Linux `gmc_v9_0.c` sets `adev->gmc.translate_further` for GC 9.4.1/9.4.2/9.4.3; gmc_v10+ never do.
        """
        return self is GfxGeneration.GFX9_4

    @classmethod
    def parse(cls, text: str) -> GfxGeneration:
        """The generation named `text` ("gfx11" or "gfx9.4", case-insensitive)."""
        for generation in cls:
            if generation.value == text.strip().lower():
                return generation
        raise ValueError(f"unknown AMD GFX generation {text!r}; expected one of {[g.value for g in cls]}")
