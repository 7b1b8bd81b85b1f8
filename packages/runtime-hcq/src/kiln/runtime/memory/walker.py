"""The generic multi-level page-table walker: builds, reads, clears and frees page tables of any PageTableFormat.

Entries live in device memory (the PhysicalMemory) and are the source of truth for leaves. The walker also keeps a
small shadow of the tree's *structure* (which entry points to which child table, and how many valid entries each table
holds), so that descending needs no decode and an emptied table is found and freed in O(1).

Page-size rule (mapping): at each position the walker places the largest leaf whose VA is aligned to its size, that
fits in what remains of the physically contiguous chunk, and that the format accepts (`can_map_page`). Runs never
cross a table boundary or a level change. All VAs handed to the walker are absolute; table indices are computed from
`vaddr - va_base`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kiln.runtime.memory.address_space import AddrSpace, MappingError
from kiln.runtime.memory.fragment import fragment_runs
from kiln.runtime.memory.page_table_format import PageTableFormat
from kiln.runtime.memory.physical_memory import PhysicalMemory


@dataclass(frozen=True)
class WalkRun:
    """Consecutive entries of one table, all mapped leaves (`mapped`) or all unmapped (holes at `level`).

    `vaddr` is the absolute VA where the first entry's coverage starts (it may lie before the walked range when a huge
    page straddles its start); the run covers `count * page_size` bytes from there.
    """

    vaddr: int
    level: int
    page_size: int
    table_paddr: int
    first_index: int
    raw_entries: tuple[int, ...]
    mapped: bool

    @property
    def count(self) -> int:
        """Number of entries in the run."""
        return len(self.raw_entries)

    @property
    def size(self) -> int:
        """Bytes of VA the run's entries cover."""
        return len(self.raw_entries) * self.page_size

    @property
    def end(self) -> int:
        """One past the last VA the run covers."""
        return self.vaddr + self.size


class _Table:
    """Shadow of one page table: where it is, its parent link, its child tables and its count of valid entries."""

    __slots__ = ("children", "level", "paddr", "parent", "parent_index", "pinned", "valid_entries")

    def __init__(self, paddr: int, level: int, parent: _Table | None, parent_index: int) -> None:
        self.paddr = paddr
        self.level = level
        self.parent = parent
        self.parent_index = parent_index
        self.valid_entries = 0
        self.pinned = False
        self.children: dict[int, _Table] = {}


TableAllocator = Callable[[int, int, bool], int]  # (level, table bytes, boot) -> paddr of a zeroed table


