"""Map + unmap throughput of the user-space drivers' memory managers on their simulated GPUs.

Sections are separate functions, one per driver package: `bench_am()` (kiln.drivers.am) and `bench_nv()`
(kiln.drivers.nv, added by that package when present). `main()` runs every section that exists.

AM section: AMMemoryManager over a 16 GiB simulated GFX11 / GFX9.4 GPU (sparse VRAM, TLB invalidation through the
simulated registers after every map and unmap). Workloads force 4 KiB or 2 MiB leaves, as many small map_range calls
and as one large call. Each row prints map and unmap time, mappings/s and GiB/s for a full map + unmap cycle, next to a
reference measured in the same run: encoding the same leaf entries with the AM format and writing them into the same
kind of memory with no walker at all (the floor any page-table manager in Python pays).

Run: uv run python benchmarks/drivers_bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kiln.drivers.am import GfxGeneration

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


# ---- AM (kiln.drivers.am) -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AMWorkload:
    name: str
    mappings: int
    mapping_size: int
    page_size: int  # the leaf size the layout forces


AM_WORKLOADS = [
    AMWorkload("4 KiB pages, 4096 x 16 KiB maps", 4096, 16 * KIB, 4 * KIB),
    AMWorkload("4 KiB pages, 1 x 64 MiB map", 1, 64 * MIB, 4 * KIB),
    AMWorkload("2 MiB pages, 1024 x 2 MiB maps", 1024, 2 * MIB, 2 * MIB),
    AMWorkload("2 MiB pages, 1 x 16 GiB map", 1, 16 * GIB, 2 * MIB),
]


def _am_layout(workload: AMWorkload, va_base: int) -> list[tuple[int, int]]:
    """(va, paddr) per mapping; VA - PA is a multiple of the page size but not of the next larger page size, so the
    manager picks exactly `page_size` leaves (PHYS offsets may exceed the VRAM: nothing reads them)."""
    step = workload.mapping_size
    skew = 4 * KIB if workload.page_size == 4 * KIB else 0
    start = va_base + 2 * MIB
    return [(start + i * step, i * step + skew) for i in range(workload.mappings)]


def _am_reference_seconds(workload: AMWorkload, generation: GfxGeneration) -> float:
    """Encode every leaf of the workload with the AM format and write it to sparse memory, no walker."""
    from kiln.drivers.am import AMPageTableFormat
    from kiln.runtime.memory import AddrSpace, SparseMemory

    pt_format = AMPageTableFormat(generation, 0)
    level = 3 if workload.page_size == 4 * KIB else 2
    memory = SparseMemory(64 * MIB)
    pages_per_mapping = workload.mapping_size // workload.page_size
    started = time.perf_counter()
    offset = 0
    for _, paddr in _am_layout(workload, 0):
        raws = [
            pt_format.encode_page(level, paddr + i * workload.page_size, AddrSpace.PHYS, False, False, 0)
            for i in range(pages_per_mapping)
        ]
        for first in range(0, len(raws), 512):
            piece = raws[first : first + 512]
            memory.write(offset % (60 * MIB), struct.pack(f"<{len(piece)}Q", *piece))
            offset += 4096
    return time.perf_counter() - started


def bench_am(repeat: int = 3) -> None:
    """Print the AM memory manager's map + unmap throughput for each workload and GFX generation."""
    from kiln.drivers.am import AM_VA_BASE, AMMemoryManager, GfxGeneration, SimulatedAMHardware, SimulatedPlatform
    from kiln.runtime.memory import AddrSpace

    print("AM memory manager (kiln.drivers.am), simulated 16 GiB GPU, best of", repeat)
    header = f"{'generation':<8} {'workload':<34} {'map s':>8} {'unmap s':>8} {'maps/s':>10} {'GiB/s':>8} {'ref s':>8}"
    print(header)
    for generation in GfxGeneration:
        manager = AMMemoryManager(SimulatedAMHardware(SimulatedPlatform(), 16 * GIB, generation))
        for workload in AM_WORKLOADS:
            layout = _am_layout(workload, AM_VA_BASE)
            best_map = best_unmap = float("inf")
            for _ in range(repeat):
                started = time.perf_counter()
                for va, paddr in layout:
                    manager.map_range(va, workload.mapping_size, [(paddr, workload.mapping_size)], AddrSpace.PHYS)
                mapped = time.perf_counter()
                for va, _ in layout:
                    manager.unmap_range(va, workload.mapping_size)
                best_map = min(best_map, mapped - started)
                best_unmap = min(best_unmap, time.perf_counter() - mapped)
            assert manager.page_table_pages() == {manager.root_paddr}
            reference = min(_am_reference_seconds(workload, generation) for _ in range(repeat))
            cycle = best_map + best_unmap
            total = workload.mappings * workload.mapping_size
            print(
                f"{generation.value:<8} {workload.name:<34} {best_map:>8.4f} {best_unmap:>8.4f} "
                f"{workload.mappings / cycle:>10.0f} {total / GIB / cycle:>8.2f} {reference:>8.4f}"
            )


