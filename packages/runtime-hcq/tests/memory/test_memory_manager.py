"""MemoryManager over ReferencePageTableFormat + SparseMemory, checked by an independent software walker.

The walker here decodes the reference format's bits itself from raw memory (it never calls the format's decode), and
the expected leaves are derived from definitions, not from the implementation's algorithm:
* a page lies in the LARGEST naturally aligned page (4K / 2M / 1G / 512G) that fits inside its chunk's VA extent and
  whose physical address is aligned to its size (the reference format's huge-page rule);
* its fragment is log2 of the largest naturally aligned power-of-two VA block around it inside the chunk, minus 12.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from dataclasses import dataclass

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kiln.runtime.memory import (
    AddrSpace,
    MappingError,
    MemoryManager,
    ReferencePageTableFormat,
    SparseMemory,
    TLSFAllocator,
    VirtMapping,
)

VA_BASE = 0x2000_0000_0000
SHIFTS = (39, 30, 21, 12)
PAGE = 4096
MIB = 1 << 20
GIB = 1 << 30
ADDRESS_BITS = ((1 << 52) - 1) & ~0xFFF  # reference format: address in bits 12-51
VALLOC_BASE = VA_BASE + (1 << 42)  # valloc VAs stay clear of the ranges the tests map by hand
ASPACE_CODE = {AddrSpace.PHYS: 0, AddrSpace.SYS: 1, AddrSpace.PEER: 2}


# ---- independent oracle -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    size: int
    paddr: int
    aspace: AddrSpace
    uncached: bool
    snooped: bool
    fragment: int

    def raw(self) -> int:
        """The raw entry as the reference layout defines it (composed here, not by the format)."""
        raw = self.paddr | 0b11 | (ASPACE_CODE[self.aspace] << 2) | (self.uncached << 4) | (self.snooped << 5)
        return raw | (self.fragment << 6)


def read_table(memory: SparseMemory, paddr: int) -> tuple[int, ...]:
    return struct.unpack("<512Q", memory.read(paddr, 4096))


def walk_everything(memory: SparseMemory, root: int) -> tuple[list[int], dict[int, tuple[int, int]]]:
    """Every table reachable from the root and every valid leaf as {va: (size, raw)}, from raw bits."""
    tables: list[int] = []
    leaves: dict[int, tuple[int, int]] = {}

    def visit(paddr: int, level: int, va_start: int) -> None:
        tables.append(paddr)
        valid = 0
        for index, raw in enumerate(read_table(memory, paddr)):
            if not raw & 1:  # bit 0: valid
                continue
            valid += 1
            va = va_start + (index << SHIFTS[level])
            if level == 3 or raw & 2:  # bit 1: page (always a page at the last level)
                leaves[va] = (1 << SHIFTS[level], raw)
            else:
                visit(raw & ADDRESS_BITS, level + 1, va)
        assert level == 0 or valid > 0, f"empty table {paddr:#x} at level {level} was not freed"

    visit(root, 0, VA_BASE)
    return tables, leaves


def translate(tables: dict[int, tuple[int, ...]], root: int, va: int) -> tuple[int, int] | None:
    """(paddr, page size) for `va` by a per-page descent from the root, or None when unmapped."""
    table = root
    for level, shift in enumerate(SHIFTS):
        raw = tables[table][((va - VA_BASE) >> shift) & 511]
        if not raw & 1:
            return None
        if level == 3 or raw & 2:
            return (raw & ADDRESS_BITS) + va % (1 << shift), 1 << shift
        table = raw & ADDRESS_BITS
    raise AssertionError("unreachable")


def fragment_of(va: int, chunk_start: int, chunk_end: int) -> int:
    best = 0
    for log in range(12, 60):
        block = va - va % (1 << log)
        if block >= chunk_start and block + (1 << log) <= chunk_end:
            best = log
    return min(best - 12, 31)


def expected_leaves(
    va: int, paddrs: list[tuple[int, int]], aspace: AddrSpace, uncached: bool, snooped: bool
) -> dict[int, Leaf]:
    """The leaves a map must produce: each page inside the largest allowed aligned page, by definition."""
    leaves: dict[int, Leaf] = {}
    chunk_start = va
    for paddr, length in paddrs:
        chunk_end = chunk_start + length
        page = chunk_start
        while page < chunk_end:
            for shift in SHIFTS:  # largest first
                size = 1 << shift
                start = page - (page - VA_BASE) % size
                leaf_paddr = paddr + (start - chunk_start)
                if start >= chunk_start and start + size <= chunk_end and leaf_paddr % size == 0:
                    break
            leaves[start] = Leaf(
                size, leaf_paddr, aspace, uncached, snooped, fragment_of(start, chunk_start, chunk_end)
            )
            page = start + size
        chunk_start = chunk_end
    return leaves


class RecordingMemory:
    """A PhysicalMemory that counts writes, to prove failed operations write nothing."""

    def __init__(self, inner: SparseMemory) -> None:
        self.inner = inner
        self.writes = 0

    def read(self, paddr: int, size: int) -> bytes:
        return self.inner.read(paddr, size)

    def write(self, paddr: int, data: bytes) -> None:
        self.writes += 1
        self.inner.write(paddr, data)


def make_manager(
    vram_size: int = 256 * MIB, reserve_ptable: bool = False, palloc_ranges: list[tuple[int, int]] | None = None
) -> tuple[MemoryManager, RecordingMemory]:
    memory = RecordingMemory(SparseMemory(vram_size))
    manager = MemoryManager(
        memory,
        ReferencePageTableFormat(),
        vram_size,
        boot_size=2 * MIB,
        va_allocator=TLSFAllocator(1 << 40, base=VALLOC_BASE),
        va_base=VA_BASE,
        palloc_ranges=palloc_ranges or [(2 * MIB, 2 * MIB), (PAGE, PAGE)],
        reserve_ptable=reserve_ptable,
    )
    return manager, memory


def allocator_state(manager: MemoryManager) -> list[object]:
    return [manager.boot_allocator.blocks(), manager.pa_allocator.blocks(), manager.va_allocator.blocks()]


# ---- the rule-based model ---------------------------------------------------------------------------------------

REGIONS = [VA_BASE, VA_BASE + GIB - 4 * MIB, VA_BASE + (512 * GIB) - 2 * MIB]  # cross 1 GiB / 512 GiB boundaries
chunk_pages = st.one_of(st.integers(1, 40), st.sampled_from([512, 1024]), st.integers(500, 1100))
chunk_paddr = st.one_of(
    st.integers(0, 1 << 20).map(lambda n: n * 2 * MIB), st.integers(0, 1 << 28).map(lambda n: n * PAGE)
)


class ManagerModel(RuleBasedStateMachine):
    """Random map / unmap / valloc / vfree; after every step the tables must decode to exactly the model's leaves."""

    @initialize()
    def setup(self) -> None:
        self.manager, self.memory = make_manager(vram_size=48 * MIB)
        self.root = self.manager.root_paddr
        self.leaves: dict[int, Leaf] = {}
        self.ranges: list[tuple[int, int]] = []  # ranges handed to map_range (to pick unmap ranges from)
        self.vallocs: list[VirtMapping] = []

    def _overlapping(self, start: int, end: int) -> list[int]:
        return [va for va, leaf in self.leaves.items() if va < end and va + leaf.size > start]

    def _expect_untouched(self, call: Callable[[], object], error: type[Exception]) -> None:
        writes, snapshot, allocators = self.memory.writes, self.memory.inner.snapshot(), allocator_state(self.manager)
        with pytest.raises(error):
            call()
        assert self.memory.writes == writes, "a rejected operation must not write"
        assert self.memory.inner.snapshot() == snapshot
        assert allocator_state(self.manager) == allocators

    @rule(
        region=st.sampled_from(REGIONS),
        offset=st.one_of(st.integers(0, 2047), st.integers(0, 3).map(lambda n: n * 512)),
        chunks=st.lists(st.tuples(chunk_paddr, chunk_pages), min_size=1, max_size=3),
        aspace=st.sampled_from(list(AddrSpace)),
        uncached=st.booleans(),
        snooped=st.booleans(),
    )
    def map_range(
        self,
        region: int,
        offset: int,
        chunks: list[tuple[int, int]],
        aspace: AddrSpace,
        uncached: bool,
        snooped: bool,
    ) -> None:
        paddrs = [(paddr, pages * PAGE) for paddr, pages in chunks]
        self._map(region + offset * PAGE, paddrs, aspace, uncached, snooped)

    def _map(self, va: int, paddrs: list[tuple[int, int]], aspace: AddrSpace, uncached: bool, snooped: bool) -> None:
        size = sum(length for _, length in paddrs)
        if self._overlapping(va, va + size):
            event("map rejected: overlap")
            self._expect_untouched(
                lambda: self.manager.map_range(va, size, paddrs, aspace, uncached, snooped), MappingError
            )
            return
        mapping = self.manager.map_range(va, size, paddrs, aspace, uncached, snooped)
        assert mapping == VirtMapping(va, size, tuple(paddrs), aspace, uncached, snooped)
        leaves = expected_leaves(va, paddrs, aspace, uncached, snooped)
        event(f"map ok, largest leaf {max(leaf.size for leaf in leaves.values()):#x}")
        self.leaves.update(leaves)
        self.ranges.append((va, size))

    @rule(
        gib=st.integers(0, 3),
        shape=st.sampled_from([(0, GIB), (2 * MIB, GIB), (0, 512 * GIB)]),
        paddr=st.integers(1, 4).map(lambda n: n * 512 * GIB),
    )
    def map_huge(self, gib: int, shape: tuple[int, int], paddr: int) -> None:
        """1 GiB / 512 GiB leaves (or 2 MiB / 1 GiB ones when the VA is less aligned), optionally after a 2 MiB head."""
        head, big = shape
        va = VA_BASE + (512 * GIB if big > GIB else 0) + gib * GIB
        paddrs = ([(paddr - head, head)] if head else []) + [(paddr, big)]
        self._map(va, paddrs, AddrSpace.PHYS, False, False)

    @precondition(lambda self: self.ranges)
    @rule(data=st.data(), mode=st.sampled_from(["whole", "part", "around"]))
    def unmap_range(self, data: st.DataObject, mode: str) -> None:
        va, size = data.draw(st.sampled_from(self.ranges))
        pages = size // PAGE
        if mode == "part":
            first = data.draw(st.integers(0, pages - 1))
            last = data.draw(st.integers(first + 1, pages))
            va, size = va + first * PAGE, (last - first) * PAGE
        elif mode == "around":
            before = min(data.draw(st.integers(0, 3)), (va - VA_BASE) // PAGE)
            va, size = va - PAGE * before, size + PAGE * data.draw(st.integers(before, before + 3))
        end = va + size
        overlapping = self._overlapping(va, end)
        covered = sum(min(end, leaf + self.leaves[leaf].size) - max(va, leaf) for leaf in overlapping)
        inside = all(va <= leaf and leaf + self.leaves[leaf].size <= end for leaf in overlapping)
        if covered != size or not inside:
            event(f"unmap rejected: {'hole' if covered != size else 'splits a huge page'}")
            self._expect_untouched(lambda: self.manager.unmap_range(va, size), MappingError)
            return
        self.manager.unmap_range(va, size)
        event(f"unmap ok ({mode})")
        for leaf in overlapping:
            del self.leaves[leaf]

    @precondition(lambda self: any(leaf.size > PAGE for leaf in self.leaves.values()))
    @rule(data=st.data())
    def unmap_inside_huge_page(self, data: st.DataObject) -> None:
        va = data.draw(st.sampled_from(sorted(va for va, leaf in self.leaves.items() if leaf.size > PAGE)))
        pages = self.leaves[va].size // PAGE
        first = data.draw(st.integers(0, pages - 1))
        last = data.draw(st.integers(first + 1, min(pages + 4, first + 1024)))
        if first == 0 and last >= pages:
            first = 1  # keep the range strictly partial over this leaf
        event("unmap rejected: inside a huge page")
        self._expect_untouched(lambda: self.manager.unmap_range(va + first * PAGE, (last - first) * PAGE), MappingError)

    @rule(pages=st.one_of(st.integers(1, 64), st.integers(500, 1600)), uncached=st.booleans())
    def valloc(self, pages: int, uncached: bool) -> None:
        before = allocator_state(self.manager)
        try:
            mapping = self.manager.valloc(pages * PAGE - 100, uncached=uncached)
        except MemoryError:
            event("valloc out of memory")
            assert allocator_state(self.manager) == before, "a failed valloc must release everything it took"
            return
        assert mapping.size == pages * PAGE and mapping.aspace is AddrSpace.PHYS
        assert mapping.va_addr % (1 << ((pages * PAGE).bit_length() - 1)) == 0, "VAs are naturally aligned"
        for paddr, length in mapping.paddrs:
            assert length in (2 * MIB, PAGE) and paddr % length == 0, "chunks follow palloc_ranges"
        self.leaves.update(expected_leaves(mapping.va_addr, list(mapping.paddrs), AddrSpace.PHYS, uncached, False))
        self.vallocs.append(mapping)

    @precondition(lambda self: self.vallocs)
    @rule(data=st.data())
    def map_over_valloc(self, data: st.DataObject) -> None:
        mapping = data.draw(st.sampled_from(self.vallocs))
        page = data.draw(st.integers(0, mapping.size // PAGE - 1))
        va = mapping.va_addr + page * PAGE
        self._expect_untouched(lambda: self.manager.map_range(va, PAGE, [(0, PAGE)], AddrSpace.SYS), MappingError)

    @precondition(lambda self: self.vallocs)
    @rule(data=st.data())
    def vfree(self, data: st.DataObject) -> None:
        mapping = self.vallocs.pop(data.draw(st.integers(0, len(self.vallocs) - 1)))
        self.manager.vfree(mapping)
        for leaf in self._overlapping(mapping.va_addr, mapping.va_end):
            del self.leaves[leaf]

    @invariant()
    def tables_decode_to_the_model(self) -> None:
        if not hasattr(self, "manager"):
            return
        tables, leaves = walk_everything(self.memory.inner, self.root)
        assert len(set(tables)) == len(tables) and set(tables) == self.manager.page_table_pages()
        assert {va: (leaf.size, leaf.raw()) for va, leaf in self.leaves.items()} == leaves
        # Every physical byte in use is a table or a valloc chunk: the allocators account for nothing else.
        assert self.manager.boot_allocator.used_bytes == PAGE, "only the root table is boot memory"
        chunk_bytes = sum(length for mapping in self.vallocs for _, length in mapping.paddrs)
        assert self.manager.pa_allocator.used_bytes == PAGE * (len(tables) - 1) + chunk_bytes
        used = sorted(
            [(table, table + PAGE) for table in tables]
            + [(paddr, paddr + length) for mapping in self.vallocs for paddr, length in mapping.paddrs]
        )
        assert all(left[1] <= right[0] for left, right in itertools.pairwise(used)), "tables and chunks never overlap"
        # Translate pages one by one as an MMU would: every huge leaf and a spread of the small ones.
        contents = {table: read_table(self.memory.inner, table) for table in tables}
        small = sorted(va for va, leaf in self.leaves.items() if leaf.size == PAGE)
        sample = [va for va, leaf in self.leaves.items() if leaf.size > PAGE] + small[:: max(1, len(small) // 48)]
        for va in sample:
            leaf = self.leaves[va]
            for page in {va, va + leaf.size - PAGE}:
                assert translate(contents, self.root, page) == (leaf.paddr + page - va, leaf.size)
            assert self.manager.physical_address(va + leaf.size - 1) == leaf.paddr + leaf.size - 1
        for va in (sample[0] - PAGE, sample[-1] + self.leaves[sample[-1]].size) if sample else ():
            if not self._overlapping(va, va + PAGE) and va >= VA_BASE:
                assert translate(contents, self.root, va) is None, f"{va:#x} must be unmapped"

    def teardown(self) -> None:
        if not hasattr(self, "manager"):
            return
        for mapping in self.vallocs:
            self.manager.vfree(mapping)
        for va in [va for va in self.leaves if va < VALLOC_BASE]:
            self.manager.unmap_range(va, self.leaves[va].size)
        tables, leaves = walk_everything(self.memory.inner, self.root)
        assert tables == [self.root] and leaves == {}
        assert self.manager.page_table_pages() == {self.root}
        assert [(b.start, b.size, b.free) for b in self.manager.pa_allocator.blocks()] == [(2 * MIB, 46 * MIB, True)], (
            "the general allocator is back to its initial state"
        )


TestManagerModel = ManagerModel.TestCase
TestManagerModel.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


# ---- hand-written scenarios -------------------------------------------------------------------------------------


def leaves_of(manager: MemoryManager, memory: RecordingMemory) -> dict[int, tuple[int, int]]:
    tables, leaves = walk_everything(memory.inner, manager.root_paddr)
    assert set(tables) == manager.page_table_pages()
    return leaves


def assert_only_root(manager: MemoryManager, memory: RecordingMemory) -> None:
    assert walk_everything(memory.inner, manager.root_paddr) == ([manager.root_paddr], {})
    assert manager.page_table_pages() == {manager.root_paddr}
    assert manager.pa_allocator.used_bytes == 0


@pytest.mark.parametrize(
    ("offset", "size"),
    [
        (0x10000, 0x3000),
        (0x11000, 0x300000),
        (0x10000, 0x2000),
        (0x11000, 0x5000),
        (0x2000000, 0x2000),
        (0x4000000, 0x4000000),
        (0x38000, 0x303000),
        (0x8000, 0x1000),
    ],
)
def test_identity_maps_cover_the_range_then_unmap_clean(offset: int, size: int) -> None:
    # The (VA offset, size) cases of tinygrad's walker test, identity mapped (paddr == VA offset).
    manager, memory = make_manager()
    manager.map_range(VA_BASE + offset, size, [(offset, size)], AddrSpace.PHYS)
    runs = list(manager.walk(VA_BASE + offset, size))
    assert all(run.mapped for run in runs) and sum(run.size for run in runs) == size
    assert runs[0].vaddr == VA_BASE + offset
    assert leaves_of(manager, memory) == {
        va: (leaf.size, leaf.raw())
        for va, leaf in expected_leaves(VA_BASE + offset, [(offset, size)], *PHYS_PLAIN).items()
    }
    manager.unmap_range(VA_BASE + offset, size)
    assert_only_root(manager, memory)


PHYS_PLAIN = (AddrSpace.PHYS, False, False)


def test_runs_never_cross_tables_or_levels() -> None:
    # Facts §1.4 (verified in tinygrad): 0x402000 bytes at 0x1FF000 -> 1 x 4K, 2 x 2M, 1 x 4K.
    manager, _ = make_manager()
    manager.map_range(VA_BASE + 0x1FF000, 0x402000, [(0x1FF000, 0x402000)], AddrSpace.PHYS)
    runs = [(run.vaddr - VA_BASE, run.level, run.count) for run in manager.walk(VA_BASE + 0x1FF000, 0x402000)]
    assert runs == [(0x1FF000, 3, 1), (0x200000, 2, 2), (0x600000, 3, 1)]


def test_fragments_of_a_five_mib_valloc() -> None:
    # Facts §1.6 (verified): AM-style ranges give 4 MiB + 1 MiB chunks -> 2 x 2 MiB leaves with fragment 10, then
    # 256 x 4 KiB leaves with fragment 8.
    ranges = [(1 << shift, min(1 << shift, 2 * MIB)) for shift in range(30, 11, -1)]
    manager, memory = make_manager(palloc_ranges=ranges)
    mapping = manager.valloc(5 * MIB)
    assert [length for _, length in mapping.paddrs] == [4 * MIB, MIB]
    leaves = leaves_of(manager, memory)
    fragments = sorted({(size, (raw >> 6) & 31) for size, raw in leaves.values()})
    assert fragments == [(PAGE, 8), (2 * MIB, 10)] and len(leaves) == 2 + 256


def test_small_pages_are_replaced_by_a_huge_page_after_unmap() -> None:
    # tinygrad's test_free_pt: 4 KiB chunks all aliasing one page, unmapped, then the whole 2 MiB as one leaf.
    for start_off, end_off in [(0, 0), (0x3000, 0), (0x10000, 0), (0, 0x1000), (0, 0x20000)]:
        manager, memory = make_manager()
        start, end = VA_BASE + 0x1000000 + start_off, VA_BASE + 0x1200000 - end_off
        manager.map_range(start, end - start, [(0x5000, PAGE)] * ((end - start) // PAGE), AddrSpace.PHYS)
        assert {size for size, _ in leaves_of(manager, memory).values()} == {PAGE}
        manager.unmap_range(start, end - start)
        manager.map_range(VA_BASE + 0x1000000, 2 * MIB, [(0x1000000, 2 * MIB)], AddrSpace.PHYS)
        assert leaves_of(manager, memory) == {VA_BASE + 0x1000000: (2 * MIB, 0x1000000 | 0b11 | (9 << 6))}
        assert manager.translate(VA_BASE + 0x1100000).level == 2
        manager.unmap_range(VA_BASE + 0x1000000, 2 * MIB)
        assert_only_root(manager, memory)


@pytest.mark.parametrize("page", [0, 0x100000, 0x1FF000])
def test_map_inside_a_huge_page_is_rejected(page: int) -> None:
    manager, memory = make_manager()
    manager.map_range(VA_BASE + 0x1000000, 2 * MIB, [(0, 2 * MIB)], AddrSpace.PHYS)
    writes = memory.writes
    with pytest.raises(MappingError, match="already mapped"):
        manager.map_range(VA_BASE + 0x1000000 + page, PAGE, [(0, PAGE)], AddrSpace.PHYS)
    with pytest.raises(MappingError):
        manager.map_range(VA_BASE + 0x1000000 + page - PAGE, 2 * PAGE, [(0, 2 * PAGE)], AddrSpace.PHYS)
    assert memory.writes == writes


def test_multi_chunk_mapping_is_contiguous_across_chunks() -> None:
    manager, memory = make_manager()
    va = VA_BASE + 0x12000
    manager.map_range(va, MIB, [(0xDEAD0000, PAGE), (0xDEAD1000, MIB - PAGE)], AddrSpace.SYS, snooped=True)
    for page in range(va, va + MIB, PAGE):
        assert manager.physical_address(page) == 0xDEAD0000 + (page - va)
    # Fragments stay inside each chunk: the first page is a chunk of its own (fragment 0).
    assert (leaves_of(manager, memory)[va][1] >> 6) & 31 == 0


def test_bad_unmaps_raise_and_change_nothing() -> None:
    manager, memory = make_manager()
    for _ in range(2):
        writes = memory.writes
        with pytest.raises(MappingError, match="not mapped"):
            manager.unmap_range(VA_BASE + 0x10000, 0x3000)
        manager.map_range(VA_BASE + 0x10000, 0x3000, [(0, 0x3000)], AddrSpace.PHYS)
        with pytest.raises(MappingError, match=r"0x200000013000 is not mapped"):
            manager.unmap_range(VA_BASE + 0x10000, 0x4000)  # one page past the end: atomic, nothing cleared
        assert len(leaves_of(manager, memory)) == 3
        manager.unmap_range(VA_BASE + 0x10000, 0x3000)
        assert memory.writes > writes
        assert_only_root(manager, memory)


def test_cleared_entries_follow_the_format() -> None:
    # The reference format keeps flags and fragment in a cleared entry; the manager must use encode_invalid.
    manager, _ = make_manager()
    manager.map_range(VA_BASE, PAGE, [(0x7000, PAGE)], AddrSpace.SYS, uncached=True)
    level, table_raw = manager.translate(VA_BASE)
    assert level == 3
    raw = table_raw
    manager.map_range(VA_BASE + PAGE, PAGE, [(0x8000, PAGE)], AddrSpace.PHYS)  # keeps the table alive
    manager.unmap_range(VA_BASE, PAGE)
    assert manager.translate(VA_BASE) == (3, raw & ~(ADDRESS_BITS | 1))


def test_validation_errors_write_nothing() -> None:
    manager, memory = make_manager()
    writes = memory.writes
    bad_calls: list[Callable[[], object]] = [
        lambda: manager.map_range(VA_BASE + 1, PAGE, [(0, PAGE)], AddrSpace.PHYS),
        lambda: manager.map_range(VA_BASE, 2 * PAGE, [(0, PAGE)], AddrSpace.PHYS),
        lambda: manager.map_range(VA_BASE, PAGE, [(0x800, PAGE)], AddrSpace.PHYS),
        lambda: manager.map_range(VA_BASE - PAGE, PAGE, [(0, PAGE)], AddrSpace.PHYS),
        lambda: manager.map_range(VA_BASE + (1 << 48), PAGE, [(0, PAGE)], AddrSpace.PHYS),
        lambda: manager.unmap_range(VA_BASE, 0),
    ]
    for call in bad_calls:
        with pytest.raises(ValueError):
            call()
    with pytest.raises(TypeError, match="AddrSpace"):
        manager.map_range(VA_BASE, PAGE, [(0, PAGE)], "phys")  # type: ignore[arg-type]
    assert memory.writes == writes


def _fill_general(manager: MemoryManager, leave: int) -> None:
    while manager.pa_allocator.free_bytes > leave:
        manager.palloc(PAGE, zero=False)


def test_table_allocation_failure_rolls_back_everything() -> None:
    manager, memory = make_manager(vram_size=4 * MIB)
    manager.map_range(VA_BASE, PAGE, [(0, PAGE)], AddrSpace.PHYS)  # 3 tables under the root
    _fill_general(manager, leave=PAGE)
    before = (allocator_state(manager), leaves_of(manager, memory))
    # Chunk 1 lands in the existing last-level table; chunk 2 (unaligned PA: 4 KiB leaves) fills one new table, which
    # takes the last free page, and then needs a second one.
    chunks = [(0x100000, PAGE), (0x201000, 2 * MIB + PAGE)]
    writes = memory.writes
    with pytest.raises(MemoryError, match="out of general VRAM"):
        manager.map_range(VA_BASE + 0x1FF000, 2 * MIB + 2 * PAGE, chunks, AddrSpace.PHYS)
    assert memory.writes > writes + 2, "leaves and a table were written before the failure, then undone"
    assert (allocator_state(manager), leaves_of(manager, memory)) == before
    # Three new levels needed, the second allocation fails: the first new table must be released again.
    with pytest.raises(MemoryError):
        manager.map_range(VA_BASE + 512 * GIB, PAGE, [(0, PAGE)], AddrSpace.PHYS)
    assert (allocator_state(manager), leaves_of(manager, memory)) == before


def test_valloc_out_of_memory_releases_every_chunk() -> None:
    manager, _ = make_manager(vram_size=16 * MIB)
    before = allocator_state(manager)
    with pytest.raises(MemoryError, match=r"valloc of 0x1000000 bytes"):
        manager.valloc(16 * MIB)
    assert allocator_state(manager) == before
    with pytest.raises(MemoryError, match=r"out of general VRAM: cannot allocate 0x2000000 bytes"):
        manager.palloc(32 * MIB)


def test_palloc_regions_and_zeroing() -> None:
    manager, memory = make_manager(vram_size=1 << 30, reserve_ptable=True)
    assert manager.root_paddr == 0 and manager.boot_allocator.used_bytes == PAGE
    ptable = manager.ptable_allocator
    assert ptable is not None and (ptable.base, ptable.size) == (2 * MIB, 2 * MIB)  # 1 GiB / 512 -> 2 MiB
    assert manager.pa_allocator.base == 4 * MIB
    manager.map_range(VA_BASE, PAGE, [(0, PAGE)], AddrSpace.PHYS)
    assert all(2 * MIB <= table < 4 * MIB for table in manager.page_table_pages() - {0}), "tables in the region"
    paddr = manager.palloc(3 * PAGE, zero=False)
    memory.write(paddr, b"\xff" * (3 * PAGE))
    manager.pfree(paddr)
    assert manager.palloc(3 * PAGE) == paddr and memory.read(paddr, 3 * PAGE) == bytes(3 * PAGE)
    with pytest.raises(ValueError, match="outside the managed VRAM"):
        manager.pfree(1 << 31)
    with pytest.raises(ValueError, match="double free"):
        manager.pfree(paddr + PAGE)


def test_alloc_vaddr_is_naturally_aligned() -> None:
    manager, _ = make_manager()
    for size, alignment in [(PAGE, PAGE), (3 * MIB, 2 * MIB), (5 * MIB, 4 * MIB), (GIB + PAGE, GIB)]:
        vaddr = manager.alloc_vaddr(size)
        assert vaddr % alignment == 0 and vaddr >= VALLOC_BASE
    assert manager.alloc_vaddr(PAGE, align=GIB) % GIB == 0


def test_vfree_frees_physical_memory_only_for_phys_mappings() -> None:
    manager, _ = make_manager()
    with pytest.raises(ValueError, match="not allocated"):
        manager.vfree(VirtMapping(VA_BASE, PAGE, ((0, PAGE),), AddrSpace.PHYS))
    vaddr = manager.alloc_vaddr(PAGE)
    paddr = manager.palloc(PAGE)
    mapping = manager.map_range(vaddr, PAGE, [(paddr, PAGE)], AddrSpace.SYS)
    used = manager.pa_allocator.used_bytes
    manager.vfree(mapping)
    assert manager.pa_allocator.used_bytes == used - 3 * PAGE, "SYS memory is not VRAM: only the tables are freed"
    assert manager.pa_allocator.is_allocated(paddr)


def test_reserved_tables_are_pinned() -> None:
    manager, memory = make_manager()
    va = VA_BASE + 4 * GIB
    path = manager.reserve_page_tables(va, GIB)
    assert len(path) == 2 and path[0] == manager.root_paddr, "a 1 GiB leaf would sit in the level-1 table"
    path = manager.reserve_page_tables(va, 512 * MIB)
    assert len(path) == 3 and manager.page_table_pages() == {*path}
    manager.map_range(va, 4 * MIB, [(0, 4 * MIB)], AddrSpace.PHYS)
    manager.unmap_range(va, 4 * MIB)
    assert manager.page_table_pages() == {*path}, "pinned tables survive becoming empty"
    # A 1 GiB leaf cannot replace the pinned level-2 table: the walker descends into it instead.
    manager.map_range(va, GIB, [(0, GIB)], AddrSpace.PHYS)
    assert {size for size, _ in leaves_of(manager, memory).values()} == {2 * MIB}
    # Reserving tables where a huge page is mapped would overwrite it: rejected without writing.
    writes, pages = memory.writes, manager.page_table_pages()
    with pytest.raises(MappingError, match="lies in the page mapped at"):
        manager.reserve_page_tables(va + 2 * MIB + PAGE, PAGE)
    assert (memory.writes, manager.page_table_pages()) == (writes, pages)


def test_hooks_run_once_per_successful_call() -> None:
    calls: list[str] = []

    class Hooked(MemoryManager):
        def on_range_mapped(self) -> None:
            calls.append("map")

        def on_range_unmapped(self) -> None:
            calls.append("unmap")

    memory = RecordingMemory(SparseMemory(16 * MIB))
    manager = Hooked(
        memory,
        ReferencePageTableFormat(),
        16 * MIB,
        boot_size=2 * MIB,
        va_allocator=TLSFAllocator(1 << 40, base=VALLOC_BASE),
        va_base=VA_BASE,
        palloc_ranges=[(PAGE, PAGE)],
    )
    mapping = manager.valloc(PAGE)
    with pytest.raises(MappingError):
        manager.map_range(mapping.va_addr, PAGE, [(0, PAGE)], AddrSpace.PHYS)
    manager.vfree(mapping)
    assert calls == ["map", "unmap"]


def test_boot_mappings_take_tables_from_the_boot_region() -> None:
    manager, memory = make_manager()
    manager.map_range(VA_BASE, PAGE, [(0x40000, PAGE)], AddrSpace.PHYS, boot=True)
    tables = manager.page_table_pages()
    assert len(tables) == 4 and all(table < 2 * MIB for table in tables)
    assert manager.boot_allocator.used_bytes == 4 * PAGE and manager.pa_allocator.used_bytes == 0
    manager.unmap_range(VA_BASE, PAGE)
    assert manager.boot_allocator.used_bytes == PAGE, "freed tables return to the boot region"
    assert_only_root(manager, memory)
