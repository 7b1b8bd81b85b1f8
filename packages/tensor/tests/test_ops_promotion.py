"""Type promotion (kiln.tensor.ops.promotion) against a written-out table of PyTorch's rules, and the division /
modulo semantics built on it against Python's own integer and float arithmetic."""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kiln.tensor.ops.promotion import (
    DIMENSIONED,
    PYTHON_SCALAR,
    ZERO_DIM,
    operand_kind,
    promote_kinds,
    promote_kinds_uncached,
    result_type,
)
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes

DEVICE = "PYTHON"
Array = np.ndarray[Any, Any]


pytestmark = pytest.mark.default_device(DEVICE)


def T(dtype: DType) -> Tensor:  # a tensor with dims
    return Tensor.zeros(2, dtype=dtype)


def Z(dtype: DType) -> Tensor:  # a 0-dim tensor
    return Tensor.zeros((), dtype=dtype)


d = dtypes
# (operands, expected) — PyTorch's result_type with kiln's default_int (int32) in place of torch's int64 for
# Python ints; everything else is exactly what torch.result_type returns.
PROMOTION_TABLE: list[tuple[tuple[object, ...], DType]] = [
    # tensors with dims: the lattice
    ((T(d.int8), T(d.uint8)), d.int16),
    ((T(d.int8), T(d.int16)), d.int16),
    ((T(d.uint8), T(d.int32)), d.int32),
    ((T(d.int32), T(d.int64)), d.int64),
    ((T(d.int32), T(d.float16)), d.float16),
    ((T(d.int64), T(d.float32)), d.float32),
    ((T(d.float16), T(d.bfloat16)), d.float32),
    ((T(d.float16), T(d.float32)), d.float32),
    ((T(d.float32), T(d.float64)), d.float64),
    ((T(d.bool), T(d.bool)), d.bool),
    ((T(d.bool), T(d.uint8)), d.uint8),
    ((T(d.bool), T(d.float16)), d.float16),
    ((T(d.uint8), T(d.int8)), d.int16),
    # Python scalars only matter when their category is higher
    ((T(d.int8), 1), d.int8),
    ((T(d.uint8), 1), d.uint8),
    ((T(d.int16), 100000), d.int16),
    ((T(d.int8), 1.5), d.float32),
    ((T(d.int64), 1.5), d.float32),
    ((T(d.float16), 1.5), d.float16),
    ((T(d.float16), 1), d.float16),
    ((T(d.float64), 1.5), d.float64),
    ((T(d.bfloat16), 2.0), d.bfloat16),
    ((T(d.bool), 1), d.int32),
    ((T(d.bool), 1.5), d.float32),
    ((T(d.bool), True), d.bool),
    ((T(d.int32), True), d.int32),
    ((T(d.float32), False), d.float32),
    # 0-dim tensors: same category -> the dimensioned tensor wins; higher category -> joined
    ((T(d.int8), Z(d.int64)), d.int8),
    ((T(d.uint8), Z(d.int8)), d.uint8),
    ((T(d.int8), Z(d.float64)), d.float64),
    ((T(d.float16), Z(d.float64)), d.float16),
    ((T(d.int32), Z(d.float16)), d.float16),
    ((T(d.bool), Z(d.int64)), d.int64),
    ((T(d.bool), Z(d.uint8)), d.uint8),
    ((T(d.float32), Z(d.int64)), d.float32),
    ((Z(d.int8), Z(d.int16)), d.int16),
    ((Z(d.int8), 1.5), d.float32),
    ((Z(d.float64), 1), d.float64),
    ((Z(d.bool), 1), d.int32),
    ((Z(d.int64), 1), d.int64),
    # three tiers at once: a 0-dim float above an int tensor, the float scalar below the 0-dim float
    ((T(d.int16), Z(d.float64), 1.0), d.float64),
    ((T(d.int16), Z(d.int64), 1.0), d.float32),
    ((T(d.int16), Z(d.float16), 1.0), d.float16),
    # scalars only
    ((1, 1.5), d.float32),
    ((1, True), d.int32),
    ((True, False), d.bool),
]


