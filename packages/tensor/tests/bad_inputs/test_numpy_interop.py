"""numpy operands and Python's protocols (float / int / bool / len / iter / index / tolist / np.asarray) behave as
PyTorch's, compared with answers recorded from torch 2.13 (record_torch.py -> torch_expected.json)."""

from __future__ import annotations

import json
import math
import operator
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, dtypes

TORCH = json.loads(pathlib.Path(__file__).with_name("torch_expected.json").read_text())

# name -> (the kiln spelling of the torch case, whether the dtype must match torch's too; kiln's default int is
# int32 where torch's is int64, so dtypes of cases built from plain Python ints are not compared)
KILN: dict[str, tuple[Callable[[], Any], bool]] = {
    "float_two_elements": (lambda: float(Tensor([1.0, 2.0])), False),
    "float_no_elements": (lambda: float(Tensor.zeros(0)), False),
    "int_two_elements": (lambda: int(Tensor([1, 2])), False),
    "int_of_float": (lambda: int(Tensor(-2.7)), False),
    "int_of_nan": (lambda: int(Tensor(math.nan)), False),
    "int_of_inf": (lambda: int(Tensor(math.inf)), False),
    "float_of_int": (lambda: float(Tensor([3])), False),
    "bool_two_elements": (lambda: bool(Tensor([1, 2])), False),
    "bool_no_elements": (lambda: bool(Tensor.zeros(0)), False),
    "bool_nan": (lambda: bool(Tensor(math.nan)), False),
    "bool_zero": (lambda: bool(Tensor([0.0])), False),
    "len_0d": (lambda: len(Tensor(1.0)), False),
    "len_2d": (lambda: len(Tensor.zeros(3, 2)), False),
    "iter_0d": (lambda: list(Tensor(1.0)), False),
    "iter_rows": (lambda: [row.tolist() for row in Tensor([[1, 2], [3, 4]])], False),
    "index_of_float": (lambda: operator.index(Tensor(1.0)), False),
    "index_of_int": (lambda: operator.index(Tensor([3])), False),
    "index_of_two": (lambda: operator.index(Tensor([3, 4])), False),
    "list_indexed_by_tensor": (lambda: [10, 20, 30][Tensor(1)], False),  # type: ignore[index]
    "item_two_elements": (lambda: Tensor([1, 2]).item(), False),
    "tolist_0d": (lambda: Tensor(2.5).tolist(), False),
    "tolist_2d_int": (lambda: Tensor([[1, 2], [3, 4]]).tolist(), False),
    "asarray": (lambda: np.asarray(Tensor([[1.5, 2.0]])).tolist(), False),
    "numpy_scalar_times_tensor": (lambda: np.float32(2) * Tensor([1.0, 2.0]), True),
    "numpy_f64_scalar_plus_f32": (lambda: np.float64(0.5) + Tensor([1.0, 2.0]), True),
    "numpy_int_scalar_times_int": (lambda: np.int64(3) * Tensor([1, 2], dtype=dtypes.int32), True),
    "tensor_plus_numpy_array": (lambda: Tensor([1.0, 2.0]) + np.array([0.5, 0.25]), True),
    "tensor_times_numpy_f32": (lambda: Tensor([1.0, 2.0]) * np.array([3.0, 4.0], np.float32), True),
    "int_tensor_plus_numpy_int": (lambda: Tensor([1, 2], dtype=dtypes.int64) + np.array([5, 6], np.int32), True),
    "tensor_lt_numpy": (lambda: Tensor([1.0, 5.0]) < np.array([2.0, 2.0], np.float32), True),
}


def _same(actual: Any, expected: Any) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(actual, float) and math.isnan(actual)
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(map(_same, actual, expected))
    return type(actual) is type(expected) and actual == expected


@pytest.mark.parametrize("name", sorted(KILN))
def test_matches_torch(name: str) -> None:
    expected = TORCH[name]
    function, compare_dtype = KILN[name]
    if "error" in expected:
        with pytest.raises(Exception) as info:
            function()
        assert type(info.value).__name__ == expected["error"], f"torch raised {expected}, kiln {info.value!r}"
        return
    result = function()
    if expected["type"] == "Tensor":
        assert isinstance(result, Tensor), f"expected a Tensor, got {type(result).__name__}: {result!r}"
        assert _same(result.tolist(), expected["value"])
        if compare_dtype:
            assert result.dtype.name == expected["dtype"]
    else:
        assert _same(result, expected["value"])


@pytest.mark.parametrize(
    "expression",
    [
        lambda t: np.array([1.0, 2.0]) + t,
        lambda t: np.array([1.0, 2.0]) - t,
        lambda t: np.array([1.0, 2.0]) * t,
        lambda t: np.array([1.0, 2.0]) / t,
        lambda t: np.array([1.0, 2.0]) ** t,
        lambda t: np.array([1.0, 2.0]) < t,
        lambda t: np.float32(2) * t,
        lambda t: np.float64(2) - t,
        lambda t: np.int32(2) + t,
        lambda t: t + np.array([1.0, 2.0]),
        lambda t: t / np.array([1.0, 2.0]),
        lambda t: np.array([[1.0], [2.0]]) * t,
    ],
)
def test_numpy_on_the_left_gives_a_tensor_with_numpys_values(expression: Callable[[Any], Any]) -> None:
    values = np.array([3.0, 4.0], dtype=np.float32)
    result = expression(Tensor(values))
    assert isinstance(result, Tensor), f"got {type(result).__name__}, expected a Tensor (numpy must defer)"
    np.testing.assert_allclose(result.numpy(), expression(values), rtol=1e-6)


def test_numpy_operand_of_another_shape_names_both_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(3,\) and \(2,\)"):
        Tensor([1.0, 2.0, 3.0]) + np.array([1.0, 2.0])


def test_numpy_object_array_operand_is_rejected() -> None:
    with pytest.raises(TypeError, match="object"):
        Tensor([1.0]) + np.array([object()])


def test_numpy_ufunc_on_a_tensor_says_to_convert() -> None:
    # with __array_ufunc__ = None numpy refuses its ufuncs on a Tensor rather than building an object array
    with pytest.raises(TypeError):
        np.exp(Tensor([1.0]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_])
def test_asarray_keeps_the_dtype(dtype: type) -> None:
    values = np.array([[1, 0], [3, 4]], dtype=dtype)
    result = np.asarray(Tensor(values))
    assert result.dtype == values.dtype and result.tolist() == values.tolist()


def test_asarray_with_dtype_converts() -> None:
    assert np.asarray(Tensor([1.5, 2.5]), dtype=np.int64).tolist() == [1, 2]
