"""sort / argsort / topk (kiln.tensor.ops.sorting) against numpy's stable sort, with NaN, ties, several dtypes and
dims, plus the errors raised at the call."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(11)


pytestmark = pytest.mark.default_device("PYTHON")


def _stable_descending_order(x: Array, axis: int) -> Array:
    """Positions sorting `x` largest first (NaN first), equal values in input order."""
    moved = np.moveaxis(x, axis, -1)
    size = moved.shape[-1]
    # sort descending by (is NaN, value) with ties broken by position: a stable ascending sort of the negated keys
    keys = np.where(np.isnan(moved), -np.inf, -moved) if moved.dtype.kind == "f" else -moved.astype(np.int64)
    nan_first = np.isnan(moved) if moved.dtype.kind == "f" else np.zeros(moved.shape, dtype=bool)
    order = np.lexsort((np.broadcast_to(np.arange(size), moved.shape), keys, ~nan_first), axis=-1)
    return np.moveaxis(order, -1, axis)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
@pytest.mark.parametrize(("shape", "axis"), [((9,), 0), ((3, 7), -1), ((4, 3, 5), 1), ((5, 2), 0)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_numpy(shape: tuple[int, ...], axis: int, dtype: Any, descending: bool) -> None:
    x = RNG.integers(0, 4, shape).astype(dtype)  # few distinct values: many ties
    if np.dtype(dtype).kind == "f":
        x = x + RNG.integers(0, 2, shape) * 0.5
        x.flat[:: max(1, x.size // 3)] = np.nan
    values, positions = Tensor(x).sort(axis, descending=descending)
    order = _stable_descending_order(x, axis) if descending else np.argsort(x, axis=axis, kind="stable")
    assert positions.dtype == dtypes.default_int
    np.testing.assert_array_equal(positions.numpy(), order)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, order, axis))
    np.testing.assert_array_equal(Tensor(x).argsort(axis, descending=descending).numpy(), order)


def test_sort_bools_negatives_and_infinities() -> None:
    flags = np.array([True, False, True, False])
    values, positions = Tensor(flags).sort()
    assert values.dtype == dtypes.bool
    assert values.tolist() == [False, False, True, True]
    assert positions.tolist() == [1, 3, 0, 2]
    x = np.array([3.0, -np.inf, -2.0, np.inf, -0.5], dtype=np.float32)
    np.testing.assert_array_equal(Tensor(x).sort()[0].numpy(), np.sort(x))
    ints = np.array([5, -3, 7, -3, 0], dtype=np.int64)
    assert Tensor(ints).sort(descending=True)[1].tolist() == [2, 0, 4, 1, 3]


def test_sort_empty_and_0_dim() -> None:
    values, positions = Tensor(np.zeros((3, 0), dtype=np.float32)).sort()
    assert values.shape == (3, 0) and positions.shape == (3, 0)
    scalar_values, scalar_positions = Tensor(2.5).sort()
    assert scalar_values.item() == 2.5 and scalar_positions.item() == 0


@pytest.mark.parametrize(("shape", "k", "axis"), [((10,), 3, 0), ((4, 6), 2, -1), ((3, 5, 2), 5, 1), ((4, 3), 0, 0)])
@pytest.mark.parametrize("largest", [True, False])
def test_topk(shape: tuple[int, ...], k: int, axis: int, largest: bool) -> None:
    x = RNG.permutation(int(np.prod(shape))).reshape(shape).astype(np.float32)  # distinct values
    values, positions = Tensor(x).topk(k, dim=axis, largest=largest)
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    expected = np.take(order, np.arange(k), axis=axis)
    assert values.shape == expected.shape
    if expected.size:  # an empty result is all shape
        np.testing.assert_array_equal(positions.numpy(), expected)
        np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, expected, axis))


def test_topk_nan_is_largest_and_ties_prefer_earlier_positions() -> None:
    x = Tensor([1.0, float("nan"), 3.0, 3.0, -1.0])
    values, positions = x.topk(3)
    assert positions.tolist() == [1, 2, 3]
    assert np.isnan(values.numpy()[0]) and values.tolist()[1:] == [3.0, 3.0]
    assert x.topk(2, largest=False)[1].tolist() == [4, 0]


# ---------------------------------------------------------------------------------------------------------------
# errors at the call
# ---------------------------------------------------------------------------------------------------------------


def test_sorting_errors() -> None:
    x = Tensor.zeros(3, 4)
    with pytest.raises(ValueError, match=r"topk k=5 is out of range for dim 1 of size 4 \(shape \(3, 4\)\)"):
        x.topk(5)
    with pytest.raises(ValueError, match=r"topk k=-1 is out of range"):
        x.topk(-1)
    with pytest.raises(TypeError, match=r"topk k must be an int, got 2\.0"):
        x.topk(2.0)  # type: ignore[arg-type]
    with pytest.raises(IndexError, match=r"sort dim 2 is out of range for a tensor of shape \(3, 4\)"):
        x.sort(2)
    with pytest.raises(ValueError, match=r"topk dim -3 is out of range"):
        x.topk(1, dim=-3)
    with pytest.raises(TypeError, match="sort descending and stable must be bools, got 1 and False"):
        x.sort(descending=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"topk k=2 is out of range for a 0-dim tensor"):
        Tensor(1.0).topk(2)