class PageTableWalker:
    """Walks and edits the page-table tree rooted at `root_paddr` (a zeroed table allocated by the caller).

    Args:
        memory: where the tables live.
        pt_format: the entry encoding and geometry.
        va_base: the VA that maps to index 0 of every level.
        root_paddr: the root table.
        allocate_table: returns a zeroed table for a level; may raise MemoryError.
        free_table: releases a table's memory.
    """

    def __init__(
        self,
        memory: PhysicalMemory,
        pt_format: PageTableFormat,
        va_base: int,
        root_paddr: int,
        allocate_table: TableAllocator,
        free_table: Callable[[int], None],
    ) -> None:
        self.memory = memory
        self.pt_format = pt_format
        self.va_base = va_base
        self._allocate_table = allocate_table
        self._free_table = free_table
        levels = range(pt_format.levels)
        self._shifts = list(pt_format.level_shifts)
        self._entries = [pt_format.entries_per_table(level) for level in levels]
        self._entry_bytes = [pt_format.entry_bytes(level) for level in levels]
        self._last = pt_format.levels - 1
        self._root = _Table(root_paddr, 0, None, 0)
        self._tables: dict[int, _Table] = {root_paddr: self._root}

    @property
    def root_paddr(self) -> int:
        """Physical address of the root table."""
        return self._root.paddr

    def table_paddrs(self) -> set[int]:
        """Physical addresses of every allocated table, root included."""
        return set(self._tables)

    # ---- raw entry access ---------------------------------------------------------------------------------------

    def _read(self, table: _Table, first: int, count: int) -> list[int]:
        size = self._entry_bytes[table.level]
        data = self.memory.read(table.paddr + first * size, count * size)
        if size == 8:
            return list(struct.unpack(f"<{count}Q", data))
        return [int.from_bytes(data[i * size : (i + 1) * size], "little") for i in range(count)]

    def _write(self, table: _Table, first: int, raws: list[int]) -> None:
        size = self._entry_bytes[table.level]
        if size == 8:
            data = struct.pack(f"<{len(raws)}Q", *raws)
        else:
            data = b"".join(raw.to_bytes(size, "little") for raw in raws)
        self.memory.write(table.paddr + first * size, data)

    # ---- inspection ---------------------------------------------------------------------------------------------

    def runs(self, vaddr: int, size: int) -> Iterator[WalkRun]:
        """Every leaf and hole overlapping [vaddr, vaddr + size), in VA order, grouped into runs.

        Descends through valid table entries only; a hole is reported at the level of its invalid entry.
        """
        low = vaddr - self.va_base
        yield from self._runs(self._root, low, low + size, 0)

    def _runs(self, table: _Table, low: int, high: int, table_start: int) -> Iterator[WalkRun]:
        level = table.level
        shift = self._shifts[level]
        first = (low - table_start) >> shift
        last = (high - 1 - table_start) >> shift
        raws = self._read(table, first, last - first + 1)
        pending: int | None = None  # index where the current run of leaves / holes began
        pending_mapped = False
        for index in range(first, last + 1):
            child = table.children.get(index)
            if child is not None:
                if pending is not None:
                    yield self._run(table, table_start, pending, raws[pending - first : index - first], pending_mapped)
                    pending = None
                entry_start = table_start + (index << shift)
                yield from self._runs(child, max(low, entry_start), min(high, entry_start + (1 << shift)), entry_start)
                continue
            decoded = self.pt_format.decode(level, raws[index - first])
            assert not (decoded.valid and not decoded.is_page), f"table entry {index} of {table.paddr:#x} not shadowed"
            if pending is not None and pending_mapped == decoded.valid:
                continue
            if pending is not None:
                yield self._run(table, table_start, pending, raws[pending - first : index - first], pending_mapped)
            pending, pending_mapped = index, decoded.valid
        if pending is not None:
            yield self._run(table, table_start, pending, raws[pending - first :], pending_mapped)

    def _run(self, table: _Table, table_start: int, first: int, raws: list[int], mapped: bool) -> WalkRun:
        shift = self._shifts[table.level]
        vaddr = self.va_base + table_start + (first << shift)
        return WalkRun(vaddr, table.level, 1 << shift, table.paddr, first, tuple(raws), mapped)

    def first_mapped(self, vaddr: int, size: int) -> int | None:
        """VA where the first valid leaf overlapping [vaddr, vaddr + size) starts, or None when nothing is mapped."""
        low = vaddr - self.va_base
        return self._first_mapped(self._root, low, low + size, 0)

    def _first_mapped(self, table: _Table, low: int, high: int, table_start: int) -> int | None:
        level = table.level
        shift = self._shifts[level]
        first = (low - table_start) >> shift
        last = (high - 1 - table_start) >> shift
        if table.valid_entries == len(table.children):  # no leaves here: only child tables can hold mappings
            if last - first < len(table.children):
                indices = [index for index in range(first, last + 1) if index in table.children]
            else:
                indices = sorted(index for index in table.children if first <= index <= last)
            raws: list[int] = []
        else:
            indices = list(range(first, last + 1))
            raws = self._read(table, first, last - first + 1)
        for index in indices:
            child = table.children.get(index)
            entry_start = table_start + (index << shift)
            if child is not None:
                if child.valid_entries:
                    found = self._first_mapped(
                        child, max(low, entry_start), min(high, entry_start + (1 << shift)), entry_start
                    )
                    if found is not None:
                        return found
            elif self.pt_format.decode(level, raws[index - first]).valid:
                return self.va_base + entry_start
        return None

    def translate(self, vaddr: int) -> tuple[int, int, int, int]:
        """Follow table entries for `vaddr` to where the walk stops: (level, raw entry, table paddr, index)."""
        table, _, index = self._deepest(vaddr - self.va_base)
        return table.level, self._read(table, index, 1)[0], table.paddr, index

    def _deepest(self, relative: int) -> tuple[_Table, int, int]:
        """The existing tables followed towards `relative` as far as they go: (the last table, the offset it starts
        at, the index of its entry for `relative`, which holds no child table)."""
        table, table_start = self._root, 0
        while True:
            shift = self._shifts[table.level]
            index = (relative - table_start) >> shift
            child = table.children.get(index)
            if child is None:
                return table, table_start, index
            table, table_start = child, table_start + (index << shift)

    # ---- editing ------------------------------------------------------------------------------------------------

    def map_pages(
        self,
        vaddr: int,
        size: int,
        paddr: int,
        aspace: AddrSpace,
        *,
        uncached: bool,
        snooped: bool,
        boot: bool,
        contiguous_range: tuple[int, int],
    ) -> None:
        """Map [vaddr, vaddr + size) to physically contiguous memory at `paddr`; the range must be unmapped.

        `contiguous_range` is the VA extent that is contiguous with this piece (for fragment sizes). On failure (a
        table allocation raising MemoryError) everything this call wrote is cleared and new tables freed.
        """
        relative = vaddr - self.va_base
        end = relative + size
        try:
            while relative < end:
                table, index = self._descend_for_leaf(relative, end - relative, paddr, aspace, boot)
                level = table.level
                page_size = 1 << self._shifts[level]
                count = self._leaf_run_length(table, index, (end - relative) >> self._shifts[level], paddr, aspace)
                assert count > 0, f"no leaf fits at {self.va_base + relative:#x} (level {level})"
                run_vaddr = self.va_base + relative
                raws: list[int] = []
                encode = self.pt_format.encode_page
                for start, stop, fragment in fragment_runs(
                    run_vaddr, run_vaddr + count * page_size, *contiguous_range, self.pt_format.max_fragment
                ):
                    first_paddr = paddr + (start - run_vaddr)
                    raws.extend(
                        encode(level, page_paddr, aspace, uncached, snooped, fragment)
                        for page_paddr in range(first_paddr, first_paddr + (stop - start), page_size)
                    )
                self._write(table, index, raws)
                table.valid_entries += count
                relative += count * page_size
                paddr += count * page_size
        except BaseException:
            written = relative - (vaddr - self.va_base)
            if written:
                self.clear(list(self.runs(vaddr, written)))
            self._release_path(relative)
            raise

    def _descend_for_leaf(
        self, relative: int, remaining: int, paddr: int, aspace: AddrSpace, boot: bool
    ) -> tuple[_Table, int]:
        """Create tables down to the level of the largest allowed leaf at `relative`; returns (table, index)."""
        table, table_start = self._root, 0
        while True:
            level = table.level
            shift = self._shifts[level]
            index = (relative - table_start) >> shift
            if level == self._last:
                return table, index
            cover = 1 << shift
            child = table.children.get(index)
            if (
                child is None
                and relative & (cover - 1) == 0
                and remaining >= cover
                and self.pt_format.can_map_page(level, paddr, aspace)
            ):
                return table, index
            if child is None:
                child = self._create_child(table, index, boot)
            table, table_start = child, table_start + (index << shift)

    def _leaf_run_length(self, table: _Table, index: int, pages_left: int, paddr: int, aspace: AddrSpace) -> int:
        """How many consecutive leaves from `index` fit: bounded by the chunk, the table end and (above the last
        level) entries that hold a (pinned) child table or that the format refuses."""
        count = min(pages_left, self._entries[table.level] - index)
        if table.level == self._last:
            return count
        page_size = 1 << self._shifts[table.level]
        for offset in range(1, count):
            if index + offset in table.children or not self.pt_format.can_map_page(
                table.level, paddr + offset * page_size, aspace
            ):
                return offset
        return count

    def _create_child(self, table: _Table, index: int, boot: bool) -> _Table:
        level = table.level + 1
        paddr = self._allocate_table(level, self.pt_format.table_bytes(level), boot)
        child = _Table(paddr, level, table, index)
        self._write(table, index, [self.pt_format.encode_table(table.level, paddr)])
        table.children[index] = child
        table.valid_entries += 1
        self._tables[paddr] = child
        return child

    def clear(self, runs: list[WalkRun]) -> None:
        """Invalidate the leaves of mapped `runs` (from `runs()`, taken before any edit) and free emptied tables."""
        for run in runs:
            assert run.mapped, "only mapped runs are cleared"
            table = self._tables[run.table_paddr]
            self._write(
                table, run.first_index, [self.pt_format.encode_invalid(run.level, raw) for raw in run.raw_entries]
            )
            table.valid_entries -= run.count
            self._release_if_empty(table)

    def _release_if_empty(self, table: _Table) -> None:
        """Free `table` and then its ancestors while they hold no valid entry (never the root or a pinned table)."""
        while table.parent is not None and table.valid_entries == 0 and not table.pinned:
            parent = table.parent
            previous = self._read(parent, table.parent_index, 1)[0]
            self._write(parent, table.parent_index, [self.pt_format.encode_invalid(parent.level, previous)])
            del parent.children[table.parent_index]
            parent.valid_entries -= 1
            del self._tables[table.paddr]
            self._free_table(table.paddr)
            table = parent

    def _release_path(self, relative: int) -> None:
        """Free the empty tables on the path to `relative` (left behind when a table allocation failed)."""
        self._release_if_empty(self._deepest(relative)[0])

    def _check_path_unmapped(self, relative: int) -> None:
        """MappingError if a leaf sits on the path to `relative` (creating a table there would overwrite it)."""
        table, table_start, index = self._deepest(relative)
        if self.pt_format.decode(table.level, self._read(table, index, 1)[0]).valid:
            page = self.va_base + table_start + (index << self._shifts[table.level])
            raise MappingError(f"{self.va_base + relative:#x} lies in the page mapped at {page:#x}")

    def reserve_tables(self, vaddr: int, size: int, boot: bool) -> list[int]:
        """Create and pin the tables a mapping of [vaddr, vaddr + size) would start in; returns their paddrs, root
        first. Pinned tables are never freed, so their addresses can be handed to firmware."""
        relative = vaddr - self.va_base
        self._check_path_unmapped(relative)
        table, _ = self._descend_for_leaf(relative, size, 0, AddrSpace.PHYS, boot)
        path: list[int] = []
        cursor: _Table | None = table
        while cursor is not None:
            if cursor.parent is not None:
                cursor.pinned = True
            path.append(cursor.paddr)
            cursor = cursor.parent
        return path[::-1]
