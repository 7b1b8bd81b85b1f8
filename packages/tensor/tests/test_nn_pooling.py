"""max / avg pooling (kiln.tensor.ops.pooling) against direct loops over PyTorch's definitions (output size with
ceil_mode, -inf padding for max, the divisor rules of count_include_pad), the window helper
(kiln.tensor.ops.windows), and the errors raised at the call."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kiln.tensor import graph
from kiln.tensor.ops.windows import _build_windows, output_size, sliding_windows
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(7)


pytestmark = pytest.mark.default_device("PYTHON")


def _out(size: int, kernel: int, stride: int, pad: int, dilation: int, ceil_mode: bool) -> int:
    room = size + 2 * pad - dilation * (kernel - 1) - 1
    count = (math.ceil(room / stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (count - 1) * stride >= size + pad:
        count -= 1
    return count


def pool_reference(
    x: Array,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pad: tuple[int, int],
    dilation: tuple[int, int],
    ceil_mode: bool,
    mode: str,
    count_include_pad: bool = True,
) -> tuple[Array, Array]:
    """(pooled values, flat argmax positions) of a (batch, channels, height, width) array by loops over windows."""
    height, width = x.shape[2:]
    rows = _out(height, kernel[0], stride[0], pad[0], dilation[0], ceil_mode)
    columns = _out(width, kernel[1], stride[1], pad[1], dilation[1], ceil_mode)
    values = np.zeros((*x.shape[:2], rows, columns))
    positions = np.zeros((*x.shape[:2], rows, columns), dtype=np.int64)
    for row in range(rows):
        for column in range(columns):
            top, left = row * stride[0] - pad[0], column * stride[1] - pad[1]
            if mode == "max":
                best = np.full(x.shape[:2], -np.inf)
                where = np.full(x.shape[:2], -1)
                for i in range(kernel[0]):
                    for j in range(kernel[1]):
                        h, w = top + i * dilation[0], left + j * dilation[1]
                        if 0 <= h < height and 0 <= w < width:
                            cell = x[:, :, h, w]
                            better = (cell > best) | (np.isnan(cell) & ~np.isnan(best))
                            best, where = np.where(better, cell, best), np.where(better, h * width + w, where)
                values[:, :, row, column], positions[:, :, row, column] = best, where
            else:
                bottom, right = min(top + kernel[0], height + pad[0]), min(left + kernel[1], width + pad[1])
                with_padding = (bottom - top) * (right - left)
                h0, w0, h1, w1 = max(top, 0), max(left, 0), min(bottom, height), min(right, width)
                total = x[:, :, h0:h1, w0:w1].sum((2, 3))
                values[:, :, row, column] = total / (with_padding if count_include_pad else (h1 - h0) * (w1 - w0))
    return values, positions


@pytest.mark.parametrize(
    ("size", "kernel", "stride", "dilation"),
    [(7, 3, 1, 1), (7, 3, 2, 1), (7, 2, 3, 1), (9, 3, 2, 2), (5, 1, 10, 1), (8, 3, 1, 3), (5, 5, 1, 1), (6, 2, 2, 1)],
)
def test_sliding_windows(size: int, kernel: int, stride: int, dilation: int) -> None:
    x = RNG.standard_normal((2, size)).astype(np.float32)
    windows = sliding_windows(Tensor(x), (kernel,), (stride,), (dilation,))
    count = output_size(size, kernel, stride, dilation)
    expected = np.stack(
        [np.stack([x[:, o * stride + j * dilation] for j in range(kernel)], -1) for o in range(count)], 1
    )
    np.testing.assert_array_equal(windows.numpy(), expected)


MAX_CASES = [
    ((2, 3, 6, 5), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((1, 2, 7, 7), (3, 3), (2, 2), (1, 1), (1, 1), True),
    ((1, 2, 8, 7), (3, 2), (1, 2), (1, 1), (2, 1), False),
    ((1, 1, 5, 5), (2, 2), (2, 2), (1, 0), (1, 1), True),
    ((1, 1, 6, 6), (3, 3), (3, 3), (1, 1), (1, 1), True),
    ((2, 1, 4, 6), (4, 3), (1, 3), (2, 0), (1, 1), False),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "kernel", "stride", "padding", "dilation", "ceil_mode"), MAX_CASES)
def test_max_pool2d_with_indices(
    shape: tuple[int, ...], kernel: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool, dtype: Any
) -> None:
    x = RNG.standard_normal(shape).astype(dtype)
    values, positions = Tensor(x).max_pool2d(kernel, stride, padding, dilation, ceil_mode, return_indices=True)
    expected, expected_positions = pool_reference(x, kernel, stride, padding, dilation, ceil_mode, "max")
    np.testing.assert_array_equal(values.numpy(), expected.astype(dtype))
    assert positions.dtype == dtypes.default_int
    np.testing.assert_array_equal(positions.numpy(), expected_positions)


def test_max_pool2d_nan_wins_and_integers() -> None:
    x = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    x[0, 0, 1, 2] = np.nan
    values, positions = Tensor(x).max_pool2d(2, return_indices=True)
    expected, expected_positions = pool_reference(x, (2, 2), (2, 2), (0, 0), (1, 1), False, "max")
    np.testing.assert_array_equal(values.numpy(), expected.astype(np.float32))
    np.testing.assert_array_equal(positions.numpy(), expected_positions)
    ints = RNG.integers(-100, 100, (2, 5, 5)).astype(np.int32)  # unbatched (channels, height, width)
    pooled = Tensor(ints).max_pool2d(3, stride=2, padding=1)
    assert pooled.dtype == dtypes.int32
    np.testing.assert_array_equal(
        pooled.numpy(), pool_reference(ints[None], (3, 3), (2, 2), (1, 1), (1, 1), False, "max")[0][0]
    )


AVG_CASES = [
    ((2, 3, 6, 5), (2, 2), (2, 2), (0, 0), False),
    ((1, 2, 7, 7), (3, 3), (2, 2), (1, 1), True),
    ((1, 2, 5, 6), (3, 2), (1, 2), (1, 1), False),
    ((1, 1, 5, 5), (2, 2), (2, 2), (1, 0), True),
    ((1, 1, 6, 6), (3, 3), (3, 3), (1, 1), True),
]


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize(("shape", "kernel", "stride", "padding", "ceil_mode"), AVG_CASES)
def test_avg_pool2d(
    shape: tuple[int, ...], kernel: Any, stride: Any, padding: Any, ceil_mode: bool, count_include_pad: bool
) -> None:
    x = RNG.standard_normal(shape)
    result = Tensor(x).avg_pool2d(kernel, stride, padding, ceil_mode, count_include_pad)
    expected, _ = pool_reference(x, kernel, stride, padding, (1, 1), ceil_mode, "avg", count_include_pad)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_avg_pool2d_float32_and_divisor_override() -> None:
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    result = Tensor(x).avg_pool2d(2, padding=1, divisor_override=3)
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    expected = padded.reshape(1, 2, 3, 2, 3, 2).sum((3, 5)) / 3
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6, atol=1e-6)


def test_pool1d_and_3d() -> None:
    x = RNG.standard_normal((2, 3, 9))
    np.testing.assert_array_equal(
        Tensor(x).max_pool1d(3, 2).numpy(), np.stack([x[..., i : i + 3].max(-1) for i in range(0, 7, 2)], -1)
    )
    np.testing.assert_allclose(Tensor(x).avg_pool1d(2).numpy(), x[..., :8].reshape(2, 3, 4, 2).mean(-1), rtol=1e-12)
    cube = RNG.standard_normal((1, 2, 4, 4, 6))
    expected = cube.reshape(1, 2, 2, 2, 2, 2, 3, 2).max((3, 5, 7))
    np.testing.assert_array_equal(Tensor(cube).max_pool3d(2).numpy(), expected)
    np.testing.assert_allclose(
        Tensor(cube).avg_pool3d((2, 2, 3)).numpy(), cube.reshape(1, 2, 2, 2, 2, 2, 2, 3).mean((3, 5, 7)), rtol=1e-12
    )


# ---------------------------------------------------------------------------------------------------------------
# errors at the call
# ---------------------------------------------------------------------------------------------------------------


def test_pooling_errors() -> None:
    x = Tensor.zeros(1, 1, 4, 4)
    with pytest.raises(ValueError, match=r"max_pool2d padding \(2, 2\) must be at most half the kernel size \(3, 3\)"):
        x.max_pool2d(3, padding=2)
    with pytest.raises(
        ValueError,
        match=r"max_pool2d: the window \(kernel \(5, 5\), dilation \(1, 1\)\) does not fit the input of shape "
        r"\(1, 1, 4, 4\)",
    ):
        x.max_pool2d(5)
    with pytest.raises(ValueError, match=r"dilation \(4, 4\)\) does not fit"):
        x.max_pool2d(2, dilation=4)
    with pytest.raises(ValueError, match=r"max_pool2d input must have 4 dims .* got shape \(4, 4\)"):
        Tensor.zeros(4, 4).max_pool2d(2)
    with pytest.raises(ValueError, match=r"avg_pool2d kernel_size must be >= 1, got \(0, 0\)"):
        x.avg_pool2d(0)
    with pytest.raises(ValueError, match=r"max_pool2d kernel_size needs 1 or 2 values .* got \(2, 2, 2\)"):
        x.max_pool2d((2, 2, 2))
    with pytest.raises(TypeError, match=r"avg_pool2d needs a floating-point tensor, got dtypes.int32"):
        Tensor.zeros(1, 1, 4, 4, dtype=dtypes.int32).avg_pool2d(2)
    with pytest.raises(ValueError, match="avg_pool2d divisor_override must not be zero"):
        x.avg_pool2d(2, divisor_override=0)
    with pytest.raises(TypeError, match="max_pool2d return_indices must be a bool"):
        x.max_pool2d(2, return_indices=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_pool2d is not defined for bool tensors"):
        Tensor.zeros(1, 1, 4, 4, dtype=dtypes.bool).max_pool2d(2)
    with pytest.raises(TypeError, match="avg_pool1d ceil_mode must be a bool"):
        Tensor.zeros(1, 1, 4).avg_pool1d(2, ceil_mode=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("shape", "kernel", "stride", "dilation"),
    [
        ((2, 3, 9, 7), (3, 2), (1, 2), (1, 1)),
        ((1, 2, 10), (4,), (4,), (1,)),
        ((4, 5, 6, 6, 5), (2, 3, 2), (1, 1, 2), (2, 1, 1)),
    ],
)
def test_sliding_windows_replay_the_checked_chain(
    shape: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]
) -> None:
    # the cached plan builds the very nodes graph's checked constructors build (hash-consed: the same objects), and
    # the windows hold x[..., o * stride + j * dilation]
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    x = Tensor(values)
    for _ in range(2):  # the second call replays the cached plan
        windows = sliding_windows(x, kernel, stride, dilation)
        assert windows.uop is _build_windows(x.uop, kernel, stride, dilation)
        assert graph.shape_of(windows.uop) == windows.numpy().shape
    got = windows.numpy()
    spatial = len(kernel)
    for out_index in np.ndindex(*got.shape[-2 * spatial : -spatial]):
        for tap in np.ndindex(*kernel):
            source = tuple(o * s + j * d for o, s, j, d in zip(out_index, stride, tap, dilation))
            np.testing.assert_array_equal(got[(..., *out_index, *tap)], values[(..., *source)])
