"""A Tensor subclass keeps its class through operations, as a torch.Tensor subclass does (torch's default
__torch_function__ wraps every result in the most derived class among the operands)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from kiln.tensor import Tensor


class Tagged(Tensor):
    """A user's subclass with nothing of its own."""


A = np.array([[1.0, -2.0], [3.0, 4.0]], np.float32)
B = np.array([[0.5, 1.0], [2.0, -1.0]], np.float32)

OPERATIONS: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "add a scalar": (lambda a, b: a + 1, lambda a, b: a + 1),
    "scalar on the left": (lambda a, b: 2 * a, lambda a, b: 2 * a),
    "with a plain tensor": (lambda a, b: a * b, lambda a, b: a * b),
    "plain tensor on the left": (lambda a, b: b - a, lambda a, b: b - a),
    "matmul": (lambda a, b: a @ b, lambda a, b: a @ b),
    "sum": (lambda a, b: a.sum(0), lambda a, b: a.sum(0)),
    "exp": (lambda a, b: a.exp(), np.exp),
    "reshape": (lambda a, b: a.reshape(4), lambda a, b: a.reshape(4)),
    "transpose": (lambda a, b: a.T, lambda a, b: a.T),
    "index": (lambda a, b: a[1], lambda a, b: a[1]),
    "softmax": (
        lambda a, b: a.softmax(-1),
        lambda a, b: np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True),
    ),
    "comparison": (lambda a, b: a > b, lambda a, b: a > b),
    "cast": (lambda a, b: a.int(), lambda a, b: a.astype(np.int32)),
    "detach": (lambda a, b: a.detach(), lambda a, b: a),
}


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_operations_on_a_subclass_return_the_subclass(name: str) -> None:
    build, reference = OPERATIONS[name]
    result = build(Tagged(A), Tensor(B))
    assert type(result) is Tagged
    np.testing.assert_allclose(result.numpy(), reference(A, B), rtol=1e-6)


def test_plain_tensors_stay_plain() -> None:
    result = Tensor(A) @ Tensor(B) + 1
    assert type(result) is Tensor


def test_a_subclass_trains_like_a_tensor() -> None:
    weight = Tagged(A, requires_grad=True)
    loss = (weight * Tensor(B)).sum()
    assert type(loss) is Tagged
    loss.backward()
    assert weight.grad is not None
    np.testing.assert_allclose(weight.grad.numpy(), B)
