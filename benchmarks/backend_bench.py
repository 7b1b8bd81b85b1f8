"""The tensor bench workloads (benchmarks/tensor_bench.py) on every GPU-style backend that opens here, in one run:
CPU, CL (OpenCL; PoCL's CPU device on machines without a GPU) and WEBGPU (WGSL on Vulkan; Mesa's lavapipe without
a GPU), beside numpy measured in the same run.

    uv run python benchmarks/backend_bench.py [--quick] [--devices CPU,CL,WEBGPU] [--only chain]

Each workload checks its result against numpy before it is timed (tensor_bench's checks), so a backend that
computes a wrong number fails here instead of printing a figure. A device that does not open is listed with why.

Why the backends differ (on a machine without a GPU every one of them runs on the same CPU cores):
- CPU compiles LLVM IR in process, vectorizes with the host's full vector width and splits loops over cores with
  its own THREAD axes; kernels run on a worker thread with no driver in between.
- CL goes through PoCL: kernels are GPU-shaped (work groups of work items), PoCL turns a work group into loops and
  vectorizes across work items, and spreads groups over its pthread workers; each launch and copy is an OpenCL
  command (a few microseconds of driver work) and a new kernel costs a PoCL program build (~0.2-0.7 s), so the
  first-call and per-op rows are where it trails most. float16 is emulated (PoCL has no cl_khr_fp16).
- WEBGPU runs SPIR-V through lavapipe (LLVM JIT, a software Vulkan), with WGSL's 32-bit-only types and a
  submission per command buffer; its per-launch cost is the highest.
These are CPU emulations of GPUs: the figures track regressions of each backend; they do not rank real hardware.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import tensor_bench

from kiln.runtime import Device, DeviceUnavailable

DEFAULT_DEVICES = ("CPU", "CL", "WEBGPU")


class Collector:
    """Takes tensor_bench's rows (kiln and numpy seconds per workload) for one device at a time."""

    def __init__(self) -> None:
        self.device = ""
        self.rows: dict[str, dict[str, object]] = {}

    def row(self, name: str, key: str, kiln: float, numpy: float | None, amount: float, unit: str, target: str) -> None:
        entry = self.rows.setdefault(name, {"unit": unit, "amount": amount, "numpy": numpy, "devices": {}})
        devices = entry["devices"]
        assert isinstance(devices, dict)
        devices[self.device] = kiln
        if entry["numpy"] is None:
            entry["numpy"] = numpy


def shown(seconds: float | None, amount: float, unit: str) -> str:
    if seconds is None:
        return f"{'-':>12}"
    if unit in ("ms", "us"):
        return f"{seconds * (1e3 if unit == 'ms' else 1e6):9.2f} {unit}"
    return f"{amount / seconds / 1e9:9.2f}  "


def opened(devices: list[str]) -> tuple[list[str], list[str]]:
    """(the devices that open, "DEVICE: why not" for the others)."""
    usable, missing = [], []
    for name in devices:
        try:
            device = Device[name]
            _ = device.renderer
        except (DeviceUnavailable, ValueError, RuntimeError) as error:
            missing.append(f"{name}: {error}")
            continue
        usable.append(name)
    return usable, missing


def workloads(
    table: tensor_bench.Table, device: str, size: int, elements: int, repeats: int, steps: int
) -> tuple[tuple[str, Callable[[], None]], ...]:
    """tensor_bench's workload groups on `device` (group name, run)."""
    return (
        ("matmul", lambda: tensor_bench.bench_matmul(table, device, size, repeats)),
        ("chain", lambda: tensor_bench.bench_chain(table, device, elements, repeats)),
        ("sum", lambda: tensor_bench.bench_sum(table, device, elements, repeats)),
        ("rows", lambda: tensor_bench.bench_rows(table, device, repeats)),
        ("conv", lambda: tensor_bench.bench_conv(table, device, repeats)),
        ("first call", lambda: tensor_bench.bench_first_call(table, device)),
        ("per-op", lambda: tensor_bench.bench_per_op(table, device, steps)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (a smoke run)")
    parser.add_argument("--devices", default=",".join(DEFAULT_DEVICES), help="comma-separated device names")
    parser.add_argument("--only", help="run only the workloads whose group name contains this (matmul, rows ...)")
    arguments = parser.parse_args()
    devices, missing = opened([name.strip() for name in arguments.devices.split(",") if name.strip()])
    quick = arguments.quick
    elements = 1 << (20 if quick else 22)
    repeats = 3 if quick else 5
    size = 256 if quick else 512
    collector = Collector()
    table = tensor_bench.Table(None)
    table.row = collector.row  # type: ignore[method-assign]

    for device in devices:
        collector.device = device
        for name, run in workloads(table, device, size, elements, repeats, 100 if quick else 300):
            if arguments.only is None or arguments.only in name:
                run()
        print(f"measured {device}", file=sys.stderr, flush=True)

    print("kiln.tensor workloads per backend (GFLOP/s or GB/s, higher is better; ms / us: time, lower is better)")
    for line in missing:
        print(f"  not measured: {line}")
    header = " | ".join(f"{name:>12}" for name in (*devices, "numpy"))
    print(f"| {'workload':<44} | {header} |")
    for name, entry in collector.rows.items():
        unit, amount = str(entry["unit"]), float(entry["amount"])  # type: ignore[arg-type]
        per_device = entry["devices"]
        assert isinstance(per_device, dict)
        numpy = entry["numpy"]
        cells = [shown(per_device.get(device), amount, unit) for device in devices]
        cells.append(shown(numpy if isinstance(numpy, float) else None, amount, unit))
        print(f"| {name + ' [' + unit + ']':<44} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
