"""Mapping GLOBAL/LOCAL axes onto gidx/lidx within limits: a bijection between threads and iterations."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from renderers_for_tests import CPULikeRenderer, GPULikeRenderer
from sinks_for_tests import matmul

from kiln.codegen import Opt, OptOps, Program, get_program
from kiln.codegen.lowering.gpu_dims import _largest_divisor_at_most, hardware_indices
from kiln.uops import AxisKind, Ops, UOp, sym_infer


def check_bijection(sizes: list[int], limits: tuple[int, ...]) -> list[int]:
    """Map axes of `sizes` (outermost first); check every thread runs exactly one iteration. Returns dim sizes."""
    ranges = [UOp.range(size, axis, AxisKind.GLOBAL) for axis, size in enumerate(sizes)]
    values = hardware_indices(ranges, limits, "gidx")
    specials = sorted(
        {n for v in values.values() for n in v.toposort() if n.op is Ops.SPECIAL}, key=lambda n: n.arg.name
    )
    dims = [s.src[0].arg for s in specials]
    assert [s.arg.name for s in specials] == [f"gidx{d}" for d in range(len(specials))]
    assert all(size <= limit for size, limit in zip(dims, limits)) and len(dims) <= len(limits)
    assert math.prod(dims) == math.prod(sizes)
    seen = set()
    for point in itertools.product(*(range(d) for d in dims)):
        assignment = {s.arg.name: p for s, p in zip(specials, point)}
        iteration = tuple(sym_infer(values[r].simplify(), assignment) for r in ranges)
        assert all(0 <= v < size for v, size in zip(iteration, sizes))
        seen.add(iteration)
    assert len(seen) == math.prod(sizes)
    return dims


def test_direct_mapping_puts_the_innermost_axis_on_dimension_zero() -> None:
    assert check_bijection([3, 5, 7], (100, 100, 100)) == [7, 5, 3]


def test_too_many_axes_share_dimensions() -> None:
    # 4 axes on 3 dims (dimension order 5, 7, 2, 3): the adjacent pair with the smallest product (2 * 3) is merged
    assert check_bijection([3, 2, 7, 5], (100, 100, 100)) == [5, 7, 6]


def test_oversized_axis_is_split_into_a_free_dimension() -> None:
    assert check_bijection([48], (16, 16, 16)) == [16, 3]


def test_impossible_mappings_raise() -> None:
    with pytest.raises(ValueError, match="exceeds the limits"):
        check_bijection([17, 17], (16, 16))
    with pytest.raises(ValueError, match="cannot be split"):
        check_bijection([17], (16, 16))
    with pytest.raises(ValueError, match="no gidx dimensions"):
        check_bijection([4], ())


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    limits=st.lists(st.integers(4, 64), min_size=1, max_size=3).map(tuple),
)
def test_every_successful_mapping_is_a_bijection(sizes: list[int], limits: tuple[int, ...]) -> None:
    try:
        check_bijection(sizes, limits)
    except ValueError as error:
        assert "limits" in str(error) or "split" in str(error)
        # a mapping must exist whenever each axis fits a dimension of its own
        assert len(sizes) > len(limits) or any(s > limits[d] for d, s in enumerate(reversed(sizes)))


def test_program_dims_follow_the_renderer_limits() -> None:
    class Tiny(GPULikeRenderer):
        global_max = (8, 8, 8)
        local_max = (4, 4, 4)
        local_size_max = 16

    program = Program(get_program(matmul(16, 12, 4), Tiny(), (Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.LOCAL, 0, 4))))
    # axis 1: 12 = 3 blocks x 4 threads, axis 0: 16 = 4 x 4
    assert program.launch_dims() == ((3, 4, 1), (4, 4, 1))


def test_cpu_has_no_hardware_dims_but_threads() -> None:
    program = Program(get_program(matmul(16, 12, 4), CPULikeRenderer(), (Opt(OptOps.THREAD, 1, 6),)))
    assert [u.arg.name for u in program.uops if u.op is Ops.SPECIAL] == ["core_id"]
    assert program.global_size == (6, 1, 1)


@given(value=st.integers(1, 5000), limit=st.integers(1, 6000))
@settings(max_examples=400, deadline=None)
def test_the_largest_divisor_within_a_limit_matches_brute_force(value: int, limit: int) -> None:
    assert _largest_divisor_at_most(value, limit) == max(d for d in range(1, min(value, limit) + 1) if value % d == 0)


@pytest.mark.parametrize(
    ("size", "dims"),
    [(2**31 + 64, [2**30 + 32, 2]), (2**40, [2**30, 2**10]), (3 * (2**31 - 1), [2**31 - 1, 3])],
    ids=["2**31+64", "2**40", "3*(2**31-1)"],
)
def test_grids_past_int32_split_by_their_largest_divisor(size: int, dims: list[int]) -> None:
    # issue 44: the split counted every divisor candidate up to 2**31 - 1 in Python (minutes per kernel)
    (value,) = hardware_indices([UOp.range(size, 0, AxisKind.GLOBAL)], (2**31 - 1, 65535, 65535), "gidx").values()
    specials = sorted((n for n in value.toposort() if n.op is Ops.SPECIAL), key=lambda n: n.arg.name)
    assert [int(s.src[0].arg) for s in specials] == dims
    assert math.prod(dims) == size
