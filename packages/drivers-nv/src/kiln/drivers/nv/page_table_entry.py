"""Raw bit layouts of NVIDIA GMMU page-table entries: MMU format version 2 (Pascal..Ada, incl. Ampere) and 3 (Hopper).

Every field position below is a hardware fact taken from NVIDIA's public headers (open-gpu-kernel-modules,
abbreviated `ogkm`):

* ver2: `ogkm:kernel-open/nvidia-uvm/hwref/turing/tu102/dev_mmu.h`, the `NV_MMU_VER2_PTE_*`, `NV_MMU_VER2_PDE_*` and
  `NV_MMU_VER2_DUAL_PDE_*` defines (identical to the `NV_MMU_NEW_*` ones in the same file).
* ver3: `ogkm:src/common/inc/swref/published/hopper/gh100/dev_mmu.h`, the `NV_MMU_VER3_*` defines; the `ADDRESS_VID`
  width of a ver3 PTE (39:12) is the one `ogkm:kernel-open/nvidia-uvm/uvm_hopper_mmu.c` defines itself.

A dual PDE is 16 bytes; it is handled here as one 128-bit integer whose low 64 bits are the first 8 bytes in memory
(the "big" half) and whose high 64 bits are the second 8 bytes (the "small" half), matching the headers' bit numbers
(e.g. APERTURE_SMALL at 66:65).

This module is pure arithmetic: it knows nothing about page-table walks or the runtime.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import KW_ONLY, dataclass

PAGE_SHIFT = 12  # every *_ADDRESS_SHIFT in both headers is 0xc
BIG_TABLE_ADDRESS_SHIFT = 8  # NV_MMU_VER2/VER3_DUAL_PDE_ADDRESS_BIG_SHIFT: 64 KiB-page tables are 256-byte aligned

KIND_PITCH = 0x00  # NV_MMU_PTE_KIND_PITCH (tu102 and gh100 dev_mmu.h)
KIND_GENERIC_MEMORY = 0x06  # NV_MMU_PTE_KIND_GENERIC_MEMORY: plain linear memory, what compute buffers use
KIND_INVALID = 0x07  # NV_MMU_PTE_KIND_INVALID

PEER_ID_COUNT = 8  # ADDRESS_VID_PEER (ver2) and PEER_ID (ver3) are 3-bit fields: peers 0..7


class Aperture(enum.IntEnum):
    """Where a PTE points: the 2-bit APERTURE field (`NV_MMU_VER2_PTE_APERTURE`, `NV_MMU_VER3_PTE_APERTURE`)."""

    VIDEO_MEMORY = 0
    PEER_MEMORY = 1
    SYSTEM_COHERENT_MEMORY = 2
    SYSTEM_NON_COHERENT_MEMORY = 3


class DirectoryAperture(enum.IntEnum):
    """Where a PDE points. Not the PTE encoding: for PDEs 0 means "invalid" (`NV_MMU_VER2_PDE_APERTURE_*`)."""

    INVALID = 0
    VIDEO_MEMORY = 1
    SYSTEM_COHERENT_MEMORY = 2
    SYSTEM_NON_COHERENT_MEMORY = 3


@dataclass(frozen=True)
class Leaf:
    """A page-table leaf: the byte address its page starts at and the page's flags, as the encoder takes them
    (`PteFields`) and the software MMU reports them (its `Translation`). `volatile` means uncached (ver2 VOL bit;
    ver3 PCF "uncached"); `peer_id` names the GPU of a PEER page."""

    address: int
    _: KW_ONLY
    peer_id: int = 0
    volatile: bool = False
    privileged: bool = False
    read_only: bool = False
    atomic_disable: bool = False
    kind: int = KIND_GENERIC_MEMORY


@dataclass(frozen=True)
class PteFields(Leaf):
    """The fields of one leaf entry (4 KiB PTE, 2 MiB PTE in a dual-PDE slot, 512 MiB PTE at PDE1): `address` is a
    VRAM offset for VIDEO and PEER, a bus address for SYSTEM_*; the flags are keywords."""

    aperture: Aperture


def _put(value: int, high: int, low: int, what: str) -> int:
    """Place `value` in bits high:low, refusing values that do not fit the field."""
    width = high - low + 1
    if not 0 <= value < (1 << width):
        raise ValueError(f"{what}={value:#x} does not fit the {width}-bit field {high}:{low}")
    return value << low


def _page_number(address: int, what: str) -> int:
    if address < 0 or address % (1 << PAGE_SHIFT):
        raise ValueError(f"{what}={address:#x} must be a non-negative multiple of 4 KiB")
    return address >> PAGE_SHIFT


class EntryLayout(abc.ABC):
    """The bit layout of one GMMU format version: builds raw PTE, PDE and dual-PDE values."""

    version: int
    video_address_bits: int  # how many bits of VRAM offset a VIDEO/PEER PTE can hold
    system_address_bits: int  # how many bits of bus address a SYSTEM_* PTE can hold

    @abc.abstractmethod
    def encode_pte(self, fields: PteFields) -> int:
        """A valid leaf entry (64 bits)."""

    @abc.abstractmethod
    def encode_pde(self, table_paddr: int) -> int:
        """A valid 8-byte PDE pointing at a child table in this device's VRAM."""

    @abc.abstractmethod
    def encode_dual_pde(self, small_table_paddr: int | None, big_table_paddr: int | None = None) -> int:
        """A 16-byte dual PDE (as a 128-bit int) pointing at a 4 KiB-page table and/or a 64 KiB-page table in VRAM."""

    @abc.abstractmethod
    def address_field(self, address: int, aperture: Aperture) -> int:
        """The PTE address bits for a page at byte `address` in `aperture` (ValueError when it does not fit)."""

    def check_pte(self, fields: PteFields) -> None:
        """Reject fields the hardware cannot express (address width, peer id range, kind width)."""
        bits = self.system_address_bits
        if fields.aperture in (Aperture.VIDEO_MEMORY, Aperture.PEER_MEMORY):
            bits = self.video_address_bits
        if not 0 <= fields.address < (1 << bits):
            raise ValueError(f"address {fields.address:#x} exceeds the {bits}-bit {fields.aperture.name} field")
        if not 0 <= fields.peer_id < PEER_ID_COUNT:
            raise ValueError(f"peer_id {fields.peer_id} must be in 0..{PEER_ID_COUNT - 1}")
        if fields.peer_id and fields.aperture is not Aperture.PEER_MEMORY:
            raise ValueError(f"peer_id {fields.peer_id} given for aperture {fields.aperture.name}; only PEER has one")


