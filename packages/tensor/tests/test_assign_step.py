"""Training steps updated per parameter keep PyTorch's semantics exactly, with and without TinyJit (issue 42).

Four SGD steps of a small CNN and of a ResNet basic block with BatchNorm (training mode: batch statistics, running
statistics written every step), each on its own batch, against the losses, parameters and buffers torch recorded
(fixtures/make_assign_step.py). The update runs three ways: `optim.SGD.step()`, tinygrad's per-parameter
`p.assign(p.detach() - p.grad * lr)` and PyTorch's `with no_grad(): p -= lr * p.grad`. Each write happens at once;
every gradient must still be the one of the pre-update parameters (a gradient computed after an earlier write would
read the new values), and under TinyJit the replayed writes (calls 3 and 4) must land in the live parameters.
"""

from __future__ import annotations

import functools
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kiln.tensor import GlobalCounters, Tensor, TinyJit, nn, no_grad, optim

pytestmark = pytest.mark.default_device("CPU")

RECORDED = np.load(pathlib.Path(__file__).parent / "fixtures" / "assign_step.npz")
LR = 0.1
STEPS = 4


class _ResBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(4)
        self.shortcut = nn.Conv2d(3, 4, 1, bias=False)
        self.head = nn.Linear(4, 3)

    def forward(self, x: Tensor) -> Tensor:
        out = self.bn1(self.conv1(x)).relu()
        out = (self.bn2(self.conv2(out)) + self.shortcut(x)).relu()
        result: Tensor = self.head(out.mean((2, 3)))
        return result


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 8, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8, 3),
    )  # fmt: skip


MODELS: dict[str, Callable[[], nn.Module]] = {"cnn": _cnn, "resblock": _ResBlock}


def _recorded(prefix: str) -> dict[str, np.ndarray[Any, Any]]:
    return {key[len(prefix) :]: RECORDED[key] for key in RECORDED.files if key.startswith(prefix)}


def _sgd(optimizer: optim.SGD, params: list[Tensor]) -> None:
    optimizer.step()


def _assign(optimizer: optim.SGD, params: list[Tensor]) -> None:
    for parameter in params:
        parameter.assign(parameter.detach() - parameter.grad * LR)


def _subtract(optimizer: optim.SGD, params: list[Tensor]) -> None:
    with no_grad():
        for parameter in params:
            parameter -= LR * parameter.grad


UPDATES: dict[str, Callable[[optim.SGD, list[Tensor]], None]] = {"sgd": _sgd, "assign": _assign, "isub": _subtract}


@functools.cache
def _train(model_name: str, update: str, jit: bool) -> tuple[int, ...]:
    """Trains against the recorded values, checking every step; returns the kernels each step launched (cached: the
    kernel-count test reads the runs the fidelity test made)."""
    model = MODELS[model_name]()
    initial = _recorded(f"{model_name}/initial/")
    model.load_state_dict({key: Tensor(value) for key, value in initial.items()})
    params = model.parameters()
    optimizer = optim.SGD(params, lr=LR)

    def step(x: Tensor, y: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = model(x).cross_entropy(y)
        loss.backward()
        UPDATES[update](optimizer, params)
        return loss

    run = TinyJit(step) if jit else step
    kernels = []
    for index in range(STEPS):
        images = Tensor(RECORDED[f"{model_name}/images/{index}"])
        labels = Tensor(RECORDED[f"{model_name}/labels/{index}"])
        images.realize(), labels.realize()
        GlobalCounters.reset()
        loss = run(images, labels)
        loss.realize()
        kernels.append(GlobalCounters.kernel_count)
        where = f"{model_name}, {update}, jit={jit}, step {index}"
        np.testing.assert_allclose(loss.item(), RECORDED[f"{model_name}/loss/{index}"], rtol=2e-5, err_msg=where)
        state = {key: value.numpy() for key, value in model.state_dict().items()}
        expected = _recorded(f"{model_name}/after/{index}/")
        assert sorted(state) == sorted(expected), where
        for key, value in expected.items():
            np.testing.assert_allclose(state[key], value, rtol=2e-5, atol=2e-6, err_msg=f"{where}: {key}")
    return tuple(kernels)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("update", sorted(UPDATES))
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_steps_match_torch(model_name: str, update: str, jit: bool) -> None:
    _train(model_name, update, jit)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_per_parameter_loops_cost_what_sgd_costs(model_name: str, jit: bool) -> None:
    # each write is one small kernel (`-=` also computes its right-hand side first): nothing runs the forward or
    # backward pass again for the gradients the later writes read, with BatchNorm's running statistics written too
    sgd = _train(model_name, "sgd", jit)
    parameters = len(MODELS[model_name]().parameters())
    for update, per_write in (("assign", 1), ("isub", 2)):
        loop = _train(model_name, update, jit)
        assert len(set(loop)) == 1, f"{update}: kernels per step {loop}"
        # SGD's one schedule: the backward pass and one kernel per parameter
        assert loop[0] <= sgd[0] - parameters + per_write * parameters, f"{update}: {loop} against SGD's {sgd}"
