"""kiln on an NVIDIA GPU beside torch (cuBLAS, its CUDA kernels) in the same run: the GPU rows of issue 42.

    python benchmarks/gpu_bench.py [--size 4096] [--elements 67108864] [--beam 2] [--beam-size 2048] [--budget 420]

Without a CUDA device it prints why and exits 0 (CI and machines without a GPU); without torch built with CUDA, the
torch column says why it is empty. Every kiln figure is checked against numpy before it is printed. Rows:

- matmul `--size`³ with bfloat16 and float16 inputs, float32 accumulation, TFLOP/s: kiln's TC opt (mma.sync
  m16n8k16) with the LOCAL warps per block found by a small search timed on the device (CUDA events), for each CUDA
  renderer (CUDA C through NVRTC, PTX); torch: `a @ b` (cuBLAS, bf16/f16 output);
- device-to-device copy and `a + b` (float32, `--elements`), GB/s counting every byte read and written: kiln's copy
  (`cuMemcpyDtoD`) and Tensor add, torch's `copy_` and `a + b`; the elementwise target is 80% of the copy's rate;
- a cached small op, `x = (x + 1).realize()` on 16 floats, µs per op (wall, queue drained at the end); torch:
  `x = x + 1`;
- TinyJit replay of 16 chained small kernels, µs per kernel; and the same 16 kernels launched one by one against
  one `CUDAGraphBatch` (`cuGraphLaunch`), µs per kernel;
- a Tensor bfloat16 matmul `--beam-size`³ with BEAM=`--beam` (search timed on the device), in a child process that
  gets what is left of `--budget` seconds: the search's seconds and the kernel's TFLOP/s (BEAM's candidates do not
  include the TC opt: this row is the heuristic's reach plus search).

Targets (issue 42): bf16 matmul >= 0.7x torch's, elementwise >= 80% of the copy bandwidth, cached op <= 20 µs.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.codegen import KernelInfo, Opt, OptOps, Program, get_program
from kiln.runtime import Buffer, Device, DeviceUnavailable, copy_between
from kiln.uops import AxisKind, DType, Ops, UOp, dtypes

REPEATS = 10
CHAIN = 16
LOCAL_AMOUNTS = (1, 2, 4)


def bf16_values(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(bfloat16 bit patterns, their float32 values): normal values cut to bfloat16, exact either way."""
    bits = (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def matmul_sink(size: int, dtype_in: DType) -> UOp:
    """out[i, j] = sum_r float32(a[i, r]) * float32(b[r, j]), float32 out (axes i=0, j=1, r=2)."""
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(size * size), (), 0)
    a = UOp(Ops.DEFINE_GLOBAL, dtype_in.ptr(size * size), (), 1)
    b = UOp(Ops.DEFINE_GLOBAL, dtype_in.ptr(size * size), (), 2)
    i, j, r = UOp.range(size, 0), UOp.range(size, 1), UOp.range(size, 2, AxisKind.REDUCE)
    product = a.index(i * size + r).load().cast(dtypes.float32) * b.index(r * size + j).load().cast(dtypes.float32)
    store = out.index(i * size + j).store(product.reduce(r)).end(i, j)
    return UOp(Ops.SINK, dtypes.void, (store,), KernelInfo(f"tc_matmul_{size}_{dtype_in.name}"))


def event_seconds(runner: Any, buffers: list[Buffer]) -> float:
    """The fastest of REPEATS launches, each timed by CUDA events (`wait=True`)."""
    runner(buffers, wait=True)
    return min(float(runner(buffers, wait=True)) for _ in range(REPEATS))


def wall_per_call(run: Callable[[], object], drain: Callable[[], None], calls: int) -> float:
    """Median over 5 runs of `calls` calls of `run` (the queue drained after each run), seconds per call."""
    run()
    drain()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        drain()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)

    def row(self, name: str, kiln: str, torch: str, ratio: str = "") -> None:
        line = f"| {name:<52} | {kiln:>16} | {torch:>16} | {ratio:>12} |"
        print(line, flush=True)
        self.lines.append(line)


