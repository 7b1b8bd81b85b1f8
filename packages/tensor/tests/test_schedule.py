"""The scheduler: every scheduled graph computes what numpy computes, and the plans have the expected structure.

Graphs are built from the primitives only (engine_graphs.py) and run on the PYTHON interpreter device.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from engine_graphs import FAST_DEVICE, apply_numpy, const_like, movement_chain, plan_of
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tensor import GlobalCounters, Tensor, graph
from kiln.tensor.realize import default_engine
from kiln.tensor.schedule import CopyStep, KernelStep
from kiln.tensor.schedule.cost import DEFAULT_COSTS
from kiln.tensor.schedule.row_fusion import ROW_FUSION_BYTES, ROW_FUSION_MIN_ELEMENTS
from kiln.uops import Ops, dtypes

_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


def _tensor(array: np.ndarray) -> Tensor:
    return Tensor(array, device=FAST_DEVICE)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_movement_chains_match_numpy(data: st.DataObject) -> None:
    shape = data.draw(_shapes)
    chain = data.draw(movement_chain(shape, data.draw(st.integers(1, 6))))
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 3
    node, expected = _tensor(values), values
    for movement in chain:
        node, expected = node._movement(*movement), apply_numpy(expected, movement)
    # the chain alone (a copy kernel or a plain view), and as the input of elementwise work
    np.testing.assert_array_equal(node.numpy(), expected)
    doubled = node._binary(Ops.ADD, node)._binary(Ops.MUL, const_like(node, 0.5))._binary(Ops.SUB, const_like(node, 1))
    np.testing.assert_array_equal(doubled.numpy(), expected - 1)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_movement_chains_of_computed_values(data: st.DataObject) -> None:
    # movement after compute: padding must give zeros even where the computation of 0 is not 0 (exp2(0) == 1)
    shape = data.draw(_shapes)
    chain = data.draw(movement_chain(shape, data.draw(st.integers(1, 5))))
    values = (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 2) / 4
    node = _tensor(values)._unary(Ops.EXP2)
    expected = np.exp2(values)
    for movement in chain:
        node, expected = node._movement(*movement), apply_numpy(expected, movement)
    np.testing.assert_allclose(node.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MUL, Ops.MAX])
@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2)])
def test_reductions_over_each_axis(op: Ops, axes: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(axes) * 10 + op.value)
    values = rng.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    reference = {Ops.ADD: np.sum, Ops.MUL: np.prod, Ops.MAX: np.max}[op](values, axis=axes, keepdims=True)
    np.testing.assert_allclose(_tensor(values)._reduce(op, axes).numpy(), reference, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.float64])
def test_integer_and_double_reductions(dtype: type) -> None:
    values = (np.arange(24).reshape(2, 3, 4) % 7 - 3).astype(dtype)
    tensor = _tensor(values)
    np.testing.assert_array_equal(tensor._reduce(Ops.ADD, (1,)).numpy(), values.sum(1, keepdims=True, dtype=dtype))
    np.testing.assert_array_equal(tensor._reduce(Ops.MAX, (0, 2)).numpy(), values.max((0, 2), keepdims=True))


def test_reduce_of_padded_and_flipped_input() -> None:
    values = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    node = _tensor(values)._movement(Ops.PAD, ((1, 2), (0, 1)))._movement(Ops.FLIP, (True, False))
    expected = np.flip(np.pad(values, ((1, 2), (0, 1))), 0)
    np.testing.assert_array_equal(node._reduce(Ops.MAX, (1,)).numpy(), expected.max(1, keepdims=True))
    np.testing.assert_array_equal(node._reduce(Ops.ADD, (0,)).numpy(), expected.sum(0, keepdims=True))


def test_reductions_of_zero_size_axes_give_the_identity() -> None:
    empty = _tensor(np.zeros((0, 3), np.float32))
    np.testing.assert_array_equal(empty._reduce(Ops.ADD, (0,)).numpy(), np.zeros((1, 3)))
    np.testing.assert_array_equal(empty._reduce(Ops.MUL, (0,)).numpy(), np.ones((1, 3)))
    np.testing.assert_array_equal(empty._reduce(Ops.MAX, (0,)).numpy(), np.full((1, 3), -np.inf))


def test_elementwise_dtypes() -> None:
    values = np.array([-7, -3, 0, 5, 9], np.int32)
    tensor = _tensor(values)
    np.testing.assert_array_equal(tensor._binary(Ops.IDIV, const_like(tensor, 2)).numpy(), [-3, -1, 0, 2, 4])
    np.testing.assert_array_equal(tensor._binary(Ops.MOD, const_like(tensor, 4)).numpy(), [-3, -3, 0, 1, 1])
    less = tensor._binary(Ops.CMPLT, const_like(tensor, 1))
    assert less.dtype == dtypes.bool
    np.testing.assert_array_equal(less.numpy(), values < 1)
    chosen = less._ternary(Ops.WHERE, tensor, const_like(tensor, 100))
    np.testing.assert_array_equal(chosen.numpy(), np.where(values < 1, values, 100))
    np.testing.assert_array_equal(tensor._cast(dtypes.float32).numpy(), values.astype(np.float32))
    floats = _tensor(np.array([1.0, -2.5], np.float32))
    np.testing.assert_array_equal(
        floats._bitcast(dtypes.uint32).numpy(), np.array([1.0, -2.5], np.float32).view(np.uint32)
    )


def test_multi_output_kernels_share_loops() -> None:
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = _tensor(values)
    total, product = a._binary(Ops.ADD, a), a._binary(Ops.MUL, a)
    assert plan_of(total, product).kernel_count == 1
    Tensor.realize_all(total, product)
    np.testing.assert_array_equal(total.numpy(), 2 * values)
    np.testing.assert_array_equal(product.numpy(), values * values)
    summed, biggest = a._reduce(Ops.ADD, (1,)), a._reduce(Ops.MAX, (1,))
    plan = plan_of(summed, biggest)
    assert plan.kernel_count == 1
    (step,) = plan.steps
    assert isinstance(step, KernelStep) and len(step.buffers) == 3  # two outputs, one input
    Tensor.realize_all(summed, biggest)
    np.testing.assert_array_equal(summed.numpy(), values.sum(1, keepdims=True))
    np.testing.assert_array_equal(biggest.numpy(), values.max(1, keepdims=True))


def test_dependent_outputs_are_not_merged() -> None:
    a = _tensor(np.arange(6, dtype=np.float32))
    first = a._binary(Ops.ADD, const_like(a, 1))
    second = first._binary(Ops.MUL, first)
    plan = plan_of(first, second)
    assert plan.kernel_count == 2  # second reads the buffer first is written to
    Tensor.realize_all(first, second)
    np.testing.assert_array_equal(second.numpy(), (np.arange(6) + 1.0) ** 2)


def _reduces_per_kernel(*tensors: Tensor) -> list[int]:
    plan = plan_of(*tensors)
    return [sum(n.op is Ops.REDUCE for n in s.ast.toposort()) for s in plan.steps if isinstance(s, KernelStep)]


@pytest.mark.parametrize(("rows", "inner", "cols", "apart"), [(64, 768, 1024, True), (8, 16, 32, False)])
def test_independent_matrix_products_get_kernels_of_their_own(rows: int, inner: int, cols: int, apart: bool) -> None:
    # silu(x @ w1.T) * (x @ w3.T), a llama MLP's gate and up: inside their elementwise reader's kernel the two
    # products got no register tile ((64, 768) inputs, (2048, 768) weights: 62 ms against 2.7 ms apart), so each
    # gets a kernel of its own and the reader reads two buffers; nor are they merged back into one multi-output
    # kernel. Products whose weights fit in the cache (an MLP's small layers) lose nothing together: they stay.
    rng = np.random.default_rng(rows)
    x, w1, w3 = (
        rng.standard_normal(shape).astype(np.float32) for shape in ((rows, inner), (cols, inner), (cols, inner))
    )
    out = (_tensor(x) @ _tensor(w1).T).silu() * (_tensor(x) @ _tensor(w3).T)
    assert (cols * inner * 4 > DEFAULT_COSTS.cache_bytes) is apart
    assert max(_reduces_per_kernel(out)) == (1 if apart else 2)
    gate, up = x.astype(np.float64) @ w1.T, x.astype(np.float64) @ w3.T
    expected = gate / (1 + np.exp(-gate)) * up
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


def test_reduce_over_a_short_row_stays_in_its_reader() -> None:
    # row fusion: the max is computed once per row inside the kernel that subtracts it, no buffer
    # (on a CPU device: a GPU-style renderer, like the interpreter's, keeps the cut)
    values = np.random.default_rng(1).standard_normal((5, ROW_FUSION_MIN_ELEMENTS + 3)).astype(np.float32)
    for device, kernels in (("CPU", 1), (FAST_DEVICE, 2)):
        a = Tensor(values, device=device)
        centered = a._binary(Ops.SUB, a._reduce(Ops.MAX, (1,))._movement(Ops.EXPAND, a.shape))
        plan = plan_of(centered)
        assert plan.kernel_count == kernels and len(plan.temporaries) == kernels - 1, device
        np.testing.assert_allclose(centered.numpy(), values - values.max(1, keepdims=True))


def test_expand_after_reduce_of_a_very_short_row_gets_a_buffer() -> None:
    # rows shorter than ROW_FUSION_MIN_ELEMENTS run faster as separate kernels (rows in vector lanes)
    values = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
    a = _tensor(values)
    centered = a._binary(Ops.SUB, a._reduce(Ops.MAX, (1,))._movement(Ops.EXPAND, a.shape))
    plan = plan_of(centered)
    assert plan.kernel_count == 2 and len(plan.temporaries) == 1
    np.testing.assert_allclose(centered.numpy(), values - values.max(1, keepdims=True))


def test_expand_after_column_reduce_gets_a_buffer() -> None:
    # a column max read back over the rows would sit inside the row loop (recomputed per row): it is cut
    values = np.random.default_rng(1).standard_normal((ROW_FUSION_MIN_ELEMENTS + 8, 7)).astype(np.float32)
    a = _tensor(values)
    centered = a._binary(Ops.SUB, a._reduce(Ops.MAX, (0,))._movement(Ops.EXPAND, a.shape))
    plan = plan_of(centered)
    assert plan.kernel_count == 2 and len(plan.temporaries) == 1
    np.testing.assert_allclose(centered.numpy(), values - values.max(0, keepdims=True))


def test_expand_after_reduce_of_a_long_row_gets_a_buffer() -> None:
    # a row past ROW_FUSION_BYTES does not stay in the cache between the loops: the reduce is cut as before
    length = ROW_FUSION_BYTES // 4 * 2
    values = np.random.default_rng(1).standard_normal((2, length)).astype(np.float32)
    a = Tensor(values, device="CPU")
    centered = a._binary(Ops.SUB, a._reduce(Ops.MAX, (1,))._movement(Ops.EXPAND, a.shape))
    plan = plan_of(centered)
    assert plan.kernel_count == 2 and len(plan.temporaries) == 1
    np.testing.assert_allclose(centered.numpy(), values - values.max(1, keepdims=True))


def _nested(values: np.ndarray, device: str) -> Tensor:
    a = Tensor(values, device=device)
    rows = values.shape[0]
    inner = (
        a._reduce(Ops.ADD, (1,))
        ._movement(Ops.RESHAPE, (1, rows))
        ._binary(Ops.MUL, Tensor._const(0.5, (1, rows), a.dtype, a.device))
    )
    return inner._reduce(Ops.MAX, (1,))


def test_reduce_inside_another_reduces_loop_gets_a_buffer() -> None:
    # short rows, but each row sum would run inside the loop of the max over rows: one core would do every row
    values = np.arange(33 * 40, dtype=np.float32).reshape(33, 40) / 100
    outer = _nested(values, FAST_DEVICE)
    assert plan_of(outer).kernel_count == 2
    np.testing.assert_allclose(outer.numpy(), [[(values.sum(1) * 0.5).max()]], rtol=1e-6)


def test_nested_reduce_gets_a_buffer() -> None:
    # the outer reduce's row is too long for row fusion: the inner reduce gets a buffer
    values = np.random.default_rng(2).standard_normal((ROW_FUSION_BYTES // 4 * 2, 3)).astype(np.float32)
    outer = _nested(values, "CPU")
    assert plan_of(outer).kernel_count == 2
    np.testing.assert_allclose(outer.numpy(), [[(values.sum(1) * 0.5).max()]], rtol=1e-6)


def test_reduce_used_twice_is_computed_once() -> None:
    values = np.arange(8, dtype=np.float32).reshape(2, 4)
    a = _tensor(values)
    row = a._reduce(Ops.ADD, (1,))
    # the reduce is read at two index sets (plain and flipped): a buffer, not two reductions
    both = row._binary(Ops.ADD, row._movement(Ops.FLIP, (True, False)))
    assert plan_of(both).kernel_count == 2
    np.testing.assert_array_equal(both.numpy(), values.sum(1, keepdims=True) + values.sum(1, keepdims=True)[::-1])


def test_temporaries_reuse_memory() -> None:
    values = np.random.default_rng(2).uniform(1, 2, (4, 8)).astype(np.float32)
    node, expected = _tensor(values), values
    for _ in range(4):  # each step makes two temporaries that are dead two steps later
        peak = node._reduce(Ops.MAX, (1,))._movement(Ops.EXPAND, node.shape)
        node = node._binary(Ops.SUB, peak)._binary(Ops.MUL, const_like(node, 3.0)).contiguous()
        expected = (expected - expected.max(1, keepdims=True)) * 3
    plan = plan_of(node)
    assert len(plan.temporaries) == 7  # four maxima, three intermediate steps (the last one is the output)
    assert len(plan.slot_bytes) < len(plan.temporaries)
    assert sum(plan.slot_bytes) < sum(spec.nbytes for spec in plan.temporaries)
    np.testing.assert_allclose(node.numpy(), expected, rtol=1e-5)


def test_schedule_cache_keys_on_structure_not_buffers() -> None:
    cache = default_engine().schedule
    cache.clear()
    rng = np.random.default_rng(3)
    results = []
    for _ in range(3):
        values = rng.standard_normal((3, 5)).astype(np.float32)
        a = _tensor(values)
        results.append((a._binary(Ops.MUL, a)._reduce(Ops.ADD, (0,)).numpy(), (values * values).sum(0, keepdims=True)))
    assert cache.misses == 1 and cache.hits == 2
    for got, expected in results:
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_recomputation_blowup_is_cut() -> None:
    # each level reads the previous one at two shifted index sets: fused naively that is 2**levels loads
    rng = np.random.default_rng(4)
    values = rng.standard_normal(64).astype(np.float32)
    node, expected = _tensor(values), values
    levels = 20
    for _ in range(levels):
        left = node._movement(Ops.PAD, ((1, 0),))._movement(Ops.SHRINK, ((0, 64),))
        right = node._movement(Ops.PAD, ((0, 1),))._movement(Ops.SHRINK, ((1, 65),))
        node = left._binary(Ops.ADD, right)._binary(Ops.MUL, const_like(node, 0.5))
        expected = 0.5 * (np.concatenate([[0], expected[:-1]]) + np.concatenate([expected[1:], [0]]))
    started = time.perf_counter()
    plan = plan_of(node)
    assert time.perf_counter() - started < 10
    assert 1 < plan.kernel_count < levels
    np.testing.assert_allclose(node.numpy(), expected, rtol=1e-4, atol=1e-6)


def test_copies_between_devices() -> None:
    values = np.arange(6, dtype=np.float32)
    a = _tensor(values)
    moved = a._binary(Ops.ADD, a).to("CPU")
    plan = plan_of(moved)
    assert [type(step) for step in plan.steps] == [KernelStep, CopyStep]
    assert moved.device == "CPU"
    np.testing.assert_array_equal(moved.numpy(), 2 * values)
    back = moved.to(FAST_DEVICE)._binary(Ops.ADD, a)
    np.testing.assert_array_equal(back.numpy(), 3 * values)


def test_assign_writes_the_target_buffer() -> None:
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = _tensor(values.copy())
    buffer = x.data_buffer()
    before = GlobalCounters.kernel_count
    x.assign(x._binary(Ops.ADD, const_like(x, 1)))  # a write runs at once
    assert GlobalCounters.kernel_count - before == 1
    assert plan_of(x).kernel_count == 0  # x is its buffer again
    np.testing.assert_array_equal(x.numpy(), values + 1)
    assert x.data_buffer() is buffer  # written in place
    np.testing.assert_array_equal(buffer.numpy().reshape(2, 3), values + 1)


def test_assign_through_a_view() -> None:
    values = np.arange(20, dtype=np.float32).reshape(4, 5)
    x = _tensor(values.copy())
    window = x._movement(Ops.SHRINK, ((1, 3), (2, 5)))._movement(Ops.FLIP, (False, True))
    window.assign(_tensor(np.arange(6, dtype=np.float32).reshape(2, 3) * 10)).realize()
    expected = values.copy()
    expected[1:3, 2:5] = (np.arange(6).reshape(2, 3) * 10)[:, ::-1]
    np.testing.assert_array_equal(x.numpy(), expected)


def test_assign_reading_other_elements_of_its_target() -> None:
    values = np.arange(6, dtype=np.float32)
    x = _tensor(values.copy())
    before = GlobalCounters.kernel_count
    x.assign(x._movement(Ops.FLIP, (True,))._binary(Ops.ADD, x))
    assert GlobalCounters.kernel_count - before == 2  # the value goes through a temporary, or elements would race
    np.testing.assert_array_equal(x.numpy(), values[::-1] + values)


def test_reads_of_an_assigned_buffer_run_before_the_assign() -> None:
    values = np.arange(4, dtype=np.float32)
    x = _tensor(values.copy())
    doubled = x._binary(Ops.MUL, const_like(x, 2))
    x.assign(x._binary(Ops.ADD, const_like(x, 10)))
    Tensor.realize_all(x, doubled)
    np.testing.assert_array_equal(doubled.numpy(), values * 2)
    np.testing.assert_array_equal(x.numpy(), values + 10)


def test_assigned_tensor_is_not_confused_with_earlier_graphs() -> None:
    x = _tensor(np.zeros(4, np.float32))
    for step in range(1, 4):
        x.assign(x._binary(Ops.ADD, const_like(x, 1))).realize()
        np.testing.assert_array_equal(x._binary(Ops.MUL, const_like(x, 2)).numpy(), np.full(4, 2.0 * step))


def test_assign_to_a_padded_tensor_replaces_its_value_and_leaves_the_source() -> None:
    # pad() makes a new value (PyTorch's F.pad copies): writing it never reaches the padded tensor's source
    x = _tensor(np.zeros(4, np.float32))
    padded = x._movement(Ops.PAD, ((1, 1),))
    padded.assign(_tensor(np.ones(6, np.float32))).realize()
    assert padded.numpy().tolist() == [1.0] * 6
    assert x.numpy().tolist() == [0.0] * 4


def test_two_assigns_to_one_buffer_in_one_schedule() -> None:
    # graph-level ASSIGN nodes (a Tensor's assign runs at once): two writes to one buffer in one schedule
    values = np.arange(5, dtype=np.float32)
    x = _tensor(values.copy())
    buffer = x.data_buffer()
    first = graph.assign(x.uop, x._binary(Ops.ADD, const_like(x, 1)).uop)
    second = graph.assign(first, graph.alu(Ops.MUL, first, const_like(x, 3).uop))
    x.uop = second
    assert plan_of(x).kernel_count == 2
    np.testing.assert_array_equal(x.numpy(), (values + 1) * 3)
    assert x.data_buffer() is buffer
    assert [node.op for node in x.uop.toposort()] == [Ops.BUFFER]  # a plain buffer again: nothing runs twice
    np.testing.assert_array_equal(x._binary(Ops.ADD, const_like(x, 1)).numpy(), (values + 1) * 3 + 1)


def test_merging_kernels_never_creates_a_cycle() -> None:
    # pairwise-independent points whose merged groups would wait on each other: {C, A} and {B2, B1} with
    # B1 reading A and C reading B2
    values = np.arange(16, dtype=np.float32).reshape(4, 4)
    x = _tensor(values)
    a = x._binary(Ops.ADD, const_like(x, 1)).contiguous()
    a_wide = a._movement(Ops.RESHAPE, (2, 8))
    b1 = a_wide._binary(Ops.MUL, const_like(a_wide, 2)).contiguous()
    x_wide = x._movement(Ops.RESHAPE, (2, 8))
    b2 = x_wide._binary(Ops.SUB, const_like(x_wide, 1)).contiguous()
    b2_square = b2._movement(Ops.RESHAPE, (4, 4))
    c = b2_square._binary(Ops.MUL, const_like(b2_square, 3)).contiguous()
    plan = plan_of(c, b1)
    assert plan.kernel_count == 3  # A merges with C, B1 and B2 stay apart
    Tensor.realize_all(c, b1)
    np.testing.assert_array_equal(c.numpy(), (values - 1) * 3)
    np.testing.assert_array_equal(b1.numpy(), ((values + 1) * 2).reshape(2, 8))


@st.composite
def _random_graph(draw: st.DrawFn) -> tuple[list[Tensor], list[np.ndarray]]:
    """A random DAG of primitives over two inputs, mirrored in numpy: elementwise ops between same-shape nodes,
    movement ops, reductions expanded back, CONTIGUOUS; returns several of its nodes to realize together."""
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    rng = np.random.default_rng(draw(st.integers(0, 1000)))
    first, second = (rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(2))
    pool: list[tuple[Tensor, np.ndarray]] = [(_tensor(first), first), (_tensor(second), second)]
    for _ in range(draw(st.integers(2, 10))):
        kind = draw(st.sampled_from(["binary", "unary", "reduce", "flip", "permute", "pad", "contiguous"]))
        node, value = pool[draw(st.integers(0, len(pool) - 1))]
        if kind == "binary":
            partners = [(t, v) for t, v in pool if v.shape == value.shape]
            other, other_value = partners[draw(st.integers(0, len(partners) - 1))]
            op = draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX, Ops.SUB]))
            result = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.SUB: np.subtract}[op]
            pool.append((node._binary(op, other), result(value, other_value)))
        elif kind == "unary":
            pool.append((node._binary(Ops.MUL, const_like(node, 0.5))._unary(Ops.NEG), -(value * np.float32(0.5))))
        elif kind == "reduce":
            axis = draw(st.integers(0, 1))
            op = draw(st.sampled_from([Ops.ADD, Ops.MAX]))
            reduced = node._reduce(op, (axis,))._movement(Ops.EXPAND, node.shape)
            expected = (np.sum if op is Ops.ADD else np.max)(value, axis=axis, keepdims=True)
            pool.append((reduced, np.broadcast_to(expected, value.shape)))
        elif kind == "flip":
            pool.append((node._movement(Ops.FLIP, (True, False)), value[::-1]))
        elif kind == "permute":
            pool.append((node._movement(Ops.PERMUTE, (1, 0)), value.T))
        elif kind == "pad":
            padded = node._movement(Ops.PAD, ((1, 0), (0, 1)))._movement(
                Ops.SHRINK, ((0, value.shape[0]), (1, value.shape[1] + 1))
            )
            pool.append((padded, np.pad(value, ((1, 0), (0, 1)))[: value.shape[0], 1:]))
        else:
            pool.append((node.contiguous(), value))
    chosen = draw(st.lists(st.integers(2, len(pool) - 1), min_size=1, max_size=3, unique=True))
    return [pool[i][0] for i in chosen], [pool[i][1] for i in chosen]


@settings(max_examples=100, deadline=None)
@given(_random_graph())
def test_random_graphs_match_numpy(case: tuple[list[Tensor], list[np.ndarray]]) -> None:
    tensors, expected = case
    Tensor.realize_all(*tensors)
    for tensor, values in zip(tensors, expected):
        np.testing.assert_allclose(tensor.numpy(), values, rtol=1e-5, atol=1e-5)


def test_long_chains_schedule_without_recursion_limits() -> None:
    x = _tensor(np.zeros(3, np.float32))
    node = x
    for _ in range(3000):
        node = node._binary(Ops.ADD, const_like(node, 1))
    for _ in range(600):
        x.assign(x._binary(Ops.ADD, const_like(x, 1)))
    np.testing.assert_array_equal(node.numpy(), np.full(3, 3000.0))
    np.testing.assert_array_equal(x.numpy(), np.full(3, 600.0))
