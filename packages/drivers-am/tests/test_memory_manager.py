"""AMMemoryManager checked against a dictionary model through the simulated hardware's independent MMU.

The model knows, for every mapped chunk, where its pages go and with which flags. From that alone it derives the
page size the walker must pick (the largest aligned block inside the chunk whose device address is equally aligned;
never the 512 GiB root level) and the fragment (the largest aligned block around the page inside the chunk). The
MMU decodes the raw tables on its own, so encoder and walker are both checked against arithmetic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kiln.drivers.am.gfx_generation import GfxGeneration
from kiln.drivers.am.memory_manager import AM_VA_BASE, AM_VA_END, AMMemoryManager
from kiln.drivers.am.registers import AMRegister, Hub
from kiln.drivers.am.simulated_hardware import SimulatedAMHardware, SimulatedHive, SimulatedPlatform
from kiln.drivers.am.software_mmu import PageFault
from kiln.runtime.memory import AddrSpace, MappingError

KIB4, MIB2, GIB1 = 1 << 12, 1 << 21, 1 << 30
VRAM = 16 << 30
SEGMENT = (16 << 30) + (16 << 20)  # node 1's VRAM starts 2 MiB- but not 1 GiB-aligned in the fabric
LEAF_LEVELS = ((1, GIB1), (2, MIB2), (3, KIB4))  # (level, page size) the walker may use, largest first


@dataclass(frozen=True)
class Chunk:
    """One physically contiguous piece of a mapping, as the model sees it."""

    va: int
    size: int
    address: int  # device/bus address of the first byte, as the MMU reports it
    system: bool
    snooped: bool
    uncached: bool

    @property
    def end(self) -> int:
        return self.va + self.size

    def expected_level(self, va: int) -> tuple[int, int]:
        """The level and page size the walker must use for the page at `va`."""
        for level, size in LEAF_LEVELS:
            block = va - va % size
            if block >= self.va and block + size <= self.end and (self.address - self.va) % size == 0:
                return level, size
        raise AssertionError("a 4 KiB page always fits")

    def expected_fragment(self, va: int) -> int:
        """log2 of the largest naturally aligned block around `va` inside the chunk, minus 12 (capped at 31)."""
        shift = 12
        while shift < 12 + 31:
            size = 1 << (shift + 1)
            block = va - va % size
            if block < self.va or block + size > self.end:
                break
            shift += 1
        return shift - 12


def _hive_rig(generation: GfxGeneration) -> tuple[SimulatedPlatform, list[SimulatedAMHardware], list[AMMemoryManager]]:
    """Device 0 and 1 in one hive (device 1 is node 1: its VRAM sits at a fabric base that rules out 1 GiB pages for
    1 GiB-aligned VRAM offsets); device 2 alone."""
    platform = SimulatedPlatform(host_memory_size=1 << 40)
    hive = SimulatedHive(node_count=2, segment_size=SEGMENT)
    hardware = [
        SimulatedAMHardware(platform, VRAM, generation, hive=hive),
        SimulatedAMHardware(platform, VRAM, generation, hive=hive),
        SimulatedAMHardware(platform, VRAM, generation),
    ]
    return platform, hardware, [AMMemoryManager(device) for device in hardware]


class MappingMachine(RuleBasedStateMachine):
    """Random map / unmap of PHYS, SYS and PEER ranges on device 1, checked after every step."""

    generation = GfxGeneration.GFX11

    @initialize()
    def setup(self) -> None:
        self.platform, hardware, managers = _hive_rig(self.generation)
        self.owner, self.hardware, self.lonely = managers[0], hardware[1], managers[2]
        self.manager = managers[1]
        self.pristine_free = self.manager.pa_allocator.free_bytes
        self.chunks: list[Chunk] = []
        self.mappings: list[tuple[int, int]] = []  # (va, size) of each map_range call that succeeded
        self.references: dict[Chunk, Chunk] = {}  # piece left by a partial unmap -> the chunk it was mapped as
        self.random = random.Random(0)

    # ---- helpers -----------------------------------------------------------------------------------------------

    def _overlaps(self, va: int, size: int) -> bool:
        return any(chunk.va < va + size and va < chunk.end for chunk in self.chunks)

    def _covered(self, va: int) -> Chunk | None:
        return next((chunk for chunk in self.chunks if chunk.va <= va < chunk.end), None)

    # ---- rules ---------------------------------------------------------------------------------------------------

    @rule(
        kind=st.sampled_from(["phys", "sys", "peer_xgmi", "peer_bar"]),
        page_class=st.sampled_from([KIB4, MIB2, GIB1]),
        slot=st.integers(0, 15),
        count_exponent=st.integers(0, 9),
        count_fraction=st.floats(0, 1),
        tail_pages=st.sampled_from([0, 0, 1, 3]),
        misalign=st.sampled_from(["none", "none", "va", "pa"]),
        skew=st.sampled_from([KIB4, 5 * KIB4, 511 * KIB4, MIB2, 3 * MIB2]),
        pa_unit=st.integers(0, 7),
        splits=st.lists(st.floats(0.01, 0.99), max_size=2),
        uncached=st.booleans(),
        snooped=st.booleans(),
    )
    def map_chunks(
        self,
        kind: str,
        page_class: int,
        slot: int,
        count_exponent: int,
        count_fraction: float,
        tail_pages: int,
        misalign: str,
        skew: int,
        pa_unit: int,
        splits: list[float],
        uncached: bool,
        snooped: bool,
    ) -> None:
        """Map 4 KiB .. 1 GiB; `page_class` makes VA and PA aligned for that page size unless `misalign` skews one."""
        if page_class == GIB1:
            size = GIB1
        else:
            count = (1 << count_exponent) + int(count_fraction * ((1 << count_exponent) - 1))
            size = min(GIB1, count * (page_class if page_class == MIB2 else 8 * KIB4) + tail_pages * KIB4)
        va = AM_VA_BASE + slot * (page_class if page_class != KIB4 else 3 * MIB2) + (skew if misalign == "va" else 0)
        pages = size // KIB4
        cuts = sorted({int(fraction * pages) * KIB4 for fraction in splits} - {0})
        lengths = [b - a for a, b in zip([0, *cuts], [*cuts, size], strict=True)]
        chunks: list[tuple[int, int]] = []
        base = pa_unit * GIB1 + (skew if misalign == "pa" else 0)
        for length in lengths:
            chunks.append((base, length))
            base += length + 5 * MIB2  # chunks are not contiguous with each other
        if kind == "phys":
            aspace, mapped, system = AddrSpace.PHYS, chunks, False
            addresses = [self.manager.vram_base + paddr for paddr, _ in chunks]
        elif kind == "sys":
            mapped = [(paddr + (1 << 32), length) for paddr, length in chunks]
            aspace, system, addresses = AddrSpace.SYS, True, [paddr for paddr, _ in mapped]
        else:
            owner = self.owner if kind == "peer_xgmi" else self.lonely
            aspace, mapped_chunks = self.manager.peer_chunks(owner, chunks)
            mapped = list(mapped_chunks)
            assert aspace is (AddrSpace.PEER if kind == "peer_xgmi" else AddrSpace.SYS)
            system = aspace is AddrSpace.SYS
            base_address = owner.vram_base if kind == "peer_xgmi" else owner.hardware.bar_address
            addresses = [base_address + paddr for paddr, _ in chunks]
        if self._overlaps(va, size):
            before = self.manager.page_table_pages()
            with pytest.raises(MappingError, match="already mapped"):
                self.manager.map_range(va, size, mapped, aspace, uncached=uncached, snooped=snooped)
            assert self.manager.page_table_pages() == before
            event("map: overlap rejected")
            return
        self.manager.map_range(va, size, mapped, aspace, uncached=uncached, snooped=snooped)
        event(f"map: {kind}")
        position = va
        for address, (_, length) in zip(addresses, mapped, strict=True):
            self.chunks.append(Chunk(position, length, address, system, snooped, uncached))
            position += length
        self.mappings.append((va, size))

    @precondition(lambda self: self.mappings)
    @rule(data=st.data())
    def unmap_whole(self, data: st.DataObject) -> None:
        va, size = self.mappings.pop(data.draw(st.integers(0, len(self.mappings) - 1)))
        self.manager.unmap_range(va, size)
        self.chunks = [chunk for chunk in self.chunks if not va <= chunk.va < va + size]

    @precondition(lambda self: self.chunks)
    @rule(data=st.data())
    def unmap_part(self, data: st.DataObject) -> None:
        """Unmap a page-aligned piece of one chunk: allowed unless it cuts a leaf (a huge page) in two."""
        chunk = data.draw(st.sampled_from(self.chunks))
        pages = chunk.size // KIB4
        first = data.draw(st.integers(0, pages - 1))
        last = data.draw(st.integers(first, min(pages - 1, first + data.draw(st.sampled_from([0, 3, 511, 1 << 18])))))
        start, end = chunk.va + first * KIB4, chunk.va + (last + 1) * KIB4
        reference = self.references.get(chunk, chunk)
        _, first_page = reference.expected_level(start)
        _, last_page = reference.expected_level(end - KIB4)
        cuts_leaf = start % first_page != 0 or end % last_page != 0
        if cuts_leaf:
            with pytest.raises(MappingError, match="only part of"):
                self.manager.unmap_range(start, end - start)
            event("unmap part: cut leaf rejected")
            return
        self.manager.unmap_range(start, end - start)
        event("unmap part: done")
        index = self.chunks.index(chunk)
        pieces = [
            Chunk(chunk.va, start - chunk.va, chunk.address, chunk.system, chunk.snooped, chunk.uncached),
            Chunk(end, chunk.end - end, chunk.address + (end - chunk.va), chunk.system, chunk.snooped, chunk.uncached),
        ]
        self.chunks[index : index + 1] = [piece for piece in pieces if piece.size]
        # The surviving pieces keep the leaves and fragments written for the whole chunk: their pages are checked
        # against the arithmetic of the chunk as it was mapped.
        for piece in pieces:
            if piece.size:
                self.references[piece] = reference
        self.mappings = [(va, size) for va, size in self.mappings if not va <= chunk.va < va + size]

    @rule(va_page=st.integers(0, 4 << 18), pages=st.integers(1, 1 << 10))
    def unmap_hole(self, va_page: int, pages: int) -> None:
        """Unmapping a range with an unmapped page raises and changes nothing."""
        va, size = AM_VA_BASE + va_page * KIB4, pages * KIB4
        holes = [page for page in range(va, va + size, KIB4) if self._covered(page) is None]
        if not holes:
            return
        before = self.manager.page_table_pages()
        with pytest.raises(MappingError, match=r"not mapped|only part of"):
            self.manager.unmap_range(va, size)
        assert self.manager.page_table_pages() == before
        event("unmap hole: rejected")

    # ---- the invariant ---------------------------------------------------------------------------------------------

    def _sample_pages(self, chunk: Chunk) -> set[int]:
        pages = {chunk.va, chunk.end - KIB4}
        for boundary in (MIB2, GIB1):
            aligned = -(-chunk.va // boundary) * boundary
            for page in (aligned - KIB4, aligned):
                if chunk.va <= page < chunk.end:
                    pages.add(page)
        count = chunk.size // KIB4
        pages.update(chunk.va + self.random.randrange(count) * KIB4 for _ in range(3))
        return pages

    @invariant()
    def mmu_matches_model(self) -> None:
        if not hasattr(self, "chunks"):
            return
        mmu = self.hardware.mmu
        for chunk in self.chunks:
            reference = self.references.get(chunk, chunk)
            for page in self._sample_pages(chunk):
                translation = mmu.translate(page + 0x18)
                expected_level, _ = reference.expected_level(page)
                assert translation.address == chunk.address + (page - chunk.va) + 0x18, hex(page)
                assert translation.system == chunk.system
                assert translation.level == expected_level, (hex(page), chunk)
                event(f"translated at level {expected_level}")
                flags = translation.flags
                assert (flags.snooped, flags.mtype) == (chunk.snooped, 3 if chunk.uncached else 0)
                assert flags.readable and flags.writeable and flags.executable and not flags.encrypted
                assert flags.fragment == reference.expected_fragment(page), (hex(page), chunk)
            for outside in (chunk.va - KIB4, chunk.end):
                if outside >= AM_VA_BASE and self._covered(outside) is None:
                    with pytest.raises(PageFault):
                        mmu.translate(outside)

    def teardown(self) -> None:
        if not hasattr(self, "chunks"):
            return
        for va, size in self.mappings:
            self.manager.unmap_range(va, size)
        for chunk in self.chunks:  # pieces left by partial unmaps
            if not any(va <= chunk.va < va + size for va, size in self.mappings):
                self.manager.unmap_range(chunk.va, chunk.size)
        assert self.manager.page_table_pages() == {self.manager.root_paddr}
        assert self.manager.pa_allocator.free_bytes == self.pristine_free
        assert self.hardware.vram.resident_pages() == 0  # every table page was cleared and handed back
        with pytest.raises(PageFault):
            self.hardware.mmu.translate(AM_VA_BASE)


_settings = settings(
    max_examples=40, stateful_step_count=12, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


class MappingMachineGfx11(MappingMachine):
    generation = GfxGeneration.GFX11


class MappingMachineGfx94(MappingMachine):
    generation = GfxGeneration.GFX9_4


TestMappingGfx11 = MappingMachineGfx11.TestCase
TestMappingGfx11.settings = _settings
TestMappingGfx94 = MappingMachineGfx94.TestCase
TestMappingGfx94.settings = _settings


# ---- directed tests ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("generation", list(GfxGeneration))
def test_vm_context_registers(generation: GfxGeneration) -> None:
    _, hardware, managers = _hive_rig(generation)
    device, manager = hardware[1], managers[1]
    root_fabric = SEGMENT + manager.root_paddr  # node 1
    for hub in Hub:
        read = device.read_register
        base = read(hub, AMRegister.VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32) << 32
        base |= read(hub, AMRegister.VM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32)
        assert base == root_fabric | 1
        assert read(hub, AMRegister.VM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32) == 0
        assert read(hub, AMRegister.VM_CONTEXT0_PAGE_TABLE_START_ADDR_HI32) == 0x2  # 0x2000_0000_0000 >> 12 >> 32
        assert read(hub, AMRegister.VM_CONTEXT0_PAGE_TABLE_END_ADDR_LO32) == 0xFFFF_FFFF
        assert read(hub, AMRegister.VM_CONTEXT0_PAGE_TABLE_END_ADDR_HI32) == 0x7  # 0x7FFF_FFFF_FFFF >> 12 >> 32
        expected_cntl = 0x4D if generation is GfxGeneration.GFX9_4 else 0x7  # enable | depth << 1 | block << 3
        assert read(hub, AMRegister.VM_CONTEXT0_CNTL) == expected_cntl
    assert manager.vram_base == SEGMENT and managers[0].vram_base == 0 and managers[2].vram_base == 0


def test_every_change_invalidates_both_hubs() -> None:
    _, hardware, managers = _hive_rig(GfxGeneration.GFX11)
    device, manager = hardware[2], managers[2]
    before = dict(device.invalidation_requests)
    mapping = manager.valloc(3 * KIB4)
    manager.vfree(mapping)
    assert {hub: device.invalidation_requests[hub] - before[hub] for hub in Hub} == {Hub.GC: 2, Hub.MM: 2}


def test_unmapped_range_faults_even_after_a_cached_walk() -> None:
    _, hardware, managers = _hive_rig(GfxGeneration.GFX11)
    device, manager = hardware[2], managers[2]
    mapping = manager.valloc(MIB2)
    assert device.mmu.translate(mapping.va_addr).level == 2
    manager.vfree(mapping)
    with pytest.raises(PageFault):
        device.mmu.translate(mapping.va_addr)


@pytest.mark.parametrize("generation", list(GfxGeneration))
@pytest.mark.parametrize(("index", "gigabyte_level"), [(0, 1), (1, 2)])
def test_huge_pages_of_valloc(generation: GfxGeneration, index: int, gigabyte_level: int) -> None:
    _, hardware, managers = _hive_rig(generation)
    device, manager = hardware[index], managers[index]
    mapping = manager.valloc(GIB1 + 5 * MIB2 + 3 * KIB4)
    levels = {}
    position = mapping.va_addr
    for paddr, size in mapping.paddrs:
        translation = device.mmu.translate(position)
        assert translation.address == index * SEGMENT + paddr
        levels[size] = translation.level
        position += size
    # 1 GiB chunk -> one 1 GiB page (2 MiB pages on node 1, whose fabric base is not 1 GiB-aligned), 8 MiB and
    # 2 MiB chunks -> 2 MiB pages, 8 KiB and 4 KiB chunks -> 4 KiB pages.
    assert levels == {GIB1: gigabyte_level, 4 * MIB2: 2, MIB2: 2, 2 * KIB4: 3, KIB4: 3}
    manager.vfree(mapping)
    assert manager.page_table_pages() == {manager.root_paddr}


def test_map_errors_write_nothing() -> None:
    _, _, managers = _hive_rig(GfxGeneration.GFX11)
    manager = managers[2]
    va = AM_VA_BASE + 7 * GIB1
    manager.map_range(va, MIB2, [(0, MIB2)], AddrSpace.PHYS)
    for start, size in ((va, KIB4), (va + MIB2 - KIB4, 2 * KIB4), (va - KIB4, 2 * KIB4), (va, 2 * MIB2)):
        with pytest.raises(MappingError, match="already mapped"):
            manager.map_range(start, size, [(MIB2 * 8, size)], AddrSpace.PHYS)
    with pytest.raises(MappingError, match="only part of"):
        manager.unmap_range(va + KIB4, KIB4)
    manager.unmap_range(va, MIB2)
    with pytest.raises(MappingError, match="not mapped"):
        manager.unmap_range(va, MIB2)
    assert manager.page_table_pages() == {manager.root_paddr}


def test_address_reach_is_checked_first() -> None:
    _, _, managers = _hive_rig(GfxGeneration.GFX11)
    manager = managers[2]
    with pytest.raises(ValueError, match="44-bit"):
        manager.map_range(AM_VA_BASE, 2 * KIB4, [(1 << 44, KIB4), (0, KIB4)], AddrSpace.SYS)
    with pytest.raises(ValueError, match="44-bit"):
        manager.map_range(AM_VA_BASE, 2 * KIB4, [((1 << 44) - KIB4, 2 * KIB4)], AddrSpace.PEER)
    with pytest.raises(ValueError, match="VM context"):
        manager.map_range(AM_VA_END + 1 - KIB4, 2 * KIB4, [(0, 2 * KIB4)], AddrSpace.PHYS)
    assert manager.page_table_pages() == {manager.root_paddr}


def test_shared_va_allocator() -> None:
    _, _, managers = _hive_rig(GfxGeneration.GFX11)
    first = managers[0].valloc(MIB2)
    second = managers[1].valloc(MIB2)
    assert managers[0].va_allocator is managers[1].va_allocator is AMMemoryManager.shared_va_allocator
    assert first.va_addr + first.size <= second.va_addr or second.va_addr + second.size <= first.va_addr
    managers[0].vfree(first)
    managers[1].vfree(second)


@pytest.mark.parametrize("hive", [True, False])
def test_peer_buffer_reached_through_the_other_mmu(hive: bool) -> None:
    _, hardware, managers = _hive_rig(GfxGeneration.GFX11)
    owner, owner_device = managers[1], hardware[1]
    importer, importer_device = (managers[0], hardware[0]) if hive else (managers[2], hardware[2])
    buffer = owner.valloc(3 * MIB2 + 5 * KIB4)
    payload = bytes(range(256)) * 40
    owner_device.write_virtual(buffer.va_addr + MIB2 - 100, payload)
    peer = importer.map_peer(owner, buffer)
    assert peer.va_addr == buffer.va_addr
    assert peer.aspace is (AddrSpace.PEER if hive else AddrSpace.SYS)
    translation = importer_device.mmu.translate(buffer.va_addr)
    assert translation.system is not hive and translation.flags.snooped
    assert importer_device.read_virtual(buffer.va_addr + MIB2 - 100, len(payload)) == payload
    # A write through the importer lands in the owner's VRAM, at the offset the owner allocated.
    importer_device.write_virtual(buffer.va_addr + 2 * MIB2 + 8, b"from the peer")
    paddr = owner.physical_address(buffer.va_addr + 2 * MIB2 + 8) - owner.vram_base
    assert owner_device.vram.read(paddr, 13) == b"from the peer"
    importer.unmap_range(peer.va_addr, peer.size)
    owner.vfree(buffer)
    assert importer.page_table_pages() == {importer.root_paddr}


def test_host_memory_mapping() -> None:
    platform, hardware, managers = _hive_rig(GfxGeneration.GFX9_4)
    manager, device = managers[0], hardware[0]
    bus = platform.alloc_host(5 * KIB4)
    platform.bus_write(bus + 4000, b"host bytes")
    va = manager.alloc_vaddr(5 * KIB4)
    mapping = manager.map_host(va, 5 * KIB4, [(bus, 5 * KIB4)])
    translation = device.mmu.translate(va + 4000)
    assert (translation.address, translation.system, translation.flags.snooped) == (bus + 4000, True, True)
    assert translation.flags.mtype == 3
    assert device.read_virtual(va + 4000, 10) == b"host bytes"
    manager.unmap_range(mapping.va_addr, mapping.size)
    manager.free_vaddr(va)
    platform.free_host(bus)


def test_peer_beyond_a_small_bar_is_refused() -> None:
    _, _, managers = _hive_rig(GfxGeneration.GFX11)
    with pytest.raises(RuntimeError, match="BAR"):
        managers[2].peer_chunks(managers[1], [(VRAM - KIB4, 2 * KIB4)])
    with pytest.raises(ValueError, match="PHYS"):
        managers[2].map_peer(managers[1], managers[1].map_host(AM_VA_BASE + GIB1 * 40, KIB4, [(1 << 32, KIB4)]))


def test_no_leaf_at_the_root() -> None:
    """512 GiB, aligned in VA and PA, still maps as 512 one-GiB pages: the root level never holds a leaf."""
    _, hardware, managers = _hive_rig(GfxGeneration.GFX11)
    device, manager = hardware[0], managers[0]
    size = 512 * GIB1
    manager.map_range(AM_VA_BASE, size, [(0, size)], AddrSpace.SYS)
    for offset in (0, 77 * GIB1 + 5 * KIB4, size - KIB4):
        translation = device.mmu.translate(AM_VA_BASE + offset)
        assert (translation.address, translation.level, translation.system) == (offset, 1, True)
    assert len(manager.page_table_pages()) == 2  # root + one PDB1 table
    manager.unmap_range(AM_VA_BASE, size)
    assert manager.page_table_pages() == {manager.root_paddr}
