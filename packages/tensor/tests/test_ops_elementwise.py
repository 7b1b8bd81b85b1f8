"""Elementwise Tensor methods (unary math, activations, binary operators, comparisons, logic, where) against numpy,
over broadcasting shapes, 0-dim and zero-size tensors, Python scalars and the dtypes each op supports."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kiln.tensor.ops._checks import ShapeError
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes

DEVICE = "PYTHON"
Array = np.ndarray[Any, Any]


pytestmark = pytest.mark.default_device(DEVICE)


SPECIAL = [-10.0, -3.5, -2.5, -1.5, -1.0, -0.5, -0.3, -0.0, 0.0, 0.2, 0.5, 1.0, 1.5, 2.5, 3.7, 8.0, 10.0]
EDGES = [math.inf, -math.inf, math.nan]
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _softplus(x: Array, beta: float = 1.0, threshold: float = 20.0) -> Array:
    return np.where(x * beta > threshold, x, np.log1p(np.exp(beta * x)) / beta)


def _sigmoid(x: Array) -> Array:
    return 1.0 / (1.0 + np.exp(-x))


# name -> (kiln call, numpy reference computed in float64, absolute tolerance for float32, include inf/nan)
UNARY: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[Array], Array], float, bool]] = {
    "neg": (lambda t: -t, np.negative, 0.0, True),
    "abs": (lambda t: t.abs(), np.abs, 0.0, True),
    "sign": (lambda t: t.sign(), np.sign, 0.0, True),
    "square": (lambda t: t.square(), np.square, 1e-5, True),
    "exp": (lambda t: t.exp(), np.exp, 1e-5, True),
    "exp2": (lambda t: t.exp2(), np.exp2, 1e-5, True),
    "log": (lambda t: t.log(), np.log, 1e-6, True),
    "log2": (lambda t: t.log2(), np.log2, 1e-6, True),
    "sqrt": (lambda t: t.sqrt(), np.sqrt, 1e-6, True),
    "rsqrt": (lambda t: t.rsqrt(), lambda x: 1.0 / np.sqrt(x), 1e-6, True),
    "reciprocal": (lambda t: t.reciprocal(), np.reciprocal, 1e-6, True),
    "sin": (lambda t: t.sin(), np.sin, 1e-6, False),
    "cos": (lambda t: t.cos(), np.cos, 2e-6, False),
    "tan": (lambda t: t.tan(), np.tan, 1e-4, False),
    "sigmoid": (lambda t: t.sigmoid(), _sigmoid, 1e-6, True),
    "tanh": (lambda t: t.tanh(), np.tanh, 2e-6, True),
    "relu": (lambda t: t.relu(), lambda x: np.where(x < 0, 0.0, x), 0.0, True),
    "relu6": (lambda t: t.relu6(), lambda x: np.minimum(np.where(x < 0, 0.0, x), 6.0), 0.0, True),
    "leaky_relu": (lambda t: t.leaky_relu(0.1), lambda x: np.where(x > 0, x, 0.1 * x), 1e-6, True),
    "elu": (lambda t: t.elu(0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x)), 1e-6, True),
    "hardtanh": (lambda t: t.hardtanh(-2.0, 3.0), lambda x: np.clip(x, -2.0, 3.0), 0.0, True),
    "hardsigmoid": (lambda t: t.hardsigmoid(), lambda x: np.clip(x + 3.0, 0.0, 6.0) / 6.0, 1e-6, True),
    "hardswish": (lambda t: t.hardswish(), lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0, 1e-5, False),
    "silu": (lambda t: t.silu(), lambda x: x * _sigmoid(x), 1e-5, False),
    "gelu": (lambda t: t.gelu(), lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))), 1e-5, False),
    "gelu_tanh": (
        lambda t: t.gelu(approximate="tanh"),
        lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
        1e-5,
        False,
    ),
    "softplus": (lambda t: t.softplus(), _softplus, 1e-6, False),
    "softplus_beta": (lambda t: t.softplus(beta=2.0, threshold=5.0), lambda x: _softplus(x, 2.0, 5.0), 1e-6, False),
    "mish": (lambda t: t.mish(), lambda x: x * np.tanh(_softplus(x)), 1e-5, False),
    "erf": (lambda t: t.erf(), _erf, 3e-7, False),
    "floor": (lambda t: t.floor(), np.floor, 0.0, True),
    "ceil": (lambda t: t.ceil(), np.ceil, 0.0, True),
    "trunc": (lambda t: t.trunc(), np.trunc, 0.0, True),
    "round": (lambda t: t.round(), np.round, 0.0, True),
    "isnan": (lambda t: t.isnan(), np.isnan, 0.0, True),
    "isinf": (lambda t: t.isinf(), np.isinf, 0.0, True),
    "isfinite": (lambda t: t.isfinite(), np.isfinite, 0.0, True),
}


def _check(actual: Array, expected: Array, atol: float, rtol: float = 1e-6) -> None:
    if actual.dtype == np.bool_:
        np.testing.assert_array_equal(actual, expected)
        return
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float32(name: str) -> None:
    method, reference, atol, with_edges = UNARY[name]
    values = np.array(SPECIAL + (EDGES if with_edges else []), dtype=np.float32)
    result = method(Tensor(values))
    with np.errstate(all="ignore"):
        expected = reference(values.astype(np.float64))
    _check(result.numpy(), expected, atol)
    if result.dtype != dtypes.bool:
        assert result.dtype is dtypes.float32


def test_unary_exactness_properties() -> None:
    # rounding of halves to even, signed zeros and integers beyond 2**23 (where x + 0.5 would round)
    values = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.0**23 + 1, -(2.0**24) - 2, 1e30, 0.49999997], np.float32)
    rounded, floored, ceiled = Tensor(values).round(), Tensor(values).floor(), Tensor(values).ceil()
    Tensor.realize_all(rounded, floored, ceiled)
    np.testing.assert_array_equal(rounded.numpy(), np.round(values))
    np.testing.assert_array_equal(floored.numpy(), np.floor(values))
    np.testing.assert_array_equal(ceiled.numpy(), np.ceil(values))
    assert np.signbit(Tensor([-0.4]).round().numpy()).all()  # rounds to -0.0, like numpy


WIDE = np.linspace(-6.0, 6.0, 25)


@pytest.mark.parametrize(
    "name", ["exp", "log", "sqrt", "sigmoid", "tanh", "gelu", "silu", "erf", "round", "floor", "sin", "softplus"]
)
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float64])
def test_unary_other_float_dtypes(name: str, dtype: DType) -> None:
    method, reference, _, _ = UNARY[name]
    numpy_dtype = np.float16 if dtype is dtypes.float16 else np.float64
    values = WIDE.astype(numpy_dtype)
    result = method(Tensor(values))
    assert result.dtype is dtype
    with np.errstate(all="ignore"):
        expected = reference(values.astype(np.float64))
        if dtype is dtypes.float16:
            # opmath: computed in float32, rounded once to float16
            _check(result.numpy(), expected.astype(np.float16).astype(np.float64), atol=1e-3, rtol=2e-3)
        else:
            tight = 3e-7 if name in ("erf", "gelu") else 1e-12
            _check(result.numpy(), expected, atol=tight, rtol=1e-12)


INTEGER_UNARY: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[Array], Array]]] = {
    "neg": (lambda t: -t, np.negative),
    "abs": (lambda t: t.abs(), np.abs),
    "sign": (lambda t: t.sign(), np.sign),
    "square": (lambda t: t.square(), np.square),
    "relu": (lambda t: t.relu(), lambda x: np.maximum(x, 0)),
    "floor": (lambda t: t.floor(), lambda x: x),
    "ceil": (lambda t: t.ceil(), lambda x: x),
    "round": (lambda t: t.round(), lambda x: x),
    "trunc": (lambda t: t.trunc(), lambda x: x),
    "bitwise_not": (lambda t: ~t, np.invert),
}


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.int64])
def test_unary_integers_keep_their_dtype(dtype: DType) -> None:
    numpy_dtype = np.dtype(dtype.name)
    values = np.array([0, 1, 2, 7, 100, 127], dtype=numpy_dtype)
    if dtypes.is_unsigned(dtype):
        values = np.concatenate([values, np.array([200, 255], dtype=numpy_dtype)])
    else:
        values = np.concatenate([values, -values[1:]])
    results = {name: method(Tensor(values)) for name, (method, _) in INTEGER_UNARY.items() if name != "neg"}
    if not dtypes.is_unsigned(dtype):
        results["neg"] = -Tensor(values)
    Tensor.realize_all(*results.values())
    for name, result in results.items():
        assert result.dtype is dtype, name
        np.testing.assert_array_equal(result.numpy(), INTEGER_UNARY[name][1](values), err_msg=name)


def test_float_functions_of_integers_and_bools_give_default_float() -> None:
    ints = Tensor([1, 4, 9])
    results = [ints.sqrt(), ints.exp(), ints.log2(), ints.sigmoid(), ints.reciprocal(), Tensor([True, False]).exp()]
    Tensor.realize_all(*results)
    for result in results:
        assert result.dtype is dtypes.float32
    np.testing.assert_allclose(results[0].numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_allclose(results[1].numpy(), np.exp([1.0, 4.0, 9.0]), rtol=1e-6)
    np.testing.assert_allclose(results[4].numpy(), [1.0, 0.25, 1 / 9], rtol=1e-6)
    np.testing.assert_allclose(results[5].numpy(), [math.e, 1.0], rtol=1e-6)
    flags = Tensor([True, False])
    assert flags.abs().tolist() == [True, False] and flags.sign().tolist() == [True, False]
    assert (~flags).tolist() == [False, True] and flags.logical_not().tolist() == [False, True]


# ------------------------------------------------------------------------------------------------------------------
# binary operators over broadcasting shapes
# ------------------------------------------------------------------------------------------------------------------

BROADCAST_SHAPES = [
    ((3, 4), (4,)),
    ((2, 1, 3), (4, 1)),
    ((), (3,)),
    ((5,), ()),
    ((1,), (2, 3)),
    ((2, 3), (2, 3)),
    ((4, 1), (1, 5)),
]

FLOAT_BINARY: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Array]]] = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.divide),
    "floordiv": (lambda a, b: a // b, np.floor_divide),
    "mod": (lambda a, b: a % b, np.remainder),
    "pow": (lambda a, b: a**b, np.power),
    "maximum": (lambda a, b: a.maximum(b) if isinstance(a, Tensor) else b.maximum(a), np.maximum),
    "minimum": (lambda a, b: a.minimum(b) if isinstance(a, Tensor) else b.minimum(a), np.minimum),
    "lt": (lambda a, b: a < b, np.less),
    "le": (lambda a, b: a <= b, np.less_equal),
    "gt": (lambda a, b: a > b, np.greater),
    "ge": (lambda a, b: a >= b, np.greater_equal),
    "eq": (lambda a, b: a == b, np.equal),
    "ne": (lambda a, b: a != b, np.not_equal),
}


def _random(shape: tuple[int, ...], seed: int, low: float = -3.0, high: float = 3.0) -> Array:
    generator = np.random.default_rng(seed)
    values = generator.uniform(low, high, size=shape).astype(np.float32)
    return np.round(values * 4) / 4  # quarter steps: ties and equal values occur


@pytest.mark.parametrize(("left_shape", "right_shape"), BROADCAST_SHAPES)
def test_float_binary_broadcasting(left_shape: tuple[int, ...], right_shape: tuple[int, ...]) -> None:
    a, b = _random(left_shape, 1), _random(right_shape, 2)
    b = np.where(b == 0, np.float32(0.75), b)
    positive_base = np.abs(a) + np.float32(0.5)
    results = {name: method(Tensor(a), Tensor(b)) for name, (method, _) in FLOAT_BINARY.items() if name != "pow"}
    results["pow"] = Tensor(positive_base) ** Tensor(b)
    Tensor.realize_all(*results.values())
    expected_shape = np.broadcast_shapes(left_shape, right_shape)
    for name, result in results.items():
        reference = FLOAT_BINARY[name][1](positive_base if name == "pow" else a, b)
        assert result.shape == expected_shape, name
        _check(
            result.numpy(), np.asarray(reference, dtype=np.float64 if reference.dtype != np.bool_ else np.bool_), 1e-5
        )


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("scalar", [2, -1.5, True])
def test_binary_with_python_scalars(scalar: float, reverse: bool) -> None:
    a = np.array([[1.5, -2.0, 3.25], [0.5, 4.0, -1.0]], dtype=np.float32)
    x = Tensor(a)
    names = ["add", "sub", "mul", "div", "lt", "ge", "eq", "maximum"]
    results = {}
    for name in names:
        method = FLOAT_BINARY[name][0]
        results[name] = method(scalar, x) if reverse else method(x, scalar)
    Tensor.realize_all(*results.values())
    number = np.float32(scalar)
    for name, result in results.items():
        reference = FLOAT_BINARY[name][1]
        expected = reference(number, a) if reverse else reference(a, number)
        assert result.dtype is (dtypes.bool if expected.dtype == np.bool_ else dtypes.float32), name
        _check(result.numpy(), np.asarray(expected), 1e-6)


INT_BINARY: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Array, Array], Array]]] = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "floordiv": (lambda a, b: a // b, np.floor_divide),
    "mod": (lambda a, b: a % b, np.remainder),
    "and": (lambda a, b: a & b, np.bitwise_and),
    "or": (lambda a, b: a | b, np.bitwise_or),
    "xor": (lambda a, b: a ^ b, np.bitwise_xor),
    "maximum": (lambda a, b: a.maximum(b), np.maximum),
    "minimum": (lambda a, b: a.minimum(b), np.minimum),
    "lt": (lambda a, b: a < b, np.less),
    "le": (lambda a, b: a <= b, np.less_equal),
    "eq": (lambda a, b: a == b, np.equal),
}


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.int64, dtypes.uint32])
def test_integer_binary(dtype: DType) -> None:
    numpy_dtype = np.dtype(dtype.name)
    generator = np.random.default_rng(3)
    low = 0 if dtypes.is_unsigned(dtype) else -50
    a = generator.integers(low, 50, size=(4, 5)).astype(numpy_dtype)
    b = generator.integers(1, 20, size=(5,)).astype(numpy_dtype)
    if not dtypes.is_unsigned(dtype):
        b[::2] = -b[::2]
    results = {name: method(Tensor(a), Tensor(b)) for name, (method, _) in INT_BINARY.items()}
    shifts = np.array([0, 1, 3, 5, 6], dtype=numpy_dtype)
    results["lshift"] = Tensor(a) << Tensor(shifts)
    results["rshift"] = Tensor(a) >> Tensor(shifts)
    exponents = np.array([0, 1, 2, 3, 2], dtype=numpy_dtype)
    results["pow"] = Tensor(a) ** Tensor(exponents)
    Tensor.realize_all(*results.values())
    for name, result in results.items():
        if name in ("lshift", "rshift", "pow"):
            function = {"lshift": np.left_shift, "rshift": np.right_shift, "pow": np.power}[name]
            expected = function(a, shifts if name != "pow" else exponents)
        else:
            expected = INT_BINARY[name][1](a, b)
        assert result.dtype is (dtypes.bool if expected.dtype == np.bool_ else dtype), name
        np.testing.assert_array_equal(result.numpy(), expected, err_msg=name)


def test_integer_power_edge_cases() -> None:
    base = Tensor([2, -2, 1, -1, -1, 3, 0, 7], dtype=dtypes.int32)
    exponent = Tensor([10, 3, -5, -3, -4, -1, 0, 11], dtype=dtypes.int32)
    # negative exponents truncate 1 / base**n toward zero (PyTorch's integer pow); 7**11 wraps around in int32
    assert (base**exponent).tolist() == [1024, -8, 1, -1, 1, 0, 1, 7**11]

    def wrap64(value: int) -> int:
        return (value + 2**63) % 2**64 - 2**63

    assert (Tensor([3, 4, -3], dtype=dtypes.int64) ** 41).tolist() == [wrap64(3**41), 0, wrap64((-3) ** 41)]


# (left dtype, right dtype, PyTorch's result dtype)
MIXED = [
    (dtypes.int8, dtypes.uint8, dtypes.int16),
    (dtypes.int32, dtypes.float16, dtypes.float16),
    (dtypes.bool, dtypes.int32, dtypes.int32),
    (dtypes.uint8, dtypes.int64, dtypes.int64),
    (dtypes.float64, dtypes.float32, dtypes.float64),
    (dtypes.bool, dtypes.float32, dtypes.float32),
    (dtypes.int16, dtypes.float64, dtypes.float64),
]


@pytest.mark.parametrize(("left", "right", "expected"), MIXED)
def test_mixed_dtype_arithmetic(left: DType, right: DType, expected: DType) -> None:
    a = np.array([[1, 0, 3], [2, 5, 1]]).astype(left.name if left is not dtypes.bool else np.bool_)
    b = np.array([3, 1, 2]).astype(right.name if right is not dtypes.bool else np.bool_)
    results = [Tensor(a) + Tensor(b), Tensor(a) * Tensor(b), Tensor(a).maximum(Tensor(b)), Tensor(a) < Tensor(b)]
    Tensor.realize_all(*results)
    wide_a, wide_b = a.astype(expected.name), b.astype(expected.name)
    for result, reference in zip(results, [np.add, np.multiply, np.maximum, np.less]):
        wanted = reference(wide_a, wide_b)
        assert result.dtype is (dtypes.bool if wanted.dtype == np.bool_ else expected)
        np.testing.assert_array_equal(result.numpy(), wanted)


def test_nan_propagation_like_pytorch() -> None:
    a = Tensor([math.nan, 1.0, math.nan, -2.0])
    b = Tensor([1.0, math.nan, math.nan, 3.0])
    results = [a.maximum(b), a.minimum(b), a < b, a == b, a != b, a.relu(), a.clamp(0.0, 1.0)]
    Tensor.realize_all(*results)
    np.testing.assert_array_equal(results[0].numpy(), [math.nan, math.nan, math.nan, 3.0])
    np.testing.assert_array_equal(results[1].numpy(), [math.nan, math.nan, math.nan, -2.0])
    assert results[2].tolist() == [False, False, False, True]
    assert results[3].tolist() == [False, False, False, False]
    assert results[4].tolist() == [True, True, True, True]
    np.testing.assert_array_equal(results[5].numpy(), [math.nan, 1.0, math.nan, 0.0])
    np.testing.assert_array_equal(results[6].numpy(), [math.nan, 1.0, math.nan, 0.0])


# ------------------------------------------------------------------------------------------------------------------
# logic, bits, selection
# ------------------------------------------------------------------------------------------------------------------


def test_logical_ops_take_truth_values() -> None:
    a = np.array([0, 1, 2, 0, -3], dtype=np.int32)
    b = np.array([0.0, 0.0, 0.5, 2.0, math.nan], dtype=np.float32)
    results = [Tensor(a).logical_and(Tensor(b)), Tensor(a).logical_or(Tensor(b)), Tensor(a).logical_xor(Tensor(b))]
    results.append(Tensor(b).logical_not())
    Tensor.realize_all(*results)
    for result, expected in zip(
        results, [np.logical_and(a, b), np.logical_or(a, b), np.logical_xor(a, b), np.logical_not(b)]
    ):
        assert result.dtype is dtypes.bool
        np.testing.assert_array_equal(result.numpy(), expected)


def test_bool_bitwise_ops() -> None:
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    results = [Tensor(a) & Tensor(b), Tensor(a) | Tensor(b), Tensor(a) ^ Tensor(b), ~Tensor(a), Tensor(a) & True]
    Tensor.realize_all(*results)
    for result, expected in zip(results, [a & b, a | b, a ^ b, ~a, a & True]):
        assert result.dtype is dtypes.bool
        np.testing.assert_array_equal(result.numpy(), expected)


def test_unsigned_and_signed_shifts() -> None:
    signed = np.array([-64, -1, 64, 5], dtype=np.int32)
    unsigned = np.array([0xF0000000, 1, 64, 5], dtype=np.uint32)
    results = [
        Tensor(signed) >> 2,
        Tensor(unsigned) >> 2,
        Tensor(signed) << 3,
        Tensor(unsigned) << 3,
        1 << Tensor(signed[2:] // 16),
    ]
    Tensor.realize_all(*results)
    np.testing.assert_array_equal(results[0].numpy(), signed >> 2)  # arithmetic shift keeps the sign
    np.testing.assert_array_equal(results[1].numpy(), unsigned >> 2)
    np.testing.assert_array_equal(results[2].numpy(), signed << 3)
    np.testing.assert_array_equal(results[3].numpy(), unsigned << np.uint32(3))
    np.testing.assert_array_equal(results[4].numpy(), np.left_shift(1, signed[2:] // 16))


@pytest.mark.parametrize(
    ("condition_shape", "true_shape", "false_shape"),
    [((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), ()), ((), (2, 3), (3,)), ((2, 1, 3), (1, 4, 1), (3,))],
)
def test_where_broadcasts_three_ways(
    condition_shape: tuple[int, ...], true_shape: tuple[int, ...], false_shape: tuple[int, ...]
) -> None:
    condition = _random(condition_shape, 5) > 0
    if_true, if_false = _random(true_shape, 6), _random(false_shape, 7)
    result = Tensor(condition).where(Tensor(if_true), Tensor(if_false))
    np.testing.assert_array_equal(result.numpy(), np.where(condition, if_true, if_false))
    functional = Tensor.where(Tensor(condition), Tensor(if_true), Tensor(if_false))  # torch.where-style call
    np.testing.assert_array_equal(functional.numpy(), np.where(condition, if_true, if_false))


def test_where_promotes_branches_like_pytorch() -> None:
    condition = Tensor([True, False, True])
    cases = [
        (condition.where(Tensor([1, 2, 3]), 0.5), dtypes.float32, [1.0, 0.5, 3.0]),
        (condition.where(Tensor([1, 2, 3], dtype=dtypes.int8), 300), dtypes.int8, [1, 44, 3]),  # 300 wraps in int8
        (condition.where(1.0, 0), dtypes.float32, [1.0, 0.0, 1.0]),
        (condition.where(True, False), dtypes.bool, [True, False, True]),
        (
            Tensor([2, 0, -1]).where(Tensor([1.5, 2.5, 3.5], dtype=dtypes.float16), Tensor(9)),
            dtypes.float16,
            [1.5, 9, 3.5],
        ),
    ]
    Tensor.realize_all(*(result for result, _, _ in cases))
    for result, dtype, values in cases:
        assert result.dtype is dtype
        assert result.tolist() == values


def test_masked_fill_and_clamp() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    mask = np.array([True, False, False, True])
    results = [
        Tensor(a).masked_fill(Tensor(mask), -1.5),
        Tensor(a).masked_fill(Tensor(a > 2), Tensor(7.0)),
        Tensor(a).clamp(-2, 3),
        Tensor(a).clamp(min=0),
        Tensor(a).clip(max=Tensor([0.0, 1.0, 2.0, 3.0])),
        Tensor(a).clamp(2, -2),  # min > max gives max everywhere, like PyTorch
        Tensor(a.astype(np.int32)).clamp(-1.5, 2.5),
    ]
    Tensor.realize_all(*results)
    expected = [
        np.where(mask, -1.5, a),
        np.where(a > 2, 7.0, a),
        np.clip(a, -2, 3),
        np.maximum(a, 0),
        np.minimum(a, [0.0, 1.0, 2.0, 3.0]),
        np.full_like(a, -2),
        np.minimum(np.maximum(a, -1.5), 2.5),
    ]
    for result, wanted in zip(results, expected):
        np.testing.assert_array_equal(result.numpy(), wanted)
    assert results[6].dtype is dtypes.float32
    assert Tensor([1, 2], dtype=dtypes.int8).masked_fill(Tensor([True, False]), 3.7).dtype is dtypes.int8


def test_lerp_matches_pytorch_formula() -> None:
    start = np.array([0.0, 10.0, -4.0, 1e8], dtype=np.float32)
    end = np.array([10.0, 20.0, 4.0, 1.0], dtype=np.float32)
    weight = np.array([0.25, 0.75, 1.0, 0.5], dtype=np.float32)
    results = [
        Tensor(start).lerp(Tensor(end), 0.25),
        Tensor(start).lerp(Tensor(end), 1.0),
        Tensor(start).lerp(Tensor(end), Tensor(weight)),
    ]
    Tensor.realize_all(*results)

    def reference(w: Any) -> Array:
        difference = end - start
        return np.asarray(np.where(np.abs(w) < 0.5, start + w * difference, end - difference * (np.float32(1) - w)))

    np.testing.assert_allclose(results[0].numpy(), reference(np.float32(0.25)), rtol=1e-6)
    np.testing.assert_array_equal(results[1].numpy(), end)  # exact at weight 1
    np.testing.assert_allclose(results[2].numpy(), reference(weight), rtol=1e-6)


def test_float16_and_bfloat16_arithmetic() -> None:
    a = np.array([1.0, 2.5, -3.0, 1000.0], dtype=np.float16)
    b = np.array([0.5, 0.25, 7.0, 64.0], dtype=np.float16)
    sums = Tensor(a) + Tensor(b)
    products = Tensor(a) * Tensor(b)
    Tensor.realize_all(sums, products)
    np.testing.assert_array_equal(sums.numpy(), a + b)
    np.testing.assert_array_equal(products.numpy(), a * b)
    brain = Tensor([1.0, 3.0, 256.0], dtype=dtypes.bfloat16) * Tensor([1.5, 0.5, 1.0078125], dtype=dtypes.bfloat16)
    assert brain.dtype is dtypes.bfloat16
    # bfloat16 keeps 8 significant bits: 256 * 1.0078125 = 258 exactly
    np.testing.assert_array_equal(brain.numpy(), [1.5, 1.5, 258.0])


def test_zero_dim_results() -> None:
    x = Tensor(2.5)
    results = [x + 1, x * Tensor([1.0, 2.0]), -x, x.exp(), x > 2, x.where(1, 2)]
    Tensor.realize_all(*results)
    assert results[0].shape == () and results[0].item() == 3.5
    assert results[1].tolist() == [2.5, 5.0]
    assert results[2].item() == -2.5
    assert abs(results[3].item() - math.exp(2.5)) < 1e-5
    assert results[4].item() is True
    assert results[5].item() == 1


def test_zero_size_elementwise() -> None:
    empty = Tensor(np.zeros((0, 3), dtype=np.float32))
    results = [empty + Tensor([1.0, 2.0, 3.0]), empty.exp(), empty < 1, Tensor(np.zeros((0,), np.int32)) // 2]
    shapes = [(0, 3), (0, 3), (0, 3), (0,)]
    for result, shape in zip(results, shapes):
        assert result.shape == shape
        assert result.numpy().shape == shape


def test_dunder_helpers() -> None:
    assert bool(Tensor([3.0]) > 2) is True
    assert bool(Tensor(0)) is False
    x = Tensor([1.0, 2.0])
    assert hash(x) == hash(x) and len({x, x}) == 1  # hashable by identity even though == builds a tensor
    assert abs(Tensor([-2])).tolist() == [2] and (+x) is x


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_add_and_mul_of_two_tensors_alike_match_numpy_and_carry_gradients(device: str) -> None:
    # two tensors of one class, dtype, shape and device take the short path (no promotion, no broadcast): the same
    # values, dtypes, result class and gradients as the general path (numpy and the product rule are the oracles)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    x, y = Tensor(a, device=device, requires_grad=True), Tensor(b, device=device)
    total, product = x + y, x * y
    np.testing.assert_allclose(total.numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose(product.numpy(), a * b, rtol=1e-6)
    assert total.requires_grad and product.requires_grad and total.dtype == dtypes.float32
    (product.sum() + total.sum()).backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), b + 1, rtol=1e-6)
    ints = np.array([2**31 - 1, -7, 3], dtype=np.int32)
    wrapped = Tensor(ints, device=device) + Tensor(ints, device=device)
    assert wrapped.dtype == dtypes.int32
    np.testing.assert_array_equal(wrapped.numpy(), ints + ints)  # int32 wraps like numpy
    flags = np.array([True, False, False]), np.array([True, True, False])
    either = Tensor(flags[0], device=device) + Tensor(flags[1], device=device)
    assert either.dtype == dtypes.bool
    np.testing.assert_array_equal(either.numpy(), flags[0] | flags[1])
    # one dtype apart or one shape apart: the general path promotes and broadcasts
    mixed = Tensor(a, device=device) * Tensor(b.astype(np.float16), device=device)
    assert mixed.dtype == dtypes.float32
    np.testing.assert_allclose(mixed.numpy(), a * b.astype(np.float16).astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose((Tensor(a, device=device) + Tensor(b[:1], device=device)).numpy(), a + b[:1], rtol=1e-6)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_broadcast_operands_of_one_dtype_carry_gradients_and_refuse_bad_shapes(device: str) -> None:
    # a (3, 4) tensor with a (4,) bias and a (3, 1) column: each broadcast operand's gradient sums over the
    # broadcast dims (numpy is the oracle); shapes that do not broadcast raise ShapeError naming the op
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    bias, column = rng.standard_normal(4).astype(np.float32), rng.standard_normal((3, 1)).astype(np.float32)
    x = Tensor(a, device=device)
    b = Tensor(bias, device=device, requires_grad=True)
    c = Tensor(column, device=device, requires_grad=True)
    out = (x + b) * c - c / b
    expected = (a + bias) * column - column / bias
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)
    out.sum().backward()
    assert b.grad is not None and c.grad is not None
    np.testing.assert_allclose(b.grad.numpy(), (column + column / bias**2).sum(0), rtol=1e-4)
    np.testing.assert_allclose(c.grad.numpy(), ((a + bias) - 1 / bias).sum(1, keepdims=True), rtol=1e-4)
    with pytest.raises(ShapeError, match=r"^add: .*\(3, 4\).*\(3,\)"):
        x + Tensor(np.zeros(3, np.float32), device=device)
    with pytest.raises(ShapeError, match=r"^sub: "):
        x - Tensor(np.zeros((2, 4), np.float32), device=device)
