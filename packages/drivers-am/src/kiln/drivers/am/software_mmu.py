"""A software model of the GC hub's page walker: translate a virtual address by decoding the tables in VRAM.

This is the oracle the memory manager's tests check against, so it shares no code with the encoder
(`page_table_entry`) or the format class: it reads the VM context registers, walks the raw 64-bit entries in the
simulated VRAM and extracts every field itself, by the bit ranges of the Linux format comments:

* "PTE format on NAVI 10" (gmc_v10_0.c, also used by gmc_v11_0.c): 56 F, 55 L, 54 P (PDE), 51 T, 50:48 mtype,
  47:12 page base, 11:7 fragment, 6 write, 5 read, 4 exe, 3 Z, 2 snooped, 1 system, 0 valid.
* "PTE format on VEGA 10" (gmc_v9_0.c): 58:57 mtype, 56 F, 55 L, 54 P; PDE format 63:59 block fragment size,
  47:6 table base.

Like the hardware's UTCL2, it caches what it walked, per level: translated 4 KiB pages in an L1 and an L2 PTE cache,
and directory entries in PDE2 / PDE1 / PDE0 caches (a cached directory entry is used instead of re-reading the table).
An invalidation request drops only the caches it names, so a driver that forgets to invalidate, or names the wrong
bits for its generation (see `hub_spec`), keeps reading stale translations and its tests fail. The context register
fields are decoded with the simulator's own masks (`hub_spec`), never with the driver's encoder table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.hub_spec import HUB_REGISTER_MASKS, field_value
from kiln.drivers.am.registers import AMRegister, Hub, RegisterAccess


def _field(raw: int, high: int, low: int) -> int:
    """Bits high:low of `raw` (inclusive, as the hardware documents write them)."""
    return (raw >> low) & ((1 << (high - low + 1)) - 1)


# The walker's geometry, restated from the hardware description: 4 levels of 9 VA bits above a 12-bit page offset.
_WALK_SHIFTS = (39, 30, 21, 12)
_LEVEL_NAMES = ("PDB2", "PDB1", "PDB0", "PTB")


@dataclass(frozen=True)
class PageFlags:
    """The attribute bits of a leaf entry, decoded."""

    readable: bool
    writeable: bool
    executable: bool
    snooped: bool
    encrypted: bool
    mtype: int
    fragment: int


@dataclass(frozen=True)
class Translation:
    """Where a virtual address goes.

    Attributes:
        address: the device address (fabric/VRAM address, or bus address when `system`) of the byte.
        system: the leaf's SYSTEM bit: the address is a host bus address.
        level: the level whose entry was the leaf (0 = PDB2 ... 3 = PTB).
        page_size: bytes covered by that leaf.
        flags: the leaf's other attribute bits.
    """

    address: int
    system: bool
    level: int
    page_size: int
    flags: PageFlags


class PageFault(RuntimeError):
    """The walk found no valid translation (or the VM context is off / the address is outside it)."""

    def __init__(self, va: int, level: int | None, reason: str) -> None:
        where = "" if level is None else f" at level {_LEVEL_NAMES[level]}"
        super().__init__(f"page fault at VA {va:#x}{where}: {reason}")
        self.va = va
        self.level = level


class WalkerError(RuntimeError):
    """The tables or registers hold something the hardware would not accept (a malformed entry)."""


@dataclass(eq=False)
class SoftwareMMU:
    """Translates virtual addresses of VM context 0 of one hub by walking the page tables in local VRAM.

    Attributes:
        generation: selects the entry layout.
        registers: the device's registers (context setup and XGMI placement are read from them on every walk).
        read_vram: reads bytes at an offset of this device's own VRAM.
        vram_size: bytes of VRAM; a table outside it is a walker error.
        hub: which hub's context this MMU models.
        instance: which instance of that hub (XCC for GC, AID for MM).
        invalidations: how many invalidation requests reached this MMU.
    """

    generation: GfxGeneration
    registers: RegisterAccess
    read_vram: Callable[[int, int], bytes]
    vram_size: int
    hub: Hub = Hub.GC
    instance: int = 0
    invalidations: int = field(default=0, init=False)
    _l1_ptes: dict[int, Translation] = field(default_factory=dict, init=False, repr=False)
    _l2_ptes: dict[int, Translation] = field(default_factory=dict, init=False, repr=False)
    # Directory-entry caches by walk level (0: PDB2 entries = PDE2 ... 2: PDB0 entries = PDE0), keyed by the VA
    # range the entry covers (context offset >> level shift).
    _pdes: tuple[dict[int, int], dict[int, int], dict[int, int]] = field(
        default_factory=lambda: ({}, {}, {}), init=False, repr=False
    )

    def invalidate(
        self, *, l1_ptes: bool = True, l2_ptes: bool = True, pde0: bool = True, pde1: bool = True, pde2: bool = True
    ) -> None:
        """Drops the named caches (what an invalidation request with those INVALIDATE_* bits does)."""
        for flag, cache in ((l1_ptes, self._l1_ptes), (l2_ptes, self._l2_ptes)):
            if flag:
                cache.clear()
        for flag, pdes in ((pde2, self._pdes[0]), (pde1, self._pdes[1]), (pde0, self._pdes[2])):
            if flag:
                pdes.clear()
        self.invalidations += 1

    def _read(self, register: AMRegister) -> int:
        return self.registers.read_register(self.hub, register, self.instance)

    def _register64(self, low: AMRegister, high: AMRegister) -> int:
        return self._read(high) << 32 | self._read(low)

    def local_fabric_base(self) -> int:
        """Fabric address of local VRAM offset 0, from MC_VM_XGMI_LFB_CNTL/SIZE (region 3:0, max 7:4, size 16:0)."""
        lfb_cntl = self._read(AMRegister.MC_VM_XGMI_LFB_CNTL)
        lfb_size = self._read(AMRegister.MC_VM_XGMI_LFB_SIZE)
        if _field(lfb_cntl, 7, 4) == 0:
            return 0
        return _field(lfb_cntl, 3, 0) * (_field(lfb_size, 16, 0) << 24)

    def _table_offset(self, fabric_address: int) -> int:
        offset = fabric_address - self.local_fabric_base()
        if not 0 <= offset <= self.vram_size - 4096:
            raise WalkerError(f"page table at fabric address {fabric_address:#x} is outside local VRAM")
        return offset

    def translate(self, va: int) -> Translation:
        """The translation of `va`; raises PageFault where the hardware would fault."""
        page = va >> 12
        cached = self._l1_ptes.get(page)
        if cached is None:
            cached = self._l2_ptes.get(page)
            if cached is None:
                cached = self._walk(va & ~0xFFF)
                self._l2_ptes[page] = cached
            self._l1_ptes[page] = cached
        return dataclasses.replace(cached, address=cached.address + (va & 0xFFF))

    def _check_context(self, va: int) -> tuple[int, int]:
        """Validates the context registers; returns (first VA of the context, fabric address of the root)."""
        masks = HUB_REGISTER_MASKS[self.generation]
        cntl = self._read(AMRegister.VM_CONTEXT0_CNTL)
        if not field_value(cntl, masks.CONTEXT0_CNTL__ENABLE_CONTEXT):
            raise PageFault(va, None, f"VM context 0 of {self.hub.value} hub {self.instance} is not enabled")
        depth = field_value(cntl, masks.CONTEXT0_CNTL__PAGE_TABLE_DEPTH)
        block_size = field_value(cntl, masks.CONTEXT0_CNTL__PAGE_TABLE_BLOCK_SIZE)
        expected = (2, 9) if self.generation is GfxGeneration.GFX9_4 else (3, 0)
        if (depth, block_size) != expected:
            raise WalkerError(
                f"{self.generation.value} context set up with depth {depth} and block size {block_size}; "
                f"this walker models depth {expected[0]} with block size {expected[1]}"
            )
        start = (
            self._register64(
                AMRegister.VM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32, AMRegister.VM_CONTEXT0_PAGE_TABLE_START_ADDR_HI32
            )
            << 12
        )
        end = (
            self._register64(
                AMRegister.VM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32, AMRegister.VM_CONTEXT0_PAGE_TABLE_END_ADDR_HI32
            )
            << 12
            | 0xFFF
        )
        if not start <= va <= end:
            raise PageFault(va, None, f"outside the context's range [{start:#x}, {end:#x}]")
        base = self._register64(
            AMRegister.VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32, AMRegister.VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32
        )
        if not _field(base, 0, 0):
            raise PageFault(va, None, "page-table base register has no valid bit")
        return start, _field(base, 47, 12) << 12

    def _is_leaf(self, level: int, raw: int, parent: int | None) -> bool:
        tf_mode = self.generation is GfxGeneration.GFX9_4
        if level == 3:
            return True
        if tf_mode and level == 2:
            # Translate-further: PDB0 entries are 2 MiB PTEs; F (bit 56) says "walk one more level", with the block
            # fragment size the PDB1 entry above carries (must be 9 for a 512-entry PTB).
            if _field(raw, 54, 54):
                raise WalkerError("a PDB0 entry in translate-further mode must not carry the P bit")
            if _field(raw, 56, 56):
                if parent is None or _field(parent, 63, 59) != 9:
                    raise WalkerError("PDB0 entry translates further but its PDB1 entry has no block fragment size 9")
                return False
            return True
        if not tf_mode and _field(raw, 56, 56):
            raise WalkerError(f"{self.generation.value} never uses translate-further, but bit 56 is set")
        return bool(_field(raw, 54, 54))

    def _walk(self, va: int) -> Translation:
        start, root = self._check_context(va)
        offset = va - start
        table = self._table_offset(root)
        parent: int | None = None
        for level, shift in enumerate(_WALK_SHIFTS):
            index = _field(offset, shift + 8, shift)
            cached = self._pdes[level].get(offset >> shift) if level < 3 else None
            raw = int.from_bytes(self.read_vram(table + 8 * index, 8), "little") if cached is None else cached
            if not _field(raw, 0, 0):
                raise PageFault(va, level, f"entry {index} is not valid")
            if not self._is_leaf(level, raw, parent):
                self._pdes[level][offset >> shift] = raw
                if _field(raw, 1, 1):
                    raise WalkerError(f"directory entry {raw:#x} at level {level} points to system memory")
                table = self._table_offset(_field(raw, 47, 6) << 6)
                parent = raw
                continue
            page_size = 1 << shift
            base = _field(raw, 47, 12) << 12
            if base % page_size:
                raise WalkerError(f"{page_size:#x}-byte page at level {level} has a misaligned base {base:#x}")
            mtype = _field(raw, 58, 57) if self.generation is GfxGeneration.GFX9_4 else _field(raw, 50, 48)
            flags = PageFlags(
                readable=bool(_field(raw, 5, 5)),
                writeable=bool(_field(raw, 6, 6)),
                executable=bool(_field(raw, 4, 4)),
                snooped=bool(_field(raw, 2, 2)),
                encrypted=bool(_field(raw, 3, 3)),
                mtype=mtype,
                fragment=_field(raw, 11, 7),
            )
            return Translation(base + offset % page_size, bool(_field(raw, 1, 1)), level, page_size, flags)
        raise AssertionError("the PTB level is always a leaf")
