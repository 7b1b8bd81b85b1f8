"""Tests of kiln.tensor.gradient: every rule of pm_gradient on tensor graphs, evaluated by a numpy reference.

The graphs here are built with kiln.tensor.graph directly and evaluated by `evaluate` below (a small numpy model of
the tensor-graph primitives written for these tests), so the rules are checked independently of the scheduler:
- every differentiable primitive against float64 central differences on random inputs away from kinks,
- movement rules exactly through the adjoint identity <M x, y> == <x, M^T y> on integer-valued data (hypothesis),
- hand-computed values where the derivative is a choice (ties, zeros, TRUNC, DETACH, ASSIGN, comparisons),
- the walk itself: accumulation over shared nodes, pruning, errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tensor import graph
from kiln.tensor.gradient import compute_gradient, pm_gradient
from kiln.uops import Ops, UOp, dtypes

DEVICE = "PYTHON"
F64 = dtypes.float64

# ---------------------------------------------------------------------------------------------------------------
# a numpy model of the tensor graph
# ---------------------------------------------------------------------------------------------------------------

_UNARY: dict[Ops, Callable[[np.ndarray], np.ndarray]] = {
    Ops.NEG: np.negative,
    Ops.EXP2: np.exp2,
    Ops.LOG2: np.log2,
    Ops.SIN: np.sin,
    Ops.SQRT: np.sqrt,
    Ops.RECIPROCAL: lambda x: 1.0 / x,
    Ops.TRUNC: np.trunc,
}
_BINARY: dict[Ops, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Ops.ADD: np.add,
    Ops.SUB: np.subtract,
    Ops.MUL: np.multiply,
    Ops.FDIV: np.divide,
    Ops.MAX: np.maximum,
    Ops.POW: np.power,
    Ops.MOD: np.fmod,
    Ops.CMPLT: np.less,
    Ops.CMPNE: np.not_equal,
    Ops.CMPEQ: np.equal,
}
_REDUCE: dict[Ops, Callable[..., np.ndarray]] = {Ops.ADD: np.sum, Ops.MUL: np.prod, Ops.MAX: np.max}


def evaluate(root: UOp, inputs: dict[UOp, np.ndarray]) -> np.ndarray:
    """The value of tensor-graph node `root`, with BUFFER nodes read from `inputs` (flat arrays)."""
    values: dict[UOp, np.ndarray] = {}
    for node in root.toposort():
        op, src = node.op, [values.get(source) for source in node.src]
        if op is Ops.DEVICE:
            continue
        if op is Ops.BUFFER:
            value = inputs[node]
        elif op is Ops.CONST:
            value = np.array(node.arg, dtype=_numpy_dtype(node))
        elif op in _UNARY:
            with np.errstate(all="ignore"):
                value = _UNARY[op](src[0])
        elif op in _BINARY:
            with np.errstate(all="ignore"):
                value = _BINARY[op](src[0], src[1])
        elif op is Ops.WHERE:
            value = np.where(src[0], src[1], src[2])
        elif op is Ops.MULACC:
            value = src[0] * src[1] + src[2]
        elif op is Ops.CAST:
            value = src[0].astype(_numpy_dtype(node))
        elif op is Ops.RESHAPE:
            value = src[0].reshape(node.arg)
        elif op is Ops.EXPAND:
            value = np.broadcast_to(src[0], node.arg)
        elif op is Ops.PERMUTE:
            value = np.transpose(src[0], node.arg)
        elif op is Ops.PAD:
            value = np.pad(src[0], node.arg)
        elif op is Ops.SHRINK:
            value = src[0][tuple(slice(start, end) for start, end in node.arg)]
        elif op is Ops.FLIP:
            value = np.flip(src[0], tuple(axis for axis, flag in enumerate(node.arg) if flag))
        elif op is Ops.REDUCE_AXIS:
            value = _REDUCE[node.arg.op](src[0], axis=node.arg.axes, keepdims=True)
        elif op in (Ops.CONTIGUOUS, Ops.DETACH, Ops.COPY):
            value = src[0]
        elif op is Ops.ASSIGN:
            value = src[1]
        else:
            raise NotImplementedError(op)
        values[node] = np.asarray(value, dtype=_numpy_dtype(node))
    assert values[root].shape == graph.shape_of(root)
    return values[root]


def _numpy_dtype(node: UOp) -> np.dtype:
    return np.dtype(node.dtype.fmt)


class Inputs:
    """BUFFER nodes with values for `evaluate`."""

    def __init__(self) -> None:
        self.values: dict[UOp, np.ndarray] = {}

    def add(self, array: np.ndarray) -> UOp:
        """A node holding `array`: CONTIGUOUS of a BUFFER reshaped to its shape.

        CONTIGUOUS keeps the target out of graph.py's folding of movement chains (a reshape of a reshape is built as
        one reshape of the base), which would otherwise take a movement-op target out of the graph built on it.
        """
        array = np.asarray(array, dtype=np.float64)
        buffer = graph.buffer_uop(DEVICE, array.size, F64)
        self.values[buffer] = array.reshape(-1).copy()
        return graph.contiguous(graph.reshape(buffer, array.shape))

    def buffer_of(self, node: UOp) -> UOp:
        return next(source for source in node.toposort() if source.op is Ops.BUFFER)


def full(value: float, shape: Sequence[int], dtype=F64) -> UOp:
    return graph.const(value, dtype, DEVICE, tuple(shape))


def weighted_sum(node: UOp, weights: np.ndarray, inputs: Inputs) -> UOp:
    """sum(node * weights) as a scalar: random weights make every output element count differently."""
    product = graph.alu(Ops.MUL, node, inputs.add(weights))
    shape = graph.shape_of(product)
    return graph.reshape(graph.reduce_axis(product, Ops.ADD, range(len(shape))), ())


def finite_difference_check(
    build: Callable[..., UOp],
    arrays: Sequence[np.ndarray],
    rng: np.random.Generator,
    tolerance: float = 1e-6,
    step: float = 1e-6,
) -> None:
    """Compares compute_gradient of sum(build(*xs) * w) with central differences in float64, for every input."""
    inputs = Inputs()
    nodes = [inputs.add(array) for array in arrays]
    out = build(*nodes)
    weights = rng.uniform(0.5, 1.5, graph.shape_of(out))
    loss = weighted_sum(out, weights, inputs)
    gradients = compute_gradient(loss, full(1.0, ()), nodes)
    for position, node in enumerate(nodes):
        analytic = evaluate(gradients[node], inputs.values)
        buffer = inputs.buffer_of(node)
        numeric = np.zeros(arrays[position].size)
        for index in range(arrays[position].size):
            flat = inputs.values[buffer]
            saved = flat[index]
            flat[index] = saved + step
            plus = float(evaluate(loss, inputs.values))
            flat[index] = saved - step
            minus = float(evaluate(loss, inputs.values))
            flat[index] = saved
            numeric[index] = (plus - minus) / (2 * step)
        np.testing.assert_allclose(
            analytic.reshape(-1), numeric, rtol=tolerance, atol=tolerance, err_msg=f"input {position}"
        )


# ---------------------------------------------------------------------------------------------------------------
# every differentiable primitive against central differences
# ---------------------------------------------------------------------------------------------------------------

SHAPE = (2, 3)


def _unit(low: float, high: float) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.uniform(low, high, SHAPE)


def _away_from_integers(rng: np.random.Generator) -> np.ndarray:
    return rng.integers(-3, 3, SHAPE) + rng.uniform(0.2, 0.8, SHAPE)


def _distinct(rng: np.random.Generator) -> np.ndarray:
    # well-separated values, so MAX never sits on a tie within the finite-difference step
    return rng.permutation(np.arange(6, dtype=np.float64)).reshape(SHAPE) * 0.5 + rng.uniform(0, 0.1, SHAPE)


ELEMENTWISE_CASES: dict[str, tuple[Callable[..., UOp], list[Callable[[np.random.Generator], np.ndarray]]]] = {
    "ADD": (lambda a, b: graph.alu(Ops.ADD, a, b), [_unit(-2, 2), _unit(-2, 2)]),
    "SUB": (lambda a, b: graph.alu(Ops.SUB, a, b), [_unit(-2, 2), _unit(-2, 2)]),
    "MUL": (lambda a, b: graph.alu(Ops.MUL, a, b), [_unit(-2, 2), _unit(-2, 2)]),
    "FDIV": (lambda a, b: graph.alu(Ops.FDIV, a, b), [_unit(-2, 2), _unit(0.5, 2)]),
    "MULACC": (lambda a, b, c: graph.alu(Ops.MULACC, a, b, c), [_unit(-2, 2), _unit(-2, 2), _unit(-2, 2)]),
    "NEG": (lambda a: graph.alu(Ops.NEG, a), [_unit(-2, 2)]),
    "EXP2": (lambda a: graph.alu(Ops.EXP2, a), [_unit(-2, 2)]),
    "LOG2": (lambda a: graph.alu(Ops.LOG2, a), [_unit(0.3, 3)]),
    "SIN": (lambda a: graph.alu(Ops.SIN, a), [_unit(-4, 4)]),
    "SQRT": (lambda a: graph.alu(Ops.SQRT, a), [_unit(0.3, 3)]),
    "RECIPROCAL": (lambda a: graph.alu(Ops.RECIPROCAL, a), [_unit(0.5, 2)]),
    "TRUNC": (lambda a: graph.alu(Ops.TRUNC, a), [_away_from_integers]),
    "MAX": (lambda a, b: graph.alu(Ops.MAX, a, b), [_distinct, _distinct]),
    "POW": (lambda a, b: graph.alu(Ops.POW, a, b), [_unit(0.5, 2), _unit(-2, 2)]),
    "MOD": (lambda a, b: graph.alu(Ops.MOD, a, b), [_away_from_integers, lambda rng: rng.uniform(0.9, 1.1, SHAPE)]),
    "WHERE": (
        lambda a, b: graph.alu(Ops.WHERE, graph.alu(Ops.CMPLT, a, b), graph.alu(Ops.MUL, a, a), b),
        [_distinct, _distinct],
    ),
    "CAST float32 round trip": (lambda a: graph.cast(graph.cast(a, dtypes.float32), F64), [_unit(-2, 2)]),
    "CONTIGUOUS": (graph.contiguous, [_unit(-2, 2)]),
    "COPY": (lambda a: graph.copy_to(graph.copy_to(a, "OTHER"), DEVICE), [_unit(-2, 2)]),
    "ASSIGN": (lambda a: graph.assign(full(0.0, SHAPE), graph.alu(Ops.SIN, a)), [_unit(-2, 2)]),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE_CASES))
def test_elementwise_rule_matches_finite_differences(name: str) -> None:
    build, makers = ELEMENTWISE_CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    # a float32 round trip is linear but rounds: a wide step keeps the rounding error small against it
    step, tolerance = (1e-2, 1e-4) if name.startswith("CAST") else (1e-6, 1e-6)
    finite_difference_check(build, [make(rng) for make in makers], rng, tolerance, step)


MOVEMENT_CASES: dict[str, tuple[Callable[[UOp], UOp], tuple[int, ...]]] = {
    "RESHAPE": (lambda x: graph.reshape(x, (3, 2, 2)), (2, 6)),
    "PERMUTE": (lambda x: graph.permute(x, (2, 0, 1)), (2, 3, 4)),
    "EXPAND": (lambda x: graph.expand(x, (3, 4, 2)), (3, 1, 2)),
    "EXPAND two axes": (lambda x: graph.expand(x, (3, 4, 5)), (1, 4, 1)),
    "PAD": (lambda x: graph.pad(x, ((1, 2), (0, 3))), (2, 3)),
    "SHRINK": (lambda x: graph.shrink(x, ((1, 3), (0, 2))), (4, 3)),
    "FLIP": (lambda x: graph.flip(x, (True, False, True)), (2, 3, 2)),
}


@pytest.mark.parametrize("name", sorted(MOVEMENT_CASES))
def test_movement_rule_matches_finite_differences(name: str) -> None:
    build, shape = MOVEMENT_CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    # square the result so the gradient depends on the value too
    finite_difference_check(lambda x: graph.alu(Ops.MUL, build(x), build(x)), [rng.normal(size=shape)], rng)


@pytest.mark.parametrize("reduce_op", [Ops.ADD, Ops.MUL, Ops.MAX])
@pytest.mark.parametrize("axes", [(0,), (1,), (0, 2), (0, 1, 2)])
def test_reduce_rule_matches_finite_differences(reduce_op: Ops, axes: tuple[int, ...]) -> None:
    rng = np.random.default_rng(7)
    shape = (2, 3, 2)
    data = rng.permutation(np.arange(12, dtype=np.float64)).reshape(shape) * 0.3 + 0.5
    data *= rng.choice([-1.0, 1.0], shape)
    finite_difference_check(lambda x: graph.reduce_axis(x, reduce_op, axes), [data], rng)


def test_composite_graph_with_shared_nodes() -> None:
    # softmax-like: a node used by several consumers must get the sum of their gradients
    def build(x: UOp) -> UOp:
        shifted = graph.alu(Ops.SUB, x, graph.expand(graph.reduce_axis(x, Ops.MAX, (1,)), (3, 4)))
        exp = graph.alu(Ops.EXP2, shifted)
        total = graph.expand(graph.reduce_axis(exp, Ops.ADD, (1,)), (3, 4))
        return graph.alu(Ops.MUL, graph.alu(Ops.FDIV, exp, total), x)

    rng = np.random.default_rng(3)
    finite_difference_check(build, [rng.normal(size=(3, 4))], rng)


# ---------------------------------------------------------------------------------------------------------------
# movement rules are exact adjoints (hypothesis over shapes and arguments)
# ---------------------------------------------------------------------------------------------------------------


@st.composite
def movement_chains(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[Ops, object]]]:
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    current = shape
    chain: list[tuple[Ops, object]] = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from([Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP]))
        if op is Ops.RESHAPE:
            size = math.prod(current)
            divisors = [d for d in range(1, size + 1) if size % d == 0]
            first = draw(st.sampled_from(divisors))
            arg: object = (first, size // first)
            current = (first, size // first)
        elif op is Ops.PERMUTE:
            arg = tuple(draw(st.permutations(range(len(current)))))
            current = tuple(current[axis] for axis in arg)  # type: ignore[attr-defined]
        elif op is Ops.EXPAND:
            arg = tuple(draw(st.integers(1, 3)) if size == 1 else size for size in current)
            current = arg  # type: ignore[assignment]
        elif op is Ops.PAD:
            arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in current)
            current = tuple(size + before + after for size, (before, after) in zip(current, arg))  # type: ignore[misc]
        elif op is Ops.SHRINK:
            bounds = []
            for size in current:
                start = draw(st.integers(0, size - 1))
                bounds.append((start, draw(st.integers(start + 1, size))))
            arg = tuple(bounds)
            current = tuple(end - start for start, end in bounds)
        else:
            arg = tuple(draw(st.booleans()) for _ in current)
        chain.append((op, arg))
    return shape, chain


@settings(max_examples=150, deadline=None)
@given(movement_chains(), st.integers(0, 2**32 - 1))
def test_movement_gradients_are_exact_adjoints(
    case: tuple[tuple[int, ...], list[tuple[Ops, object]]], seed: int
) -> None:
    shape, chain = case
    rng = np.random.default_rng(seed)
    inputs = Inputs()
    x = inputs.add(rng.integers(-9, 10, shape).astype(np.float64))
    moved = x
    for op, arg in chain:
        moved = graph.movement(op, moved, arg)
    y = rng.integers(-9, 10, graph.shape_of(moved)).astype(np.float64)
    # <M x, y> == <x, M^T y>, where M^T y is the gradient of <M x, y> and integer data makes both sides exact
    gradient = compute_gradient(moved, inputs.add(y), [x])[x]
    forward = evaluate(moved, inputs.values)
    assert float(np.sum(forward * y)) == float(np.sum(evaluate(x, inputs.values) * evaluate(gradient, inputs.values)))


# ---------------------------------------------------------------------------------------------------------------
# hand-computed values where the derivative is a choice
# ---------------------------------------------------------------------------------------------------------------


def _gradients(build: Callable[..., UOp], *arrays: Sequence[float]) -> list[np.ndarray]:
    """Gradients of sum(build(*xs)) with respect to each x, evaluated."""
    inputs = Inputs()
    nodes = [inputs.add(np.array(array, dtype=np.float64)) for array in arrays]
    out = build(*nodes)
    found = compute_gradient(out, full(1.0, graph.shape_of(out)), nodes)
    return [evaluate(found[node], inputs.values) if node in found else None for node in nodes]  # type: ignore[misc]


def test_max_tie_splits_the_gradient_in_half() -> None:
    lhs, rhs = _gradients(lambda a, b: graph.alu(Ops.MAX, a, b), [1.0, 2.0, 3.0], [3.0, 2.0, 1.0])
    assert lhs.tolist() == [0.0, 0.5, 1.0]
    assert rhs.tolist() == [1.0, 0.5, 0.0]


def test_reduce_max_splits_among_all_maxima() -> None:
    (grad,) = _gradients(lambda x: graph.reduce_axis(x, Ops.MAX, (1,)), [[1.0, 5.0, 5.0, 5.0], [2.0, 0.0, 2.0, -1.0]])
    np.testing.assert_array_equal(grad, [[0, 1 / 3, 1 / 3, 1 / 3], [0.5, 0, 0.5, 0]])


def test_reduce_product_with_zeros() -> None:
    # no zero: product / x; one zero: the zero gets the product of the others; two zeros: everything 0
    data = [[2.0, 3.0, 4.0], [2.0, 0.0, 5.0], [0.0, 3.0, 0.0]]
    (grad,) = _gradients(lambda x: graph.reduce_axis(x, Ops.MUL, (1,)), data)
    np.testing.assert_array_equal(grad, [[12.0, 8.0, 6.0], [0.0, 10.0, 0.0], [0.0, 0.0, 0.0]])


def test_pow_at_zero() -> None:
    # x**2 at 0 has slope 0; x**0 has slope 0 everywhere; d/dy of 0**y (y > 0) is 0 rather than nan
    base, exponent = _gradients(lambda a, b: graph.alu(Ops.POW, a, b), [0.0, 0.0, 2.0], [2.0, 0.0, 3.0])
    np.testing.assert_array_equal(base, [0.0, 0.0, 12.0])
    np.testing.assert_allclose(exponent, [0.0, 0.0, 8.0 * math.log(2.0)])


def test_trunc_gradient_is_zero() -> None:
    (grad,) = _gradients(lambda x: graph.alu(Ops.TRUNC, x), [1.5, -2.5, 0.3])
    assert grad.tolist() == [0.0, 0.0, 0.0]


def test_where_condition_gets_no_gradient_and_branches_are_masked() -> None:
    def build(a: UOp, b: UOp) -> UOp:
        return graph.alu(Ops.WHERE, graph.alu(Ops.CMPLT, a, b), a, graph.alu(Ops.MUL, b, b))

    lhs, rhs = _gradients(build, [1.0, 5.0, 2.0], [3.0, 4.0, 1.0])
    assert lhs.tolist() == [1.0, 0.0, 0.0]
    assert rhs.tolist() == [0.0, 8.0, 2.0]


def test_detach_stops_the_gradient() -> None:
    # d/dx (x * detach(x)) = detach(x): the detached factor is a constant
    (grad,) = _gradients(lambda x: graph.alu(Ops.MUL, x, graph.detach(x)), [1.0, -2.0, 3.0])
    assert grad.tolist() == [1.0, -2.0, 3.0]


def test_assign_passes_the_gradient_to_the_value_only() -> None:
    inputs = Inputs()
    target = inputs.add(np.zeros(3))
    value = inputs.add(np.array([1.0, 2.0, 3.0]))
    out = graph.alu(Ops.MUL, graph.assign(target, value), value)
    found = compute_gradient(out, full(1.0, (3,)), [target, value])
    assert target not in found
    assert evaluate(found[value], inputs.values).tolist() == [2.0, 4.0, 6.0]


def test_comparison_only_paths_give_no_gradient() -> None:
    inputs = Inputs()
    x = inputs.add(np.array([1.0, 2.0]))
    flag = graph.cast(graph.alu(Ops.CMPLT, x, full(1.5, (2,))), F64)
    assert compute_gradient(graph.alu(Ops.MUL, flag, full(3.0, (2,))), full(1.0, (2,)), [x]) == {}


def test_cast_through_an_integer_stops_the_gradient() -> None:
    inputs = Inputs()
    x = inputs.add(np.array([1.5, 2.5]))
    through_int = graph.cast(graph.cast(x, dtypes.int32), F64)
    found = compute_gradient(graph.alu(Ops.ADD, through_int, x), full(1.0, (2,)), [x])
    assert evaluate(found[x], inputs.values).tolist() == [1.0, 1.0]


def test_cast_gradient_comes_back_in_the_source_dtype() -> None:
    inputs = Inputs()
    x = inputs.add(np.array([1.0, 2.0]))
    narrow = graph.cast(x, dtypes.float32)
    found = compute_gradient(graph.alu(Ops.MUL, narrow, narrow), full(1.0, (2,), dtypes.float32), [x])
    assert found[x].dtype == F64
    assert evaluate(found[x], inputs.values).tolist() == [2.0, 4.0]


# ---------------------------------------------------------------------------------------------------------------
# the walk
# ---------------------------------------------------------------------------------------------------------------


def test_gradients_of_a_node_used_twice_add_up() -> None:
    # d/dx (x*x + x) = 2x + 1
    (grad,) = _gradients(lambda x: graph.alu(Ops.ADD, graph.alu(Ops.MUL, x, x), x), [1.0, 2.0, -3.0])
    assert grad.tolist() == [3.0, 5.0, -5.0]


def test_gradient_of_an_intermediate_node() -> None:
    inputs = Inputs()
    x = inputs.add(np.array([1.0, 2.0]))
    middle = graph.alu(Ops.MUL, x, x)
    out = graph.alu(Ops.MUL, middle, full(3.0, (2,)))
    found = compute_gradient(out, full(1.0, (2,)), [middle, x])
    assert evaluate(found[middle], inputs.values).tolist() == [3.0, 3.0]
    assert evaluate(found[x], inputs.values).tolist() == [6.0, 12.0]


def test_second_derivative_by_differentiating_the_gradient() -> None:
    # d2/dx2 sin(x) = -sin(x)
    inputs = Inputs()
    data = np.array([0.3, 1.1, -2.0])
    x = inputs.add(data)
    first = compute_gradient(graph.alu(Ops.SIN, x), full(1.0, (3,)), [x])[x]
    second = compute_gradient(first, full(1.0, (3,)), [x])[x]
    np.testing.assert_allclose(evaluate(second, inputs.values), -np.sin(data), rtol=1e-12)


def test_only_nodes_on_a_path_to_a_target_are_differentiated() -> None:
    # the other branch uses an op with no gradient rule (IDIV on ints is never differentiable): it must not be visited
    inputs = Inputs()
    x = inputs.add(np.array([1.0, 2.0]))
    ints = graph.cast(x, dtypes.int32)
    unrelated = graph.cast(graph.alu(Ops.IDIV, ints, graph.const(2, dtypes.int32, DEVICE, (2,))), F64)
    found = compute_gradient(graph.alu(Ops.ADD, graph.alu(Ops.MUL, x, x), unrelated), full(1.0, (2,)), [x])
    assert evaluate(found[x], inputs.values).tolist() == [2.0, 4.0]


def test_target_not_in_graph_is_left_out() -> None:
    inputs = Inputs()
    x, y = inputs.add(np.array([1.0])), inputs.add(np.array([2.0]))
    assert set(compute_gradient(graph.alu(Ops.NEG, x), full(1.0, (1,)), [x, y])) == {x}


def test_root_gradient_must_match_the_root() -> None:
    x = full(1.0, (2, 2))
    with pytest.raises(ValueError, match=r"expected shape \(2, 2\)"):
        compute_gradient(graph.alu(Ops.NEG, x), full(1.0, (2,)), [x])
    with pytest.raises(ValueError, match="dtype"):
        compute_gradient(graph.alu(Ops.NEG, x), full(1.0, (2, 2), dtypes.float32), [x])


def test_non_float_root_or_target_is_a_type_error() -> None:
    ints = graph.const(1, dtypes.int32, DEVICE, (2,))
    with pytest.raises(TypeError, match="float"):
        compute_gradient(ints, ints, [ints])
    x = full(1.0, (2,))
    with pytest.raises(TypeError, match="int32"):
        compute_gradient(x, x, [ints])


def test_float_node_without_a_rule_is_a_clear_error() -> None:
    # a float node whose op has no rule, built by hand (SHL never takes floats in a real graph)
    x = full(1.0, (2,))
    odd = UOp(Ops.SHL, F64, (x, x))
    graph.shape_of(odd)
    with pytest.raises(RuntimeError, match=r"no gradient rule for Ops\.SHL"):
        compute_gradient(odd, full(1.0, (2,)), [x])


def test_every_float_primitive_has_a_rule() -> None:
    # the ops a float tensor graph can contain (integer-only ops excepted) must each have exactly one rule
    integer_only = {Ops.IDIV, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.THREEFRY}
    differentiable = (
        (set(Ops.__members__.values()) & (set(graph.ELEMENTWISE_OPS) | set(graph.MOVEMENT_OPS)))
        | {Ops.REDUCE_AXIS, Ops.CONTIGUOUS, Ops.DETACH, Ops.COPY, Ops.ASSIGN, Ops.CONST}
    ) - integer_only
    covered = {op for rule in pm_gradient.rules for op in (rule.ops or ())}
    assert differentiable <= covered, sorted(op.name for op in differentiable - covered)
    patterns_per_op = [op for pattern, _ in pm_gradient.patterns for op in (pattern.op or ())]
    assert len(patterns_per_op) == len(set(patterns_per_op))
