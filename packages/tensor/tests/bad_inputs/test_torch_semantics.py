"""`where`'s spellings, `(values, indices)` results and gradient mode, compared with answers recorded from torch
2.13 (record_torch.py -> torch_expected.json)."""

from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Callable
from typing import Any

import pytest

import kiln.tensor
from kiln.tensor import Tensor, dtypes, enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from kiln.tensor.return_types import ValuesIndices

TORCH = json.loads(pathlib.Path(__file__).with_name("torch_expected.json").read_text())

KILN: dict[str, Callable[[], Any]] = {
    "where_function": lambda: kiln.tensor.where(Tensor([True, False, True]), Tensor([1.0, 2.0, 3.0]), 0.0),
    "where_method_torch_form": lambda: Tensor([1.0, 2.0, 3.0]).where(Tensor([False, True, True]), -1.0),
    "where_method_broadcast": lambda: Tensor([[1.0], [2.0]]).where(Tensor([True, False]), 5.0),
    "where_int_values": lambda: Tensor([4, 5, 6]).where(Tensor([True, False, False]), 0),
    "max_dim1_values": lambda: Tensor([[1.0, 5.0, 5.0], [7.0, 2.0, 7.0]]).max(1).values,
    "max_dim1_indices": lambda: Tensor([[1.0, 5.0, 5.0], [7.0, 2.0, 7.0]]).max(1).indices,
    "max_dim0_keepdim_values": lambda: Tensor([[1, 5], [7, 2]]).max(0, keepdim=True).values,
    "max_dim0_keepdim_indices": lambda: Tensor([[1, 5], [7, 2]]).max(0, keepdim=True).indices,
    "min_dim_neg1_values": lambda: Tensor([[3.0, 1.0, 1.0], [0.0, 4.0, -2.0]]).min(dim=-1).values,
    "min_dim_neg1_indices": lambda: Tensor([[3.0, 1.0, 1.0], [0.0, 4.0, -2.0]]).min(dim=-1).indices,
    "max_nan_values": lambda: Tensor([[1.0, math.nan, 3.0]]).max(1).values,
    "max_nan_indices": lambda: Tensor([[1.0, math.nan, 3.0]]).max(1).indices,
    "max_all": lambda: Tensor([[1, 9], [3, 4]]).max(),
    "max_other": lambda: Tensor([1.0, 5.0]).max(Tensor([3.0, 2.0])),
    "sort_values": lambda: Tensor([3, 1, 2, 1]).sort().values,
    "sort_indices": lambda: Tensor([3, 1, 2, 1]).sort(stable=True).indices,
    "topk_values": lambda: Tensor([1.0, 5.0, 3.0, 4.0]).topk(2).values,
    "topk_indices": lambda: Tensor([1.0, 5.0, 3.0, 4.0]).topk(2).indices,
    "cummax_values": lambda: Tensor([1, 3, 2, 3]).cummax(0).values,
    "cummax_indices": lambda: Tensor([1, 3, 2, 3]).cummax(0).indices,
    "max_empty_all": lambda: Tensor.zeros(0).max(),
    "max_dim_empty": lambda: Tensor.zeros(0, 3).max(0),
}

_TORCH_ERROR_CLASSES = {"RuntimeError": RuntimeError, "IndexError": IndexError, "ValueError": ValueError}


def _same(actual: Any, expected: Any) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(actual, float) and math.isnan(actual)
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(map(_same, actual, expected))
    return actual == expected


