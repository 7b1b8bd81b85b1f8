"""Normalizing graphs to realize: buffers become numbered inputs, realized nodes their views, and parts without
buffers stay the very same nodes (remembered, until one of them is realized)."""

from __future__ import annotations

import numpy as np
from engine_graphs import FAST_DEVICE, const_like

from kiln.tensor import Tensor
from kiln.tensor.graph import SHAPE, shape_of
from kiln.tensor.realize import default_engine
from kiln.tensor.schedule import normalize
from kiln.uops import Ops, dtypes


def _tensor(values: np.ndarray) -> Tensor:
    return Tensor(values, device=FAST_DEVICE)


def test_same_structure_on_other_buffers_normalizes_to_the_same_nodes() -> None:
    first, second = (_tensor(np.full(6, value, np.float32)).realize() for value in (1.0, 2.0))
    graphs = [x._binary(Ops.ADD, const_like(x, 3.0))._binary(Ops.MUL, x) for x in (first, second)]
    normalized = [normalize([graph.uop]) for graph in graphs]
    assert normalized[0].roots[0] is normalized[1].roots[0]
    assert normalized[0].sink is normalized[1].sink and normalized[0].sink.src == normalized[0].roots
    # one input position per distinct buffer, holding that graph's own buffer node
    assert normalized[0].inputs == (first.uop,) and normalized[1].inputs == (second.uop,)


def test_parts_without_buffers_stay_the_same_nodes() -> None:
    x = _tensor(np.arange(4, dtype=np.float32)).realize()
    constant = const_like(x, 2.0)._binary(Ops.MUL, const_like(x, 5.0))
    for _ in range(3):  # later walks stop at the remembered nodes; the result must not change
        root = normalize([x._binary(Ops.ADD, constant).uop]).roots[0]
        assert root.src[1] is constant.uop
        assert normalize([constant.uop]).roots == (constant.uop,) and normalize([constant.uop]).inputs == ()


def test_realizing_a_node_without_buffers_leaves_its_users_computing_it() -> None:
    inner = const_like(_tensor(np.zeros(5, np.float32)), 1.5)._binary(
        Ops.ADD, Tensor._const(2.0, (5,), dtypes.float32, FAST_DEVICE)
    )
    outer = inner._binary(Ops.MUL, inner)
    before = normalize([outer.uop])
    assert before.inputs == () and before.roots == (outer.uop,)  # no buffer anywhere: the graph itself
    inner_node = inner.uop
    inner.realize()  # inner gets memory of its own; a graph of constants is not recorded for other users
    assert inner.uop.op is Ops.BUFFER and inner_node is not inner.uop
    after = normalize([outer.uop])
    assert after.inputs == () and after.roots == (outer.uop,)
    np.testing.assert_array_equal(outer.numpy(), np.full(5, 3.5 * 3.5, np.float32))


def test_cached_plan_of_the_roots_is_the_plan_of_their_sink() -> None:
    x = _tensor(np.ones(3, np.float32)).realize()
    normalized = normalize([x._binary(Ops.ADD, const_like(x, 7.0)).uop])
    cache = default_engine().schedule
    plan = cache.plan(normalized.sink)
    hits = cache.hits
    assert cache.plan_of(normalized.roots) is plan
    assert cache.hits == hits + 1


def test_a_small_op_normalizes_as_the_walk_does() -> None:
    # one requested op over buffers and pure parts takes a shortcut past the walk; asking for the node twice walks
    a, b = (_tensor(np.arange(6, dtype=np.float32) + offset).realize() for offset in (0.0, 10.0))
    constant = const_like(a, 2.0)
    normalize([a._binary(Ops.ADD, constant).uop])  # marks the constant's graph pure
    inner = a._binary(Ops.MUL, b)
    outer = inner._binary(Ops.ADD, a)
    graphs = [
        a._binary(Ops.ADD, constant),
        constant._binary(Ops.ADD, a),
        a._binary(Ops.ADD, a),
        a._binary(Ops.ADD, b),
        b._binary(Ops.MAX, a),
        outer,
    ]
    for graph in graphs:
        shallow, walked = normalize([graph.uop]), normalize([graph.uop, graph.uop])
        assert shallow.roots == walked.roots[:1] and shallow.inputs == walked.inputs, graph.uop.op
    inner.realize()  # a realized source stands for its view: still what the walk gives
    shallow, walked = normalize([outer.uop]), normalize([outer.uop, outer.uop])
    assert shallow.roots == walked.roots[:1] and shallow.inputs == walked.inputs == (inner.uop, a.uop)
    np.testing.assert_array_equal(outer.numpy(), np.arange(6) * (np.arange(6) + 10) + np.arange(6))


def test_normalized_nodes_keep_the_shapes_of_the_nodes_they_stand_for() -> None:
    # rebuilt nodes take the original's known shape (merging a chain above them then infers none): each one must be
    # what inference gives from scratch
    x = _tensor(np.arange(24, dtype=np.float32)).realize()
    chained = x.reshape(2, 3, 4).permute(2, 0, 1).reshape(4, 6).permute(1, 0).reshape(3, 2, 4).expand(2, 3, 2, 4)
    graph = chained._binary(Ops.ADD, const_like(chained, 1.0)).pad(((0, 0), (1, 1), (0, 0), (2, 0))).sum(1)
    root = normalize([graph.uop]).roots[0]
    checked = 0
    for node in root.toposort():
        cached = SHAPE.get(node)
        if cached is None or node.op is Ops.DEVICE:
            continue
        SHAPE.discard(node)
        for inner in node.toposort():  # inference from scratch: no cached shape below either
            SHAPE.discard(inner)
        assert shape_of(node) == cached, node.op
        checked += 1
    assert checked >= 5 and shape_of(root) == graph.shape
    np.testing.assert_array_equal(
        graph.numpy(),
        (
            np.pad(
                np.broadcast_to(
                    (
                        np.arange(24, dtype=np.float32)
                        .reshape(2, 3, 4)
                        .transpose(2, 0, 1)
                        .reshape(4, 6)
                        .T.reshape(3, 2, 4)
                        + 1
                    ),
                    (2, 3, 2, 4),
                ),
                ((0, 0), (1, 1), (0, 0), (2, 0)),
            )
        ).sum(1),
    )
