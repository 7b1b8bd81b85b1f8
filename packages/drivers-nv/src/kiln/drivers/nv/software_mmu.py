"""A software GMMU: translates a GPU virtual address by walking the page tables stored in simulated VRAM.

This is the oracle the memory manager is tested against, so it deliberately shares no decoding code with the encoder
(`page_table_entry.py` / `page_table_format.py`; only the `Leaf` record a translation is reported in is theirs): every
field is extracted here from the raw bits again, from the same public layouts (tu102 dev_mmu.h `NV_MMU_VER2_*`, gh100
dev_mmu.h `NV_MMU_VER3_*`, in NVIDIA's open-gpu-kernel-modules).

Walk rules modelled (ver2: PDE3 -> PDE2 -> PDE1 -> PDE0 -> PT; ver3 adds PDE4 above):
* a directory entry is a leaf when bit 0 (IS_PTE) is set, which the hardware honours at PDE1 (512 MiB page) and
  PDE0 (2 MiB page, in the first 8 bytes of the 16-byte dual entry); anywhere above that it is a fault;
* otherwise its aperture (2:1) must be non-zero ("invalid" is 0 for PDEs) and the child table sits in video memory;
* a dual PDE may point at a big-page (64 KiB) table and/or a small-page (4 KiB) table; a valid big PTE wins,
  otherwise the small PTE is used;
* a large page whose physical address is not aligned to its size is reported as a fault.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Protocol

from kiln.drivers.nv.page_table_entry import Leaf


class ReadableMemory(Protocol):
    """What the walker needs from VRAM."""

    def read(self, paddr: int, size: int) -> bytes: ...


class MemoryTarget(enum.Enum):
    """Which memory a translation lands in (the PTE aperture, named independently of the encoder's enum)."""

    VIDEO = "video"
    PEER = "peer"
    SYSTEM_COHERENT = "system-coherent"
    SYSTEM_NON_COHERENT = "system-non-coherent"


_FLAG_NAMES = ("volatile", "privileged", "read_only", "atomic_disable")
"""The leaf's one-bit flags, in the order of their bits in both formats."""

_PTE_TARGETS = (MemoryTarget.VIDEO, MemoryTarget.PEER, MemoryTarget.SYSTEM_COHERENT, MemoryTarget.SYSTEM_NON_COHERENT)


class TranslationFault(RuntimeError):
    """The walk found no valid mapping (or a malformed one) for a virtual address."""

    def __init__(self, vaddr: int, level: int, reason: str) -> None:
        super().__init__(f"GPU MMU fault at VA {vaddr:#x}, level {level}: {reason}")
        self.vaddr = vaddr
        self.level = level
        self.reason = reason


@dataclass(frozen=True)
class Translation(Leaf):
    """Where one virtual address goes: the physical byte address, the memory it is in and the leaf's flags.

    `address` is a VRAM offset for VIDEO (this GPU) and PEER (GPU `peer_id`), a bus address for SYSTEM_*.
    `level` is the page-table level where the walk ended (0 = root); `page_size` the size of that leaf's page.
    """

    target: MemoryTarget
    level: int
    page_size: int


def _bits(value: int, high: int, low: int) -> int:
    return (value >> low) & ((1 << (high - low + 1)) - 1)


class SoftwareMMU:
    """Walks GMMU ver2 or ver3 page tables held in `vram`, with a small TLB flushed by explicit invalidation."""

    def __init__(self, vram: ReadableMemory, version: int) -> None:
        if version not in (2, 3):
            raise ValueError(f"GMMU format version {version} is not simulated; expected 2 or 3")
        self.vram = vram
        self.version = version
        # VA bits of each level, root first: ver2 PDE3 48:47 .. PT 20:12; ver3 PDE4 56:56 .. PT 20:12
        # (uvm_ampere_mmu.c / uvm_hopper_mmu.c header comments).
        self.level_shifts = (47, 38, 29, 21, 12) if version == 2 else (56, 47, 38, 29, 21, 12)
        self.va_bits = 49 if version == 2 else 57
        self._tlb: dict[tuple[int, int], Translation] = {}

    # -- TLB ----------------------------------------------------------------------------------------------------------

    def invalidate(self, root_paddr: int | None = None) -> None:
        """Drop the cached translations of one address space (by root table), or of all when `root_paddr` is None."""
        if root_paddr is None:
            self._tlb.clear()
        else:
            self._tlb = {key: value for key, value in self._tlb.items() if key[0] != root_paddr}

    @property
    def cached_pages(self) -> int:
        """How many 4 KiB pages the TLB holds."""
        return len(self._tlb)

    def translate(self, root_paddr: int, vaddr: int, *, use_tlb: bool = True) -> Translation:
        """Translate `vaddr` in the address space rooted at `root_paddr`; raises TranslationFault when unmapped."""
        page_key = (root_paddr, vaddr >> 12)
        cached = self._tlb.get(page_key) if use_tlb else None
        if cached is None:
            cached = self._walk(root_paddr, vaddr & ~0xFFF)
            if use_tlb:
                self._tlb[page_key] = cached
        return dataclasses.replace(cached, address=cached.address + (vaddr & 0xFFF))

    # -- walk ---------------------------------------------------------------------------------------------------------

    def _read_u64(self, paddr: int) -> int:
        return int.from_bytes(self.vram.read(paddr, 8), "little")

    def _walk(self, root_paddr: int, vaddr: int) -> Translation:
        if not 0 <= vaddr < (1 << self.va_bits):
            raise TranslationFault(vaddr, 0, f"outside the {self.va_bits}-bit virtual address space")
        shifts = self.level_shifts
        last = len(shifts) - 1
        dual_level = last - 1  # PDE0
        huge_level = last - 2  # PDE1
        table = root_paddr
        for level, shift in enumerate(shifts):
            upper = shifts[level - 1] if level else self.va_bits
            index = (vaddr >> shift) & ((1 << (upper - shift)) - 1)
            if level == last:
                return self._leaf(self._read_u64(table + index * 8), vaddr, level, shift)
            if level == dual_level:
                return self._dual(table + index * 16, vaddr, level)
            raw = self._read_u64(table + index * 8)
            if raw & 1:  # IS_PTE
                if level != huge_level:
                    raise TranslationFault(vaddr, level, f"IS_PTE set in a level that cannot hold pages ({raw:#x})")
                return self._leaf(raw, vaddr, level, shift)
            table = self._directory_target(_bits(raw, 2, 1), raw, vaddr, level)
        raise AssertionError("unreachable: the last level always returns")

    def _directory_target(self, aperture: int, raw: int, vaddr: int, level: int) -> int:
        if aperture == 0:
            raise TranslationFault(vaddr, level, "directory entry invalid (aperture 0)")
        if aperture != 1:
            raise TranslationFault(vaddr, level, f"page table in system memory (aperture {aperture}) not simulated")
        if self.version == 2:
            return _bits(raw, 32, 8) << 12  # NV_MMU_VER2_PDE_ADDRESS_VID (35-3):8
        return _bits(raw, 51, 12) << 12  # NV_MMU_VER3_PDE_ADDRESS 51:12

    def _dual(self, entry_paddr: int, vaddr: int, level: int) -> Translation:
        low = self._read_u64(entry_paddr)  # bytes 0-7: the "big" half, or a 2 MiB PTE
        high = self._read_u64(entry_paddr + 8)  # bytes 8-15: the "small" half (bits 64..127 of the dual PDE)
        if low & 1:  # IS_PTE: a 2 MiB page
            return self._leaf(low, vaddr, level, 21)
        big_aperture, small_aperture = _bits(low, 2, 1), _bits(high, 2, 1)  # APERTURE_BIG 2:1, APERTURE_SMALL 66:65
        if big_aperture:
            if self.version == 2:
                big_table = _bits(low, 32, 4) << 8  # ADDRESS_BIG_VID (35-3):(8-4), 256-byte units
            else:
                big_table = _bits(low, 51, 8) << 8  # ADDRESS_BIG 51:8, 256-byte units
            if big_aperture != 1:
                raise TranslationFault(vaddr, level, "big-page table in system memory not simulated")
            big_pte = self._read_u64(big_table + ((vaddr >> 16) & 31) * 8)  # 32 entries of 64 KiB
            if big_pte & 1:
                return self._leaf(big_pte, vaddr, level + 1, 16)
        if small_aperture == 0:
            raise TranslationFault(vaddr, level, "dual PDE has no valid small-page table and no valid big page")
        if small_aperture != 1:
            raise TranslationFault(vaddr, level, "small-page table in system memory not simulated")
        if self.version == 2:
            small_table = _bits(high, 96 - 64, 72 - 64) << 12  # ADDRESS_SMALL_VID (99-3):72
        else:
            small_table = _bits(high, 115 - 64, 76 - 64) << 12  # ADDRESS_SMALL 115:76
        return self._leaf(self._read_u64(small_table + ((vaddr >> 12) & 511) * 8), vaddr, level + 1, 12)

    def _leaf(self, raw: int, vaddr: int, level: int, page_shift: int) -> Translation:
        if not raw & 1:
            raise TranslationFault(vaddr, level, f"PTE not valid ({raw:#x})")
        target = _PTE_TARGETS[_bits(raw, 2, 1)]
        local = target in (MemoryTarget.VIDEO, MemoryTarget.PEER)
        if self.version == 2:
            base = (_bits(raw, 32, 8) if local else _bits(raw, 53, 8)) << 12  # ADDRESS_VID 32:8 / ADDRESS_SYS 53:8
            peer_id = _bits(raw, 35, 33) if target is MemoryTarget.PEER else 0  # ADDRESS_VID_PEER 35:33
            flag_bits, kind = (3, 5, 6, 7), _bits(raw, 63, 56)  # VOL 3, PRIVILEGE 5, READ_ONLY 6, ATOMIC_DISABLE 7
        else:
            video = target is MemoryTarget.VIDEO
            base = (_bits(raw, 39, 12) if video else _bits(raw, 51, 12)) << 12  # ADDRESS_VID 39:12 / ADDRESS 51:12
            peer_id = _bits(raw, 63, 61) if target is MemoryTarget.PEER else 0  # PEER_ID 63:61
            # PCF 7:3, its bits: 0 uncached, 1 privileged, 2 read-only, 3 no-atomic, 4 ACD
            flag_bits, kind = (3, 4, 5, 6), _bits(raw, 11, 8)
        flags = {name: bool(raw >> bit & 1) for name, bit in zip(_FLAG_NAMES, flag_bits, strict=True)}
        page_size = 1 << page_shift
        if base % page_size:
            raise TranslationFault(vaddr, level, f"{page_size:#x}-byte page at misaligned address {base:#x}")
        address = base + (vaddr & (page_size - 1))
        return Translation(address, target, level, page_size, peer_id=peer_id, kind=kind, **flags)
