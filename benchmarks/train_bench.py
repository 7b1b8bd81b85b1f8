"""Training-step throughput of kiln with and without TinyJit, the JIT's Python cost per replayed kernel, and torch
eager on the same step when a Python with torch is given (issue 14).

    uv run python benchmarks/train_bench.py [--steps 30] [--torch-python PATH_TO_A_PYTHON_WITH_TORCH]

The step: conv(1->8, 3x3) relu maxpool2, conv(8->16, 3x3) relu maxpool2, flatten, linear(400->10), cross-entropy,
backward, SGD (lr 0.01) on a random (128, 1, 28, 28) batch, written as a torch user would (`loss.backward();
optimizer.step()`; backward computes the gradients and the loss together, the forward pass runs once). The same
update is also timed written as a loop over the parameters (issue 36): tinygrad's
`p.assign(p.detach() - p.grad * lr)` and PyTorch's `with no_grad(): p -= lr * p.grad`, each write running at once
(its own schedule) on gradients backward has computed. On the 2-core CPU machine (medians of 3 alternated runs,
another process busy) the loops run 33 and 39 kernels a step, 11.1 and 11.5 ms with TinyJit, against SGD's 39 kernels
and 10.3 ms; while backward left the gradients lazy they ran 114 and 120 kernels, 37 and 40 ms (SGD 39, 11.5 ms).
Figures are medians over `--steps` timed steps after a
warm-up (compilation, the JIT's capture). "Python per replayed kernel" is the time a replay takes to return (the
launches are queued; the kernels may still run) divided by its kernel count, measured on a function of 64 tiny
kernels so the kernels' own run time does not count. torch runs in a subprocess with the same model and batch size.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import textwrap
import time
from collections.abc import Callable

import numpy as np

from kiln.runtime import Device
from kiln.tensor import GlobalCounters, Tensor, TinyJit, nn, no_grad, optim


def make_model() -> nn.Sequential:
    """The benchmark's small CNN for (N, 1, 28, 28) inputs."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(400, 10),
    )  # fmt: skip


def _median(run: Callable[[], object], steps: int, warmup: int) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


UPDATES = {
    "optim.SGD": "optimizer.step()",
    "assign loop": "for p in params: p.assign(p.detach() - p.grad * lr)",
    "-= loop": "with no_grad(): for p in params: p -= lr * p.grad",
}
"""How the step applies SGD: the name of each variant and its code."""


def kiln_steps_per_second(jit: bool, steps: int, device: str, update: str = "optim.SGD") -> tuple[float, int]:
    """(steps per second, kernels per step) of the training step, with the update written as `UPDATES[update]`."""
    Tensor.manual_seed(0)
    model = make_model()
    params = model.parameters()
    lr = 0.01
    optimizer = optim.SGD(params, lr=lr)
    rng = np.random.default_rng(0)
    images = Tensor(rng.standard_normal((128, 1, 28, 28)).astype(np.float32))
    labels = Tensor(rng.integers(0, 10, 128).astype(np.int64))

    def step(x: Tensor, y: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = model(x).cross_entropy(y)
        loss.backward()  # computes the gradients and the loss (the forward runs once)
        if update == "optim.SGD":
            optimizer.step()
        elif update == "assign loop":
            for p in params:
                p.assign(p.detach() - p.grad * lr)
        elif update == "-= loop":
            with no_grad():
                for p in params:
                    p -= lr * p.grad
        else:
            raise ValueError(f"unknown update {update!r}: one of {sorted(UPDATES)}")
        return loss

    run = TinyJit(step) if jit else step

    def timed() -> object:
        loss = run(images, labels)
        loss.realize()
        Device[device].synchronize()
        return loss

    seconds = _median(timed, steps, warmup=3)
    GlobalCounters.reset()
    timed()
    return 1.0 / seconds, GlobalCounters.kernel_count


def replay_overhead_us(device: str, kernels: int = 64) -> float:
    """Microseconds of Python per replayed kernel, on a function of `kernels` tiny dependent kernels."""

    @TinyJit
    def chain(x: Tensor) -> Tensor:
        for _ in range(kernels):
            x = (x * 1.0001 + 1).contiguous()
        return x

    x = Tensor(np.ones(16, np.float32))
    for _ in range(3):
        chain(x)
    Device[device].synchronize()
    times = []
    for _ in range(50):
        start = time.perf_counter()
        chain(x)
        times.append(time.perf_counter() - start)
        Device[device].synchronize()
    return statistics.median(times) / kernels * 1e6


TORCH_SCRIPT = textwrap.dedent(
    """
    import statistics, sys, time
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(400, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,))
    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    for _ in range(3):
        step()
    times = []
    for _ in range(int(sys.argv[1])):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(1.0 / statistics.median(times), torch.get_num_threads())
    """
)


def torch_steps_per_second(python: str, steps: int) -> tuple[float, int]:
    """(steps per second, threads) of torch eager on the same step, run by `python` in a subprocess."""
    output = subprocess.run([python, "-c", TORCH_SCRIPT, str(steps)], capture_output=True, text=True, check=True)
    rate, threads = output.stdout.split()
    return float(rate), int(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--device", default="CPU")
    parser.add_argument("--torch-python", help="a Python with torch installed (e.g. /path/to/torch-venv/bin/python)")
    arguments = parser.parse_args()
    Device.DEFAULT = arguments.device
    jitted = 0.0
    for update, code in UPDATES.items():
        print(f"update {update}: {code}")
        for jit in (False, True):
            steps = arguments.steps if jit else max(5, arguments.steps // 3)
            rate, kernels = kiln_steps_per_second(jit, steps, arguments.device, update)
            how = "with TinyJit" if jit else "without JIT"
            print(f"  kiln {how:13s} {rate:8.1f} steps/s {1e3 / rate:7.2f} ms/step ({kernels} kernels per step)")
            if jit and update == "optim.SGD":
                jitted = rate
    print(f"TinyJit replay: {replay_overhead_us(arguments.device):.1f} us of Python per kernel (target <= 10 us)")
    if arguments.torch_python:
        rate, threads = torch_steps_per_second(arguments.torch_python, arguments.steps)
        print(f"torch eager: {rate:8.1f} steps/s ({threads} threads); kiln+JIT / torch = {jitted / rate:.2f}x")


if __name__ == "__main__":
    main()
