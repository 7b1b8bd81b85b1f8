"""kiln.tensor.graph: shape and device inference of every primitive, builder checks and no-op folding."""

from __future__ import annotations

import numpy as np
import pytest
from engine_graphs import apply_numpy, movement_chain
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tensor import graph, graph_inference
from kiln.tensor.graph import BufferArg, ReduceArg, device_of, shape_of
from kiln.uops import Ops, UOp, dtypes


def _buffer(shape: tuple[int, ...], dtype=dtypes.float32, device: str = "PYTHON") -> UOp:
    return graph.reshape(graph.buffer_uop(device, int(np.prod(shape)), dtype), shape)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=4).flatmap(
        lambda shape: st.tuples(st.just(tuple(shape)), movement_chain(tuple(shape), 6))
    )
)
def test_movement_shapes_match_numpy(case) -> None:
    shape, chain = case
    node, probe = _buffer(shape), np.zeros(shape)
    for op, arg in chain:
        node = graph.movement(op, node, arg)
        probe = apply_numpy(probe, (op, arg))
        assert shape_of(node) == probe.shape


def test_source_shapes_and_devices() -> None:
    buffer = graph.buffer_uop("PYTHON", 12, dtypes.int32)
    assert buffer.arg == BufferArg(buffer.arg.number, 12, "PYTHON")
    assert shape_of(buffer) == (12,) and device_of(buffer) == "PYTHON"
    scalar = graph.const(2.5, dtypes.float32, "CPU")
    assert shape_of(scalar) == () and device_of(scalar) == "CPU" and scalar.arg == 2.5
    broadcast = graph.const(1, dtypes.int8, "CPU", (3, 4))
    assert shape_of(broadcast) == (3, 4) and broadcast.dtype == dtypes.int8
    assert [n.op for n in broadcast.toposort() if n.op in (Ops.RESHAPE, Ops.EXPAND)] == [Ops.RESHAPE, Ops.EXPAND]


def test_unique_buffers_and_hash_consed_expressions() -> None:
    first, second = graph.buffer_uop("PYTHON", 4, dtypes.float32), graph.buffer_uop("PYTHON", 4, dtypes.float32)
    assert first is not second and first.arg.number != second.arg.number
    assert graph.alu(Ops.ADD, first, second) is graph.alu(Ops.ADD, first, second)


def test_elementwise_shape_dtype_device() -> None:
    a, b = _buffer((2, 3)), _buffer((2, 3))
    assert shape_of(graph.alu(Ops.MUL, a, b)) == (2, 3)
    comparison = graph.alu(Ops.CMPLT, a, b)
    assert comparison.dtype == dtypes.bool and shape_of(comparison) == (2, 3)
    chosen = graph.alu(Ops.WHERE, comparison, a, b)
    assert chosen.dtype == dtypes.float32
    assert graph.cast(a, dtypes.int16).dtype == dtypes.int16 and graph.cast(a, dtypes.float32) is a
    assert graph.bitcast(a, dtypes.int32).dtype == dtypes.int32


def test_reduce_keeps_reduced_dims() -> None:
    node = graph.reduce_axis(_buffer((2, 3, 4)), Ops.MAX, (2, 0, 2))
    assert node.arg == ReduceArg(Ops.MAX, (0, 2)) and shape_of(node) == (1, 3, 1)
    ones = _buffer((1, 5))
    assert graph.reduce_axis(ones, Ops.ADD, (0,)) is ones  # only size-1 dims: nothing to reduce


def test_other_primitives() -> None:
    a = _buffer((2, 2))
    for node in (graph.contiguous(a), graph.detach(a)):
        assert shape_of(node) == (2, 2) and device_of(node) == "PYTHON"
    copied = graph.copy_to(a, "CPU")
    assert copied.op is Ops.COPY and device_of(copied) == "CPU" and shape_of(copied) == (2, 2)
    assert graph.copy_to(a, "PYTHON") is a
    assigned = graph.assign(a, graph.alu(Ops.NEG, a))
    assert assigned.op is Ops.ASSIGN and shape_of(assigned) == (2, 2)
    assert graph.contiguous(graph.contiguous(a)) is graph.contiguous(a)


def test_no_op_movements_fold() -> None:
    a = _buffer((2, 3))
    assert graph.reshape(a, (2, 3)) is a
    assert graph.permute(a, (0, 1)) is a
    assert graph.expand(a, (2, 3)) is a
    assert graph.pad(a, ((0, 0), (0, 0))) is a
    assert graph.shrink(a, ((0, 2), (0, 3))) is a
    assert graph.flip(a, (False, False)) is a
    # chains are kept as built: the inner link may be a tensor someone differentiates with respect to
    inner = graph.permute(a, (1, 0))
    assert graph.permute(inner, (1, 0)).src[0] is inner
    flat = graph.reshape(a, (6,))
    assert graph.reshape(flat, (3, 2)).src[0] is flat


