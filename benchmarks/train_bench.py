"""Training-step throughput of kiln with and without TinyJit, the JIT's Python cost per replayed kernel, and torch
eager and JAX's jitted step on the same steps when a Python with torch / jax is given (issues 14 and 42).

    uv run python benchmarks/train_bench.py [--steps 30] [--torch-python PATH_TO_A_PYTHON_WITH_TORCH]
        [--jax-python PATH (default: the --torch-python one)] [--models cnn,resblock]

The step: conv(1->8, 3x3) relu maxpool2, conv(8->16, 3x3) relu maxpool2, flatten, linear(400->10), cross-entropy,
backward, SGD (lr 0.01) on a random (128, 1, 28, 28) batch, written as a torch user would (`loss.backward();
optimizer.step()`; backward computes the gradients and the loss together, the forward pass runs once). The same
update is also timed written as a loop over the parameters (issue 36): tinygrad's
`p.assign(p.detach() - p.grad * lr)` and PyTorch's `with no_grad(): p -= lr * p.grad`, each write running at once
(its own schedule) on gradients backward has computed. On the 2-core CPU machine (medians of 3 alternated runs,
another process busy) the loops run 33 and 39 kernels a step, 11.1 and 11.5 ms with TinyJit, against SGD's 39 kernels
and 10.3 ms; while backward left the gradients lazy they ran 114 and 120 kernels, 37 and 40 ms (SGD 39, 11.5 ms).
Since issue 42 `optim.SGD` runs the assign loop's 33 kernels (`write_many` computes a value that reads no other
write's target inside its ASSIGN kernel instead of copying it through a buffer of its own); on the ResNet block
below both run 47 kernels a step and the `-=` loop 55 (its right-hand side is a live tensor computed first).
Later in issue 42 the small CNN's max pooling computes its lazy input (conv + ReLU) into a buffer once in training
(35 kernels a step, not 33; the sum of its kernels' times 14.7 -> 10.5 ms), and the ResNet block's weight gradients
(a 16-wide image row) and BatchNorm (one-pass statistics, a gradient shortcut) cut its process CPU time per jitted
step ~3x on the loaded 2-core box. Round 8: max pooling in training compares its 2 x 2 taps elementwise (forward and
backward one elementwise kernel each, not three argmax reduce kernels and a routing kernel) and the first
convolution's weight gradient (8 x 1 x 3 x 3) sums two batch halves in one threaded kernel: 31 kernels a step with
`optim.SGD` or the assign loop (the `-=` loop 37); the ResNet block keeps 47 / 55.
The second step (issue 42) is a ResNet basic block with BatchNorm in training mode (conv 16->16 3x3 pad 1, BN,
relu, conv, BN, identity shortcut, relu, global average pool, linear 16->10) on a (32, 16, 16, 16) batch, each step
also writing BN's running statistics. Each peer is optional and skipped with a message when it is not installed;
JAX (benchmarks/jax_peer.py) runs the same step as one `jax.jit`.
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
from jax_peer import start as start_jax

from kiln.runtime import Device
from kiln.tensor import GlobalCounters, Tensor, TinyJit, nn, no_grad, optim


def make_model() -> nn.Sequential:
    """The benchmark's small CNN for (N, 1, 28, 28) inputs."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(400, 10),
    )  # fmt: skip


class ResBlock(nn.Module):
    """A ResNet basic block with BatchNorm (training mode) and a linear head, for (N, 16, H, W) inputs."""

    def __init__(self, channels: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.head = nn.Linear(channels, classes)

    def forward(self, x: Tensor) -> Tensor:
        out = self.bn1(self.conv1(x)).relu()
        out = (self.bn2(self.conv2(out)) + x).relu()
        result: Tensor = self.head(out.mean((2, 3)))
        return result


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "cnn": (make_model, (128, 1, 28, 28)),
    "resblock": (ResBlock, (32, 16, 16, 16)),
}
"""Each step's model and input batch shape (10 classes)."""


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


def step_runner(jit: bool, device: str, update: str = "optim.SGD", model_name: str = "cnn") -> Callable[[], Tensor]:
    """One training step of `MODELS[model_name]` per call (the loss realized and the device synchronized), with the
    update written as `UPDATES[update]`, with or without TinyJit."""
    Tensor.manual_seed(0)
    make, shape = MODELS[model_name]
    model = make()
    params = model.parameters()
    lr = 0.01
    optimizer = optim.SGD(params, lr=lr)
    rng = np.random.default_rng(0)
    images = Tensor(rng.standard_normal(shape).astype(np.float32), device=device)
    labels = Tensor(rng.integers(0, 10, shape[0]).astype(np.int64), device=device)

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

    def timed() -> Tensor:
        loss = run(images, labels)
        loss.realize()
        Device[device].synchronize()
        return loss

    return timed


