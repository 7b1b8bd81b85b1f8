"""The quickstart's training step as a benchmark fixture, shared by tensor_bench.py and codegen_bench.py.

An MLP 2-64-64-2 (tanh) on 400 random points with labels 0 / 1, cross-entropy, backward, the gradients' joint norm
clipped to 0.5, SGD with momentum 0.9 (lr 0.3): the same work as examples/quickstart.py's step, on fixed data.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from kiln.tensor import Tensor, optim


def mlp_step(device: str) -> Callable[[], Tensor]:
    """A function running one training step on `device` each call (no JIT) and returning the still-lazy loss."""
    rng = np.random.default_rng(0)
    x = Tensor(rng.normal(size=(400, 2)).astype(np.float32), device=device)
    y = Tensor(rng.integers(0, 2, 400), device=device)
    sizes = (2, 64, 64, 2)
    weights = [
        Tensor(rng.uniform(-0.5, 0.5, shape).astype(np.float32), device=device, requires_grad=True)
        for shape in itertools.pairwise(sizes)
    ]
    biases = [Tensor(np.zeros(size, np.float32), device=device, requires_grad=True) for size in sizes[1:]]
    parameters = [*weights, *biases]
    optimizer = optim.SGD(parameters, lr=0.3, momentum=0.9)

    def step() -> Tensor:
        optimizer.zero_grad()
        h = x
        for layer, (weight, bias) in enumerate(zip(weights, biases, strict=True)):
            h = h @ weight + bias
            if layer < len(weights) - 1:
                h = h.tanh()
        loss = -h.log_softmax(-1).gather(1, y.reshape(-1, 1)).mean()
        loss.backward()
        optim.clip_grad_norm_(parameters, 0.5)
        optimizer.step()
        return loss

    return step
