"""kiln quickstart: fit a small MLP to the two-spirals dataset with lazy Tensors, autograd, optim and TinyJit.

    uv run python examples/quickstart.py              # default device (DEV=PYTHON / DEV=CPU to choose)
    uv run python examples/quickstart.py --steps 300  # fewer steps

Everything is ordinary kiln Tensor code: the forward pass and the loss record a lazy graph, `backward()` adds the
gradient graph (autograd is a rewrite of the same graph), gradient clipping and the SGD update are lazy too, and
`optimizer.step()` realizes every update in one schedule of fused kernels. The whole step is a TinyJit function:
its kernels are captured on the second call and replayed afterwards without any Python scheduling. The kernel
statistics come from the engine's `GlobalCounters`.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from dataclasses import dataclass, field

import numpy as np

from kiln.tensor import GlobalCounters, Tensor, TinyJit, optim
from kiln.tensor.grad_mode import no_grad


def two_spirals(
    points_per_class: int, seed: int = 0, turns: float = 1.5, noise: float = 0.04
) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved spirals of `turns` turns in the plane: float32 points (2N, 2) and int64 labels (2N,)."""
    rng = np.random.default_rng(seed)
    angle = np.sqrt(rng.uniform(0.0, 1.0, points_per_class)) * turns * 2.0 * math.pi  # even spacing along the arm
    radius = angle / (turns * 2.0 * math.pi) * 2.0
    arm = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    points = np.concatenate([arm, -arm]) + rng.normal(scale=noise, size=(2 * points_per_class, 2))
    labels = np.concatenate([np.zeros(points_per_class), np.ones(points_per_class)]).astype(np.int64)
    return points.astype(np.float32), labels


@dataclass
class MLP:
    """A multi-layer perceptron: tanh hidden layers, a linear output layer of class logits."""

    weights: list[Tensor]
    biases: list[Tensor]

    @staticmethod
    def create(sizes: list[int], seed: int = 0) -> MLP:
        """Random weights (scaled like PyTorch's default init) and zero biases, as leaf tensors needing gradients."""
        rng = np.random.default_rng(seed)
        weights, biases = [], []
        for fan_in, fan_out in itertools.pairwise(sizes):
            bound = 1.0 / math.sqrt(fan_in)
            weights.append(Tensor(rng.uniform(-bound, bound, (fan_in, fan_out)).astype(np.float32), requires_grad=True))
            biases.append(Tensor(np.zeros(fan_out, dtype=np.float32), requires_grad=True))
        return MLP(weights, biases)

    @property
    def parameters(self) -> list[Tensor]:
        return [*self.weights, *self.biases]

    def __call__(self, x: Tensor) -> Tensor:
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            x = x @ weight + bias
            if layer < len(self.weights) - 1:
                x = x.tanh()
        return x


def cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """The mean negative log-likelihood of the labels under softmax(logits)."""
    return -logits.log_softmax(-1).gather(1, labels.reshape(-1, 1)).mean()


@dataclass
class TrainingRun:
    """What `train` measured."""

    losses: list[float] = field(default_factory=list)
    accuracy: float = 0.0
    kernels: int = 0
    flops: int = 0
    memory_bytes: int = 0
    kernel_seconds: float = 0.0
    seconds: float = 0.0


def train(
    points_per_class: int = 200,
    steps: int = 500,
    hidden: int = 64,
    learning_rate: float = 0.3,
    momentum: float = 0.9,
    turns: float = 1.5,
    max_gradient_norm: float | None = 0.5,
    seed: int = 0,
    log_every: int = 0,
) -> TrainingRun:
    """Full-batch SGD with momentum (and the gradients' joint norm clipped to `max_gradient_norm`) on the two
    spirals; returns the losses, the final accuracy and the kernel statistics."""
    points, labels = two_spirals(points_per_class, seed, turns)
    x, y = Tensor(points), Tensor(labels)
    model = MLP.create([2, hidden, hidden, 2], seed)
    # v <- momentum * v + grad, p <- p - learning_rate * v (PyTorch's SGD), after clipping the gradients' joint norm
    optimizer = optim.SGD(model.parameters, lr=learning_rate, momentum=momentum)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = cross_entropy(model(x), y)
        loss.backward()
        if max_gradient_norm is not None:
            optim.clip_grad_norm_(model.parameters, max_gradient_norm)
        optimizer.step()
        return loss

    run = TrainingRun()
    GlobalCounters.reset()
    started = time.perf_counter()
    for number in range(steps):
        run.losses.append(float(step(x, y).item()))
        if log_every and (number % log_every == 0 or number == steps - 1):
            print(f"step {number:4d}  loss {run.losses[-1]:.4f}")
    with no_grad():
        predictions = model(x).argmax(-1).numpy()
    run.accuracy = float((predictions == labels).mean())
    run.seconds = time.perf_counter() - started
    run.kernels, run.flops = GlobalCounters.kernel_count, GlobalCounters.flops
    run.memory_bytes = GlobalCounters.mem_bytes
    run.kernel_seconds = GlobalCounters.time_ns / 1e9
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--points", type=int, default=200, help="points per spiral arm")
    parser.add_argument("--hidden", type=int, default=64)
    arguments = parser.parse_args()
    print(
        f"two spirals: {2 * arguments.points} points, MLP 2-{arguments.hidden}-{arguments.hidden}-2, device "
        f"{Tensor([0.0]).device}"
    )
    run = train(arguments.points, arguments.steps, arguments.hidden, log_every=max(1, arguments.steps // 10))
    print(
        f"kernels: {run.kernels} ({run.kernels / arguments.steps:.1f} per step), "
        f"{run.flops / 1e6:.1f} MFLOP, {run.memory_bytes / 1e6:.1f} MB moved, "
        f"{run.kernel_seconds:.2f} s in kernels, {run.seconds:.2f} s in all"
    )
    print(f"accuracy: {run.accuracy * 100:.1f}%")


if __name__ == "__main__":
    main()
