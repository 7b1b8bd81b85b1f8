"""Bad arguments to Tensor() and the creation functions: the error class and a message naming the bad value."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, dtypes

CASES: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("ragged", lambda: Tensor([[1, 2], [3]]), ValueError, "ragged"),
    ("string", lambda: Tensor("abc"), TypeError, "str"),
    ("none_items", lambda: Tensor([None]), TypeError, "None"),
    ("dict", lambda: Tensor({1: 2}), TypeError, "dict"),
    ("set", lambda: Tensor({1, 2}), TypeError, "set"),
    ("complex", lambda: Tensor(np.array([1j])), TypeError, "complex"),
    ("object_array", lambda: Tensor(np.array([object()])), TypeError, "object"),
    ("requires_grad_int", lambda: Tensor([1, 2], requires_grad=True), RuntimeError, "int32"),
    ("requires_grad_not_bool", lambda: Tensor([1.0], requires_grad=1), TypeError, "1"),
    ("zeros_negative", lambda: Tensor.zeros(-1), ValueError, "-1"),
    ("zeros_float", lambda: Tensor.zeros(2.5), TypeError, "2.5"),
    ("ones_string", lambda: Tensor.ones("3"), TypeError, "'3'"),
    ("full_nan_int", lambda: Tensor.full((2,), math.nan, dtype=dtypes.int32), ValueError, "nan"),
    ("full_inf_int", lambda: Tensor.full((2,), math.inf, dtype=dtypes.int64), ValueError, "inf"),
    ("arange_step_zero", lambda: Tensor.arange(0, 3, 0), ValueError, "zero"),
    ("arange_infinite", lambda: Tensor.arange(0, math.inf), ValueError, "inf"),
    ("arange_bool", lambda: Tensor.arange(True), TypeError, "True"),
    ("linspace_negative", lambda: Tensor.linspace(0, 1, -1), ValueError, "-1"),
    ("eye_negative", lambda: Tensor.eye(-1), ValueError, "-1"),
    ("rand_negative", lambda: Tensor.rand(-2), ValueError, "-2"),
    ("randint_empty_range", lambda: Tensor.randint(2, low=5, high=5), ValueError, "5"),
]


@pytest.mark.parametrize(("name", "run", "error", "words"), CASES, ids=[case[0] for case in CASES])
def test_bad_creation_raises_naming_the_value(
    name: str, run: Callable[[], Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error) as info:
        run()
    assert words in str(info.value), f"{name}: {info.value!r} does not name {words!r}"


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: Tensor([]), np.zeros(0, np.float32)),
        (lambda: Tensor([[]]), np.zeros((1, 0), np.float32)),
        (lambda: Tensor(np.zeros((2, 0), np.int16)), np.zeros((2, 0), np.int16)),
        (lambda: Tensor.zeros(0, 3), np.zeros((0, 3), np.float32)),
        (lambda: Tensor.arange(5, 1), np.arange(5, 1).astype(np.int32)),
        (lambda: Tensor([True, 2]), np.array([1, 2], np.int32)),
        (lambda: Tensor([1, 2.5]), np.array([1, 2.5], np.float32)),
        (lambda: Tensor(np.float64(2.5)), np.array(2.5)),
        (lambda: Tensor(np.array([1, 2], np.uint16)), np.array([1, 2], np.uint16)),
    ],
)
def test_tricky_creation_matches_numpy(make: Callable[[], Tensor], expected: np.ndarray[Any, Any]) -> None:
    result = make().numpy()
    assert result.dtype == expected.dtype and result.shape == expected.shape
    np.testing.assert_array_equal(result, expected)