def load_torch() -> tuple[Any, str]:
    """(torch, "") when torch with CUDA imports, else (None, why not)."""
    try:
        import torch
    except ImportError as error:
        return None, f"torch not installed ({error})"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} has no CUDA device"
    return torch, ""


def torch_seconds(torch: Any, run: Callable[[], object]) -> float:
    """Median of REPEATS runs of `run` timed by CUDA events."""
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)) / 1e3)
    return float(statistics.median(times))


def bench_matmul(report: Report, device: Any, torch: Any, size: int) -> None:
    rng = np.random.default_rng(0)
    flops = 2.0 * size**3
    for dtype, torch_name in ((dtypes.bfloat16, "bfloat16"), (dtypes.float16, "float16")):
        if dtype == dtypes.bfloat16:
            (a_bits, a_values), (b_bits, b_values) = bf16_values(rng, (size, size)), bf16_values(rng, (size, size))
        else:
            a_values, b_values = (rng.standard_normal((size, size)).astype(np.float16) for _ in range(2))
            a_bits, b_bits = a_values.view(np.uint16), b_values.view(np.uint16)
            a_values, b_values = a_values.astype(np.float32), b_values.astype(np.float32)
        out = Buffer(device.name, size * size, dtypes.float32)
        a = Buffer(device.name, size * size, dtype).copyin(np.ascontiguousarray(a_bits))
        b = Buffer(device.name, size * size, dtype).copyin(np.ascontiguousarray(b_bits))
        expected = a_values[:8].astype(np.float64) @ b_values.astype(np.float64)
        peer = None
        if torch is not None:
            ta = torch.from_numpy(a_values).cuda().to(getattr(torch, torch_name))
            tb = torch.from_numpy(b_values).cuda().to(getattr(torch, torch_name))
            peer = torch_seconds(torch, functools.partial(torch.matmul, ta, tb))
        for renderer_class in device.renderers:
            renderer = device.create_renderer(renderer_class)
            best: tuple[float, tuple[Opt, ...]] | None = None
            for rows in LOCAL_AMOUNTS:
                for columns in LOCAL_AMOUNTS:
                    opts = [Opt(OptOps.TC, 2, -1)]
                    opts += [Opt(OptOps.LOCAL, 0, rows)] if rows > 1 else []
                    opts += [Opt(OptOps.LOCAL, 1, columns)] if columns > 1 else []
                    try:
                        runner = device.runtime(Program(get_program(matmul_sink(size, dtype), renderer, opts)))
                        seconds = event_seconds(runner, [out, a, b])
                    except (RuntimeError, ValueError) as error:
                        print(f"  ({renderer_class.__name__} {opts}: {error})")
                        continue
                    got = np.empty(size * size, np.float32)
                    out.copyout(got)
                    np.testing.assert_allclose(got.reshape(size, size)[:8], expected, rtol=1e-3, atol=1e-3 * size)
                    if best is None or seconds < best[0]:
                        best = (seconds, tuple(opts))
            name = f"matmul {size}³ {dtype.name} TC ({renderer_class.__name__}), TFLOP/s"
            if best is None:
                report.row(name, "no kernel ran", "-")
                continue
            kiln = flops / best[0] / 1e12
            torch_text = f"{flops / peer / 1e12:.1f}" if peer else "-"
            ratio = f"{kiln / (flops / peer / 1e12):.2f}x torch" if peer else ""
            report.row(name, f"{kiln:.1f}", torch_text, ratio)
            print(f"  best opts: {list(best[1])}")


