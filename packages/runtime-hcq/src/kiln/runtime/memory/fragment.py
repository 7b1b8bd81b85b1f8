"""Fragment sizes: how large a naturally aligned block around each page is mapped uniformly and contiguously.

A leaf with fragment F tells the MMU that the naturally aligned 2**(12+F)-byte VA block around it is mapped with the
same flags to contiguous physical memory, so one TLB entry may serve the whole block. For a contiguous range
[start, end) the largest such block around each page is the block of the range's canonical decomposition into
maximal naturally aligned power-of-two blocks (the same greedy split Linux's amdgpu uses in amdgpu_vm_pte_fragment).
"""

from __future__ import annotations

from collections.abc import Iterator

FRAGMENT_BASE_SHIFT = 12  # fragment 0 means one 4 KiB page


def aligned_blocks(start: int, end: int) -> Iterator[tuple[int, int]]:
    """Split [start, end) greedily into maximal naturally aligned power-of-two blocks, yielding (start, log2 size).

    Example: [0x1000, 0x5000) -> (0x1000, 12), (0x2000, 13), (0x4000, 12).
    """
    if start < 0 or end < start:
        raise ValueError(f"invalid range [{start:#x}, {end:#x})")
    while start < end:
        shift = (end - start).bit_length() - 1
        if start:
            shift = min(shift, (start & -start).bit_length() - 1)
        yield start, shift
        start += 1 << shift


def fragment_runs(
    run_start: int, run_end: int, range_start: int, range_end: int, max_fragment: int
) -> Iterator[tuple[int, int, int]]:
    """Fragments for the pages of [run_start, run_end), a piece of the contiguous range [range_start, range_end).

    Yields (start, end, fragment) sub-ranges that tile the run, each page inside carrying `fragment` (capped at
    `max_fragment`). Cost: O(log) per call.
    """
    if not range_start <= run_start <= run_end <= range_end:
        raise ValueError(f"run [{run_start:#x}, {run_end:#x}) is not inside [{range_start:#x}, {range_end:#x})")
    for block_start, shift in aligned_blocks(range_start, range_end):
        block_end = block_start + (1 << shift)
        if block_end <= run_start:
            continue
        if block_start >= run_end:
            break
        fragment = min(max(shift - FRAGMENT_BASE_SHIFT, 0), max_fragment)
        yield max(block_start, run_start), min(block_end, run_end), fragment