class Ver2EntryLayout(EntryLayout):
    """`NV_MMU_VER2_*` (tu102 dev_mmu.h): Pascal, Volta, Turing, Ampere, Ada."""

    version = 2
    video_address_bits = 25 + PAGE_SHIFT  # ADDRESS_VID (35-3):8 = 32:8, 25 bits of page number
    system_address_bits = 46 + PAGE_SHIFT  # ADDRESS_SYS 53:8, 46 bits of page number

    def encode_pte(self, fields: PteFields) -> int:
        self.check_pte(fields)
        raw = 1  # VALID 0:0
        raw |= _put(int(fields.aperture), 2, 1, "APERTURE")  # APERTURE 2:1
        raw |= int(fields.volatile) << 3  # VOL 3:3
        raw |= int(fields.privileged) << 5  # PRIVILEGE 5:5
        raw |= int(fields.read_only) << 6  # READ_ONLY 6:6
        raw |= int(fields.atomic_disable) << 7  # ATOMIC_DISABLE 7:7
        raw |= self.address_field(fields.address, fields.aperture)
        if fields.aperture is Aperture.PEER_MEMORY:
            raw |= _put(fields.peer_id, 35, 33, "ADDRESS_VID_PEER")  # ADDRESS_VID_PEER 35:(36-3)
        raw |= _put(fields.kind, 63, 56, "KIND")  # KIND 63:56
        return raw

    def address_field(self, address: int, aperture: Aperture) -> int:
        page = _page_number(address, "PTE address")
        if aperture in (Aperture.VIDEO_MEMORY, Aperture.PEER_MEMORY):
            return _put(page, 32, 8, "ADDRESS_VID")  # ADDRESS_VID (35-3):8
        return _put(page, 53, 8, "ADDRESS_SYS")  # ADDRESS_SYS 53:8

    def encode_pde(self, table_paddr: int) -> int:
        raw = _put(int(DirectoryAperture.VIDEO_MEMORY), 2, 1, "APERTURE")  # APERTURE 2:1; IS_PTE 0:0 stays 0
        raw |= 1 << 5  # NO_ATS 5:5: kiln does not use address translation services
        raw |= _put(_page_number(table_paddr, "table address"), 32, 8, "ADDRESS_VID")  # ADDRESS_VID (35-3):8
        return raw

    def encode_dual_pde(self, small_table_paddr: int | None, big_table_paddr: int | None = None) -> int:
        raw = 1 << 5  # NO_ATS 5:5; IS_PTE 0:0 stays 0
        if big_table_paddr is not None:
            if big_table_paddr % (1 << BIG_TABLE_ADDRESS_SHIFT):
                raise ValueError(f"big-page table address {big_table_paddr:#x} must be 256-byte aligned")
            raw |= _put(int(DirectoryAperture.VIDEO_MEMORY), 2, 1, "APERTURE_BIG")  # APERTURE_BIG 2:1
            # ADDRESS_BIG_VID (35-3):(8-4), in units of 256 bytes
            raw |= _put(big_table_paddr >> BIG_TABLE_ADDRESS_SHIFT, 32, 4, "ADDRESS_BIG_VID")
        if small_table_paddr is not None:
            raw |= _put(int(DirectoryAperture.VIDEO_MEMORY), 66, 65, "APERTURE_SMALL")  # APERTURE_SMALL 66:65
            # ADDRESS_SMALL_VID (99-3):72
            raw |= _put(_page_number(small_table_paddr, "table address"), 96, 72, "ADDRESS_SMALL_VID")
        return raw


