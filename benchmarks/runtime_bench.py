"""Runtime benchmarks: Buffer copy bandwidth next to numpy's own copy, and CPU kernel launch overhead next to a
direct call of the same compiled function, measured in the same run.

Run: `uv run python benchmarks/runtime_bench.py [--runs N] [--device NAME] [--section launch]`

Copy sections print one row per size: the median over `--runs` repetitions of kiln's operation and of the numpy
reference (np.copyto between two host arrays of the same size). The launch section prints the median microseconds
per launch of a tiny kernel through `Device["CPU"].runtime(program)` (the whole path: argument checks, the argument
block, the HCQ queue, the worker thread), next to calling the loaded kernel directly through ctypes and to a numpy
operation of the same size. Sections are functions in `SECTIONS`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from kiln.codegen import KernelInfo, Opt, OptOps, Program, get_program
from kiln.runtime import Buffer, CPUProgramRunner, Device, HCQCompiled, HostAllocator, ThreadQueueEngine, copy_between
from kiln.uops import Ops, UOp, dtypes

SIZES = (4 << 10, 1 << 20, 16 << 20, 64 << 20)


class BenchHostDevice(HCQCompiled):
    """Host memory + a software queue: what the CPU device will be, minus its renderers."""

    def __init__(self, name: str) -> None:
        engine = ThreadQueueEngine(name)
        super().__init__(name, HostAllocator(name, synchronize=self.synchronize), engine)


def median_seconds(operation: Callable[[], object], runs: int) -> float:
    """Median wall time of `operation` over `runs` calls, after one warm-up call."""
    operation()
    times = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        operation()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e9


def format_size(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def report(title: str, rows: list[tuple[int, float, float]]) -> None:
    """Prints `(bytes, kiln seconds, numpy seconds)` rows as bandwidths and their ratio."""
    print(f"\n{title}")
    print(f"{'size':>8} | {'kiln GB/s':>10} | {'numpy GB/s':>10} | {'kiln time':>10} | {'numpy time':>10} | kiln/numpy")
    for size, kiln_seconds, numpy_seconds in rows:
        print(
            f"{format_size(size):>8} | {size / kiln_seconds / 1e9:10.2f} | {size / numpy_seconds / 1e9:10.2f} | "
            f"{kiln_seconds * 1e6:8.1f}us | {numpy_seconds * 1e6:8.1f}us | {kiln_seconds / numpy_seconds:.2f}x time"
        )


def bench_copyin(device: str, runs: int) -> None:
    rows = []
    for size in SIZES:
        source = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
        buffer = Buffer(device, size, dtypes.uint8).allocate()
        reference = np.empty_like(source)
        kiln_seconds = median_seconds(partial(buffer.copyin, source), runs)
        numpy_seconds = median_seconds(partial(np.copyto, reference, source), runs)
        assert np.array_equal(buffer.numpy(), source)
        rows.append((size, kiln_seconds, numpy_seconds))
    report(f"copyin: host numpy array -> Buffer on {device} (reference: np.copyto)", rows)


def bench_copyout(device: str, runs: int) -> None:
    rows = []
    for size in SIZES:
        source = np.random.default_rng(1).integers(0, 255, size, dtype=np.uint8)
        buffer = Buffer(device, size, dtypes.uint8).copyin(source)
        dest, reference = np.empty_like(source), np.empty_like(source)
        kiln_seconds = median_seconds(partial(buffer.copyout, dest), runs)
        numpy_seconds = median_seconds(partial(np.copyto, reference, source), runs)
        assert np.array_equal(dest, source)
        rows.append((size, kiln_seconds, numpy_seconds))
    report(f"copyout: Buffer on {device} -> host numpy array (reference: np.copyto)", rows)


def bench_copy_between(device: str, runs: int) -> None:
    rows = []
    for size in SIZES:
        source_values = np.random.default_rng(2).integers(0, 255, size, dtype=np.uint8)
        source = Buffer(device, size, dtypes.uint8).copyin(source_values)
        dest = Buffer(device, size, dtypes.uint8).allocate()
        reference = np.empty_like(source_values)
        kiln_seconds = median_seconds(partial(copy_between, dest, source), runs)
        numpy_seconds = median_seconds(partial(np.copyto, reference, source_values), runs)
        assert np.array_equal(dest.numpy(), source_values)
        rows.append((size, kiln_seconds, numpy_seconds))
    report(f"copy_between: Buffer -> Buffer on {device} (reference: np.copyto)", rows)


LAUNCH_ELEMENTS = 64
QUEUED_LAUNCHES = 200


def plus_one_program(opts: list[Opt]) -> Program:
    """out[i] = a[i] + 1 over LAUNCH_ELEMENTS float32s, for the CPU's renderer (a kernel that costs ~nothing)."""
    i = UOp.range(LAUNCH_ELEMENTS, 0)
    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(LAUNCH_ELEMENTS), arg=0)
    a = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(LAUNCH_ELEMENTS), arg=1)
    sink = UOp(Ops.SINK, src=(out.index(i).store(a.index(i).load() + 1.0).end(i),), arg=KernelInfo("plus_one"))
    return Program(get_program(sink, Device["CPU"].renderer, opts))


