"""Sharded graphs (kiln.tensor.sharding): a graph over MULTI nodes, realized, equals numpy on the whole arrays.

Each case builds tensor-graph nodes over MULTI nodes (one shard per CPU device, split along an axis or replicated),
realizes them through the engine (which lowers them to one graph per device) and compares the joined shards with
numpy's result on the unsharded arrays; the layout of each result (split axis, or replicated) is checked too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from kiln.tensor import Tensor, graph
from kiln.tensor.gradient import compute_gradient
from kiln.tensor.multi.layout import split_bounds
from kiln.tensor.realize.engine import realize_uops
from kiln.tensor.sharding import lower_sharded
from kiln.uops import Ops, UOp, dtypes

DEVICES = {2: ("CPU", "CPU:1"), 3: ("CPU:1", "CPU:2", "CPU:3")}


def sharded(values: np.ndarray, count: int, axis: int | None) -> UOp:
    """`values` as a MULTI node over `count` CPU devices, split along `axis` (None: a copy on each)."""
    whole = Tensor(values).uop
    devices = DEVICES[count]
    if axis is None:
        return graph.multi([graph.copy_to(whole, device) for device in devices], None)
    bounds = split_bounds(values.shape[axis], count, axis)
    shards = []
    for device, bound in zip(devices, bounds):
        window = tuple(bound if dim == axis else (0, size) for dim, size in enumerate(values.shape))
        shards.append(graph.copy_to(graph.shrink(whole, window), device))
    return graph.multi(shards, axis)


def joined(view: UOp) -> tuple[np.ndarray, int | None]:
    """The realized MULTI view's values (shards joined; replicas checked equal) and its split axis."""
    assert view.op is Ops.MULTI
    parts = [Tensor._from_uop(shard).numpy() for shard in view.src]
    if view.arg is None:
        for part in parts[1:]:
            np.testing.assert_array_equal(part, parts[0])
        return parts[0], None
    return np.concatenate(parts, axis=view.arg), view.arg


def realized(node: UOp) -> tuple[np.ndarray, int | None]:
    return joined(realize_uops([node])[0])


def matmul(a: UOp, b: UOp) -> UOp:
    """a @ b for 2-d nodes, as the tensor front end builds it: reshape, expand, multiply, sum, reshape."""
    (rows, inner), (_, columns) = graph.shape_of(a), graph.shape_of(b)
    left = graph.expand(graph.reshape(a, (rows, inner, 1)), (rows, inner, columns))
    right = graph.expand(graph.reshape(b, (1, inner, columns)), (rows, inner, columns))
    product = graph.reduce_axis(graph.alu(Ops.MUL, left, right), Ops.ADD, (1,))
    return graph.reshape(product, (rows, columns))


RNG = np.random.default_rng(41)
A = RNG.standard_normal((7, 5)).astype(np.float32)
B = RNG.standard_normal((7, 5)).astype(np.float32)


def test_a_multi_node_has_the_logical_shape_and_the_tuple_of_devices() -> None:
    node = sharded(A, 3, 0)
    assert graph.shape_of(node) == (7, 5)
    assert graph.placement_of(node) == DEVICES[3]
    assert [graph.shape_of(shard) for shard in node.src] == [(3, 5), (2, 5), (2, 5)]
    assert node.arg == 0
    doubled = graph.alu(Ops.MUL, node, graph.const(2.0, node.dtype, DEVICES[3], (7, 5)))
    assert graph.placement_of(doubled) == DEVICES[3] and graph.shape_of(doubled) == (7, 5)
    with pytest.raises(ValueError, match="sharded over"):
        graph.device_of(doubled)
    with pytest.raises(ValueError, match="cannot copy a value sharded"):
        graph.copy_to(doubled, "CPU")


def test_multi_refuses_shards_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="distinct devices"):
        graph.multi([Tensor(A).uop, Tensor(B).uop], 0)
    with pytest.raises(ValueError, match="does not fit"):
        graph.multi([Tensor(A).uop, graph.copy_to(Tensor(B[:, :2]).uop, "CPU:1")], 0)
    with pytest.raises(TypeError, match="dtype"):
        graph.multi([Tensor(A).uop, graph.copy_to(Tensor(B.astype(np.int32)).uop, "CPU:1")], None)


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize(("a_axis", "b_axis"), [(0, 0), (1, 1), (0, None), (None, 1), (0, 1), (None, None)])
def test_elementwise_matches_numpy_in_every_layout(count: int, a_axis: int | None, b_axis: int | None) -> None:
    a, b = sharded(A, count, a_axis), sharded(B, count, b_axis)
    scaled = graph.alu(Ops.MUL, graph.const(3.0, a.dtype, DEVICES[count], (7, 5)), b)
    values, axis = realized(graph.alu(Ops.ADD, graph.alu(Ops.EXP2, a), scaled))
    np.testing.assert_allclose(values, np.exp2(A) + 3 * B, rtol=1e-5)
    assert axis == (a_axis if a_axis is not None else b_axis)


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize(("split", "axes"), [(0, (0,)), (0, (1,)), (1, (0, 1)), (None, (1,))])
@pytest.mark.parametrize(("op", "reference"), [(Ops.ADD, np.sum), (Ops.MAX, np.max), (Ops.MUL, np.prod)])
def test_reduce_over_and_across_the_split_axis(
    count: int, split: int | None, axes: tuple[int, ...], op: Ops, reference: Callable[..., np.ndarray]
) -> None:
    values, axis = realized(graph.reduce_axis(sharded(A, count, split), op, axes))
    np.testing.assert_allclose(values, reference(A, axis=axes, keepdims=True), rtol=1e-5)
    # over the split axis the partial results are allreduced: the result is on every device whole
    assert axis == (None if split is None or split in axes else split)


