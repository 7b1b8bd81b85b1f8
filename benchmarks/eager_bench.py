"""The cost of one cached small op in eager mode, kiln against torch eager measured in the same run (issue 42).

    uv run python benchmarks/eager_bench.py [--device CPU] [--ops 10000] [--torch-python /path/to/bin/python]

Rows (each the median of 5 runs of `--ops` operations after a warm-up of the same work):
- `x = (x + 1).realize()` on a (16,) float32 tensor: microseconds per op in the process's CPU time
  (`time.process_time`: what the op costs, whatever else the machine runs) and in wall time; torch: `x = x + 1`;
- TinyJit replay: a function of 16 chained small kernels (`x = (x + 1).realize()` 16 times), captured, then
  replayed on a new input each call: microseconds per kernel (the replay's whole call over 16), CPU and wall;
- the quickstart's training step without the JIT (benchmarks/mlp_step.py: MLP 2-64-64-2 on 400 points,
  cross-entropy, backward, gradient clipping, SGD with momentum; the loss read with `.item()`), in milliseconds per
  step (`--steps` per run); torch: the same step in eager mode;
- the fast path's share: how many of kiln's ops the eager fast path served (`Engine.fast.hits`).

torch runs with one thread (the work is small; its thread pool only adds spinning on a shared machine). It is
imported in this interpreter when it can be; otherwise the script runs itself under `--torch-python`
(default: /work/torchenv/bin/python when it exists) with `--torch-only`, which imports only torch and prints JSON.
Without either, the torch column says why it is empty. Targets (issue 42): the cached op <= 5 us of CPU time, JIT
replay <= 2 us per kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

RUNS = 5
SIZE = 16
JIT_KERNELS = 16
DEFAULT_TORCH_PYTHON = "/work/torchenv/bin/python"


def _median_per_op(body: Callable[[int], None], count: int, per: int) -> tuple[float, float]:
    """The medians over `RUNS` runs of `body(count)` of (CPU, wall) microseconds per item (`count * per` items)."""
    body(max(count // 10, 10))  # warm-up: plans, compiles, fills the allocator's cache
    cpu, wall = [], []
    for _ in range(RUNS):
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        body(count)
        cpu.append((time.process_time() - cpu_start) / (count * per) * 1e6)
        wall.append((time.perf_counter() - wall_start) / (count * per) * 1e6)
    return statistics.median(cpu), statistics.median(wall)


def measure_kiln_step(device: str, steps: int) -> tuple[float, float]:
    """kiln's quickstart training step without the JIT: (CPU, wall) ms per step."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mlp_step import mlp_step

    step = mlp_step(device)

    def train(count: int) -> None:
        for _ in range(count):
            step().item()

    cpu, wall = _median_per_op(train, steps, 1)
    return cpu / 1e3, wall / 1e3


