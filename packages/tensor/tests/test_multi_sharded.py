"""Sharded tensors equal unsharded ones: each op family forward and backward on 2 and 3 CPU devices, with splits
that do not divide evenly, against the same computation on one device (itself checked against numpy).

A sharded tensor is a `Tensor` whose graph holds its placement (a MULTI node); the layout of a result (`shard_axis`:
the split axis, or None when every device holds all of it) is the one kiln.tensor.multi.lower gives it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.uops import Ops

DEVICES = {2: ("CPU", "CPU:1"), 3: ("CPU:1", "CPU:2", "CPU:3")}
Layout = tuple[tuple[int, ...], int | None]


def _compare(
    count: int, layouts: Sequence[Layout], function: Callable[..., Any], numpy_function: Callable[..., Any]
) -> Tensor:
    """Runs `function` sharded and unsharded; checks values (also against numpy) and the inputs' gradients."""
    devices = DEVICES[count]
    rng = np.random.default_rng(count * 10 + len(layouts))
    arrays = [rng.uniform(-1, 1, shape).astype(np.float32) for shape, _ in layouts]
    plain_leaves = [Tensor(array, requires_grad=True) for array in arrays]
    plain = function(*plain_leaves)
    np.testing.assert_allclose(plain.numpy(), numpy_function(*arrays), rtol=1e-5, atol=1e-5)
    weights = rng.uniform(-1, 1, plain.shape).astype(np.float32)
    (plain * Tensor(weights)).sum().backward()

    sharded_leaves = [Tensor(array, requires_grad=True) for array in arrays]
    inputs = [leaf.shard(devices, axis) for leaf, (_, axis) in zip(sharded_leaves, layouts)]
    sharded = function(*inputs)
    assert isinstance(sharded, Tensor) and sharded.is_sharded and sharded.devices == devices
    np.testing.assert_allclose(sharded.numpy(), plain.numpy(), rtol=1e-5, atol=1e-5)
    (sharded * Tensor(weights).shard(devices)).sum().backward()
    for sharded_leaf, plain_leaf in zip(sharded_leaves, plain_leaves):
        assert sharded_leaf.grad is not None and plain_leaf.grad is not None
        np.testing.assert_allclose(sharded_leaf.grad.numpy(), plain_leaf.grad.numpy(), rtol=1e-5, atol=1e-5)
    return sharded


COUNTS = pytest.mark.parametrize("count", [2, 3])


@COUNTS
@pytest.mark.parametrize(
    "layouts",
    [
        [((7, 5), 0), ((7, 5), 0)],  # both split alike (uneven)
        [((7, 5), 0), ((5,), None)],  # split plus a replicated operand that broadcasts
        [((7, 5), 1), ((7, 1), None)],  # broadcast along the split axis
        [((7, 5), 1), ((7, 5), 0)],  # split differently: the second is re-laid out
        [((4, 5), None), ((4, 5), 1)],  # the split operand second
    ],
)
def test_elementwise_binary(count: int, layouts: list[Layout]) -> None:
    _compare(count, layouts, lambda a, b: (a * b + a) / (b * b + 1), lambda a, b: (a * b + a) / (b * b + 1))


@COUNTS
def test_elementwise_unary_and_scalars(count: int) -> None:
    result = _compare(
        count,
        [((5, 3), 0)],
        lambda a: (a * 2 - 1).exp().relu() + a.sigmoid() * 3 - 0.5 * a.tanh() + (a > 0).where(a, -a).maximum(0.2),
        lambda a: (
            np.maximum(np.exp(a * 2 - 1), 0) + 3 / (1 + np.exp(-a)) - 0.5 * np.tanh(a) + np.maximum(np.abs(a), 0.2)
        ),
    )
    expected = [(3, 3), (2, 3)] if count == 2 else [(2, 3), (2, 3), (1, 3)]
    assert result.shard_axis == 0 and [shard.shape for shard in result.shards] == expected


@COUNTS
@pytest.mark.parametrize(
    ("axis", "reduce", "expected_axis"),
    [
        (None, lambda x: x.sum(), None),
        (0, lambda x: x.sum(0), None),  # over the split axis: allreduce
        (0, lambda x: x.sum(1), 0),
        (1, lambda x: x.sum(axis=1, keepdim=True), None),
        (1, lambda x: x.mean(0), 0),
        (0, lambda x: x.mean(), None),
        (0, lambda x: x.amax(0), None),
        (1, lambda x: x.amin(1), None),
        (0, lambda x: x.amax(1, keepdim=True), 0),
        (2, lambda x: x.sum((0, 2)), None),
    ],
)
def test_reductions(count: int, axis: int, reduce: Callable[[Any], Any], expected_axis: int | None) -> None:
    shape = (7, 5, 3) if axis == 2 else (7, 5)
    result = _compare(count, [(shape, axis)], reduce, lambda a: reduce(Tensor(a)).numpy())
    assert result.shard_axis == expected_axis


