"""Lowering throughput of kiln.codegen: kernels per second from a kernel sink to SOURCE (no compiler).

Each kernel is built fresh every run (new buffer sizes, so no graph is shared with the previous run) and lowered with
`get_program` for a CPU-like and a GPU-like renderer whose `render` only formats the uops. Figures are medians of
several runs; the reference, measured in the same run, is the same lowering with no opts (opts=[]).

    uv run python benchmarks/codegen_bench.py [--runs N] [--clock process]

`--clock process` times with this process's CPU time instead of wall-clock time: steadier on a machine shared with
other jobs (the work is single-threaded, so the two agree on an idle machine).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from kiln.codegen import KernelInfo, Program, Renderer, format_linear, get_program
from kiln.uops import AxisKind, Ops, UOp, dtypes


class _Text(Renderer):
    def render(self, uops: list[UOp], name: str) -> str:
        return format_linear(uops)


class CPULike(_Text):
    device = "BENCHCPU"
    has_threads = True
    thread_max = 8
    vector_widths = (4, 8)


class GPULike(_Text):
    device = "BENCHGPU"
    has_local = True
    has_shared = True
    global_max = (2**31 - 1, 65535, 65535)
    local_max = (1024, 1024, 64)
    local_size_max = 1024
    shared_max = 49152
    vector_widths = (2, 4)


def _buffer(slot: int, size: int) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size), (), slot)


def elementwise(salt: int) -> UOp:
    n = 4096
    out, a, b = _buffer(0, n + salt), _buffer(1, n + salt), _buffer(2, n + salt)
    i = UOp.range(n, 0)
    value = (a.index(i).load() * b.index(i).load() + 1.0).maximum(a.index(i).load())
    return UOp(Ops.SINK, dtypes.void, (out.index(i).store(value).end(i),), KernelInfo())


def row_sum(salt: int) -> UOp:
    rows, columns = 256, 256
    out, a = _buffer(0, rows + salt), _buffer(1, rows * columns + salt)
    i, j = UOp.range(rows, 0), UOp.range(columns, 1, AxisKind.REDUCE)
    total = a.index(i * columns + j).load().reduce(j)
    return UOp(Ops.SINK, dtypes.void, (out.index(i).store(total).end(i),), KernelInfo())


def matmul(salt: int) -> UOp:
    n = 256
    out, a, b = _buffer(0, n * n + salt), _buffer(1, n * n + salt), _buffer(2, n * n + salt)
    i, j, k = UOp.range(n, 0), UOp.range(n, 1), UOp.range(n, 2, AxisKind.REDUCE)
    value = (a.index(i * n + k).load() * b.index(k * n + j).load()).reduce(k)
    return UOp(Ops.SINK, dtypes.void, (out.index(i * n + j).store(value).end(i, j),), KernelInfo())


KERNELS: dict[str, Callable[[int], UOp]] = {"elementwise": elementwise, "row_sum": row_sum, "matmul": matmul}


def kernels_per_second(
    build: Callable[[int], UOp],
    renderer: Renderer,
    opts: list | None,
    runs: int,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Median over `runs` of 1 / (seconds to lower one fresh kernel), timed with `clock`."""
    rates = []
    for run in range(runs):
        sink = build(run + 1)
        start = clock()
        get_program(sink, renderer, opts)
        rates.append(1.0 / (clock() - start))
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9, help="lowerings per figure (median reported)")
    parser.add_argument("--clock", choices=("wall", "process"), default="wall", help="wall-clock or process CPU time")
    arguments = parser.parse_args()
    runs = arguments.runs
    clock = time.process_time if arguments.clock == "process" else time.perf_counter
    print(f"{'kernel':<12} {'renderer':<9} {'heuristic opts':>17} {'no opts (ref)':>17}  opts")
    for name, build in KERNELS.items():
        for renderer in (CPULike(), GPULike()):
            warm = Program(get_program(build(0), renderer))  # compiles the pattern matchers once
            optimized = kernels_per_second(build, renderer, None, runs, clock)
            reference = kernels_per_second(build, renderer, [], runs, clock)
            summary = " ".join(f"{o.op.name}{o.axis}:{o.arg}" for o in warm.applied_opts)
            print(f"{name:<12} {renderer.device:<9} {optimized:>10.1f} kern/s {reference:>10.1f} kern/s  {summary}")


if __name__ == "__main__":
    main()
