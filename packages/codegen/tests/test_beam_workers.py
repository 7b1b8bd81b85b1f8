"""BEAM's build workers: the parallel search finds what the serial one does, a stuck build times out, knobs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from beam_worker_renderers import HangingRenderer
from renderers_for_tests import ScalarRenderer
from sinks_for_tests import matmul

from kiln.codegen import Opt, OptOps, Program, beam_search, get_program
from kiln.codegen.opt import apply_opts
from kiln.codegen.opt.beam_workers import BuildFailure, BuildPool, beam_worker_count, shared_pool
from kiln.uops import Context, knobs

SCALAR = ScalarRenderer()
X, Y, Z = Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 2, 4)


class RecordingTimer:
    """Seconds from the applied opts (X -1, Y and Z +0.5 each but -6 together, others +1: the best is {X, Y, Z}),
    recording the order programs were timed in; UPCAST by 3 fails to run."""

    def __init__(self) -> None:
        self.order: list[tuple[Opt, ...]] = []

    def __call__(self, program: Program) -> float:
        opts = program.applied_opts
        self.order.append(opts)
        if any(opt.op is OptOps.UPCAST and opt.arg == 3 for opt in opts):
            raise RuntimeError("launch failed")
        seconds = 10.0 + sum({X: -1.0, Y: 0.5, Z: 0.5}.get(opt, 1.0) for opt in opts)
        return seconds - 6.0 if {Y, Z} <= set(opts) else seconds


@pytest.mark.parametrize("width", [1, 3])
def test_parallel_search_times_the_same_programs_in_the_same_order_as_serial(tmp_path: Path, width: int) -> None:
    serial, parallel = RecordingTimer(), RecordingTimer()
    with Context(CACHEDIR=str(tmp_path)):
        expected = beam_search(matmul(8, 8, 8), SCALAR, serial, width, use_cache=False, workers=1)
        found = beam_search(matmul(8, 8, 8), SCALAR, parallel, width, use_cache=False, workers=2)
    assert found == expected
    assert parallel.order == serial.order and len(serial.order) > 10
    assert set(found) == ({X, Y, Z} if width == 3 else {X})


def test_workers_build_the_same_program_as_the_searching_process(tmp_path: Path) -> None:
    sink = matmul(8, 8, 8)
    with Context(CACHEDIR=str(tmp_path)):
        built = shared_pool(2).build([(sink, SCALAR, (X,)), (sink, SCALAR, (Y, Z)), (sink, SCALAR, ())], 120.0)
        for result, opts in zip(built, [(X,), (Y, Z), ()], strict=True):
            assert not isinstance(result, BuildFailure)
            assert result is get_program(sink, SCALAR, opts)  # the same uop (hash-consed): same source, same sink


def test_a_build_error_is_reported_with_its_kind(tmp_path: Path) -> None:
    sink = matmul(4, 6, 4)
    with Context(CACHEDIR=str(tmp_path)):
        # UPCAST of axis 9: the kernel has no such axis (KernelOptError): reported with its traceback
        (result,) = shared_pool(2).build([(sink, SCALAR, (Opt(OptOps.UPCAST, 9, 2),))], 120.0)
    assert isinstance(result, BuildFailure) and not result.timed_out
    assert "axis" in result.message


def test_a_hanging_candidate_times_out_and_the_search_still_returns_a_plan(tmp_path: Path) -> None:
    # building (Y,) never finishes: its worker is killed after BEAM_TIMEOUT and replaced, the candidate skipped
    sink = matmul(8, 8, 8)
    hang_on = ScalarRenderer().render(list(Program(get_program(sink, SCALAR, (Y,))).uops), "r_8_8_8")
    renderer = HangingRenderer(Program(get_program(sink, SCALAR, (Y,))).source)
    assert hang_on.splitlines()[1:] == renderer.hang_on.splitlines()[1:]
    timer = RecordingTimer()
    pool = shared_pool(2)
    replaced = pool.replaced
    with Context(CACHEDIR=str(tmp_path), BEAM_TIMEOUT=10.0):  # a real build: milliseconds, even under load
        found = beam_search(sink, renderer, timer, 3, use_cache=False, workers=2)
    assert pool.replaced == replaced + 1
    assert (Y,) not in timer.order  # never built, so never timed
    assert set(found) == {X, Y, Z}  # Y still comes in after X or Z: another kernel, built in time
    assert apply_opts(sink, found, SCALAR) is not None
    # the pool still works after the replacement
    (again,) = pool.build([(sink, SCALAR, (X,))], 120.0)
    assert again is get_program(sink, SCALAR, (X,))


def test_worker_count_knob() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    assert knobs.get_knob("BEAM_WORKERS").default == 0
    with Context(BEAM_WORKERS=0):
        assert beam_worker_count() == min(cores, 8)
    with Context(BEAM_WORKERS=3):
        assert beam_worker_count() == 3
    with Context(BEAM_WORKERS=-1), pytest.raises(ValueError, match=r"BEAM_WORKERS must be 0 .* got -1"):
        beam_worker_count()
    with pytest.raises(ValueError, match="at least one worker, got 0"):
        beam_search(matmul(8, 8, 8), SCALAR, RecordingTimer(), 1, use_cache=False, workers=0)
    with pytest.raises(ValueError, match="at least one worker, got 0"):
        BuildPool(0)
    with pytest.raises(ValueError, match="timeout must be positive seconds, got 0"):
        shared_pool(2).build([], 0.0)


def test_the_pool_is_spawned_once_and_reused() -> None:
    first = shared_pool(2)
    assert shared_pool(2) is first