def bench_cpu_launch_overhead(device: str, runs: int) -> None:
    cpu = Device["CPU"]
    values = np.arange(LAUNCH_ELEMENTS, dtype=np.float32)
    out = Buffer("CPU", LAUNCH_ELEMENTS, dtypes.float32).allocate()
    source = Buffer("CPU", LAUNCH_ELEMENTS, dtypes.float32).copyin(values)
    reference_out = np.empty_like(values)
    rows = []
    cores = min(4, Device["CPU"].renderer.thread_max)
    for label, opts in (("1 core", []), (f"{cores} cores (THREAD)", [Opt(OptOps.THREAD, 0, cores)])):
        runner = cpu.runtime(plus_one_program(opts))
        assert isinstance(runner, CPUProgramRunner)
        addresses = runner.buffer_addresses([out, source])
        waited = median_seconds(partial(runner, [out, source], wait=True), runs)

        def queued(runner: CPUProgramRunner = runner) -> None:
            for _ in range(QUEUED_LAUNCHES):
                runner([out, source])
            cpu.synchronize()

        per_queued = median_seconds(queued, max(3, runs // 5)) / QUEUED_LAUNCHES
        direct_arguments = (*addresses, 0) if runner.takes_core_id else addresses
        direct = median_seconds(partial(runner.host_kernel, *direct_arguments), runs)
        rows.append((label, waited, per_queued, direct))
    np.testing.assert_array_equal(out.numpy(), values + 1)
    numpy_seconds = median_seconds(partial(np.add, values, np.float32(1), out=reference_out), runs)
    print(f"\nCPU launch overhead per kernel ({cpu.renderer_class.__name__}, {LAUNCH_ELEMENTS} float32 elements)")
    print(f"{'kernel':>22} | {'launch+wait':>12} | {'queued launch':>13} | {'direct ctypes call':>18} | numpy op")
    for label, waited, per_queued, direct in rows:
        print(
            f"{label:>22} | {waited * 1e6:10.1f}us | {per_queued * 1e6:11.1f}us | {direct * 1e6:16.1f}us | "
            f"{numpy_seconds * 1e6:.1f}us"
        )


SECTIONS: list[Callable[[str, int], None]] = [
    bench_copyin,
    bench_copyout,
    bench_copy_between,
    bench_cpu_launch_overhead,
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, help="repetitions per measurement (median reported)")
    parser.add_argument("--device", default="", help="device to measure; default: a host-memory bench device")
    parser.add_argument("--section", default="", help="run only the sections whose name contains this, e.g. launch")
    arguments = parser.parse_args()
    device = arguments.device
    if not device:
        Device.register("BENCHHOST", BenchHostDevice)
        device = "BENCHHOST"
    print(f"device {device}, median of {arguments.runs} runs per figure")
    for section in SECTIONS:
        if arguments.section in section.__name__:
            section(device, arguments.runs)


if __name__ == "__main__":
    main()