@pytest.mark.parametrize("count", [2, 3])
def test_column_parallel_matmul_is_split_along_the_columns(count: int) -> None:
    weight = RNG.standard_normal((5, 6)).astype(np.float32)
    values, axis = realized(matmul(sharded(A, count, None), sharded(weight, count, 1)))
    np.testing.assert_allclose(values, A @ weight, rtol=1e-4, atol=1e-5)
    assert axis == 1


@pytest.mark.parametrize("count", [2, 3])
def test_row_parallel_matmul_ends_in_an_allreduce(count: int) -> None:
    weight = RNG.standard_normal((5, 4)).astype(np.float32)
    product = matmul(sharded(A, count, 1), sharded(weight, count, 0))
    lowered = lower_sharded(product)
    assert lowered.arg is None  # replicated: every device holds the summed product
    # the ring moves data between the devices: each device's graph copies from the others
    for shard in lowered.src:
        assert any(node.op is Ops.COPY for node in shard.toposort())
    values, axis = realized(product)
    np.testing.assert_allclose(values, A @ weight, rtol=1e-4, atol=1e-5)
    assert axis is None


@pytest.mark.parametrize("count", [2, 3])
def test_a_split_operand_of_another_layout_is_relaid_out(count: int) -> None:
    # a split along its rows times a split along its columns: b is gathered, then cut to a's rows
    values, axis = realized(graph.alu(Ops.MUL, sharded(A, count, 0), sharded(B, count, 1)))
    np.testing.assert_allclose(values, A * B, rtol=1e-6)
    assert axis == 0


@pytest.mark.parametrize(
    ("shape", "split", "new_shape", "expected_axis"),
    [
        ((6, 4), 0, (2, 3, 4), 0),
        ((6, 4), 0, (24,), 0),
        ((2, 6), 1, (2, 2, 3), 1),
        ((6, 4), 1, (24,), None),  # a device's columns are not one block of the flat result
        ((6, 4), 0, (3, 2, 4), None),  # a device's 3 rows would be one and a half rows of the result
    ],
)
def test_reshape_keeps_the_split_when_each_part_stays_whole(
    shape: tuple[int, ...], split: int, new_shape: tuple[int, ...], expected_axis: int | None
) -> None:
    values_in = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    values, axis = realized(graph.reshape(sharded(values_in, 2, split), new_shape))
    np.testing.assert_array_equal(values, values_in.reshape(new_shape))
    assert axis == expected_axis


@pytest.mark.parametrize("count", [2, 3])
def test_permute_moves_the_split_and_pad_shrink_flip_gather_it(count: int) -> None:
    node = sharded(A, count, 0)
    values, axis = realized(graph.permute(node, (1, 0)))
    np.testing.assert_array_equal(values, A.T)
    assert axis == 1
    values, axis = realized(graph.shrink(node, ((1, 6), (1, 4))))
    np.testing.assert_array_equal(values, A[1:6, 1:4])
    assert axis is None
    values, axis = realized(graph.shrink(node, ((0, 7), (1, 4))))  # the split axis untouched: stays split
    np.testing.assert_array_equal(values, A[:, 1:4])
    assert axis == 0
    values, _ = realized(graph.pad(node, ((1, 2), (0, 1))))
    np.testing.assert_array_equal(values, np.pad(A, ((1, 2), (0, 1))))
    values, _ = realized(graph.flip(node, (True, False)))
    np.testing.assert_array_equal(values, A[::-1])


def test_a_one_device_value_copied_to_several_devices_is_replicated() -> None:
    node = graph.copy_to(Tensor(A).uop, DEVICES[3])
    assert graph.placement_of(node) == DEVICES[3]
    values, axis = realized(graph.alu(Ops.ADD, node, sharded(B, 3, 1)))
    np.testing.assert_allclose(values, A + B, rtol=1e-6)
    assert axis == 1


