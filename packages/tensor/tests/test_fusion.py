"""Fusion by kernel count (issue 7), each result checked against numpy.

Each case is counted twice: built from the primitives (the scheduler's own property) and written with the public
Tensor methods exactly as a user would (what the issue asks). Runs on the default device.
"""

from __future__ import annotations

import numpy as np
from engine_graphs import add, const_like, matmul, plan_of, relu, softmax_last_axis, softmax_reference

from kiln.tensor import GlobalCounters, Tensor
from kiln.uops import Ops

SOFTMAX_MAX_KERNELS = 3


def _kernels_run(*tensors: Tensor) -> int:
    GlobalCounters.reset()
    Tensor.realize_all(*tensors)
    return GlobalCounters.kernel_count


def _data(seed: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


def test_add_relu_sum_is_one_kernel() -> None:
    a_values, b_values = _data(0, (16, 24), (16, 24))
    a, b = Tensor(a_values), Tensor(b_values)
    reduced = relu(add(a, b))._reduce(Ops.ADD, (0, 1))
    assert plan_of(reduced).kernel_count == 1
    assert _kernels_run(reduced) == 1
    np.testing.assert_allclose(reduced.numpy(), [[np.maximum(a_values + b_values, 0).sum()]], rtol=1e-5)
    public = (a + b).relu().sum()
    assert _kernels_run(public) == 1
    np.testing.assert_allclose(public.numpy(), np.maximum(a_values + b_values, 0).sum(), rtol=1e-5)


def test_softmax_last_axis_is_at_most_three_kernels() -> None:
    (values,) = _data(1, (8, 33))
    x = Tensor(values)
    result = softmax_last_axis(x)
    assert plan_of(result).kernel_count <= SOFTMAX_MAX_KERNELS
    assert _kernels_run(result) <= SOFTMAX_MAX_KERNELS
    np.testing.assert_allclose(result.numpy(), softmax_reference(values), rtol=1e-5, atol=1e-7)
    public = Tensor(values).softmax(-1)
    assert _kernels_run(public) <= SOFTMAX_MAX_KERNELS
    np.testing.assert_allclose(public.numpy(), softmax_reference(values), rtol=1e-5, atol=1e-7)


def test_matmul_bias_relu_is_one_kernel() -> None:
    x_values, w_values, b_values = _data(2, (12, 20), (20, 9), (9,))
    x, w, b = Tensor(x_values), Tensor(w_values), Tensor(b_values)
    result = relu(add(matmul(x, w), b))
    assert plan_of(result).kernel_count == 1
    assert _kernels_run(result) == 1
    expected = np.maximum(x_values @ w_values + b_values, 0)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5)
    public = (x @ w + b).relu()
    assert _kernels_run(public) == 1
    np.testing.assert_allclose(public.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_elementwise_chain_is_one_kernel() -> None:
    (values,) = _data(3, (5, 7))
    x = Tensor(values)
    node, expected = x, values
    for step in range(12):
        node = node._binary(Ops.MUL, const_like(node, 0.9))._binary(Ops.ADD, x)
        node = node._binary(Ops.MAX, const_like(node, -1.0 + step / 10))
        expected = np.maximum(expected * np.float32(0.9) + values, np.float32(-1.0 + step / 10))
    assert _kernels_run(node) == 1
    np.testing.assert_allclose(node.numpy(), expected, rtol=1e-5)


def test_two_layer_mlp_forward_is_two_kernels() -> None:
    x_values, w1_values, b1_values, w2_values, b2_values = _data(4, (6, 10), (10, 16), (16,), (16, 3), (3,))
    x, w1, b1, w2, b2 = (Tensor(v) for v in (x_values, w1_values, b1_values, w2_values, b2_values))
    # the hidden layer is expanded by the second matmul: it gets a buffer (with its bias and relu fused in)
    output = add(matmul(relu(add(matmul(x, w1), b1)), w2), b2)
    assert _kernels_run(output) == 2
    expected = np.maximum(x_values @ w1_values + b1_values, 0) @ w2_values + b2_values
    np.testing.assert_allclose(output.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_reduce_epilogue_and_prologue_fuse() -> None:
    (values,) = _data(5, (9, 11))
    x = Tensor(values)
    # exp2 of the input (prologue) summed, then scaled and square-rooted (epilogue): one kernel
    result = (
        x._unary(Ops.EXP2)
        ._reduce(Ops.ADD, (1,))
        ._binary(Ops.MUL, const_like(x, 0.25)._movement(Ops.SHRINK, ((0, 9), (0, 1))))
    )
    result = result._unary(Ops.SQRT)
    assert _kernels_run(result) == 1
    np.testing.assert_allclose(result.numpy(), np.sqrt(np.exp2(values).sum(1, keepdims=True) * 0.25), rtol=1e-5)
