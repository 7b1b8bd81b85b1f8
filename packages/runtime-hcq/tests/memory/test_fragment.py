"""Fragment decomposition against a brute-force definition: the largest aligned block around each page in range."""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
from hypothesis import given, settings

from kiln.runtime.memory import aligned_blocks, fragment_runs

PAGE = 4096


def _largest_block_log(page: int, start: int, end: int) -> int:
    """Brute force: log2 of the largest naturally aligned power-of-two block holding `page` inside [start, end)."""
    best = 0
    for log in range(64):
        block_start = page - page % (1 << log)
        if block_start >= start and block_start + (1 << log) <= end:
            best = log
        elif log > (end - start).bit_length():
            break
    return best


def test_hand_computed_decomposition() -> None:
    assert list(aligned_blocks(0x1000, 0x5000)) == [(0x1000, 12), (0x2000, 13), (0x4000, 12)]
    assert list(aligned_blocks(0, 0x600000)) == [(0, 22), (0x400000, 21)]
    assert list(aligned_blocks(0x200000, 0x800000)) == [(0x200000, 21), (0x400000, 22)]


@settings(deadline=None)
@given(
    start_page=st.one_of(st.integers(0, 4096), st.integers(0, 1 << 30)),
    pages=st.integers(1, 3000),
)
def test_each_page_gets_its_largest_aligned_block(start_page: int, pages: int) -> None:
    start, end = start_page * PAGE, (start_page + pages) * PAGE
    blocks = list(aligned_blocks(start, end))
    cursor = start
    for block_start, log in blocks:
        assert block_start == cursor and block_start % (1 << log) == 0
        cursor += 1 << log
    assert cursor == end
    # Sample pages (every page for short ranges) and compare with the brute-force maximum.
    for page in range(start, end, max(PAGE, (end - start) // 64 // PAGE * PAGE)):
        owner = next(log for block_start, log in blocks if block_start <= page < block_start + (1 << log))
        assert owner == _largest_block_log(page, start, end)


@settings(deadline=None)
@given(
    start_page=st.integers(0, 1 << 20),
    pages=st.integers(1, 2000),
    cut=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    max_fragment=st.sampled_from([3, 9, 31]),
)
def test_fragment_runs_match_brute_force(
    start_page: int, pages: int, cut: tuple[float, float], max_fragment: int
) -> None:
    start, end = start_page * PAGE, (start_page + pages) * PAGE
    low, high = sorted(int(fraction * pages) for fraction in cut)
    run_start, run_end = start + low * PAGE, start + max(high, low + 1) * PAGE
    if run_end > end:
        run_start, run_end = end - PAGE, end
    pieces = list(fragment_runs(run_start, run_end, start, end, max_fragment))
    assert pieces[0][0] == run_start and pieces[-1][1] == run_end
    for (_, left_end, _), (right_start, _, _) in itertools.pairwise(pieces):
        assert left_end == right_start
    for piece_start, piece_end, fragment in pieces:
        for page in {piece_start, piece_end - PAGE, (piece_start + piece_end) // 2 // PAGE * PAGE}:
            assert fragment == min(_largest_block_log(page, start, end) - 12, max_fragment)
