"""Max pooling in training over windows that tile the input (kernel == stride): the pooled values and the input
gradient (each window's whole gradient to its first largest tap, a NaN counting as the largest, as PyTorch routes it)
against a numpy reference, with ties, NaNs, infinities, signed zeros, padding and a remainder no window covers."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor


def _first_largest(cells: np.ndarray) -> int:
    """The position of the first largest of `cells` (the first NaN if there is one), PyTorch's choice."""
    best = 0
    for position, cell in enumerate(cells):
        if np.isnan(cells[best]):
            break
        if np.isnan(cell) or cell > cells[best]:
            best = position
    return best


def _reference(x: np.ndarray, kernel: tuple[int, ...], padding: int, upstream: np.ndarray) -> tuple[np.ndarray, ...]:
    """(pooled values, input gradient) of max pooling with stride == kernel, padded with -inf."""
    spatial = len(kernel)
    pairs = [(0, 0)] * (x.ndim - spatial) + [(padding, padding)] * spatial
    padded = np.pad(x, pairs, constant_values=-np.inf)
    out = tuple((size - taps) // taps + 1 for size, taps in zip(padded.shape[-spatial:], kernel))
    values = np.zeros(x.shape[:-spatial] + out, x.dtype)
    grad = np.zeros(padded.shape, np.float64)
    for lead in itertools.product(*(range(size) for size in x.shape[:-spatial])):
        for window in itertools.product(*(range(count) for count in out)):
            corner = [w * k for w, k in zip(window, kernel)]
            offsets = list(itertools.product(*(range(k) for k in kernel)))
            cells = np.array([padded[(*lead, *(c + o for c, o in zip(corner, offset)))] for offset in offsets])
            pick = offsets[_first_largest(cells)]
            values[(*lead, *window)] = cells[_first_largest(cells)]
            grad[(*lead, *(c + o for c, o in zip(corner, pick)))] += upstream[(*lead, *window)]
    inner = tuple(slice(padding, padding + size) for size in x.shape[-spatial:])
    index: tuple[Any, ...] = (..., *inner)
    return values, grad[index]


CASES = [
    ("2d ties and NaN", (2, 3, 6, 8), (2, 2), 0),
    ("2d remainder", (1, 2, 7, 5), (2, 2), 0),
    ("2d padded", (1, 2, 6, 6), (2, 2), 1),
    ("2d 3x3", (2, 1, 9, 6), (3, 3), 0),
    ("1d", (2, 3, 9), (3,), 0),
    ("3d", (1, 2, 4, 4, 2), (2, 2, 2), 0),
]


@pytest.mark.parametrize(("shape", "kernel", "padding"), [case[1:] for case in CASES], ids=[c[0] for c in CASES])
def test_training_max_pool_routes_each_window_to_its_first_largest_tap(
    shape: tuple[int, ...], kernel: tuple[int, ...], padding: int
) -> None:
    rng = np.random.default_rng(len(shape) * 10 + kernel[0])
    # few distinct values: many ties inside a window; then NaNs, infinities and signed zeros
    x = rng.integers(-2, 3, shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, 3, replace=False)] = np.nan
    flat[rng.choice(flat.size, 2, replace=False)] = np.inf
    flat[rng.choice(flat.size, 2, replace=False)] = -np.inf
    flat[rng.choice(flat.size, 4, replace=False)] = -0.0
    source = Tensor(x, requires_grad=True)
    pool = {1: source.max_pool1d, 2: source.max_pool2d, 3: source.max_pool3d}[len(kernel)]
    pooled = pool(kernel, padding=padding)
    upstream = rng.standard_normal(pooled.shape).astype(np.float32)
    (pooled * Tensor(upstream)).sum().backward()
    values, grad = _reference(x, kernel, padding, upstream)
    got = pooled.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(values))
    np.testing.assert_array_equal(np.where(np.isnan(got), 0, got), np.where(np.isnan(values), 0, values))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(values))  # -0.0 where the first largest tap is -0.0
    assert source.grad is not None
    np.testing.assert_allclose(source.grad.numpy(), grad, rtol=1e-6, atol=1e-6)


def test_training_max_pool_of_all_minus_infinity_routes_to_the_first_tap() -> None:
    x = np.full((1, 1, 2, 4), -np.inf, np.float32)
    source = Tensor(x, requires_grad=True)
    source.max_pool2d(2).sum().backward()
    assert source.grad is not None
    np.testing.assert_array_equal(source.grad.numpy()[0, 0], [[1, 0, 1, 0], [0, 0, 0, 0]])
