"""Random indexing against numpy: random shapes, ints, slices (any step), None, Ellipsis, bool masks, host lists and
integer index tensors of broadcasting shapes, for `x[index]` and `x[index] = value`.

numpy is the oracle, applied in two steps to follow PyTorch's rule for ints (kiln's, and PyTorch's): ints are
basic indices applied first, so they never separate the advanced indices (numpy counts an int as an advanced index
when there is one: `a[:, 0, :, [0, 1]]` has shape (2, 2, 4) in numpy and (2, 4, 2) in PyTorch). Each seed is one
case; a seed that once failed is pinned in `PINNED` with what it caught."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor

CASES = 64
PINNED = (7, 29)  # an all-False mask written to: the empty write once turned the selection into zeros


@dataclass
class _Case:
    array: np.ndarray
    items: list[Any]  # one entry per source dim: int, slice, ("list", array), ("tensor", array), ("mask", array)
    new_dims: list[int]  # positions in `items` before which None is inserted
    ellipsis: bool  # trailing full slices written as `...`

    def numpy_key(self, host: bool) -> tuple[Any, ...]:
        """The index for kiln (`host` False: index tensors as Tensors) or, with host True, for numpy."""
        key: list[Any] = []
        for position, item in enumerate(self.items):
            key += [None] * self.new_dims.count(position)
            key.append(_entry(item, host))
        key += [None] * self.new_dims.count(len(self.items))
        if self.ellipsis:
            while key and isinstance(key[-1], slice) and key[-1] == slice(None):
                key.pop()
            key.append(Ellipsis)
        return tuple(key)

    def expected(self) -> np.ndarray:
        """numpy's result with ints applied first (PyTorch's rule)."""
        result: np.ndarray = np.asarray(self.array[self.int_key()])[self.rest_key()]
        return result

    def int_key(self) -> tuple[Any, ...]:
        """The ints alone (full slices elsewhere): numpy's first step."""
        return tuple(item if isinstance(item, int) else slice(None) for item in self.items)

    def rest_key(self) -> tuple[Any, ...]:
        """Everything but the ints, for the result of `int_key`: numpy's second step."""
        rest: list[Any] = []
        for position, item in enumerate(self.items):
            rest += [None] * self.new_dims.count(position)
            if not isinstance(item, int):
                rest.append(_entry(item, host=True))
        rest += [None] * self.new_dims.count(len(self.items))
        return tuple(rest)


def _entry(item: Any, host: bool) -> Any:
    if not isinstance(item, tuple):
        return item
    kind, data = item
    if kind == "list":
        return data.tolist()
    return data if host or kind == "list" else Tensor(data)


def _random_slice(rng: np.random.Generator, size: int) -> slice:
    step = int(rng.choice([1, 1, 2, 3, -1, -2]))
    start = int(rng.integers(-size - 1, size + 2)) if rng.random() < 0.6 else None
    stop = int(rng.integers(-size - 1, size + 2)) if rng.random() < 0.6 else None
    return slice(start, stop, step)


def _batch_variant(rng: np.random.Generator, batch: tuple[int, ...]) -> tuple[int, ...]:
    # a shape that broadcasts to `batch`: some leading dims dropped, some dims set to 1
    dropped = batch[int(rng.integers(0, len(batch) + 1)) :] if batch else batch
    return tuple(1 if rng.random() < 0.3 else size for size in dropped)


def _case(seed: int) -> _Case:
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 6))
    shape = tuple(int(size) for size in rng.integers(1, 6 if ndim < 5 else 4, ndim))
    array = rng.integers(-50, 50, shape).astype(np.float32)
    batch = tuple(int(size) for size in rng.integers(1, 4, int(rng.integers(0, 3))))
    items: list[Any] = []
    advanced = 0
    for size in shape:
        kind = rng.choice(["slice", "int", "tensor", "list", "mask"], p=[0.3, 0.15, 0.35, 0.1, 0.1])
        if kind == "int":
            items.append(int(rng.integers(-size, size)))
        elif kind == "slice":
            items.append(_random_slice(rng, size))
        elif kind == "mask" and advanced == 0:
            items.append(("mask", rng.random(size) < 0.5))
            advanced += 3  # a mask's length is its own: it takes no other index tensor beside it
        elif kind in ("tensor", "list") and advanced < 3:
            values = rng.integers(-size, size, _batch_variant(rng, batch)).astype(np.int32)
            items.append(("tensor" if kind == "tensor" else "list", values if values.ndim else values.reshape(1)))
            advanced += 1
        else:
            items.append(slice(None))
    new_dims = sorted(int(position) for position in rng.integers(0, ndim + 1, int(rng.integers(0, 2))))
    return _Case(array, items, new_dims, bool(rng.random() < 0.2))


SEEDS = sorted(set(range(CASES)) | set(PINNED))


@pytest.mark.parametrize("seed", SEEDS)
def test_getitem_matches_numpy(seed: int) -> None:
    case = _case(seed)
    expected = case.expected()
    got = Tensor(case.array)[case.numpy_key(host=False)]
    assert got.shape == expected.shape, (case.numpy_key(host=True), got.shape, expected.shape)
    np.testing.assert_array_equal(got.numpy(), expected, err_msg=str(case.numpy_key(host=True)))


@pytest.mark.parametrize("seed", SEEDS)
def test_setitem_matches_numpy(seed: int) -> None:
    case = _case(seed)
    rng = np.random.default_rng(seed + 10_000)
    selection = case.expected().shape
    value: Any = float(rng.integers(100, 200))
    if rng.random() < 0.7:
        value = rng.integers(100, 200, _batch_variant(rng, selection)).astype(np.float32)
    expected = case.array.copy()
    if all(isinstance(item, int) for item in case.items):
        expected[case.int_key()] = np.broadcast_to(value, selection).reshape(())
    else:
        expected[case.int_key()][case.rest_key()] = value  # basic indexing gives a view: the write lands in expected
    target = Tensor(case.array.copy()).realize()
    target[case.numpy_key(host=False)] = Tensor(value) if isinstance(value, np.ndarray) else value
    np.testing.assert_array_equal(target.numpy(), expected, err_msg=str(case.numpy_key(host=True)))
