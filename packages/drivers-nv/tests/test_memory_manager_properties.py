"""Hypothesis-driven map/unmap sequences on a simulated NV GPU, checked against a brute-force dict model.

After every step the simulated GPU's software MMU (which decodes the raw page tables on its own, and caches
translations until the manager invalidates them) must agree with the model on every sampled page: physical address,
aperture, peer id, volatile bit, and the level where the walk ended (the largest page the alignment allows, derived
independently below). Overlapping maps and unmaps of holes must raise and change nothing. When every mapping is
gone, every page-table page must be back in the allocator.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kiln.drivers.nv.memory_manager import VA_BASE, NVMemoryManager
from kiln.drivers.nv.page_table_format import peer_address
from kiln.drivers.nv.simulated_hardware import SimulatedNVGPU
from kiln.drivers.nv.software_mmu import MemoryTarget, TranslationFault
from kiln.runtime.memory import AddrSpace, MappingError, TLSFAllocator

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
PAGE = 4 * KIB
VA_WINDOW = 16 * GIB  # maps land in [VA_BASE, VA_BASE + VA_WINDOW) so that they collide now and then
LARGE_PAGES = (512 * MIB, 2 * MIB)  # the leaf sizes above 4 KiB on Ampere / Hopper


@dataclass(frozen=True)
class Chunk:
    """One physically contiguous piece of a mapping, with what its pages must translate to."""

    vaddr: int
    size: int
    address: int  # VRAM offset (PHYS / PEER) or bus address (SYS) of the first byte
    target: MemoryTarget
    peer_id: int


@dataclass(frozen=True)
class LiveMapping:
    vaddr: int
    size: int
    chunks: tuple[Chunk, ...]
    volatile: bool


def expected_page_size(chunk: Chunk, vaddr: int) -> int:
    """The largest page whose aligned block around `vaddr` lies in the chunk with VA and PA equally aligned."""
    delta = chunk.address - chunk.vaddr
    for size in LARGE_PAGES:
        start = vaddr - vaddr % size
        if delta % size == 0 and start >= chunk.vaddr and start + size <= chunk.vaddr + chunk.size:
            return size
    return PAGE


def level_of(page_size: int, levels: int) -> int:
    return {PAGE: levels - 1, 2 * MIB: levels - 2, 512 * MIB: levels - 3}[page_size]


# Alignments and sizes are drawn half the time from the large-page sizes so 2 MiB and 512 MiB leaves are common.
SHIFTS = st.one_of(st.sampled_from([21, 22, 29, 30]), st.integers(12, 30))


def aligned_offset(draw: st.DrawFn, window: int, shift: int) -> int:
    """An offset in [0, window) that is a multiple of 2**shift."""
    return draw(st.integers(0, window // (1 << shift) - 1)) << shift


@st.composite
def aligned_address(draw: st.DrawFn, window: int) -> int:
    """An offset in [0, window) aligned to a random power of two between 4 KiB and 1 GiB."""
    return aligned_offset(draw, window, draw(SHIFTS))


@st.composite
def mapping_size(draw: st.DrawFn) -> int:
    """4 KiB .. 1 GiB: a power of two, or a random page count below one."""
    shift = draw(SHIFTS)
    if draw(st.booleans()):
        return 1 << shift
    return max(PAGE, draw(st.integers(1 << (shift - 1), 1 << shift)) // PAGE * PAGE)


@st.composite
def physical_offsets(draw: st.DrawFn) -> list[int]:
    """1-3 chunk addresses in [0, 8 GiB), often as aligned as the large pages need."""
    return [aligned_offset(draw, 8 * GIB, draw(SHIFTS)) for _ in range(draw(st.integers(1, 3)))]


class NVMappingMachine(RuleBasedStateMachine):
    mmu_version = 2

    def __init__(self) -> None:
        super().__init__()
        self.gpu = SimulatedNVGPU(16 * GIB, self.mmu_version)
        self.mm = NVMemoryManager(
            self.gpu, 16 * GIB, mmu_version=self.mmu_version, va_allocator=TLSFAllocator(VA_WINDOW, VA_BASE)
        )
        self.free_after_boot = self.mm.pa_allocator.free_bytes
        self.live: list[LiveMapping] = []
        self.pages: dict[int, Chunk] = {}  # VA page -> chunk, the brute-force model (big mappings are sparse-checked)
        self.random = random.Random(0)

    def overlaps(self, vaddr: int, size: int) -> bool:
        return any(vaddr < live.vaddr + live.size and live.vaddr < vaddr + size for live in self.live)

    @rule(
        va_offset=aligned_address(VA_WINDOW),
        size=mapping_size(),
        aspace=st.sampled_from(list(AddrSpace)),
        pa_offsets=physical_offsets(),
        cuts=st.one_of(st.just([]), st.lists(st.integers(1, 1 << 18), max_size=2)),
        peer_id=st.integers(0, 7),
        uncached=st.booleans(),
        snooped=st.booleans(),
    )
    def map(
        self,
        va_offset: int,
        size: int,
        aspace: AddrSpace,
        pa_offsets: list[int],
        cuts: list[int],
        peer_id: int,
        uncached: bool,
        snooped: bool,
    ) -> None:
        self.map_chunks(VA_BASE + va_offset, size, aspace, pa_offsets, cuts, peer_id, uncached, snooped)

    @rule(
        va_index=st.integers(0, VA_WINDOW // (512 * MIB) - 2),
        blocks=st.integers(1, 2),
        extra_pages=st.sampled_from([0, 1, 512]),
        aspace=st.sampled_from(list(AddrSpace)),
        pa_index=st.integers(0, 15),
        peer_id=st.integers(0, 7),
    )
    def map_huge(
        self, va_index: int, blocks: int, extra_pages: int, aspace: AddrSpace, pa_index: int, peer_id: int
    ) -> None:
        """512 MiB-aligned VA and PA: 512 MiB leaves, then 2 MiB / 4 KiB ones for a tail."""
        size = min(blocks * 512 * MIB + extra_pages * PAGE, GIB)
        self.map_chunks(VA_BASE + va_index * 512 * MIB, size, aspace, [pa_index * 512 * MIB], [], peer_id, False, True)

    def map_chunks(
        self,
        vaddr: int,
        size: int,
        aspace: AddrSpace,
        pa_offsets: list[int],
        cuts: list[int],
        peer_id: int,
        uncached: bool,
        snooped: bool,
    ) -> None:
        size = min(size, VA_BASE + VA_WINDOW - vaddr)
        bounds = sorted({0, size, *(cut * PAGE for cut in cuts if cut * PAGE < size)})
        chunks: list[Chunk] = []
        paddrs: list[tuple[int, int]] = []
        for index, (start, end) in enumerate(itertools.pairwise(bounds)):
            address = pa_offsets[index % len(pa_offsets)]
            if aspace is AddrSpace.SYS:
                address += 1 << 36  # bus addresses well above any VRAM offset
            if aspace is AddrSpace.PHYS:
                target, chunk_peer, paddr = MemoryTarget.VIDEO, 0, address
            elif aspace is AddrSpace.SYS:
                target = MemoryTarget.SYSTEM_COHERENT if snooped else MemoryTarget.SYSTEM_NON_COHERENT
                chunk_peer, paddr = 0, address
            else:
                target, chunk_peer, paddr = MemoryTarget.PEER, peer_id, peer_address(peer_id, address)
            chunks.append(Chunk(vaddr + start, end - start, address, target, chunk_peer))
            paddrs.append((paddr, end - start))
        if self.overlaps(vaddr, size):
            with pytest.raises(MappingError):
                self.mm.map_range(vaddr, size, paddrs, aspace, uncached=uncached, snooped=snooped)
            return
        mapping = self.mm.map_range(vaddr, size, paddrs, aspace, uncached=uncached, snooped=snooped)
        assert (mapping.va_addr, mapping.size, mapping.aspace) == (vaddr, size, aspace)
        self.live.append(LiveMapping(vaddr, size, tuple(chunks), uncached))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def unmap(self, data: st.DataObject) -> None:
        live = self.live.pop(data.draw(st.integers(0, len(self.live) - 1)))
        self.mm.unmap_range(live.vaddr, live.size)
        for vaddr in self.sample_pages(live):
            with pytest.raises(TranslationFault):
                self.gpu.translate(vaddr)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def double_map_raises(self, data: st.DataObject) -> None:
        live = data.draw(st.sampled_from(self.live))
        first = data.draw(st.integers(-4, live.size // PAGE - 1))
        pages = data.draw(st.integers(max(1, 1 - first), 1024))  # starts up to 4 pages early, always overlaps
        vaddr = live.vaddr + first * PAGE
        if vaddr < VA_BASE:
            return
        with pytest.raises(MappingError):
            self.mm.map_range(vaddr, pages * PAGE, [(0, pages * PAGE)], AddrSpace.PHYS)

    @rule(va_offset=aligned_address(VA_WINDOW), pages=st.integers(1, 1024), data=st.data())
    def unmap_of_unmapped_raises(self, va_offset: int, pages: int, data: st.DataObject) -> None:
        vaddr, size = VA_BASE + va_offset, pages * PAGE
        past_the_end = data.draw(st.booleans())
        if self.live and past_the_end:  # a range that runs past the end of a live mapping
            live = data.draw(st.sampled_from(self.live))
            vaddr, size = live.vaddr, live.size + PAGE
        # mapped when the live mappings, taken together, cover it (two adjacent ones may: then it unmaps fine)
        covered_to = vaddr
        for live in sorted(self.live, key=lambda mapping: mapping.vaddr):
            if live.vaddr <= covered_to < live.vaddr + live.size:
                covered_to = live.vaddr + live.size
        covered = covered_to >= vaddr + size
        if covered or vaddr + size > VA_BASE + VA_WINDOW:
            return
        with pytest.raises(MappingError):
            self.mm.unmap_range(vaddr, size)

    def sample_pages(self, live: LiveMapping) -> list[int]:
        """First and last page of each chunk, the pages around large-page boundaries inside, and random ones."""
        pages: set[int] = set()
        for chunk in live.chunks:
            end = chunk.vaddr + chunk.size
            pages.update({chunk.vaddr, end - PAGE})
            for size in LARGE_PAGES:
                boundary = -(-chunk.vaddr // size) * size
                if chunk.vaddr < boundary < end:
                    pages.update({boundary - PAGE, boundary})
        pages.update(
            live.vaddr + self.random.randrange(live.size // PAGE) * PAGE for _ in range(min(8, live.size // PAGE))
        )
        return sorted(pages)

    @invariant()
    def translations_match_the_model(self) -> None:
        levels = self.mm.nv_format.levels
        for live in self.live:
            for vaddr in self.sample_pages(live):
                chunk = next(chunk for chunk in live.chunks if chunk.vaddr <= vaddr < chunk.vaddr + chunk.size)
                offset = self.random.randrange(PAGE)
                translation = self.gpu.translate(vaddr + offset)
                assert translation.address == chunk.address + (vaddr - chunk.vaddr) + offset
                assert (translation.target, translation.peer_id) == (chunk.target, chunk.peer_id)
                assert translation.volatile == live.volatile
                page_size = expected_page_size(chunk, vaddr)
                event(f"{chunk.target.value} page of {page_size:#x} bytes")
                assert (translation.page_size, translation.level) == (page_size, level_of(page_size, levels))
            for outside in (live.vaddr - PAGE, live.vaddr + live.size):
                if VA_BASE <= outside < VA_BASE + VA_WINDOW and not self.overlaps(outside, PAGE):
                    with pytest.raises(TranslationFault):
                        self.gpu.translate(outside)

    def teardown(self) -> None:
        for live in self.live:
            self.mm.unmap_range(live.vaddr, live.size)
        assert self.mm.page_table_pages() == {self.mm.root_paddr}
        assert self.mm.pa_allocator.free_bytes == self.free_after_boot
        assert len(self.mm.pa_allocator.blocks()) == 1  # coalesced back into one free block


NVMappingMachine.TestCase.settings = settings(
    max_examples=20, stateful_step_count=10, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestAmpereMappings = NVMappingMachine.TestCase


class HopperMappingMachine(NVMappingMachine):
    mmu_version = 3


HopperMappingMachine.TestCase.settings = NVMappingMachine.TestCase.settings
TestHopperMappings = HopperMappingMachine.TestCase