@pytest.mark.parametrize(("operands", "expected"), PROMOTION_TABLE)
def test_result_type_matches_pytorch_table(operands: tuple[object, ...], expected: DType) -> None:
    assert result_type(*operands) is expected  # type: ignore[arg-type]
    if isinstance(operands[0], Tensor) and len(operands) == 2:
        # the operator builds a node of that dtype (no realization needed to know it)
        assert (operands[0] + operands[1]).dtype is expected  # type: ignore[operator]
        assert (operands[0] * operands[1]).dtype is expected  # type: ignore[operator]
        if expected is not dtypes.bool:
            assert (operands[0] - operands[1]).dtype is expected  # type: ignore[operator]


def test_result_type_is_symmetric() -> None:
    for operands, expected in PROMOTION_TABLE:
        assert result_type(*reversed(operands)) is expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        (T(d.int32), T(d.int32), d.float32),
        (T(d.int8), 2, d.float32),
        (T(d.bool), T(d.bool), d.float32),
        (T(d.float16), 2, d.float16),
        (T(d.int32), Z(d.float64), d.float64),
        (T(d.uint8), 2.5, d.float32),
        (T(d.float64), T(d.int64), d.float64),
    ],
)
def test_true_division_of_integers_gives_default_float(left: Tensor, right: object, expected: DType) -> None:
    assert (left / right).dtype is expected  # type: ignore[operator]


def test_unsigned_64_with_signed_has_no_rule() -> None:
    with pytest.raises(TypeError, match=r"dtypes.int8.*dtypes.uint64|dtypes.uint64.*dtypes.int8"):
        T(d.uint64) + T(d.int8)


def test_comparison_and_logic_results_are_bool() -> None:
    x = T(d.float16)
    for result in (x < 1, x <= 1.5, x == T(d.int32), x != 0, x > Z(d.float64), x >= 2):
        assert result.dtype is dtypes.bool
    assert Tensor([1, 2]).logical_and(Tensor([0.5, 0.0])).dtype is dtypes.bool


def test_promotion_values_and_wraparound() -> None:
    int8 = Tensor([127, -128, 5], dtype=dtypes.int8)
    np.testing.assert_array_equal((int8 + 1).numpy(), np.array([-128, -127, 6], dtype=np.int8))
    mixed = Tensor([1, 2, 3], dtype=dtypes.int32) + Tensor([0.5, 0.25, 0.125], dtype=dtypes.float16)
    assert mixed.dtype is dtypes.float16
    np.testing.assert_array_equal(mixed.numpy(), np.array([1.5, 2.25, 3.125], dtype=np.float16))
    widened = Tensor([100, 200], dtype=dtypes.uint8) + Tensor([-1, -2], dtype=dtypes.int8)
    assert widened.dtype is dtypes.int16
    np.testing.assert_array_equal(widened.numpy(), np.array([99, 198], dtype=np.int16))
    scaled = Tensor([1, 2], dtype=dtypes.int32) * 0.5
    np.testing.assert_array_equal(scaled.numpy(), np.array([0.5, 1.0], dtype=np.float32))
    flags = Tensor([True, False]) + Tensor([True, True])  # bool + bool is logical or, like PyTorch
    assert flags.dtype is dtypes.bool and flags.tolist() == [True, True]


