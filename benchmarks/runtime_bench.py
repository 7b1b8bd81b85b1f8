"""Runtime benchmarks: Buffer copy bandwidth next to numpy's own copy, measured in the same run.

Run: `uv run python benchmarks/runtime_bench.py [--runs N] [--device NAME]`

Each section prints one row per size: the median over `--runs` repetitions of kiln's operation and of the numpy
reference (np.copyto between two host arrays of the same size). Sections are functions in `SECTIONS`; a section for
kernel launch overhead joins the list once devices can launch programs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from kiln.runtime import Buffer, Device, HCQCompiled, HostAllocator, ThreadQueueEngine, copy_between
from kiln.uops import dtypes

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


SECTIONS: list[Callable[[str, int], None]] = [bench_copyin, bench_copyout, bench_copy_between]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, help="repetitions per measurement (median reported)")
    parser.add_argument("--device", default="", help="device to measure; default: a host-memory bench device")
    arguments = parser.parse_args()
    device = arguments.device
    if not device:
        Device.register("BENCHHOST", BenchHostDevice)
        device = "BENCHHOST"
    print(f"device {device}, median of {arguments.runs} runs per figure")
    for section in SECTIONS:
        section(device, arguments.runs)


if __name__ == "__main__":
    main()