def test_fold_movement_chains_merges_links_of_one_kind() -> None:
    a = _buffer((2, 3, 4))
    base = a.src[0]
    twice = graph.reshape(graph.reshape(a, (6, 4)), (4, 6))
    assert graph.fold_movement_chains(twice) is graph.reshape(base, (4, 6))
    # permutes compose: (2,0,1) then (1,2,0) is the identity
    assert graph.fold_movement_chains(graph.permute(graph.permute(a, (2, 0, 1)), (1, 2, 0))) is a
    composed = graph.permute(graph.permute(a, (1, 0, 2)), (0, 2, 1))
    assert graph.fold_movement_chains(composed) is graph.permute(a, (1, 2, 0))
    ones = graph.reshape(a, (2, 3, 4, 1, 1))
    grown = graph.expand(graph.expand(ones, (2, 3, 4, 5, 1)), (2, 3, 4, 5, 6))
    assert graph.fold_movement_chains(grown) is graph.expand(graph.reshape(base, (2, 3, 4, 1, 1)), (2, 3, 4, 5, 6))
    # links of different kinds stay, folding reaches below other ops, and a graph without chains is itself
    mixed = graph.alu(Ops.NEG, graph.reshape(graph.shrink(twice, ((1, 3), (0, 6))), (12,)))
    folded = graph.fold_movement_chains(mixed)
    assert folded.src[0].src[0].src[0] is graph.reshape(base, (4, 6))
    assert graph.fold_movement_chains(folded) is folded
    assert shape_of(folded) == shape_of(mixed)


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda a: graph.reshape(a, (4, 2)), ValueError, "cannot reshape"),
        (lambda a: graph.reshape(a, (-1, 6)), ValueError, "negative"),
        (lambda a: graph.reshape(a, (2.0, 3)), TypeError, "tuple of ints"),
        (lambda a: graph.permute(a, (0, 0)), ValueError, "not a permutation"),
        (lambda a: graph.expand(a, (4, 3)), ValueError, "cannot expand"),
        (lambda a: graph.expand(a, (2, 3, 1)), ValueError, "cannot expand"),
        (lambda a: graph.pad(a, ((1, 0),)), ValueError, r"one \(int, int\) pair per dim"),
        (lambda a: graph.pad(a, ((-1, 0), (0, 0))), ValueError, "must be >= 0"),
        (lambda a: graph.shrink(a, ((0, 3), (0, 3))), ValueError, "0 <= start <= end <= size"),
        (lambda a: graph.shrink(a, ((2, 1), (0, 3))), ValueError, "0 <= start <= end <= size"),
        (lambda a: graph.flip(a, (True,)), ValueError, "one bool per dim"),
        (lambda a: graph.flip(a, (1, 0)), ValueError, "one bool per dim"),
        (lambda a: graph.reduce_axis(a, Ops.SUB, (0,)), ValueError, "reduce op"),
        (lambda a: graph.reduce_axis(a, Ops.ADD, (2,)), ValueError, "reduce axes"),
        (lambda a: graph.movement(Ops.ADD, a, None), ValueError, "not a movement op"),
        (lambda a: graph.alu(Ops.ADD, a, _buffer((3, 2))), ValueError, "one shape"),
        (lambda a: graph.alu(Ops.ADD, a, _buffer((2, 3), device="CPU")), ValueError, "one device"),
        (lambda a: graph.alu(Ops.RESHAPE, a), ValueError, "not an ALU op"),
        (lambda a: graph.bitcast(a, dtypes.int16), TypeError, "equal item sizes"),
        (lambda a: graph.cast(a, dtypes.float32.vec(2)), TypeError, "scalar storable"),
        (lambda a: graph.assign(a, _buffer((3, 2))), ValueError, "assign: value shape"),
        (lambda a: graph.assign(a, _buffer((2, 3), dtypes.int32)), TypeError, "assign: value dtype"),
        (lambda a: graph.assign(a, _buffer((2, 3), device="CPU")), ValueError, "assign: value device"),
        (lambda a: graph.const("1", dtypes.float32, "CPU"), TypeError, "must be a bool, int or float"),
        (lambda a: graph.buffer_uop("CPU", -1, dtypes.float32), ValueError, "non-negative"),
        (lambda a: graph.device_uop(""), TypeError, "non-empty str"),
    ],
)
def test_builder_errors(build, error, message) -> None:
    with pytest.raises(error, match=message):
        build(_buffer((2, 3)))


def test_shape_of_rejects_non_tensor_nodes() -> None:
    with pytest.raises(ValueError, match="not a tensor-graph primitive"):
        shape_of(UOp(Ops.SINK, src=(_buffer((2,)),)))


def test_deep_graph_shape_is_iterative() -> None:
    node = _buffer((4,))
    for _ in range(5000):
        node = UOp(Ops.NEG, node.dtype, (node,))
    assert shape_of(node) == (4,) and device_of(node) == "PYTHON"


def test_movement_builders_cache_the_shape_and_device_inference_would_give() -> None:
    # each builder stores its node's shape and device when it builds it; the oracle is the inference that runs for
    # nodes built without them (graph_inference._infer_shape, and a device is its first source's)
    base = graph.reshape(graph.buffer_uop("PYTHON", 24, dtypes.float32), (2, 3, 4))
    nodes = [
        graph.reshape(base, (6, 4)),
        graph.permute(base, (2, 0, 1)),
        graph.expand(graph.reshape(base, (2, 1, 3, 4)), (2, 5, 3, 4)),
        graph.pad(base, ((1, 0), (0, 2), (3, 1))),
        graph.shrink(base, ((0, 1), (1, 3), (0, 4))),
        graph.flip(base, (True, False, True)),
    ]
    for node in nodes:
        assert graph.SHAPE.get(node) == graph_inference._infer_shape(node), node.op
        assert graph.DEVICE.get(node) in (None, "PYTHON") and device_of(node) == "PYTHON"
    assert [shape_of(node) for node in nodes] == [(6, 4), (4, 2, 3), (2, 5, 3, 4), (3, 5, 8), (1, 2, 4), (2, 3, 4)]
