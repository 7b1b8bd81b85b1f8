"""A training step that updates its parameters one by one costs what `optim.SGD`'s one-schedule step costs (issue 36).

The idioms: tinygrad's `p.assign(p.detach() - p.grad * lr)` and PyTorch's `with no_grad(): p -= lr * p.grad`, after
`loss.backward()`. Each write runs at once (see "Mutation semantics" in docs/ARCHITECTURE.md); `backward()` computes
the gradients, the loss and the live results of the forward pass together, so each write is one small kernel (two for
`-=`, which also computes its right-hand side) and nothing runs the forward or backward pass again. Before, the other
gradients were lazy graphs over the parameter just written: each write snapshotted the parameter and the next one
recomputed the forward and backward passes (117 kernels a step against SGD's 39 on benchmarks/train_bench.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from kiln.tensor import GlobalCounters, Tensor, nn, no_grad, optim
from kiln.tensor.gradient import compute_gradient
from kiln.uops import Ops, UOp

LR = 0.05
STEPS = 3


def _model() -> nn.Sequential:
    Tensor.manual_seed(3)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 8, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8, 3),
    )  # fmt: skip


def _batch() -> tuple[Tensor, Tensor]:
    rng = np.random.default_rng(5)
    images = Tensor(rng.standard_normal((16, 1, 12, 12)).astype(np.float32))
    labels = Tensor(rng.integers(0, 3, 16).astype(np.int64))
    return images, labels


def _assign_each(parameter: Tensor) -> None:
    parameter.assign(parameter.detach() - parameter.grad * LR)


def _subtract_each(parameter: Tensor) -> None:
    with no_grad():
        parameter -= LR * parameter.grad


IDIOMS: dict[str, Callable[[Tensor], None]] = {"assign": _assign_each, "isub": _subtract_each}
# kernels one write may launch: the update (and, for `-=`, its right-hand side, a live temporary during the write)
KERNELS_PER_WRITE = {"assign": 1, "isub": 2}


class _Run:
    """One model trained by SGD (idiom None) or by a per-parameter write loop, with per-step kernel counts."""

    def __init__(self, idiom: str | None) -> None:
        self.model = _model()
        self.params = self.model.parameters()
        self.optimizer = optim.SGD(self.params, lr=LR)
        self.idiom = idiom
        self.write_kernels: list[int] = []

    def step(self, images: Tensor, labels: Tensor) -> tuple[Tensor, int, int]:
        """(the loss, kernels of the step, kernels launched by reading the loss afterwards)."""
        GlobalCounters.reset()
        self.optimizer.zero_grad()
        loss = self.model(images).cross_entropy(labels)
        loss.backward()
        if self.idiom is None:
            self.optimizer.step()
        else:
            for parameter in self.params:
                before = GlobalCounters.kernel_count
                IDIOMS[self.idiom](parameter)
                self.write_kernels.append(GlobalCounters.kernel_count - before)
        kernels = GlobalCounters.kernel_count
        loss.item()
        return loss, kernels, GlobalCounters.kernel_count - kernels


@pytest.mark.parametrize("idiom", sorted(IDIOMS))
def test_per_parameter_loop_matches_sgd_at_sgds_cost(idiom: str) -> None:
    images, labels = _batch()
    sgd, loop = _Run(None), _Run(idiom)
    for step in range(STEPS):
        sgd_loss, sgd_kernels, sgd_reading = sgd.step(images, labels)
        loop_loss, loop_kernels, loop_reading = loop.step(images, labels)
        assert loop_loss.item() == pytest.approx(sgd_loss.item(), rel=1e-6), f"step {step}"
        for index, (a, b) in enumerate(zip(loop.params, sgd.params)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7, err_msg=f"step {step} param {index}")
        # the loss was computed with the gradients: reading it after the writes runs nothing
        assert (sgd_reading, loop_reading) == (0, 0), f"step {step}"
        # each write is its own small schedule: no forward or backward pass runs again for a later gradient
        per_write = KERNELS_PER_WRITE[idiom]
        written = loop.write_kernels[-len(loop.params) :]
        assert written == [per_write] * len(loop.params), f"step {step}: kernels per write {written}"
        assert loop_kernels <= sgd_kernels + len(loop.params), f"step {step}: {loop_kernels} against {sgd_kernels}"


def test_backward_computes_the_gradients_the_loss_and_kept_results_together() -> None:
    images, labels = _batch()
    model = _model()
    logits = model(images)  # kept, as for an accuracy
    loss = logits.cross_entropy(labels)
    loss.backward()
    GlobalCounters.reset()
    grads = [parameter.grad.numpy() for parameter in model.parameters()]
    loss.item()
    logit_values = logits.numpy()
    assert GlobalCounters.kernel_count == 0
    assert all(np.isfinite(grad).all() for grad in grads)
    # a result of the kept logits runs only its own kernels, as it does on the same values in a fresh buffer
    GlobalCounters.reset()
    correct = (logits.argmax(1) == labels).sum().item()
    from_logits = GlobalCounters.kernel_count
    GlobalCounters.reset()
    assert (Tensor(logit_values).argmax(1) == labels).sum().item() == correct
    assert from_logits == GlobalCounters.kernel_count


def test_gradient_read_by_two_shortcut_gradients_is_computed_once() -> None:
    # a convolution's input and weight gradients are kernels of their own that read the gradient flowing into the
    # convolution many times per element: it becomes a buffer (CONTIGUOUS) they read, and so does the bias gradient,
    # built before the convolution's rule ran, instead of a graph each recomputes
    rng = np.random.default_rng(7)
    x = Tensor(rng.standard_normal((2, 3, 6, 6)).astype(np.float32), requires_grad=True)
    w = Tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), requires_grad=True)
    b = Tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True)
    out = x.conv2d(w) + b.reshape(1, 4, 1, 1)
    upstream = (Tensor(rng.standard_normal(out.shape).astype(np.float32)) * 2.0).relu()
    targets = (x.uop, w.uop, b.uop)
    found = compute_gradient(out.uop, upstream.uop, targets)

    def outside_buffers(node: UOp) -> bool:
        return node.op is not Ops.CONTIGUOUS

    def reads(gradient: UOp) -> set[UOp]:
        # how the gradient reads `upstream`: through CONTIGUOUS nodes of it, or as the graph itself
        nodes = gradient.toposort(gate=outside_buffers)
        buffered = {node for node in nodes if node.op is Ops.CONTIGUOUS and node.src[0] is upstream.uop}
        return buffered | ({upstream.uop} if upstream.uop in nodes else set())

    shared = [reads(found[target]) for target in targets]
    assert len(shared[0]) == 1 and next(iter(shared[0])).op is Ops.CONTIGUOUS
    assert shared[0] == shared[1] == shared[2]
    for target in targets:  # the same values as the primitives' rules give
        plain = compute_gradient(out.uop, upstream.uop, [target], shortcuts=False)[target]
        got, expected = Tensor._from_uop(found[target]).numpy(), Tensor._from_uop(plain).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # one gradient wanted, or a gradient already in memory: nothing to share, no copy
    alone = compute_gradient(out.uop, upstream.uop, [w.uop])[w.uop]
    assert not any(node.op is Ops.CONTIGUOUS for node in alone.toposort())
    data = Tensor(rng.standard_normal(out.shape).astype(np.float32))
    both = compute_gradient(out.uop, data.uop, [x.uop, w.uop])
    assert not any(node.op is Ops.CONTIGUOUS for target in both.values() for node in target.toposort())