def bench_bandwidth(report: Report, device: Any, torch: Any, elements: int) -> None:
    from kiln.tensor import Tensor

    rng = np.random.default_rng(1)
    values = [rng.standard_normal(elements).astype(np.float32) for _ in range(2)]
    source, target = (Buffer(device.name, elements, dtypes.float32).copyin(v) for v in values)
    copy_seconds = wall_per_call(lambda: copy_between(target, source), device.synchronize, 20)
    got = np.empty(elements, np.float32)
    target.copyout(got)
    assert np.array_equal(got, values[0])
    a, b = (Tensor(v, device=device.name).realize() for v in values)
    add_seconds = wall_per_call(lambda: (a + b).realize(), device.synchronize, 20)
    np.testing.assert_array_equal((a + b).numpy()[:4096], values[0][:4096] + values[1][:4096])
    copy_rate, add_rate = 8 * elements / copy_seconds / 1e9, 12 * elements / add_seconds / 1e9
    torch_copy = torch_add = None
    if torch is not None:
        ta, tb = (torch.from_numpy(v).cuda() for v in values)
        tc = torch.empty_like(ta)
        torch_copy = 8 * elements / torch_seconds(torch, lambda: tc.copy_(ta)) / 1e9
        torch_add = 12 * elements / torch_seconds(torch, lambda: ta + tb) / 1e9

    def shown(rate: float | None) -> str:
        return "-" if rate is None else f"{rate:.0f}"

    report.row(f"copy {elements * 4 >> 20} MiB device to device, GB/s", f"{copy_rate:.0f}", shown(torch_copy))
    report.row(
        f"a + b float32 x {elements}, GB/s",
        f"{add_rate:.0f}",
        shown(torch_add),
        f"{add_rate / max(copy_rate, torch_copy or 0.0):.0%} of copy",
    )


def bench_small_ops(report: Report, device: Any, torch: Any) -> None:
    from kiln.tensor import Tensor, TinyJit

    x = Tensor(np.zeros(16, np.float32), device=device.name).realize()

    def op() -> None:
        nonlocal x
        x = (x + 1).realize()

    op_seconds = wall_per_call(op, device.synchronize, 2000)
    torch_text = "-"
    if torch is not None:
        tx = torch.zeros(16, device="cuda")

        def torch_op() -> None:
            nonlocal tx
            tx = tx + 1

        torch_text = f"{wall_per_call(torch_op, torch.cuda.synchronize, 2000) * 1e6:.1f}"
    report.row("cached x = (x + 1).realize(), µs per op (wall)", f"{op_seconds * 1e6:.1f}", torch_text)

    @TinyJit
    def chain(value: Tensor) -> Tensor:
        for _ in range(CHAIN):
            value = (value + 1).realize()
        return value

    inputs = [Tensor(np.full(16, float(i), np.float32), device=device.name).realize() for i in range(4)]
    calls = iter(range(1 << 30))
    replay = wall_per_call(lambda: chain(inputs[next(calls) % 4]), device.synchronize, 200) / CHAIN
    assert np.array_equal(chain(inputs[2]).numpy(), np.full(16, 2.0 + CHAIN, np.float32))
    report.row(f"TinyJit replay of {CHAIN} kernels, µs per kernel", f"{replay * 1e6:.2f}", "-")
    bench_graph(report, device)


@dataclass
class _Step:
    runner: Any
    buffers: list[Buffer | None]
    patches: tuple[tuple[int, int], ...] = ()
    var_vals: dict[str, int] | None = None