class Ver3EntryLayout(EntryLayout):
    """`NV_MMU_VER3_*` (gh100 dev_mmu.h): Hopper (and Blackwell, whose 256 GiB PDE2 pages kiln does not use)."""

    version = 3
    video_address_bits = 28 + PAGE_SHIFT  # ADDRESS_VID 39:12 (uvm_hopper_mmu.c)
    system_address_bits = 40 + PAGE_SHIFT  # ADDRESS / ADDRESS_SYS / ADDRESS_PEER 51:12

    def encode_pte(self, fields: PteFields) -> int:
        self.check_pte(fields)
        # PCF 7:3 when VALID: the 32 NV_MMU_VER3_PTE_PCF_* values are a bit set, e.g. REGULAR_RW_ATOMIC_CACHED_ACE = 0,
        # ..._UNCACHED_ACE = 1, PRIVILEGE_RW_... = 2, REGULAR_RO_... = 4, ..._NO_ATOMIC_... = 8, ..._ACD = 16.
        pcf = int(fields.volatile) | int(fields.privileged) << 1 | int(fields.read_only) << 2
        pcf |= int(fields.atomic_disable) << 3
        raw = 1  # VALID 0:0
        raw |= _put(int(fields.aperture), 2, 1, "APERTURE")  # APERTURE 2:1
        raw |= _put(pcf, 7, 3, "PCF")  # PCF 7:3
        raw |= _put(fields.kind, 11, 8, "KIND")  # KIND 11:8
        raw |= self.address_field(fields.address, fields.aperture)
        raw |= _put(fields.peer_id, 63, 61, "PEER_ID")  # PEER_ID 63:(64-3)
        return raw

    def address_field(self, address: int, aperture: Aperture) -> int:
        page = _page_number(address, "PTE address")
        if aperture is Aperture.VIDEO_MEMORY:
            return _put(page, 39, 12, "ADDRESS_VID")  # ADDRESS_VID 39:12
        return _put(page, 51, 12, "ADDRESS")  # ADDRESS_SYS / ADDRESS_PEER 51:12

    def encode_pde(self, table_paddr: int) -> int:
        raw = _put(int(DirectoryAperture.VIDEO_MEMORY), 2, 1, "APERTURE")  # APERTURE 2:1; IS_PTE 0:0 stays 0
        raw |= 2 << 3  # PCF 5:3 = VALID_CACHED_ATS_NOT_ALLOWED (2)
        raw |= _put(_page_number(table_paddr, "table address"), 51, 12, "ADDRESS")  # ADDRESS 51:12
        return raw

    def encode_dual_pde(self, small_table_paddr: int | None, big_table_paddr: int | None = None) -> int:
        raw = 2 << 3  # PCF_BIG 5:3 = (VALID_CACHED or INVALID)_ATS_NOT_ALLOWED (2); IS_PTE 0:0 stays 0
        if big_table_paddr is not None:
            if big_table_paddr % (1 << BIG_TABLE_ADDRESS_SHIFT):
                raise ValueError(f"big-page table address {big_table_paddr:#x} must be 256-byte aligned")
            raw |= _put(int(DirectoryAperture.VIDEO_MEMORY), 2, 1, "APERTURE_BIG")  # APERTURE_BIG 2:1
            raw |= _put(big_table_paddr >> BIG_TABLE_ADDRESS_SHIFT, 51, 8, "ADDRESS_BIG")  # ADDRESS_BIG 51:8
        if small_table_paddr is not None:
            raw |= _put(int(DirectoryAperture.VIDEO_MEMORY), 66, 65, "APERTURE_SMALL")  # APERTURE_SMALL 66:65
            raw |= 2 << 67  # PCF_SMALL 69:67 = VALID_CACHED_ATS_NOT_ALLOWED (2)
            # ADDRESS_SMALL 115:76
            raw |= _put(_page_number(small_table_paddr, "table address"), 115, 76, "ADDRESS_SMALL")
        return raw


VER2_LAYOUT = Ver2EntryLayout()
VER3_LAYOUT = Ver3EntryLayout()
