"""Checkpoint loading costs: the copy-on-load policy on a large safetensors file, and a stride-0 `.pth` (issue 44).

    uv run python benchmarks/load_bench.py [--size-mb 1024] [--runs 5] [--expand 50000000] [--only file|expand]

Each load runs in a fresh child process (so the page cache is warm but the process starts empty) that prints its
wall time, its resident memory before the load (after imports and a first kernel) and its peak resident memory
(VmHWM, which includes the start-up peak: a load that needs less than that shows no growth); the table shows the
median of `--runs` children. Linux only (/proc/self/status). References in the same run:
- `numpy.fromfile`: one read() of the whole file into an array (the cost any private copy pays);
- `safetensors.numpy.load_file` (the reference library, if installed): reads the file, then copies each tensor;
- `mmap + touch`: a copy-on-write numpy.memmap summed once (what an aliasing load costs once every page is read;
  it is not a safe policy: a later write to the file shows through and truncation raises SIGBUS).
The `.pth` holds `torch.tensor([2.5]).expand(N)` (a 1.5 KB file): kiln loads it as an expand of one element.
Run it with PYTHONPATH pointing at an older kiln tree to measure that tree with the same children.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

CHILD_PRELUDE = """
import json, sys, time
import numpy as np
from kiln.tensor import Tensor
from kiln.tensor.state import safe_load, torch_load
(Tensor([1.0]) + 1).realize().numpy()  # runtime and compiler (a first kernel) started before measuring
def status_mb(field):  # VmRSS: resident now; VmHWM: the peak of this process image (ru_maxrss survives exec)
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) / 1024
start_mb = status_mb("VmRSS")
def report(seconds, peak_mb, check):
    print(json.dumps({"seconds": seconds, "peak_mb": peak_mb, "start_mb": start_mb, "check": check}))
"""

CHILDREN = {
    "kiln safe_load": """
        start = time.perf_counter()
        tensors = safe_load(PATH)
        seconds, peak = time.perf_counter() - start, status_mb("VmHWM")  # before the check reads a value
        report(seconds, peak, float(tensors["w"][-1].item()))
    """,
    "numpy.fromfile": """
        start = time.perf_counter()
        array = np.fromfile(PATH, dtype=np.uint8)
        seconds, peak = time.perf_counter() - start, status_mb("VmHWM")  # before the check reads a value
        report(seconds, peak, float(array[-4:].view(np.float32)[0]))
    """,
    "safetensors.numpy.load_file": """
        from safetensors.numpy import load_file
        start = time.perf_counter()
        tensors = load_file(PATH)
        seconds, peak = time.perf_counter() - start, status_mb("VmHWM")  # before the check reads a value
        report(seconds, peak, float(tensors["w"][-1]))
    """,
    "mmap + touch (not safe)": """
        start = time.perf_counter()
        array = np.memmap(PATH, dtype=np.uint8, mode="c")
        total = int(array[:: 4096].sum())  # one byte of every page: every page faulted in
        seconds, peak = time.perf_counter() - start, status_mb("VmHWM")  # before the check reads a value
        report(seconds, peak, float(array[-4:].view(np.float32)[0]))
    """,
    "kiln torch_load (expand)": """
        start = time.perf_counter()
        loaded = torch_load(PATH)
        seconds, peak = time.perf_counter() - start, status_mb("VmHWM")  # before the check reads a value
        report(seconds, peak, float(loaded["x"][-1].item()))
    """,
}


def child(name: str, path: Path) -> dict[str, float]:
    body = textwrap.dedent(CHILDREN[name]).replace("PATH", repr(str(path)))
    done = subprocess.run([sys.executable, "-c", CHILD_PRELUDE + body], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{name} failed: {done.stderr[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(names: list[str], path: Path, runs: int, expected: float) -> None:
    rows = {name: [] for name in names}  # type: dict[str, list[dict[str, float]]]
    for _ in range(runs):  # interleaved, so drift on a shared machine touches every row alike
        for name in names:
            rows[name].append(child(name, path))
    print(f"{'':32} {'median s':>9} {'min s':>7} {'start MB':>9} {'peak MB':>8}   (runs: {runs})")
    for name, results in rows.items():
        checks = {result["check"] for result in results}
        if checks != {expected}:
            raise RuntimeError(f"{name} read {checks}, expected {expected}")
        seconds = [result["seconds"] for result in results]
        peak = statistics.median(result["peak_mb"] for result in results)
        start = statistics.median(result["start_mb"] for result in results)
        print(f"{name:32} {statistics.median(seconds):9.3f} {min(seconds):7.3f} {start:9.0f} {peak:8.0f}")


def write_safetensors(path: Path, size_mb: int) -> float:
    """A one-tensor float32 file of `size_mb` MiB written by safe_save; returns the last value."""
    import numpy as np

    from kiln.tensor import Tensor
    from kiln.tensor.state import safe_save

    count = size_mb * 1024 * 1024 // 4
    values = np.arange(count, dtype=np.float32)
    safe_save({"w": Tensor(values)}, path)
    return float(values[-1])


def write_expand(path: Path, count: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "packages/tensor/tests"))
    import struct

    from pth_builder import op_dict, op_tensor, zip_checkpoint

    zip_checkpoint(str(path), op_dict({"x": op_tensor("0", 1, 0, [count], [0])}), {"0": struct.pack("<f", 2.5)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--expand", type=int, default=50_000_000)
    parser.add_argument("--only", choices=["file", "expand"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=".") as folder:
        if args.only != "expand":
            path = Path(folder) / "big.safetensors"
            last = write_safetensors(path, args.size_mb)
            print(f"== safetensors file of {path.stat().st_size / 2**20:.0f} MiB (one float32 tensor), warm cache")
            names = ["kiln safe_load", "numpy.fromfile", "mmap + touch (not safe)"]
            try:
                import safetensors  # noqa: F401

                names.append("safetensors.numpy.load_file")
            except ImportError:
                print("(safetensors not installed: its row is left out)")
            measure(names, path, args.runs, last)
        if args.only != "file":
            path = Path(folder) / "expand.pth"
            write_expand(path, args.expand)
            print(f"\n== .pth of tensor([2.5]).expand({args.expand}): {path.stat().st_size} bytes")
            measure(["kiln torch_load (expand)"], path, args.runs, 2.5)


if __name__ == "__main__":
    main()
