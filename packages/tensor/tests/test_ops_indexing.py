"""Indexing (`__getitem__` / `__setitem__` with ints, slices with steps, None, Ellipsis, bool masks and integer
tensors), gather and scatter, against numpy and hand-written PyTorch semantics."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

DEVICE = "PYTHON"
Array = np.ndarray[Any, Any]


pytestmark = pytest.mark.default_device(DEVICE)


A = np.arange(4 * 5 * 6, dtype=np.int32).reshape(4, 5, 6)

# indices where PyTorch and numpy agree (basic indexing, and advanced indices that are all tensors / lists)
AGREEING = [
    1,
    -1,
    (2, 3),
    (1, -2, 5),
    slice(1, 3),
    slice(None, None, 2),
    slice(None, None, -1),
    slice(3, 0, -2),
    slice(-2, None),
    (slice(None), 2),
    (Ellipsis, 1),
    (Ellipsis, slice(None, None, -3)),
    (1, Ellipsis, None),
    (None, 2, None, slice(1, 4), None),
    (slice(None, None, 3), slice(4, 0, -1), slice(1, 6, 2)),
    (0, slice(None), slice(None, None, -1)),
    ([0, 2, 3],),
    ([3, -1, 0, 0],),
    (slice(None), [4, 0]),
    (slice(1, 3), [0, 1], slice(None, None, 2)),
    ([0, 1], [2, 3]),
    ([[0, 1], [2, 3]], slice(None), [5, 0]),
    ([0, 3], slice(None), [1, 2]),
    (Ellipsis, [1, 1, 0]),
    (np.array([[1], [2]]), np.array([0, 4])),
    ((1, 2), 0),
]


@pytest.mark.parametrize("index", AGREEING, ids=[repr(index) for index in AGREEING])
def test_getitem_matches_numpy(index: Any) -> None:
    result = Tensor(A)[index]
    expected = A[index]
    assert result.shape == expected.shape
    np.testing.assert_array_equal(result.numpy(), expected)


def test_getitem_with_index_tensors_and_masks() -> None:
    x = Tensor(A)
    rows = Tensor([3, 0, -1])
    mask = A[:, :, 0] % 3 == 0
    cases = [
        (x[rows], A[[3, 0, -1]]),
        (x[rows, Tensor([[1], [2]])], A[[3, 0, -1], [[1], [2]]]),
        (x[Tensor(mask)], A[mask]),
        (x[mask], A[mask]),
        (x[Tensor(A > 100)], A[A > 100]),
        (x[1, Tensor(mask[1])], A[1, mask[1]]),
        (x[[True, False, True, True]], A[[True, False, True, True]]),
        (x[..., Tensor([5, 0], dtype=dtypes.int64)], A[..., [5, 0]]),
    ]
    Tensor.realize_all(*(result for result, _ in cases))
    for position, (result, expected) in enumerate(cases):
        assert result.shape == expected.shape, position
        np.testing.assert_array_equal(result.numpy(), expected, err_msg=str(position))


def test_mixed_int_and_advanced_follow_pytorch() -> None:
    # PyTorch applies ints first (as basic indices), so x[0, :, [1, 2]] keeps the list's dim in place: shape (5, 2);
    # numpy would count the int as an advanced index and put the list's dim first: shape (2, 5)
    result = Tensor(A)[0, :, [1, 2]]
    assert result.shape == (5, 2)
    np.testing.assert_array_equal(result.numpy(), A[0][:, [1, 2]])
    # an ellipsis that covers no dims does not separate advanced indices (PyTorch, not numpy)
    small = A[:, :, :1].reshape(4, 5)
    result = Tensor(small)[[0, 1], ..., [2, 3]]
    np.testing.assert_array_equal(result.numpy(), small[[0, 1], [2, 3]])


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_basic_indexing_property(data: st.DataObject) -> None:
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple))
    a = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    index: list[Any] = []
    for size in shape:
        kind = data.draw(st.sampled_from(["int", "slice", "none_then_slice"]))
        if kind == "int":
            index.append(data.draw(st.integers(-size, size - 1)))
            continue
        if kind == "none_then_slice":
            index.append(None)
        start = data.draw(st.one_of(st.none(), st.integers(-size - 2, size + 2)))
        stop = data.draw(st.one_of(st.none(), st.integers(-size - 2, size + 2)))
        step = data.draw(st.one_of(st.none(), st.integers(-3, 3).filter(lambda s: s != 0)))
        index.append(slice(start, stop, step))
    result = Tensor(a)[tuple(index)]
    expected = a[tuple(index)]
    assert result.shape == expected.shape
    if expected.size:
        np.testing.assert_array_equal(result.numpy(), expected)


def test_getitem_zero_size_results() -> None:
    x = Tensor(A)
    cases = [(x[10:20], A[10:20]), (x[:, 3:1], A[:, 3:1]), (x[[]], A[np.array([], dtype=np.int64)])]
    for result, expected in cases:
        assert result.shape == expected.shape
        assert result.numpy().shape == expected.shape


def test_iteration_and_len() -> None:
    x = Tensor(A[:2, :2, 0])
    assert len(x) == 2
    assert [row.tolist() for row in x] == A[:2, :2, 0].tolist()


def _fresh(a: Array) -> Tensor:
    return Tensor(a.copy()).realize()


@pytest.mark.parametrize(
    ("index", "value"),
    [
        ((0, slice(1, None)), 5),
        ((slice(None), slice(None, None, 2)), -1),
        ((slice(None, None, -2), 3), 7),
        ((Ellipsis, slice(4, 0, -3)), np.array([10, 20], dtype=np.int32)),
        ((1,), np.arange(5 * 6, dtype=np.int32).reshape(5, 6)),
        ((None, 2, slice(1, 3), 0), np.array([[100], [200]], dtype=np.int32).reshape(1, 2)),
        (([0, 3], slice(None), 1), 9),
        ((slice(None), [4, 0], [1, 2]), np.array([-5, -6], dtype=np.int32)),
        ((A % 7 == 0,), 0),
        (([1, 1, 2],), np.arange(3 * 5 * 6, dtype=np.int32).reshape(3, 5, 6)),  # repeated position: last wins
    ],
)
def test_setitem_matches_numpy(index: Any, value: Any) -> None:
    x = _fresh(A)
    x[index] = Tensor(value) if isinstance(value, np.ndarray) else value
    expected = A.copy()
    expected[index] = value
    np.testing.assert_array_equal(x.numpy(), expected)


def test_setitem_casts_and_works_on_lazy_tensors() -> None:
    x = Tensor(np.zeros((2, 3), np.float32)).realize()
    x[0] = 1  # an int value into a float tensor
    x[1, 1:] = Tensor([2.5, 3.5], dtype=dtypes.float64)
    np.testing.assert_array_equal(x.numpy(), [[1.0, 1.0, 1.0], [0.0, 2.5, 3.5]])
    lazy = Tensor.ones(3, 3, dtype=dtypes.int32)  # no buffer yet: the assignment just gives it the new value
    lazy[1, ::2] = 5
    assert lazy.tolist() == [[1, 1, 1], [5, 1, 5], [1, 1, 1]]
    flags = Tensor(np.zeros(4, np.bool_)).realize()
    flags[[1, 3]] = True
    assert flags.tolist() == [False, True, False, True]


def _gather_reference(a: Array, dim: int, index: Array) -> Array:
    result = np.empty(index.shape, dtype=a.dtype)
    for position in np.ndindex(index.shape):
        source = list(position)
        source[dim] = index[position]
        result[position] = a[tuple(source)]
    return result


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dim: int) -> None:
    generator = np.random.default_rng(dim + 5)
    a = generator.integers(-50, 50, size=(3, 4)).astype(np.float32)
    axis = dim % 2
    index_shape = (2, 3) if axis == 0 else (3, 2)  # smaller than the tensor outside `dim`, like PyTorch allows
    index = generator.integers(0, a.shape[axis], size=index_shape)
    full_index = generator.integers(0, a.shape[axis], size=(5, 4) if axis == 0 else (3, 6))
    small, full = Tensor(a).gather(dim, Tensor(index)), Tensor(a).gather(dim, Tensor(full_index))
    Tensor.realize_all(small, full)
    np.testing.assert_array_equal(small.numpy(), _gather_reference(a, axis, index))
    np.testing.assert_array_equal(full.numpy(), _gather_reference(a, axis, full_index))


def test_gather_bool_and_three_dims() -> None:
    a = np.arange(24).reshape(2, 3, 4) % 5 == 0
    index = np.array([[[2, 0, 1, 1]], [[0, 0, 2, 1]]])
    result = Tensor(a).gather(1, Tensor(index))
    assert result.dtype is dtypes.bool
    np.testing.assert_array_equal(result.numpy(), np.take_along_axis(a, index, axis=1))


def _scatter_reference(a: Array, dim: int, index: Array, source: Array, reduce: str | None) -> Array:
    result = a.copy()
    for position in np.ndindex(index.shape):  # row-major order: for repeated targets the last write wins
        target = list(position)
        target[dim] = index[position]
        if reduce == "add":
            result[tuple(target)] += source[position]
        elif reduce == "multiply":
            result[tuple(target)] *= source[position]
        else:
            result[tuple(target)] = source[position]
    return result


@pytest.mark.parametrize("reduce", [None, "add", "multiply"])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter(dim: int, reduce: str | None) -> None:
    generator = np.random.default_rng(11 + dim)
    a = generator.integers(-5, 5, size=(4, 5)).astype(np.float32)
    index_shape = (3, 4) if dim == 0 else (4, 3)
    index = generator.integers(0, a.shape[dim], size=index_shape)  # repeated targets happen
    source = generator.integers(1, 4, size=(4, 5)).astype(np.float32)
    result = Tensor(a).scatter(dim, Tensor(index), Tensor(source), reduce=reduce)
    np.testing.assert_array_equal(result.numpy(), _scatter_reference(a, dim, index, source, reduce))


def test_scatter_scalar_source_and_scatter_add() -> None:
    a = np.zeros((2, 4), dtype=np.int32)
    index = np.array([[3, 3], [0, 1]])
    filled = Tensor(a).scatter(1, Tensor(index), 7)
    added = Tensor(a).scatter_add(1, Tensor(index), Tensor(np.array([[1, 2], [3, 4]], np.int32)))
    Tensor.realize_all(filled, added)
    np.testing.assert_array_equal(filled.numpy(), _scatter_reference(a, 1, index, np.full((2, 2), 7), None))
    np.testing.assert_array_equal(added.numpy(), [[0, 0, 0, 3], [3, 4, 0, 0]])
    assert added.dtype is dtypes.int32