@COUNTS
@pytest.mark.parametrize("split", [0, 1])
@pytest.mark.parametrize("over", [0, 1])
def test_softmax_and_log_softmax(count: int, split: int, over: int) -> None:
    def numpy_softmax(a: np.ndarray) -> np.ndarray:
        e = np.exp(a - a.max(over, keepdims=True))
        return e / e.sum(over, keepdims=True)

    _compare(count, [((5, 7), split)], lambda a: a.softmax(over), numpy_softmax)
    _compare(count, [((5, 7), split)], lambda a: a.log_softmax(over), lambda a: np.log(numpy_softmax(a)))


@COUNTS
@pytest.mark.parametrize(
    ("a_layout", "b_layout", "expected_axis"),
    [
        (((7, 5), 0), ((5, 4), None), 0),  # rows of a split
        (((6, 5), None), ((5, 7), 1), 1),  # column parallel
        (((6, 7), 1), ((7, 4), 0), None),  # row parallel: partial products allreduced
        (((6, 7), 1), ((7, 4), None), None),  # contracted axis split, b sliced to match
        (((6, 7), None), ((7, 4), 0), None),
        (((7, 5), 0), ((5, 4), 1), 0),  # b gathered
        (((5, 3, 4), 0), ((4, 2), None), 0),  # batch axis split
        (((3, 5, 4), 1), ((3, 4, 2), None), 1),
        (((5,), 0), ((5, 3), 0), None),  # vector @ matrix, row parallel
        (((5, 3), 0), ((3,), None), 0),  # matrix @ vector
    ],
)
def test_matmul(count: int, a_layout: Layout, b_layout: Layout, expected_axis: int | None) -> None:
    result = _compare(count, [a_layout, b_layout], lambda a, b: a @ b, np.matmul)
    assert result.shard_axis == expected_axis


@COUNTS
@pytest.mark.parametrize(
    ("shape", "axis", "new_shape", "expected_axis"),
    [
        ((6, 4), 0, (24,), 0),
        ((6, 6), 0, (12, 3), 0),
        ((6, 4), 0, (6, 2, 2), 0),
        ((5, 6), 0, (5, 2, 3), 0),
        ((4, 7, 2), 1, (4, 14), 1),
        ((4, 7, 2), 1, (2, 2, 7, 2, 1), 2),
        ((7, 4), 0, (7, 1, 4), 0),
        ((4, 6), None, (3, 8), None),
    ],
)
def test_reshape_keeps_the_split(
    count: int, shape: tuple[int, ...], axis: int | None, new_shape: tuple[int, ...], expected_axis: int | None
) -> None:
    result = _compare(count, [(shape, axis)], lambda a: a.reshape(new_shape) * 2, lambda a: a.reshape(new_shape) * 2)
    assert result.shard_axis == expected_axis


@COUNTS
@pytest.mark.parametrize(("axis", "order", "expected_axis"), [(0, (2, 0, 1), 1), (1, (1, 2, 0), 0), (2, (0, 2, 1), 1)])
def test_permute_moves_the_split(count: int, axis: int, order: tuple[int, ...], expected_axis: int) -> None:
    result = _compare(count, [((5, 4, 3), axis)], lambda a: a.permute(order) + 1, lambda a: a.transpose(order) + 1)
    assert result.shard_axis == expected_axis
    assert _compare(count, [((5, 3), 0)], lambda a: a.T * 3, lambda a: a.T * 3).shard_axis == 1


@COUNTS
def test_a_two_layer_network(count: int) -> None:
    # column parallel then row parallel (the Megatron pattern), a reduction over the split batch, gradients for all
    def network(x: Any, w1: Any, w2: Any) -> Any:
        return ((x @ w1).relu() @ w2).softmax(1).mean(0)

    def numpy_network(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
        h = np.maximum(x @ w1, 0) @ w2
        e = np.exp(h - h.max(1, keepdims=True))
        return (e / e.sum(1, keepdims=True)).mean(0)

    _compare(count, [((7, 4), 0), ((4, 6), 1), ((6, 3), 0)], network, numpy_network)


def test_split_bounds_are_balanced_and_realized_per_device() -> None:
    x = Tensor(np.arange(14, dtype=np.float32).reshape(7, 2)).shard(DEVICES[3], axis=0)
    assert isinstance(x, Tensor) and x.uop.op is Ops.MULTI and x.uop.arg == 0  # the graph holds the placement
    assert [shard.shape for shard in x.shards] == [(3, 2), (2, 2), (2, 2)]
    assert [shard.device for shard in x.shards] == list(DEVICES[3])
    doubled = (x * 2).realize()
    np.testing.assert_array_equal(doubled.shards[2].numpy(), [[20.0, 22.0], [24.0, 26.0]])
    gathered = doubled.to("CPU")
    assert gathered.device == "CPU"
    np.testing.assert_array_equal(gathered.numpy(), np.arange(14).reshape(7, 2) * 2)
    replicated = Tensor([1.0, 2.0]).to(list(DEVICES[2]))
    assert isinstance(replicated, Tensor) and replicated.shard_axis is None and replicated.devices == DEVICES[2]


def test_sharded_leaves_collect_their_gradients() -> None:
    rng = np.random.default_rng(0)
    x_values, w_values = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    x = Tensor(x_values).shard(DEVICES[2], axis=0).requires_grad_()
    w = Tensor(w_values).shard(DEVICES[2]).requires_grad_()
    ((x @ w) ** 2).sum().backward()
    y = x_values @ w_values
    assert x.grad is not None and w.grad is not None and x.grad.shard_axis == 0 and w.grad.shard_axis is None
    np.testing.assert_allclose(x.grad.numpy(), 2 * y @ w_values.T, rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), x_values.T @ (2 * y), rtol=1e-5)
    for shard in w.grad.shards:  # the replicas' gradient is the full one on every device
        np.testing.assert_allclose(shard.numpy(), x_values.T @ (2 * y), rtol=1e-5)