def kiln_steps_per_second(
    jit: bool, steps: int, device: str, update: str = "optim.SGD", model_name: str = "cnn"
) -> tuple[float, int]:
    """(steps per second, kernels per step) of the training step, with the update written as `UPDATES[update]`."""
    timed = step_runner(jit, device, update, model_name)
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


TORCH_STEPS = textwrap.dedent(
    """
    import torch
    class ResBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
            self.bn1 = torch.nn.BatchNorm2d(16)
            self.conv2 = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
            self.bn2 = torch.nn.BatchNorm2d(16)
            self.head = torch.nn.Linear(16, 10)
        def forward(self, x):
            out = self.bn1(self.conv1(x)).relu()
            return self.head((self.bn2(self.conv2(out)) + x).relu().mean((2, 3)))
    def torch_step(model_name):
        torch.manual_seed(0)
        if model_name == "cnn":
            model = torch.nn.Sequential(
                torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                torch.nn.Flatten(), torch.nn.Linear(400, 10))
            x = torch.randn(128, 1, 28, 28)
        else:
            model, x = ResBlock(), torch.randn(32, 16, 16, 16)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        y = torch.randint(0, 10, (x.shape[0],))
        def step():
            with torch.enable_grad():
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
        return step
    """
)
"""torch's version of each step of `MODELS`, for the torch subprocesses here and in tensor_bench.py:
`torch_step(model_name)` is a function running one eager step."""

TORCH_SCRIPT = TORCH_STEPS + textwrap.dedent(
    """
    import statistics, sys, time
    step = torch_step(sys.argv[2])
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


def torch_steps_per_second(python: str, steps: int, model_name: str = "cnn") -> tuple[float, int]:
    """(steps per second, threads) of torch eager on the same step, run by `python` in a subprocess."""
    command = [python, "-c", TORCH_SCRIPT, str(steps), model_name]
    output = subprocess.run(command, capture_output=True, text=True, check=True)
    rate, threads = output.stdout.split()
    return float(rate), int(threads)


def _torch_available(python: str | None) -> bool:
    if python is None:
        print("torch peer: skipped (no --torch-python given)")
        return False
    if subprocess.run([python, "-c", "import torch"], capture_output=True, check=False).returncode != 0:
        print(f"torch peer: skipped (torch does not import under {python})")
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--device", default="CPU")
    parser.add_argument("--torch-python", help="a Python with torch installed (e.g. /path/to/torch-venv/bin/python)")
    parser.add_argument("--jax-python", help="a Python with jax installed (default: the --torch-python one)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"which steps to run, of {','.join(MODELS)}")
    arguments = parser.parse_args()
    Device.DEFAULT = arguments.device
    has_torch = _torch_available(arguments.torch_python)
    jax = start_jax(arguments.jax_python or arguments.torch_python, arguments.steps)
    for model_name in arguments.models.split(","):
        if model_name not in MODELS:
            raise ValueError(f"unknown model {model_name!r}: one of {sorted(MODELS)}")
        print(f"model {model_name}: {MODELS[model_name][0].__name__}, batch {MODELS[model_name][1]}")
        rates: dict[tuple[str, bool], float] = {}
        for update, code in UPDATES.items():
            print(f"  update {update}: {code}")
            for jit in (False, True):
                steps = arguments.steps if jit else max(5, arguments.steps // 3)
                rate, kernels = kiln_steps_per_second(jit, steps, arguments.device, update, model_name)
                rates[update, jit] = rate
                how = "with TinyJit" if jit else "without JIT"
                print(f"    kiln {how:13s} {rate:8.1f} steps/s {1e3 / rate:7.2f} ms/step ({kernels} kernels per step)")
        peers: list[tuple[str, float]] = []
        if has_torch:
            assert arguments.torch_python is not None
            rate, threads = torch_steps_per_second(arguments.torch_python, arguments.steps, model_name)
            peers.append((f"torch eager ({threads} threads)", rate))
        if jax is not None:
            seconds = jax.seconds(f"{model_name} step")
            assert seconds is not None
            peers.append(("jax jit", 1.0 / seconds))
        for peer, rate in peers:
            ratios = ", ".join(
                f"{update}{' +JIT' if jit else ''} {kiln / rate:.2f}x" for (update, jit), kiln in rates.items()
            )
            print(f"  {peer}: {rate:8.1f} steps/s {1e3 / rate:7.2f} ms/step; kiln / peer: {ratios}")
    print(f"TinyJit replay: {replay_overhead_us(arguments.device):.1f} us of Python per kernel (target <= 10 us)")
    if jax is not None:
        jax.close()


if __name__ == "__main__":
    main()