def measure_torch_step(steps: int) -> tuple[float, float]:
    """torch eager's quickstart training step (the same model, data sizes and optimizer): (CPU, wall) ms."""
    import torch

    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(400, 2, generator=generator), torch.randint(0, 2, (400,), generator=generator)
    model = torch.nn.Sequential(
        torch.nn.Linear(2, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)

    def train(count: int) -> None:
        for _ in range(count):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            loss.item()

    cpu, wall = _median_per_op(train, steps, 1)
    return cpu / 1e3, wall / 1e3


def measure_kiln(device: str, ops: int) -> dict[str, float]:
    """kiln's rows: the cached op and the JIT replay, (CPU, wall) us; and the fast path's hits per op."""
    import numpy as np

    from kiln.tensor import Tensor, TinyJit
    from kiln.tensor.realize import default_engine

    x = Tensor(np.zeros(SIZE, np.float32), device=device).realize()

    def eager(count: int) -> None:
        nonlocal x
        for _ in range(count):
            x = (x + 1).realize()

    fast_path = getattr(default_engine(), "fast", None)  # (None in a kiln before the fast path: compare with it)
    hits_before = fast_path.hits if fast_path is not None else 0
    eager_cpu, eager_wall = _median_per_op(eager, ops, 1)
    served = (fast_path.hits - hits_before) / (ops * RUNS + max(ops // 10, 10)) if fast_path is not None else 0.0

    @TinyJit
    def chain(value: Tensor) -> Tensor:
        for _ in range(JIT_KERNELS):
            value = (value + 1).realize()
        return value

    inputs = [Tensor(np.full(SIZE, index, np.float32), device=device).realize() for index in range(4)]

    def replay(count: int) -> None:
        for call in range(count):
            chain(inputs[call % len(inputs)])

    calls = max(ops // JIT_KERNELS, 20)
    jit_cpu, jit_wall = _median_per_op(replay, calls, JIT_KERNELS)
    expected = np.full(SIZE, 1 + JIT_KERNELS, np.float32)
    if not np.array_equal(chain(inputs[1]).numpy(), expected):
        raise RuntimeError("the replayed chain gave a wrong result")
    return {
        "eager_cpu": eager_cpu,
        "eager_wall": eager_wall,
        "jit_cpu": jit_cpu,
        "jit_wall": jit_wall,
        "fast_path_share": served,
    }


def measure_torch(ops: int, steps: int) -> dict[str, float]:
    """torch eager's cached op (CPU, wall) us and training step (CPU, wall) ms, in this interpreter (torch must
    import)."""
    import torch

    torch.set_num_threads(1)  # small work: one thread, as kiln's inline launches (and no spinning pool on a busy box)
    x = torch.zeros(SIZE, dtype=torch.float32)

    def eager(count: int) -> None:
        nonlocal x
        for _ in range(count):
            x = x + 1

    cpu, wall = _median_per_op(eager, ops, 1)
    step_cpu, step_wall = measure_torch_step(steps)
    return {"eager_cpu": cpu, "eager_wall": wall, "step_cpu": step_cpu, "step_wall": step_wall}


def torch_figures(ops: int, steps: int, torch_python: str | None) -> tuple[dict[str, float] | None, str]:
    """torch's figures and where they came from (or why there are none)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        return measure_torch(ops, steps), "this interpreter"
    if torch_python is None or not os.path.exists(torch_python):
        return None, f"no torch here and no --torch-python ({torch_python!r} does not exist)"
    command = [torch_python, os.path.abspath(__file__), "--torch-only", "--ops", str(ops), "--steps", str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        return None, f"{torch_python} failed: {done.stderr.strip().splitlines()[-1:]}"
    return json.loads(done.stdout.strip().splitlines()[-1]), torch_python


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="CPU")
    parser.add_argument("--ops", type=int, default=10000, help="operations per run (default 10000)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per run (default 20)")
    torch_default = DEFAULT_TORCH_PYTHON if os.path.exists(DEFAULT_TORCH_PYTHON) else None
    parser.add_argument("--torch-python", default=os.environ.get("KILN_TORCH_PYTHON", torch_default))
    parser.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ops < 10 or args.steps < 1:
        parser.error(f"--ops must be at least 10 and --steps at least 1, got {args.ops} and {args.steps}")
    if args.torch_only:
        print(json.dumps(measure_torch(args.ops, args.steps)))
        return
    kiln = measure_kiln(args.device, args.ops)
    kiln_step = measure_kiln_step(args.device, args.steps)
    torch, source = torch_figures(args.ops, args.steps, args.torch_python)
    print(f"eager_bench: {args.ops} ops per run, median of {RUNS} runs, device {args.device}, (16,) float32")
    print(f"{'row':<44} {'kiln CPU us':>12} {'kiln wall us':>13} {'torch CPU us':>13} {'torch wall us':>14}")

    def torch_cell(key: str) -> str:
        return f"{torch[key]:13.2f}" if torch is not None else f"{'-':>13}"

    print(
        f"{'x = (x + 1).realize() (torch: x = x + 1)':<44} {kiln['eager_cpu']:12.2f} {kiln['eager_wall']:13.2f} "
        f"{torch_cell('eager_cpu')} {torch_cell('eager_wall'):>14}"
    )
    replay_row = f"TinyJit replay, per kernel ({JIT_KERNELS} per call)"
    print(f"{replay_row:<44} {kiln['jit_cpu']:12.2f} {kiln['jit_wall']:13.2f}")
    print(
        f"{'quickstart training step, no JIT (ms)':<44} {kiln_step[0]:12.2f} {kiln_step[1]:13.2f} "
        f"{torch_cell('step_cpu')} {torch_cell('step_wall'):>14}"
    )
    print(f"eager fast path served {kiln['fast_path_share']:.0%} of the cached ops")
    if torch is not None:
        print(f"kiln / torch CPU time per op: {kiln['eager_cpu'] / torch['eager_cpu']:.1f}x (torch from {source})")
        print(f"kiln / torch CPU time per training step: {kiln_step[0] / torch['step_cpu']:.1f}x")
    else:
        print(f"torch column empty: {source}")
    print("targets (issue 42): cached op <= 5 us CPU; JIT replay <= 2 us per kernel; training step within 2x torch")


if __name__ == "__main__":
    sys.exit(main())