def test_refusals_name_the_problem() -> None:
    with pytest.raises(ValueError, match="cannot split axis 0 of size 2 over 3 devices"):
        Tensor([1.0, 2.0]).shard(DEVICES[3], axis=0)
    with pytest.raises(IndexError, match="shard axis 2 is out of range"):
        Tensor([[1.0]]).shard(DEVICES[2], axis=2)
    with pytest.raises(ValueError, match="must be distinct"):
        Tensor([1.0, 2.0]).shard(["CPU", "CPU:0"], axis=0)
    x = Tensor(np.zeros((6, 4), np.float32)).shard(DEVICES[2], axis=0)
    with pytest.raises(ValueError, match=r"operands are on different devices, \('CPU', 'CPU:1'\) and 'CPU'"):
        x + Tensor(np.zeros(4, np.float32))  # shard the Tensor first
    with pytest.raises(ValueError, match="operands are on different devices"):
        x + Tensor(np.zeros((6, 4), np.float32)).shard(DEVICES[3], axis=0)
    with pytest.raises(RuntimeError, match="needs a tensor with one element"):
        x.requires_grad_().backward()  # a gradient to start from is needed for more than one element


def test_a_reshape_that_would_cut_a_part_gathers_and_any_method_runs() -> None:
    values = np.arange(24, dtype=np.float32).reshape(6, 4)
    x = Tensor(values).shard(DEVICES[2], axis=0)
    cut = x.reshape(3, 8)  # device 0 holds rows 0-2, 12 elements: one and a half rows of 8
    assert cut.shard_axis is None
    np.testing.assert_array_equal(cut.numpy(), values.reshape(3, 8))
    # every Tensor method works on a sharded tensor: it is a Tensor (a cumulative sum along the split axis)
    np.testing.assert_allclose(x.cumsum(0).numpy(), np.cumsum(values, 0))


@COUNTS
def test_more_movement_and_methods(count: int) -> None:
    _compare(count, [((5, 2, 3), 0)], lambda a: a.flatten(1) * 2, lambda a: a.reshape(5, 6) * 2)
    _compare(count, [((5, 3), 0)], lambda a: a.unsqueeze(1) + 1, lambda a: a[:, None] + 1)
    _compare(count, [((3, 5), 1)], lambda a: a.transpose(0, 1) - 1, lambda a: a.T - 1)
    _compare(count, [((5, 3), 0), ((5, 3), 1)], lambda a, b: a.maximum(b), np.maximum)
    _compare(count, [((5, 3), 0)], lambda a: a.prod(0) + 0, lambda a: a.prod(0))


def test_placement_round_trips() -> None:
    values = np.arange(35, dtype=np.float32).reshape(7, 5)
    x = Tensor(values).shard(DEVICES[2], axis=0)
    again = x.to(list(DEVICES[3]))  # re-laid out over 3 devices, same split axis
    assert again.devices == DEVICES[3] and again.shard_axis == 0
    assert [shard.shape for shard in again.shards] == [(3, 5), (2, 5), (2, 5)]
    moved = x.shard(DEVICES[3], axis=1)
    assert moved.shard_axis == 1 and [shard.shape for shard in moved.shards] == [(7, 2), (7, 2), (7, 1)]
    np.testing.assert_array_equal(moved.numpy(), values)
    replicated = moved.shard(moved.devices)
    assert replicated.shard_axis is None
    np.testing.assert_array_equal(replicated.shards[2].numpy(), values)
    assert x.sum().item() == values.sum() and x.tolist() == values.tolist()
    assert len(x) == 7 and x.ndim == 2 and x.numel() == 35 and x.device == DEVICES[2]
