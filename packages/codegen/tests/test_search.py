"""BEAM search with a fake timer whose best opt sequence is known, and its disk cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from renderers_for_tests import CPULikeRenderer, GPULikeRenderer, ScalarRenderer
from sinks_for_tests import matmul

from kiln.codegen import DiskCache, KernelInfo, Opt, OptOps, Program, beam_search, candidate_opts
from kiln.codegen.opt import apply_opts, beam_cache_key
from kiln.uops import Context

SCALAR = ScalarRenderer()
X, Y, Z = Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 2, 4)


class FakeTimer:
    """Seconds = 10 + a cost per opt (X -1, Y +0.5, Z +0.5, any other +1), and -6 when Y and Z are both applied.

    The best set is {X, Y, Z} (4.0 s); a greedy search (width 1) stops at (X,) (9.0 s) because Y or Z alone
    looks worse. Programs with UPCAST amount 3 "fail to run" (RuntimeError) and must be skipped.
    """

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, program: Program) -> float:
        self.calls += 1
        opts = set(program.applied_opts)
        if any(opt.op is OptOps.UPCAST and opt.arg == 3 for opt in opts):
            raise RuntimeError("launch failed")
        cost = {X: -1.0, Y: 0.5, Z: 0.5}
        seconds = 10.0 + sum(cost.get(opt, 1.0) for opt in opts)
        return seconds - 6.0 if {Y, Z} <= opts else seconds


def test_candidates_are_the_legal_single_opts() -> None:
    sink = apply_opts(matmul(4, 6, 4), [], SCALAR)
    candidates = candidate_opts(sink, SCALAR)
    # no locals, groups or threads on a scalar CPU; amounts must divide (UPCAST 0 = whole axis); SWAP exchanges the
    # nesting of the two loops
    assert candidates == [
        Opt(OptOps.UPCAST, 0, 0), Opt(OptOps.UPCAST, 0, 2),
        Opt(OptOps.UPCAST, 1, 0), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 1, 3),
        Opt(OptOps.UNROLL, 2, 0),
        Opt(OptOps.SWAP, 0, 1),
    ]  # fmt: skip


def test_candidates_include_reduce_blocks_that_leave_two_or_more_blocks() -> None:
    sink = apply_opts(matmul(4, 4, 64), [], SCALAR)
    blocks = [opt for opt in candidate_opts(sink, SCALAR) if opt.op is OptOps.BLOCK]
    assert blocks == [Opt(OptOps.BLOCK, 2, 8), Opt(OptOps.BLOCK, 2, 16), Opt(OptOps.BLOCK, 2, 32)]


def test_candidates_on_a_renderer_with_tensor_cores_include_the_unit_that_fits() -> None:
    gpu = GPULikeRenderer()  # a float32 8x8x8 unit: a float32 matmul fits it; after it, no second TC
    sink = apply_opts(matmul(16, 16, 16), [], gpu)
    assert [opt for opt in candidate_opts(sink, gpu) if opt.op is OptOps.TC] == [Opt(OptOps.TC, 2, -1)]
    after = apply_opts(matmul(16, 16, 16), [Opt(OptOps.TC, 2, -1)], gpu)
    assert not [opt for opt in candidate_opts(after, gpu) if opt.op is OptOps.TC]
    assert not [opt for opt in candidate_opts(sink, SCALAR) if opt.op is OptOps.TC]  # no units: no candidate


def test_wide_beam_finds_the_known_best(tmp_path: Path) -> None:
    timer = FakeTimer()
    with Context(CACHEDIR=str(tmp_path)):
        found = beam_search(matmul(8, 8, 8), SCALAR, timer, width=3, use_cache=False)
    assert set(found) == {X, Y, Z} and len(found) == 3
    assert timer(Program_of(found)) == 4.0


def test_greedy_search_stops_at_the_local_optimum(tmp_path: Path) -> None:
    with Context(CACHEDIR=str(tmp_path)):
        assert beam_search(matmul(8, 8, 8), SCALAR, FakeTimer(), width=1, use_cache=False) == (X,)


def Program_of(opts: tuple[Opt, ...]) -> Program:
    from kiln.codegen import get_program

    return Program(get_program(matmul(8, 8, 8), SCALAR, opts))


def test_results_are_cached_per_kernel_renderer_and_width(tmp_path: Path) -> None:
    with Context(CACHEDIR=str(tmp_path)):
        first = beam_search(matmul(8, 8, 8), SCALAR, FakeTimer(), width=3)

        def no_timing(program: Program) -> float:
            raise AssertionError("a cached search must not time anything")

        # same content under another name: a cache hit
        renamed = matmul(8, 8, 8).replace(arg=KernelInfo("other_name"))
        assert beam_search(renamed, SCALAR, no_timing, width=3) == first
        # another width, renderer or kernel is another search
        timer = FakeTimer()
        assert beam_search(matmul(8, 8, 8), SCALAR, timer, width=1) == (X,)
        assert timer.calls > 0
        keys = {
            beam_cache_key(matmul(8, 8, 8), SCALAR, 3),
            beam_cache_key(matmul(8, 8, 8), SCALAR, 1),
            beam_cache_key(matmul(8, 8, 8), CPULikeRenderer(), 3),
            beam_cache_key(matmul(8, 8, 4), SCALAR, 3),
        }
        assert len(keys) == 4
        # a corrupted entry means searching again
        DiskCache("beam").path_of(beam_cache_key(matmul(8, 8, 8), SCALAR, 3)).write_bytes(b"junk")
        again = FakeTimer()
        assert set(beam_search(matmul(8, 8, 8), SCALAR, again, width=3)) == {X, Y, Z}
        assert again.calls > 0


def test_search_arguments_and_untimeable_kernels(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="beam width must be at least 1, got 0"):
        beam_search(matmul(8, 8, 8), SCALAR, FakeTimer(), width=0)

    def broken(program: Program) -> float:
        raise RuntimeError("no device")

    with Context(CACHEDIR=str(tmp_path)), pytest.raises(RuntimeError, match="cannot be timed"):
        beam_search(matmul(8, 8, 8), SCALAR, broken, width=2, use_cache=False)