@pytest.mark.parametrize("name", sorted(KILN))
def test_matches_torch(name: str) -> None:
    expected = TORCH[name]
    if "error" in expected:
        # kiln's message differs; the class is torch's or a subclass of it (kiln's AxisError is also an IndexError)
        with pytest.raises(_TORCH_ERROR_CLASSES[expected["error"]]):
            KILN[name]().tolist()
        return
    result = KILN[name]()
    assert isinstance(result, Tensor)
    assert _same(result.tolist(), expected["value"])
    if expected["dtype"] in ("float32", "bool"):  # kiln's default int is int32, torch's int64
        assert result.dtype.name == expected["dtype"]
    elif name.endswith("_indices"):
        assert result.dtype == dtypes.default_int  # index results are the default int (see the README)


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.max(1),
        lambda x: x.min(dim=0),
        lambda x: x.sort(),
        lambda x: x.topk(1),
        lambda x: x.cummax(1),
    ],
)
def test_value_index_results_are_named_tuples_that_refuse_tensor_use(make: Callable[[Tensor], Any]) -> None:
    result = make(Tensor([[1.0, 3.0], [2.0, 0.0]]))
    assert isinstance(result, ValuesIndices) and isinstance(result, tuple) and len(result) == 2
    values, indices = result
    assert values is result.values and indices is result.indices and indices.dtype == dtypes.default_int
    with pytest.raises(TypeError, match=r"use \.values"):
        result * 2  # a plain tuple would silently repeat itself
    with pytest.raises(TypeError, match=r"use \.values"):
        result + (1,)  # noqa: RUF005  (the concatenation is what must raise)
    with pytest.raises(AttributeError, match=r"use \.values"):
        result.numpy()


@pytest.mark.parametrize(
    ("dims", "expected"),
    [((0, 1), 9), ((1,), [9, 4]), ([0], [3, 9])],
)
def test_max_over_a_tuple_of_dims_gives_values_like_amax(dims: Any, expected: Any) -> None:
    assert Tensor([[1, 9], [3, 4]]).max(dims).tolist() == expected
    assert Tensor([[1, 9], [3, 4]]).amax(dims).tolist() == expected


def test_where_spellings_agree() -> None:
    x, condition = Tensor([-1.0, 2.0, -3.0]), Tensor([False, True, False])
    expected = [0.0, 2.0, 0.0]
    assert condition.where(x, 0.0).tolist() == expected  # tinygrad
    assert Tensor.where(condition, x, 0.0).tolist() == expected  # torch.Tensor.where(cond, x, y)
    assert kiln.tensor.where(condition, x, 0.0).tolist() == expected  # torch.where
    assert x.where(condition, 0.0).tolist() == expected  # torch's method form: not x as the condition


def test_where_non_bool_condition_of_the_function() -> None:
    assert kiln.tensor.where(Tensor([0, 2, -1]), 1.0, 0.0).tolist() == [0.0, 1.0, 1.0]


@pytest.mark.parametrize("condition", [[True, False], 1, None])
def test_where_function_needs_a_tensor_condition(condition: Any) -> None:
    with pytest.raises(TypeError, match="condition"):
        kiln.tensor.where(condition, 1.0, 0.0)


def test_where_shape_mismatch_names_the_shapes() -> None:
    with pytest.raises(ValueError, match=r"where.*\(3,\).*\(2,\)"):
        Tensor([True, False, True]).where(Tensor([1.0, 2.0]), 0.0)


def test_no_grad_is_exported_and_works_as_context_and_decorator() -> None:
    weight = Tensor([1.0], requires_grad=True)
    assert is_grad_enabled()
    with no_grad():
        assert not is_grad_enabled() and Tensor.no_grad is True
        assert (weight * 2).requires_grad is not True
        with enable_grad():
            assert (weight * 2).requires_grad is True
    assert is_grad_enabled() and Tensor.no_grad is False

    @no_grad()
    def step() -> bool | None:
        return (weight * 2).requires_grad

    assert step() is None and is_grad_enabled()
    with inference_mode():
        assert not is_grad_enabled()


def test_set_grad_enabled_as_call_and_context() -> None:
    with set_grad_enabled(False):
        assert not is_grad_enabled()
    assert is_grad_enabled()
    set_grad_enabled(False)
    try:
        assert not is_grad_enabled()
    finally:
        set_grad_enabled(True)
    assert is_grad_enabled()
    with pytest.raises(TypeError, match="bool"):
        set_grad_enabled(0)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [True, False, 1])
def test_assigning_no_grad_raises_and_points_to_the_context(value: object) -> None:
    with pytest.raises(AttributeError, match=r"read-only.*no_grad\(\)"):
        Tensor.no_grad = value  # type: ignore[misc]
    with pytest.raises(AttributeError, match=r"read-only.*no_grad\(\)"):
        Tensor([1.0]).no_grad = value  # type: ignore[misc]
    assert Tensor.no_grad is False and Tensor([1.0]).no_grad is False
