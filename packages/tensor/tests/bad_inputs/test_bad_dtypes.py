"""Python ints and floats that do not fit a dtype: inferred wider (as PyTorch), or OverflowError (as numpy)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, dtypes
from kiln.uops import DType


@pytest.mark.parametrize(
    ("data", "dtype"),
    [
        ([2**40], dtypes.int64),
        ([1, 2**31], dtypes.int64),
        ([-(2**31) - 1], dtypes.int64),
        ([2**31 - 1], dtypes.int32),
        ([-(2**31)], dtypes.int32),
        ([[1], [2**40]], dtypes.int64),
        ([2**63 - 1], dtypes.int64),
        ([-(2**63)], dtypes.int64),
    ],
)
def test_large_python_ints_infer_int64_and_hold_the_value(data: list[object], dtype: DType) -> None:
    tensor = Tensor(data)
    assert tensor.dtype == dtype
    assert tensor.tolist() == data


@pytest.mark.parametrize("value", [2**40, -(2**40), 2**63 - 1])
def test_large_python_int_scalars_infer_int64(value: int) -> None:
    tensor = Tensor(value)
    assert tensor.dtype == dtypes.int64
    assert tensor.item() == value
    assert Tensor.full((3,), value).tolist() == [value] * 3


@pytest.mark.parametrize("data", [[2**63], [-(2**63) - 1], 2**64, [1, 2**70]])
def test_ints_beyond_int64_raise_overflow(data: object) -> None:
    with pytest.raises(OverflowError, match="int64"):
        Tensor(data)


@pytest.mark.parametrize(
    ("data", "dtype"),
    [
        ([2**40], dtypes.int64),
        ([2**64 - 1], dtypes.uint64),
        ([2**32 - 1], dtypes.uint32),
        ([-128, 127], dtypes.int8),
        ([0, 255], dtypes.uint8),
        ([-(2**15), 2**15 - 1], dtypes.int16),
    ],
)
def test_explicit_int_dtype_holds_edge_values_exactly(data: list[int], dtype: DType) -> None:
    assert Tensor(data, dtype=dtype).tolist() == data


@pytest.mark.parametrize(
    ("data", "dtype", "bad"),
    [
        ([300], dtypes.uint8, "300"),
        ([-1], dtypes.uint8, "-1"),
        ([128], dtypes.int8, "128"),
        ([-129], dtypes.int8, "-129"),
        ([2**40], dtypes.int32, "1099511627776"),
        ([-1], dtypes.uint32, "-1"),
        ([1, 2, 70000], dtypes.int16, "70000"),
        ([2**64], dtypes.uint64, "18446744073709551616"),
    ],
)
def test_out_of_range_python_ints_raise_like_numpy(data: list[int], dtype: DType, bad: str) -> None:
    with pytest.raises(OverflowError):
        np.array(data, dtype=dtype.name)  # the oracle: numpy raises for these too
    with pytest.raises(OverflowError, match=bad):
        Tensor(data, dtype=dtype)


@pytest.mark.parametrize(
    ("value", "dtype"),
    [(300, dtypes.uint8), (-1, dtypes.uint16), (2**31, dtypes.int32), (-(2**7) - 1, dtypes.int8)],
)
def test_out_of_range_scalar_constants_raise(value: int, dtype: DType) -> None:
    with pytest.raises(OverflowError, match=str(value)):
        Tensor(value, dtype=dtype)
    with pytest.raises(OverflowError, match=str(value)):
        Tensor.full((2,), value, dtype=dtype)


@pytest.mark.parametrize(
    ("start", "stop", "dtype", "expected"),
    [
        (2**31, 2**31 + 3, dtypes.int64, [2**31, 2**31 + 1, 2**31 + 2]),
        (-(2**31) - 2, -(2**31), dtypes.int64, [-(2**31) - 2, -(2**31) - 1]),
        (0, 3, dtypes.int32, [0, 1, 2]),
    ],
)
def test_arange_past_int32_infers_int64(start: int, stop: int, dtype: DType, expected: list[int]) -> None:
    result = Tensor.arange(start, stop)
    assert result.dtype == dtype
    assert result.tolist() == expected


def test_arange_out_of_range_for_explicit_dtype_raises() -> None:
    with pytest.raises(OverflowError, match="255"):
        Tensor.arange(250, 260, dtype=dtypes.uint8)


@pytest.mark.parametrize(
    ("data", "dtype", "expected"),
    # numpy's rule for Python floats given an int dtype: truncation toward zero
    [([1.5, -1.5], dtypes.int32, [1, -1]), ([2.9], dtypes.uint8, [2]), ([-0.5], dtypes.int8, [0])],
)
def test_python_floats_to_int_dtype_truncate_like_numpy(data: list[float], dtype: DType, expected: list[int]) -> None:
    assert np.array(data, dtype=dtype.name).tolist() == expected
    assert Tensor(data, dtype=dtype).tolist() == expected


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        (float("nan"), ValueError, "NaN"),
        (float("inf"), OverflowError, "infinity"),
        (1e10, OverflowError, "10000000000"),
        (-1.5, OverflowError, "-1"),
    ],
)
def test_non_finite_or_huge_floats_to_int_raise(value: float, error: type[Exception], words: str) -> None:
    dtype = dtypes.uint8 if value == -1.5 else dtypes.int32
    with pytest.raises(error, match=words):
        Tensor([value], dtype=dtype)


@pytest.mark.parametrize(
    ("values", "source", "target", "expected"),
    # numpy's documented C-cast rule for int -> int: the value modulo 2**bits
    [
        ([300, -1, 256], dtypes.int32, dtypes.uint8, [44, 255, 0]),
        ([-1], dtypes.int32, dtypes.uint32, [4294967295]),
        ([2**31], dtypes.int64, dtypes.int32, [-(2**31)]),
        ([200], dtypes.int32, dtypes.int8, [-56]),
    ],
)
def test_int_casts_wrap_like_numpy(values: list[int], source: DType, target: DType, expected: list[int]) -> None:
    assert np.array(values, dtype=source.name).astype(target.name).tolist() == expected
    assert Tensor(values, dtype=source).cast(target).tolist() == expected


@pytest.mark.parametrize("dtype", ["float32", "int32", 5, np.float32, float])
def test_dtype_argument_of_the_wrong_kind_raises(dtype: object) -> None:
    with pytest.raises(TypeError, match="dtype"):
        Tensor([1.0], dtype=dtype)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", ["float33", "int3", "complex64", object()])
def test_cast_to_unknown_dtype_raises(dtype: object) -> None:
    with pytest.raises(TypeError, match=repr(dtype) if not isinstance(dtype, str) else dtype):
        Tensor([1.0]).cast(dtype)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("values", "dtype"),
    [([np.nan, 1.0], "float32"), ([np.inf, -np.inf], "float32"), ([np.nan], "float64"), ([-0.0], "float32")],
)
def test_nan_and_inf_roundtrip(values: list[float], dtype: str) -> None:
    result = Tensor(np.array(values, dtype=dtype)).numpy()
    np.testing.assert_array_equal(result, np.array(values, dtype=dtype))
    assert np.signbit(result).tolist() == np.signbit(np.array(values, dtype=dtype)).tolist()


_SPECIAL = [np.nan, np.inf, -np.inf, 1.0, -0.0]


@pytest.mark.parametrize(
    ("kiln_op", "numpy_op"),
    [
        (lambda t: t * 0, lambda a: a * 0),
        (lambda t: t.max(), np.max),
        (lambda t: t.min(), np.min),
        (lambda t: t.sum(), np.sum),
        (lambda t: t == t, lambda a: a == a),
        (lambda t: t != t, lambda a: a != a),
        (lambda t: t < 1.0, lambda a: a < 1.0),
        (lambda t: t.clip(-1, 1), lambda a: np.clip(a, -1, 1)),
        (lambda t: t.abs(), np.abs),
        (lambda t: t.exp(), np.exp),
        (lambda t: t.sqrt(), np.sqrt),
        (lambda t: t.relu(), lambda a: np.maximum(a, 0)),
        (lambda t: 1 / t, lambda a: 1 / a),
    ],
)
def test_nan_and_inf_in_ops_match_numpy(kiln_op: Any, numpy_op: Any) -> None:
    array = np.array(_SPECIAL, dtype=np.float32)
    with np.errstate(all="ignore"):
        expected = numpy_op(array)
    np.testing.assert_allclose(kiln_op(Tensor(array)).numpy(), expected, rtol=1e-6)  # 1 ulp: exp


def _wrapped(value: float, bits: int, signed: bool) -> int:
    # exact oracle of kiln's documented float -> int cast: truncate toward zero, then wrap modulo 2**bits
    wrapped = int(value) % (1 << bits)
    return wrapped - (1 << bits) if signed and wrapped >= 1 << (bits - 1) else wrapped


@pytest.mark.parametrize(
    ("value", "dtype", "bits", "signed"),
    [
        (1e10, dtypes.int32, 32, True),
        (-1e20, dtypes.int64, 64, True),
        (300.7, dtypes.uint8, 8, False),
        (-1.5, dtypes.uint8, 8, False),
        (70000.9, dtypes.int16, 16, True),
    ],
)
def test_out_of_range_float_casts_truncate_then_wrap(value: float, dtype: DType, bits: int, signed: bool) -> None:
    # numpy and C leave these undefined; kiln defines them the same on every device, for buffers and constants
    expected = _wrapped(value, bits, signed)
    assert Tensor([value], dtype=dtypes.float64).cast(dtype).tolist() == [expected]
    assert Tensor(value, dtype=dtypes.float64).cast(dtype).item() == expected
