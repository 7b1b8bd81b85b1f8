"""Map + unmap throughput of kiln.runtime.memory.MemoryManager (reference page-table format over SparseMemory).

Workloads: 4 KiB-page and 2 MiB-page mappings, as many small map_range calls and as one large call. Each row prints
map and unmap time, mappings/s and GiB/s for a full map + unmap cycle, next to a reference measured in the same run:
the time to encode the same leaf entries and write them into the same kind of memory with no walker at all (the floor
any page-table manager in Python pays).

Run: uv run python benchmarks/memory_bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import struct
import time
from dataclasses import dataclass

from kiln.runtime.memory import AddrSpace, MemoryManager, ReferencePageTableFormat, SparseMemory, TLSFAllocator

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
VA_BASE = 0x2000_0000_0000


@dataclass(frozen=True)
class Workload:
    name: str
    mappings: int
    mapping_size: int
    page_size: int  # the leaf size the layout forces


WORKLOADS = [
    Workload("4 KiB pages, 4096 x 16 KiB maps", 4096, 16 * KIB, 4 * KIB),
    Workload("4 KiB pages, 1 x 64 MiB map", 1, 64 * MIB, 4 * KIB),
    Workload("2 MiB pages, 1024 x 2 MiB maps", 1024, 2 * MIB, 2 * MIB),
    Workload("2 MiB pages, 1 x 16 GiB map", 1, 16 * GIB, 2 * MIB),
]


def make_manager() -> MemoryManager:
    vram = 1 * GIB
    return MemoryManager(
        SparseMemory(vram),
        ReferencePageTableFormat(),
        vram,
        boot_size=32 * MIB,
        va_allocator=TLSFAllocator(1 << 44, base=VA_BASE + (1 << 44)),
        va_base=VA_BASE,
        palloc_ranges=[(2 * MIB, 2 * MIB), (4 * KIB, 4 * KIB)],
    )


def layout(workload: Workload) -> list[tuple[int, int]]:
    """(va, paddr) per mapping. The VA - PA offset is a multiple of the page size but not of the next larger page,
    so the manager picks exactly `page_size` leaves."""
    step = max(workload.mapping_size, workload.page_size)
    start = VA_BASE + 2 * MIB  # VA - PA below is 2 MiB- but not 1 GiB-aligned, plus 4 KiB for the 4 KiB workloads
    skew = 4 * KIB if workload.page_size == 4 * KIB else 0
    return [(start + i * step, 64 * GIB + i * step + skew) for i in range(workload.mappings)]


def run(workload: Workload) -> tuple[float, float]:
    manager = make_manager()
    pairs = layout(workload)
    size = workload.mapping_size
    begin = time.perf_counter()
    for va, paddr in pairs:
        manager.map_range(va, size, [(paddr, size)], AddrSpace.PHYS)
    map_time = time.perf_counter() - begin
    leaves = sum(walked.count for va, _ in pairs[:2] for walked in manager.walk(va, size))
    assert leaves == min(2, len(pairs)) * size // workload.page_size, "layout did not force the intended page size"
    begin = time.perf_counter()
    for va, _ in pairs:
        manager.unmap_range(va, size)
    unmap_time = time.perf_counter() - begin
    assert manager.page_table_pages() == {manager.root_paddr}
    return map_time, unmap_time


def reference(workload: Workload) -> float:
    """Encode every leaf and write it 512 entries at a time into a SparseMemory: no walking, checking or tables."""
    memory = SparseMemory(1 * GIB)
    page_format = ReferencePageTableFormat()
    level = page_format.levels - 1 if workload.page_size == 4 * KIB else page_format.levels - 2
    leaves = workload.mappings * workload.mapping_size // workload.page_size
    begin = time.perf_counter()
    for first in range(0, leaves, 512):
        count = min(512, leaves - first)
        raws = [
            page_format.encode_page(level, (first + i) * workload.page_size, AddrSpace.PHYS, False, False, 0)
            for i in range(count)
        ]
        memory.write((first // 512 % 1024) * 4096, struct.pack(f"<{count}Q", *raws))
    return time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per workload; the fastest is reported")
    args = parser.parse_args()
    header = (
        f"{'workload':34} {'leaves':>7} {'map ms':>8} {'unmap ms':>9} {'maps/s':>9} {'GiB/s':>8} "
        f"{'leaves/s':>10} | {'ref ms':>7} {'ref leaves/s':>12} {'x ref':>6}"
    )
    print(header)
    print("-" * len(header))
    for workload in WORKLOADS:
        map_time, unmap_time = min((run(workload) for _ in range(args.repeat)), key=sum)
        reference_time = min(reference(workload) for _ in range(args.repeat))
        total = map_time + unmap_time
        leaves = workload.mappings * workload.mapping_size // workload.page_size
        gib = workload.mappings * workload.mapping_size / GIB
        print(
            f"{workload.name:34} {leaves:7d} {map_time * 1e3:8.1f} {unmap_time * 1e3:9.1f} "
            f"{workload.mappings / total:9.0f} {gib / total:8.2f} {leaves / total:10.0f} | "
            f"{reference_time * 1e3:7.1f} {leaves / reference_time:12.0f} {total / reference_time:6.1f}"
        )
    print("maps/s, GiB/s and leaves/s count one map + one unmap; 'x ref' = (map + unmap) time / reference time.")


if __name__ == "__main__":
    main()
