"""Tests of kiln.uops.uop: hash-consing, lifetime, the stable key, graph walks, builders and operators."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import weakref
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.uops import AxisKind, DType, Ops, RangeArg, SpecialArg, UOp, VarArg, dtypes, live_uop_count


def _leaf(name: str, dtype: DType = dtypes.index) -> UOp:
    return UOp(Ops.DEFINE_VAR, dtype, (), VarArg(name, 0, 10))


# ---------------------------------------------------------------------------------------------------------------
# hash-consing and lifetime
# ---------------------------------------------------------------------------------------------------------------


def test_equal_content_is_the_same_object() -> None:
    a = _leaf("a")
    assert UOp(Ops.ADD, dtypes.index, (a, a)) is UOp(Ops.ADD, dtypes.index, (a, a))
    assert UOp(Ops.ADD, dtypes.index, [a, a]) is UOp(Ops.ADD, dtypes.index, (a, a))  # type: ignore[arg-type]
    assert UOp(Ops.ADD, dtypes.index, (a, a)) is not UOp(Ops.ADD, dtypes.index, (a, a), tag=1)
    assert UOp(Ops.ADD, dtypes.index, (a, a)) is not UOp(Ops.MUL, dtypes.index, (a, a))


def test_args_that_compare_equal_across_types_stay_distinct() -> None:
    # 1 == 1.0 == True and 0.0 == -0.0 in Python, but they are different constants
    ints = UOp(Ops.DEVICE, dtypes.void, (), 1)
    floats = UOp(Ops.DEVICE, dtypes.void, (), 1.0)
    bools = UOp(Ops.DEVICE, dtypes.void, (), True)
    assert len({id(ints), id(floats), id(bools)}) == 3
    positive_zero = UOp.const(dtypes.float32, 0.0)
    negative_zero = UOp.const(dtypes.float32, -0.0)
    assert positive_zero is not negative_zero
    assert str(negative_zero.arg) == "-0.0"
    assert UOp(Ops.GEP, dtypes.void, (), (1, 2)) is not UOp(Ops.GEP, dtypes.void, (), (True, 2))
    assert UOp.const(dtypes.float32, float("nan")) is UOp.const(dtypes.float32, float("nan"))
    # pairs (PAD / SHRINK bounds) and deeper tuples too: only equal types and values are one node
    pairs = [((0, 1), (2, 3)), ((0, 1.0), (2, 3)), ((0, True), (2, 3)), ((0, 1), (2, (3,))), ((0, 1), (2, (3.0,)))]
    nodes = [UOp(Ops.DEVICE, dtypes.void, (), pair) for pair in pairs]
    assert len({id(node) for node in nodes}) == len(pairs)
    assert [UOp(Ops.DEVICE, dtypes.void, (), pair) for pair in pairs] == nodes
    assert [node.arg for node in nodes] == pairs and type(nodes[1].arg[0][1]) is float


def test_unreferenced_uops_are_freed_and_forgotten() -> None:
    gc.collect()
    before = live_uop_count()
    node = UOp(Ops.DEVICE, dtypes.void, (), "lifetime-test")
    watcher = weakref.ref(node)
    assert live_uop_count() == before + 1
    del node
    gc.collect()
    assert watcher() is None
    assert live_uop_count() == before
    # the content can be built again and is a fresh object
    again = UOp(Ops.DEVICE, dtypes.void, (), "lifetime-test")
    assert again.arg == "lifetime-test"


def test_a_graph_lives_as_long_as_its_root() -> None:
    leaf = UOp(Ops.DEVICE, dtypes.void, (), "kept-by-parent")
    leaf_watch = weakref.ref(leaf)
    parent = UOp(Ops.SINK, dtypes.void, (leaf,))
    del leaf
    gc.collect()
    assert leaf_watch() is not None
    del parent
    gc.collect()
    assert leaf_watch() is None


def test_uops_are_immutable_and_checked() -> None:
    node = _leaf("a")
    with pytest.raises(AttributeError, match="immutable"):
        node.arg = 3
    with pytest.raises(AttributeError):
        del node.op
    with pytest.raises(TypeError, match="hashable"):
        UOp(Ops.DEVICE, dtypes.void, (), [1, 2])
    with pytest.raises(TypeError, match="Ops"):
        UOp("ADD", dtypes.void)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="DType"):
        UOp(Ops.ADD, "int32")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sources"):
        UOp(Ops.ADD, dtypes.int32, (1, 2))  # type: ignore[arg-type]


def test_pickle_and_copy_preserve_identity() -> None:
    import copy

    expression = _leaf("a") * 3 + 1
    assert pickle.loads(pickle.dumps(expression)) is expression
    assert copy.deepcopy(expression) is expression


# ---------------------------------------------------------------------------------------------------------------
# key
# ---------------------------------------------------------------------------------------------------------------

KEY_SCRIPT = """
from kiln.uops import UOp, Ops, dtypes, VarArg, AxisKind
a = UOp.variable("a", 0, 10)
r = UOp.range(16, 0, AxisKind.REDUCE)
e = ((a * 4 + r) % 7).lt(3).where(UOp.const(dtypes.float32, 1.5), UOp.const(dtypes.float32, -0.0))
s = UOp(Ops.DEVICE, dtypes.void, (), frozenset({"x", "y", "z", "w"}))
print(e.sink(s).key.hex())
"""


def test_key_is_stable_across_processes() -> None:
    keys = set()
    for seed in ("1", "2", "3"):
        environment = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run(
            [sys.executable, "-c", KEY_SCRIPT], capture_output=True, text=True, env=environment, check=True
        )
        keys.add(result.stdout.strip())
    assert len(keys) == 1
    assert len(keys.pop()) == 64


def test_key_distinguishes_content() -> None:
    a, b = _leaf("a"), _leaf("b")
    keys = {
        (a + b).key,
        (b + a).key,
        (a * b).key,
        (a + b).replace(tag="t").key,
        UOp.const(dtypes.int32, 1).key,
        UOp.const(dtypes.int64, 1).key,
        UOp.const(dtypes.float32, 0.0).key,
        UOp.const(dtypes.float32, -0.0).key,
    }
    assert len(keys) == 8
    assert (a + b).key == (a + b).key


def test_key_of_a_deep_graph_needs_no_recursion() -> None:
    node = _leaf("a")
    for _ in range(20_000):
        node = node + 1
    assert len(node.key) == 32


# ---------------------------------------------------------------------------------------------------------------
# graph walks
# ---------------------------------------------------------------------------------------------------------------


def test_toposort_orders_sources_first_in_source_order() -> None:
    a, b, c = _leaf("a"), _leaf("b"), _leaf("c")
    ab = a + b
    root = UOp(Ops.SINK, dtypes.void, (ab * c, ab))
    order = root.toposort()
    assert order == [a, b, ab, c, ab * c, root]
    assert root.toposort(gate=lambda node: node is not ab * c) == [ab * c, a, b, ab, root]


def test_a_sinks_order_is_kept_on_it_and_each_call_gets_its_own_list(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = _leaf("a"), _leaf("b"), _leaf("c")
    ab = a + b
    sink = UOp(Ops.SINK, dtypes.void, (ab * c, ab), "kept order")
    walks: list[UOp] = []
    walk = UOp._walk
    monkeypatch.setattr(UOp, "_walk", lambda node, gate: walks.append(node) or walk(node, gate))
    first = sink.toposort()
    first.append(a)  # a caller's list is its own
    second = sink.toposort()
    assert second == [a, b, ab, c, ab * c, sink] and second is not first
    assert walks == [sink]  # the second call read the kept order
    assert sink.toposort(gate=lambda node: node is not ab * c) == [ab * c, a, b, ab, sink]  # a gate walks anew
    (ab * c).toposort()
    (ab * c).toposort()
    assert walks == [sink, sink, ab * c, ab * c]  # only sinks keep their order


def test_a_sink_keeping_its_order_is_freed_without_the_garbage_collector() -> None:
    # the kept order holds the graph below the sink, not the sink itself: no reference cycle
    a = _leaf("a")
    sink = UOp(Ops.SINK, dtypes.void, (a + 1,), "freed by refcount")
    assert sink.toposort()[-1] is sink and sink.toposort()[-1] is sink
    gone = weakref.ref(sink)
    gc.disable()
    try:
        del sink
        assert gone() is None
    finally:
        gc.enable()


def _reference_toposort(root: UOp, gate: Callable[[UOp], bool] | None) -> list[UOp]:
    # the definition, recursively: each node once, after its sources in source order; gate False: sources skipped
    order: list[UOp] = []
    seen: set[UOp] = set()

    def visit(node: UOp) -> None:
        if node in seen:
            return
        seen.add(node)
        if gate is None or gate(node):
            for source in node.src:
                visit(source)
        order.append(node)

    visit(root)
    return order


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_toposort_agrees_with_the_recursive_definition(data: st.DataObject) -> None:
    # a random DAG: each node takes 1-3 sources (repeats allowed) among the earlier ones; a random set of gated nodes
    nodes = [_leaf(name) for name in "abc"]
    for _ in range(data.draw(st.integers(0, 25))):
        sources = data.draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=3))
        nodes.append(UOp(Ops.SINK, dtypes.void, tuple(sources), len(nodes)))
    root = nodes[-1]
    closed = set(data.draw(st.lists(st.sampled_from(nodes))))
    assert root.toposort() == _reference_toposort(root, None)
    asked: list[list[UOp]] = [[], []]

    def gate(node: UOp, log: list[UOp]) -> bool:
        log.append(node)
        return node not in closed

    expected = _reference_toposort(root, lambda node: gate(node, asked[0]))
    assert root.toposort(lambda node: gate(node, asked[1])) == expected
    assert asked[1] == asked[0]  # the gate is asked once per node met, in the same order


def test_toposort_of_a_deep_chain() -> None:
    node = _leaf("a")
    chain = [node]
    for _ in range(50_000):
        node = -node
        chain.append(node)
    assert node.toposort() == chain


def test_substitute_and_replace() -> None:
    a, b, c = _leaf("a"), _leaf("b"), _leaf("c")
    expression = (a + b) * a
    assert expression.substitute({a: c}) is (c + b) * c
    assert expression.substitute({a + b: c}) is c * a
    assert expression.substitute({}) is expression
    # replacements are not searched again
    assert expression.substitute({a: a + 1}) is ((a + 1) + b) * (a + 1)
    assert expression.replace(op=Ops.ADD) is UOp(Ops.ADD, dtypes.index, expression.src)
    assert expression.replace(arg=None) is expression
    assert expression.replace(tag=5).tag == 5


# ---------------------------------------------------------------------------------------------------------------
# builders and operators
# ---------------------------------------------------------------------------------------------------------------


def test_constants_truncate_and_vectors() -> None:
    assert UOp.const(dtypes.int8, 200).arg == -56
    assert UOp.const(dtypes.float16, 1e6).arg == float("inf")
    assert UOp.const(dtypes.bool, 3).arg is True
    vector = UOp.const(dtypes.float32.vec(3), 2)
    assert (vector.op, vector.arg, vector.dtype) == (Ops.VCONST, (2.0, 2.0, 2.0), dtypes.float32.vec(3))
    lanes = UOp.const(dtypes.int32, (1, 2, 300))
    assert (lanes.op, lanes.dtype, lanes.arg) == (Ops.VCONST, dtypes.int32.vec(3), (1, 2, 300))
    with pytest.raises(TypeError):
        UOp.const(dtypes.float32.ptr(), 1)
    with pytest.raises(TypeError):
        UOp.const(dtypes.int32, "1")  # type: ignore[arg-type]


def test_variable_range_special_bind() -> None:
    a = UOp.variable("a", 1, 8)
    assert (a.op, a.dtype, a.arg) == (Ops.DEFINE_VAR, dtypes.index, VarArg("a", 1, 8))
    with pytest.raises(ValueError, match="lo <= hi"):
        UOp.variable("bad", 3, 2)
    with pytest.raises(TypeError):
        UOp.variable("f", 0, 1, dtypes.float32)
    loop = UOp.range(16, 2, AxisKind.REDUCE)
    assert loop.arg == RangeArg(2, AxisKind.REDUCE) and loop.src == (UOp.const(dtypes.index, 16),)
    assert UOp.range(a, 0).src == (a,)
    special = UOp.special(32, "gidx0")
    assert (special.op, special.arg) == (Ops.SPECIAL, SpecialArg("gidx0"))
    bound = a.bind(5)
    assert bound.op is Ops.BIND and bound.src == (a, UOp.const(dtypes.index, 5))
    with pytest.raises(ValueError, match="outside"):
        a.bind(9)


def test_python_operators_build_the_documented_ops() -> None:
    x, y = _leaf("x", dtypes.int32), _leaf("y", dtypes.int32)
    three = UOp.const(dtypes.int32, 3)
    cases = [
        (x + y, Ops.ADD, (x, y)),
        (x + 3, Ops.ADD, (x, three)),
        (3 + x, Ops.ADD, (three, x)),
        (x - 3, Ops.SUB, (x, three)),
        (3 - x, Ops.SUB, (three, x)),
        (x * 3, Ops.MUL, (x, three)),
        (x // 3, Ops.IDIV, (x, three)),
        (3 // x, Ops.IDIV, (three, x)),
        (x % 3, Ops.MOD, (x, three)),
        (x & 3, Ops.AND, (x, three)),
        (x | 3, Ops.OR, (x, three)),
        (x ^ 3, Ops.XOR, (x, three)),
        (x << 3, Ops.SHL, (x, three)),
        (x >> 3, Ops.SHR, (x, three)),
        (-x, Ops.NEG, (x,)),
        (x < 3, Ops.CMPLT, (x, three)),
        (x > 3, Ops.CMPLT, (three, x)),
        (x.ne(3), Ops.CMPNE, (x, three)),
        (x.eq(y), Ops.CMPEQ, (x, y)),
        (x.maximum(y), Ops.MAX, (x, y)),
        (~x, Ops.XOR, (x, UOp.const(dtypes.int32, -1))),
    ]
    for built, op, sources in cases:
        assert (built.op, built.src) == (op, sources), built
    assert (x < 3).dtype is dtypes.bool
    assert (x <= 3) is (three < x).ne(True)
    assert (x >= 3) is (x < 3).ne(True)
    assert x.minimum(y) is (x < y).where(x, y)
    assert (x + 1).dtype is dtypes.int32
    assert (x == y) is False  # == is identity, not a UOp


def test_float_operators_and_unary_builders() -> None:
    f = UOp(Ops.DEVICE, dtypes.float32, (), "f")
    assert (f / 2).op is Ops.FDIV and (f / 2).src[1].arg == 2.0
    assert (2.5 / f).src == (UOp.const(dtypes.float32, 2.5), f)
    for method, op in [
        ("exp2", Ops.EXP2),
        ("log2", Ops.LOG2),
        ("sin", Ops.SIN),
        ("sqrt", Ops.SQRT),
        ("reciprocal", Ops.RECIPROCAL),
        ("trunc", Ops.TRUNC),
    ]:
        built = getattr(f, method)()
        assert (built.op, built.src, built.dtype) == (op, (f,), dtypes.float32)
    assert f.cast(dtypes.float32) is f
    assert f.cast(dtypes.int32).op is Ops.CAST
    assert f.bitcast(dtypes.uint32).dtype is dtypes.uint32
    with pytest.raises(TypeError, match="bytes"):
        f.bitcast(dtypes.uint16)


def test_operator_type_errors_name_the_problem() -> None:
    index = _leaf("i")
    with pytest.raises(TypeError, match="float constant"):
        index + 1.5
    with pytest.raises(TypeError, match="FDIV"):
        index / 2
    with pytest.raises(TypeError, match="share one dtype"):
        index + _leaf("j", dtypes.int32)
    with pytest.raises(TypeError, match="idiv"):
        UOp(Ops.DEVICE, dtypes.float32) // 2
    with pytest.raises(TypeError, match="condition"):
        index.where(index, 2)
    with pytest.raises(TypeError, match="UOp branch"):
        (index < 1).where(1, 2)
    with pytest.raises(TypeError):
        index + "1"  # type: ignore[operator]
    with pytest.raises(ValueError, match="not an ALU"):
        index.alu(Ops.LOAD)


def test_memory_and_structure_builders() -> None:
    buffer = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(64), (), 0)
    i = UOp.range(64, 0)
    address = buffer.index(i)
    assert (address.op, address.dtype, address.src) == (Ops.INDEX, buffer.dtype, (buffer, i))
    gate = i < 10
    assert buffer.index(i, gate=gate).src == (buffer, i, gate)
    loaded = address.load()
    assert (loaded.op, loaded.dtype) == (Ops.LOAD, dtypes.float32)
    stored = address.store(loaded + 1.0)
    assert (stored.op, stored.dtype, stored.src[0]) == (Ops.STORE, dtypes.void, address)
    reduced = loaded.reduce(i, op=Ops.MAX)
    assert (reduced.op, reduced.arg, reduced.src) == (Ops.REDUCE, Ops.MAX, (loaded, i))
    with pytest.raises(ValueError):
        loaded.reduce(i, op=Ops.SUB)
    assert stored.end(i).src == (stored, i)
    assert UOp.sink(stored, loaded).src == (stored, loaded)
    assert stored.sink().src == (stored,)
    vector = UOp.vectorize(loaded, loaded + 1.0, loaded)
    assert vector.dtype is dtypes.float32.vec(3)
    assert vector.gep(2).dtype is dtypes.float32 and vector.gep((0, 1)).arg == (0, 1)
    assert loaded.gep(0) is loaded
    with pytest.raises(ValueError):
        vector.gep(3)


def test_repr_is_nested_and_names_shared_nodes() -> None:
    a = _leaf("a")
    shared = a + 1
    text = repr(shared * shared)
    expected = (
        "UOp(Ops.MUL, dtypes.index, arg=None, src=(\n"
        "  x0:=UOp(Ops.ADD, dtypes.index, arg=None, src=(\n"
        "    UOp(Ops.DEFINE_VAR, dtypes.index, arg=VarArg(name='a', lo=0, hi=10), src=()),\n"
        "    UOp(Ops.CONST, dtypes.index, arg=1, src=()),)),\n"
        "  x0,))"
    )
    assert text == expected


def test_repr_of_a_deep_graph_is_linear_in_size() -> None:
    node = _leaf("a")
    for _ in range(5000):
        node = -node
    text = repr(node)
    assert text.count("Ops.NEG") == 5000
    assert len(text) < 5000 * 200