INTEGER_DTYPES = [dtypes.int8, dtypes.int32, dtypes.int64]


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_integer_floor_division_and_modulo_follow_python(dtype: DType) -> None:
    pairs = [(a, b) for a, b in itertools.product(range(-9, 10), range(-4, 5)) if b != 0]
    left = Tensor([a for a, _ in pairs], dtype=dtype)
    right = Tensor([b for _, b in pairs], dtype=dtype)
    floor, modulo, true, truncated = left // right, left % right, left / right, left.div(right, rounding_mode="trunc")
    Tensor.realize_all(floor, modulo, true, truncated)
    assert floor.tolist() == [a // b for a, b in pairs]
    assert modulo.tolist() == [a % b for a, b in pairs]
    assert truncated.tolist() == [int(a / b) for a, b in pairs]
    np.testing.assert_allclose(true.numpy(), [a / b for a, b in pairs], rtol=1e-6)
    assert floor.dtype is dtype and true.dtype is dtypes.float32


def test_unsigned_floor_division_and_modulo() -> None:
    pairs = [(a, b) for a, b in itertools.product(range(0, 256, 17), range(1, 256, 23))]
    left = Tensor([a for a, _ in pairs], dtype=dtypes.uint8)
    right = Tensor([b for _, b in pairs], dtype=dtypes.uint8)
    assert (left // right).tolist() == [a // b for a, b in pairs]
    assert (left % right).tolist() == [a % b for a, b in pairs]


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_float_floor_division_and_modulo_follow_python(dtype: DType) -> None:
    numerators = [7.5, -7.5, 1.0, -1.0, 0.0, -0.0, 5.25, 1e10, -3.0, 0.3, math.inf, math.nan]
    denominators = [2.0, -2.0, 0.1, -0.75, 3.0, 1e-3, math.inf, -math.inf, 0.0]
    pairs = list(itertools.product(numerators, denominators))
    cast = np.float32 if dtype is dtypes.float32 else np.float64
    a = np.array([p[0] for p in pairs], dtype=cast)
    b = np.array([p[1] for p in pairs], dtype=cast)
    floor, modulo, truncated = Tensor(a) // Tensor(b), Tensor(a) % Tensor(b), Tensor(a).fmod(Tensor(b))
    Tensor.realize_all(floor, modulo, truncated)
    with np.errstate(all="ignore"):  # numpy implements Python's float floor division / modulo exactly
        np.testing.assert_array_equal(floor.numpy(), np.floor_divide(a, b))
        np.testing.assert_array_equal(modulo.numpy(), np.remainder(a, b))
        np.testing.assert_array_equal(truncated.numpy(), np.fmod(a, b))


def test_scalar_and_reverse_forms_of_division() -> None:
    x = Tensor([3, -7, 8])
    results = [7 // x, 7 % x, 2**x, 10 / x, x // 2, x % -3, x**2, -x, 1 - x]
    Tensor.realize_all(*results)
    expected: list[list[float]] = [
        [7 // 3, 7 // -7, 7 // 8],
        [7 % 3, 7 % -7, 7 % 8],
        [8, 0, 256],  # 2 ** -7 truncates to 0 for integers
        [10 / 3, 10 / -7, 10 / 8],
        [1, -4, 4],
        [0, -1, -1],
        [9, 49, 64],
        [-3, 7, -8],
        [-2, 8, -7],
    ]
    for result, wanted in zip(results, expected):
        np.testing.assert_allclose(result.numpy(), wanted, rtol=1e-6)
    assert results[3].dtype is dtypes.float32 and results[2].dtype is dtypes.int32


# ---------------------------------------------------------------------------------------------------------------
# the memoized promotion and the Python-scalar fast path of the operators
# ---------------------------------------------------------------------------------------------------------------

TIERS = (DIMENSIONED, ZERO_DIM, PYTHON_SCALAR)


def _outcome(rule: object, kinds: tuple[tuple[int, DType], ...]) -> object:
    # the dtype, or the type of the error for pairs that have no promotion rule (uint64 with a signed dtype)
    try:
        return rule(kinds)  # type: ignore[operator]
    except (TypeError, ValueError) as error:
        return type(error)


def test_memoized_promotion_equals_the_rules_for_every_kind_pair() -> None:
    kinds = [(tier, dtype) for tier in TIERS for dtype in dtypes.all]
    for pair in itertools.product(kinds, repeat=2):
        expected = _outcome(promote_kinds_uncached, pair)
        assert _outcome(promote_kinds, pair) is expected, pair  # first call: computed (or cached by an op)
        assert _outcome(promote_kinds, pair) is expected, pair  # second call: from the cache
    for triple in [((0, d.int16), (1, d.float64), (2, d.float32)), ((1, d.bool), (2, d.int32), (2, d.float32))]:
        assert promote_kinds(triple) is promote_kinds_uncached(triple)


def test_operand_kind_names_the_tier() -> None:
    assert operand_kind(T(d.int8)) == (DIMENSIONED, d.int8)
    assert operand_kind(Z(d.float16)) == (ZERO_DIM, d.float16)
    assert operand_kind(np.float64(2.0)) == (PYTHON_SCALAR, dtypes.default_float)
    assert operand_kind(True) == (PYTHON_SCALAR, d.bool)
    with pytest.raises(TypeError, match="got 'a' of type str"):
        operand_kind("a")  # type: ignore[arg-type]


def test_a_new_default_float_is_not_hidden_by_the_cache() -> None:
    x = T(d.int32)
    assert (x + 1.5).dtype is d.float32 and result_type(x, 1.5) is d.float32
    dtypes.default_float = d.float16
    try:
        assert (x + 1.5).dtype is d.float16
        assert (1.5 * x).dtype is d.float16
        assert result_type(x, 1.5) is d.float16
    finally:
        dtypes.default_float = d.float32
    assert (x + 1.5).dtype is d.float32


SCALAR_DTYPES = [d.bool, d.int8, d.uint8, d.int32, d.int64, d.float16, d.float32, d.float64]
SCALARS: list[bool | int | float] = [True, 3, -2, 2.5, -0.0]
OPERATORS: dict[str, Callable[[Any, Any], Any]] = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}


def _numpy_scalar(value: bool | int | float) -> np.generic:
    # the same number as a numpy scalar: operators take the general (unwrapping) path for it
    if isinstance(value, bool):
        return np.bool_(value)
    return np.int64(value) if isinstance(value, int) else np.float64(value)


@pytest.mark.parametrize("dtype", SCALAR_DTYPES)
def test_python_scalar_operands_match_numpy(dtype: DType) -> None:
    values = np.array([0, 1, 5, 7], dtype=dtype.fmt) if dtype is not d.bool else np.array([True, False, True, False])
    results: list[tuple[Tensor, Tensor, Array]] = []
    for shape in [(4,), ()]:
        data = values if shape else values[1]
        x = Tensor(data, dtype=dtype)
        for scalar, (name, op), reverse in itertools.product(SCALARS, OPERATORS.items(), [False, True]):
            expected_dtype = result_type(x, scalar)
            if name == "sub" and expected_dtype is d.bool:
                with pytest.raises(TypeError, match="subtracting bool"):
                    op(scalar, x) if reverse else op(x, scalar)
                continue
            fast = op(scalar, x) if reverse else op(x, scalar)
            # a numpy scalar on the left would take over the operator: call the Tensor's reflected method
            general = getattr(x, f"__r{name}__" if reverse else f"__{name}__")(_numpy_scalar(scalar))
            assert fast.dtype is expected_dtype and general.dtype is expected_dtype and fast.shape == shape
            # numpy in the promoted dtype is the oracle (C-style wraparound for narrow integers, like kiln)
            left = np.asarray(data).astype(expected_dtype.fmt)
            right = np.asarray(scalar).astype(expected_dtype.fmt)
            with np.errstate(over="ignore"):
                wanted = op(right, left) if reverse else op(left, right)
            results.append((fast, general, np.asarray(wanted)))
    Tensor.realize_all(*(t for fast, general, _ in results for t in (fast, general)))
    for fast, general, wanted in results:
        np.testing.assert_array_equal(fast.numpy(), wanted)
        np.testing.assert_array_equal(general.numpy(), wanted)


def test_scalar_fast_path_keeps_its_checks() -> None:
    # the logical ops fix the operand dtype to bool, where an infinite or nan scalar has no meaning (as before)
    for value in (math.inf, np.float64(math.inf)):
        with pytest.raises(ValueError, match=r"logical_and: cannot use inf with a dtypes.bool operand"):
            T(d.float32).logical_and(value)
    with pytest.raises(ValueError, match=r"logical_or: cannot use nan with a dtypes.bool operand"):
        T(d.int8).logical_or(math.nan)
    assert (T(d.float16) + math.inf).dtype is d.float16 and (T(d.int32) + math.inf).dtype is d.float32
    x = Tensor([1.0, 2.0], requires_grad=True)
    assert (x * 2).requires_grad is True and (x > 1).requires_grad is None
    assert (T(d.float32) + 1).requires_grad is None