# ---- NV (kiln.drivers.nv) -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NVWorkload:
    name: str
    mappings: int
    mapping_size: int
    skew: int  # PA - VA: 4 KiB forces 4 KiB PTEs, 2 MiB forces 2 MiB PTEs (never 512 MiB ones)


NV_WORKLOADS = [
    NVWorkload("4 KiB pages, 4096 x 16 KiB maps", 4096, 16 * KIB, 4 * KIB),
    NVWorkload("4 KiB pages, 1 x 64 MiB map", 1, 64 * MIB, 4 * KIB),
    NVWorkload("2 MiB pages, 1024 x 2 MiB maps", 1024, 2 * MIB, 2 * MIB),
    NVWorkload("2 MiB pages, 1 x 16 GiB map", 1, 16 * GIB, 2 * MIB),
]


def _nv_cycle(manager: object, workload: NVWorkload, va_base: int) -> tuple[float, float]:
    """(map seconds, unmap seconds) of the workload on a MemoryManager, PHYS memory, fresh VAs from `va_base`."""
    from kiln.runtime.memory import AddrSpace, MemoryManager

    assert isinstance(manager, MemoryManager)
    size = workload.mapping_size
    layout = [(va_base + i * size, i * size + workload.skew) for i in range(workload.mappings)]
    started = time.perf_counter()
    for va, paddr in layout:
        manager.map_range(va, size, [(paddr, size)], AddrSpace.PHYS)
    mapped = time.perf_counter()
    for va, _ in layout:
        manager.unmap_range(va, size)
    assert manager.page_table_pages() == {manager.root_paddr}
    return mapped - started, time.perf_counter() - mapped


def bench_nv(repeat: int = 3) -> None:
    """Print the NV memory manager's map + unmap throughput per workload, for page-table formats ver2 and ver3.

    Reference (same run): the runtime's generic MemoryManager with its ReferencePageTableFormat over SparseMemory,
    i.e. the same walker with the simplest possible 8-byte entry format and no TLB invalidation.
    """
    from kiln.drivers.nv import NVMemoryManager, SimulatedNVGPU
    from kiln.drivers.nv.memory_manager import VA_BASE
    from kiln.runtime.memory import MemoryManager, ReferencePageTableFormat, SparseMemory, TLSFAllocator

    def reference_manager() -> MemoryManager:
        return MemoryManager(
            SparseMemory(16 * GIB),
            ReferencePageTableFormat(),
            16 * GIB,
            boot_size=2 * MIB,
            va_allocator=TLSFAllocator(1 << 40, VA_BASE),
            va_base=0,
            palloc_ranges=[(2 * MIB, 2 * MIB), (4 * KIB, 4 * KIB)],
        )

    print("NV memory manager (kiln.drivers.nv), simulated 16 GiB GPU, best of", repeat)
    header = f"{'format':<8} {'workload':<34} {'map s':>8} {'unmap s':>8} {'maps/s':>10} {'GiB/s':>8}"
    print(header + f" {'ref maps/s':>10} {'ref GiB/s':>9}")
    for version in (2, 3):
        gpu = SimulatedNVGPU(16 * GIB, version)
        manager = NVMemoryManager(gpu, 16 * GIB, mmu_version=version, va_allocator=TLSFAllocator(1 << 40, VA_BASE))
        reference = reference_manager()
        for workload in NV_WORKLOADS:
            runs = [_nv_cycle(manager, workload, VA_BASE) for _ in range(repeat)]
            best_map, best_unmap = min(run[0] for run in runs), min(run[1] for run in runs)
            reference_cycle = min(sum(_nv_cycle(reference, workload, VA_BASE)) for _ in range(repeat))
            cycle = best_map + best_unmap
            total = workload.mappings * workload.mapping_size / GIB
            print(
                f"{'ver' + str(version):<8} {workload.name:<34} {best_map:>8.4f} {best_unmap:>8.4f} "
                f"{workload.mappings / cycle:>10.0f} {total / cycle:>8.2f} "
                f"{workload.mappings / reference_cycle:>10.0f} {total / reference_cycle:>9.2f}"
            )


# ---- main -----------------------------------------------------------------------------------------------------------


def main() -> None:
    """Run every driver section present in this file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs per workload")
    arguments = parser.parse_args()
    bench_am(arguments.repeat)
    bench_nv: Callable[..., None] | None = globals().get("bench_nv")
    if bench_nv is not None:
        print()
        bench_nv(arguments.repeat)


if __name__ == "__main__":
    main()