def bench_graph(report: Report, device: Any) -> None:
    from kiln.runtime.cuda.cuda_graph import CUDAGraphBatch

    i = UOp.range(16, 0)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(16), (), 0)
    source = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(16), (), 1)
    sink = UOp(Ops.SINK, src=(out.index(i).store(source.index(i).load() + 1.0).end(i),), arg=KernelInfo("plus_one"))
    runner = device.runtime(Program(get_program(sink, device.renderer)))
    buffers = [Buffer(device.name, 16, dtypes.float32).copyin(np.zeros(16, np.float32)) for _ in range(CHAIN + 1)]
    steps = [_Step(runner, [buffers[k + 1], buffers[k]]) for k in range(CHAIN)]
    steps[0] = _Step(runner, [buffers[1], buffers[0]], ((1, 0),))  # the first kernel reads the call's input

    def one_by_one() -> None:
        for step in steps:
            runner(step.buffers)

    single = wall_per_call(one_by_one, device.synchronize, 200) / CHAIN
    batch = CUDAGraphBatch(device, steps)
    start = Buffer(device.name, 16, dtypes.float32).copyin(np.full(16, 5.0, np.float32))
    graph = wall_per_call(lambda: batch([start], {}), device.synchronize, 200) / CHAIN
    got = np.empty(16, np.float32)
    buffers[CHAIN].copyout(got)
    assert np.array_equal(got, np.full(16, 5.0 + CHAIN, np.float32)), got
    batch.close()
    report.row(f"{CHAIN} launches one by one, µs per kernel", f"{single * 1e6:.2f}", "-")
    report.row(f"{CHAIN} kernels as one CUDA graph, µs per kernel", f"{graph * 1e6:.2f}", "-", f"{single / graph:.1f}x")


def bench_beam(device: Any, size: int, beam: int) -> None:
    from kiln.tensor import Tensor
    from kiln.uops.knobs import Context

    rng = np.random.default_rng(2)
    (_, a_values), (_, b_values) = bf16_values(rng, (size, size)), bf16_values(rng, (size, size))
    a, b = (Tensor(v, device=device.name).cast(dtypes.bfloat16).realize() for v in (a_values, b_values))
    with Context(BEAM=beam):
        start = time.perf_counter()
        (a @ b).realize()
        device.synchronize()
        searched = time.perf_counter() - start
        seconds = wall_per_call(lambda: (a @ b).realize(), device.synchronize, 5)
    got = (a @ b).cast(dtypes.float32).numpy()[:8]
    expected = a_values[:8].astype(np.float64) @ b_values.astype(np.float64)
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-2 * np.sqrt(size))
    flops = 2.0 * size**3
    print(f"| {f'Tensor bf16 matmul {size}³, BEAM={beam}, TFLOP/s':<52} | {flops / seconds / 1e12:>16.2f} |", end="")
    print(f" search {searched:.0f} s (first call, build and BEAM)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--elements", type=int, default=1 << 26)
    parser.add_argument("--beam", type=int, default=2)
    parser.add_argument("--beam-size", type=int, default=2048)
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for the whole run (BEAM gets the rest)")
    parser.add_argument("--only", choices=("beam",), help=argparse.SUPPRESS)
    args = parser.parse_args()
    started = time.perf_counter()
    try:
        device = Device["CUDA"]
        _ = device.renderer
    except (DeviceUnavailable, RuntimeError, ValueError) as error:
        print(f"gpu bench: skipped, no CUDA device here ({error})")
        return 0
    if args.only == "beam":
        bench_beam(device, args.beam_size, args.beam)
        return 0
    torch, why = load_torch()
    print(f"{device!r}; torch: {torch.__version__ if torch is not None else why}", flush=True)
    report = Report()
    print(f"| {'row':<52} | {'kiln':>16} | {'torch':>16} | {'ratio':>12} |")
    print(f"|{'-' * 54}|{'-' * 18}|{'-' * 18}|{'-' * 14}|")
    bench_matmul(report, device, torch, args.size)
    bench_bandwidth(report, device, torch, args.elements)
    bench_small_ops(report, device, torch)
    left = args.budget - (time.perf_counter() - started)
    if args.beam < 1 or left < 30:
        print(f"BEAM row: not run ({'--beam 0' if args.beam < 1 else f'{left:.0f} s of the budget left'})")
        return 0
    command = [sys.executable, __file__, "--only", "beam", "--beam", str(args.beam), "--beam-size", str(args.beam_size)]
    try:
        subprocess.run(command, timeout=left, check=False)
    except subprocess.TimeoutExpired:
        print(f"BEAM row: BEAM={args.beam} on a {args.beam_size}³ bf16 matmul did not finish in {left:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