def test_plain_and_sharded_roots_realize_together() -> None:
    plain = graph.alu(Ops.ADD, Tensor(A).uop, Tensor(B).uop)
    split = graph.alu(Ops.NEG, sharded(A, 2, 0))
    plain_view, split_view = realize_uops([plain, split])
    np.testing.assert_allclose(Tensor._from_uop(plain_view).numpy(), A + B, rtol=1e-6)
    values, axis = joined(split_view)
    np.testing.assert_array_equal(values, -A)
    assert axis == 0


def replicated(values: np.ndarray, count: int) -> tuple[UOp, UOp]:
    """A leaf holding `values` on the first device, and it copied to every device (one logical value)."""
    leaf = Tensor(values).uop
    return leaf, graph.copy_to(leaf, DEVICES[count])


def split_leaf(values: np.ndarray, count: int, axis: int) -> tuple[UOp, UOp]:
    """A leaf holding `values` on the first device, and it split along `axis` over the devices."""
    leaf = Tensor(values).uop
    bounds = split_bounds(values.shape[axis], count, axis)
    shards = []
    for device, bound in zip(DEVICES[count], bounds):
        window = tuple(bound if dim == axis else (0, size) for dim, size in enumerate(values.shape))
        shards.append(graph.copy_to(graph.shrink(leaf, window), device))
    return leaf, graph.multi(shards, axis)


def gradients_of(loss: UOp, targets: list[UOp]) -> list[np.ndarray]:
    seed = graph.const(1.0, loss.dtype, graph.placement_of(loss), graph.shape_of(loss))
    found = compute_gradient(loss, seed, targets)
    views = realize_uops([found[target] for target in targets])
    return [Tensor._from_uop(view).numpy() for view in views]


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize(("x_axis", "w_axis"), [(0, None), (1, 0), (None, 1)])
def test_backward_through_shards_matches_numpy(count: int, x_axis: int | None, w_axis: int | None) -> None:
    weight = RNG.standard_normal((5, 4)).astype(np.float32)
    x_leaf, x = split_leaf(A, count, x_axis) if x_axis is not None else replicated(A, count)
    w_leaf, w = split_leaf(weight, count, w_axis) if w_axis is not None else replicated(weight, count)
    # loss = sum(sin(x @ w) * 0.5): d/dx = (0.5 * cos(x @ w)) @ w.T, d/dw = x.T @ (0.5 * cos(x @ w))
    product = matmul(x, w)
    activated = graph.alu(Ops.SIN, product)
    loss = graph.reduce_axis(
        graph.alu(Ops.MUL, activated, graph.const(0.5, dtypes.float32, DEVICES[count], (7, 4))), Ops.ADD, (0, 1)
    )
    x_grad, w_grad = gradients_of(loss, [x_leaf, w_leaf])
    upstream = 0.5 * np.cos(A @ weight)
    np.testing.assert_allclose(x_grad, upstream @ weight.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w_grad, A.T @ upstream, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("count", [2, 3])
def test_an_sgd_step_on_a_sharded_linear_model_matches_numpy(count: int) -> None:
    # a data-parallel linear regression: the batch split over the devices, the weight replicated; mean squared error
    inputs = RNG.standard_normal((9, 5)).astype(np.float32)
    targets = RNG.standard_normal((9, 3)).astype(np.float32)
    weight = RNG.standard_normal((5, 3)).astype(np.float32)
    _, x = split_leaf(inputs, count, 0)
    _, y = split_leaf(targets, count, 0)
    w_leaf, w = replicated(weight, count)
    error = graph.alu(Ops.SUB, matmul(x, w), y)
    squared = graph.reduce_axis(graph.alu(Ops.MUL, error, error), Ops.ADD, (0, 1))
    loss = graph.alu(Ops.MUL, squared, graph.const(1.0 / targets.size, dtypes.float32, DEVICES[count], (1, 1)))
    found = compute_gradient(loss, graph.const(1.0, dtypes.float32, DEVICES[count], (1, 1)), [w_leaf])
    step = graph.alu(
        Ops.SUB,
        w_leaf,
        graph.alu(Ops.MUL, found[w_leaf], graph.const(0.1, dtypes.float32, graph.device_of(w_leaf), (5, 3))),
    )
    loss_view, step_view = realize_uops([loss, step])
    expected_error = inputs @ weight - targets
    expected_loss = (expected_error**2).mean()
    expected_step = weight - 0.1 * (2.0 / targets.size) * inputs.T @ expected_error
    np.testing.assert_allclose(joined(loss_view)[0].reshape(()), expected_loss, rtol=1e-5)
    np.testing.assert_allclose(Tensor._from_uop(step_view).numpy(), expected_step, rtol=1e-4, atol=1e-6)
