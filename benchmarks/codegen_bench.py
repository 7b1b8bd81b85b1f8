"""Lowering throughput of kiln.codegen: kernels per second from a kernel sink to SOURCE (no compiler).

Each kernel is built fresh every run (new buffer sizes, so no graph is shared with the previous run) and lowered with
`get_program` for a CPU-like and a GPU-like renderer whose `render` only formats the uops. Figures are medians of
several runs; the reference, measured in the same run, is the same lowering with no opts (opts=[]).

The second table is the cost a user feels: building each kernel of a real tensor program (the quickstart's training
step: an MLP 2-64-64-2 on 400 points, cross-entropy, backward, gradient clipping, SGD with momentum; taken through a
fresh realize `Engine`, no JIT) with the device's own renderer, from kernel sink to a compiled binary (the compiler's
disk cache off), split into lowering (optimize to SOURCE) and compiling. Target (issue 16): median build <= 15 ms.
The third line builds the same kernels again in one call, one `get_program` after the other and with `get_programs`
(kiln.codegen.lifecycle: each compile on a compile thread, overlapping the next kernel's lowering): wall clock.

    uv run python benchmarks/codegen_bench.py [--runs N] [--clock process] [--device CPU] [--first-call N]

`--first-call N` prints instead where tensor_bench's "first call of a new kernel" spends its time, stage by stage
(benchmarks/first_call_stages.py), over N new kernels.

`--clock process` times with this process's CPU time instead of wall-clock time: steadier on a machine shared with
other jobs (the work is single-threaded, so the two agree on an idle machine).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from first_call_stages import first_call_stages

from kiln.codegen import KernelInfo, KernelSignature, Program, Renderer, format_linear, get_program
from kiln.uops import AxisKind, Ops, UOp, dtypes


class _Text(Renderer):
    def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
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


def training_step_sinks(device: str) -> list[UOp]:
    """The kernel sinks two quickstart-style training steps on `device` build, in the order the engine built them."""
    from mlp_step import mlp_step

    from kiln.tensor.realize.engine import Engine, Method, use_engine

    class RecordingEngine(Engine):
        def __init__(self) -> None:
            super().__init__()
            self.sinks: list[UOp] = []

        def compiled_program(self, ast: UOp, device: str) -> Method:
            before = self.programs_built
            method = super().compiled_program(ast, device)
            if self.programs_built > before:
                self.sinks.append(ast)
            return method

    step = mlp_step(device)
    engine = RecordingEngine()
    with use_engine(engine):
        for _ in range(2):  # the second step builds the optimizer's momentum kernels
            step().item()
    return engine.sinks


def pipelined_builds(device: str, runs: int) -> tuple[int, float, float]:
    """(kernels, sequential seconds, pipelined seconds): wall-clock medians of building every kernel of a training
    step from its sink to a binary, one `get_program` after the other and with `get_programs` (each compile on a
    compile thread while the next kernel is lowered), interleaved, the compiler's disk cache off."""
    from kiln.codegen.lifecycle import get_programs
    from kiln.tensor.device import renderer_for
    from kiln.uops import Context

    sinks = training_step_sinks(device)
    renderer = renderer_for(device)
    sequential, pipelined = [], []
    with Context(DISABLE_COMPILER_CACHE=True):
        for _ in range(runs):
            start = time.perf_counter()
            one_by_one = [get_program(sink, renderer) for sink in sinks]
            sequential.append(time.perf_counter() - start)
            start = time.perf_counter()
            together = get_programs(sinks, renderer)
            pipelined.append(time.perf_counter() - start)
            assert together == one_by_one
    return len(sinks), statistics.median(sequential), statistics.median(pipelined)


def training_step_builds(device: str, clock: Callable[[], float]) -> list[tuple[str, float, float]]:
    """(kernel name, build seconds, compile seconds) of every kernel two quickstart-style training steps on `device`
    build (no JIT; a fresh realize Engine, the compiler's disk cache off). The build time is what the engine spends
    making the kernel's program (optimize, lower, render, compile, load); the compile time is the compiler alone, run
    again on the same source."""
    from mlp_step import mlp_step

    from kiln.tensor.device import renderer_for
    from kiln.tensor.realize.engine import Engine, Method, use_engine
    from kiln.uops import Context

    class TimedEngine(Engine):
        def __init__(self) -> None:
            super().__init__()
            self.builds: list[tuple[Method, str, float]] = []

        def compiled_program(self, ast: UOp, device: str) -> Method:
            before, start = self.programs_built, clock()
            method = super().compiled_program(ast, device)
            if self.programs_built > before:
                self.builds.append((method, device, clock() - start))
            return method

    step = mlp_step(device)
    engine = TimedEngine()
    with use_engine(engine), Context(DISABLE_COMPILER_CACHE=True):
        for _ in range(2):
            step().item()
        results = []
        for method, kernel_device, seconds in engine.builds:
            compiler = renderer_for(kernel_device).compiler
            start = clock()
            if compiler is not None:
                compiler.compile(method.program.source)
            results.append((method.program.name, seconds, clock() - start))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9, help="lowerings per figure (median reported)")
    parser.add_argument("--clock", choices=("wall", "process"), default="wall", help="wall-clock or process CPU time")
    parser.add_argument("--device", default="CPU", help="device of the training-step kernels (default CPU)")
    parser.add_argument("--verbose", action="store_true", help="print each training-step kernel's build time")
    parser.add_argument(
        "--first-call", type=int, metavar="N", help="instead: the per-stage CPU time of N first calls of new kernels"
    )
    arguments = parser.parse_args()
    if arguments.first_call is not None:
        first_call_stages(arguments.first_call)  # first_call_stages.py
        return
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
    device = arguments.device
    builds = training_step_builds(device, clock)
    build_ms = [seconds * 1e3 for _, seconds, _ in builds]
    compile_ms = [seconds * 1e3 for _, _, seconds in builds]
    title = f"building the {len(builds)} kernels of a quickstart-style training step on {device}"
    print(f"\n{title} (target: median <= 15 ms)")
    if arguments.verbose:
        for name, seconds, compile_seconds in builds:
            print(f"  {name:<40} {seconds * 1e3:8.2f} ms  (compile {compile_seconds * 1e3:6.2f} ms)")
    print(
        f"build per kernel: median {statistics.median(build_ms):.2f} ms, max {max(build_ms):.2f} ms, "
        f"total {sum(build_ms):.0f} ms; of which compiling: median {statistics.median(compile_ms):.2f} ms"
    )
    kernels, sequential, pipelined = pipelined_builds(device, max(3, runs // 3))
    print(
        f"\nthe same {kernels} kernels built in one call, wall clock: one after the other {sequential * 1e3:.0f} ms, "
        f"with each compile overlapping the next kernel's lowering (get_programs) {pipelined * 1e3:.0f} ms "
        f"({sequential / pipelined:.2f}x)"
    )


if __name__ == "__main__":
    main()
