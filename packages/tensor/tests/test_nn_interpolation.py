"""interpolate (kiln.tensor.ops.interpolation) against values PyTorch prints for small inputs and against a
per-cell loop over PyTorch's source-index formulas, plus the errors raised at the call."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(5)


pytestmark = pytest.mark.default_device("PYTHON")


def test_bilinear_matches_pytorch_printout() -> None:
    # torch.nn.functional.interpolate(torch.tensor([[[[1., 2.], [3., 4.]]]]), scale_factor=2, mode="bilinear")
    expected = [[1.0, 1.25, 1.75, 2.0], [1.5, 1.75, 2.25, 2.5], [2.5, 2.75, 3.25, 3.5], [3.0, 3.25, 3.75, 4.0]]
    result = Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).interpolate(scale_factor=2, mode="bilinear")
    np.testing.assert_allclose(result.numpy()[0, 0], expected, rtol=1e-6)
    # align_corners=True, size (3, 3): the corners stay, the middle is the average
    corners = Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).interpolate(size=(3, 3), mode="bilinear", align_corners=True)
    np.testing.assert_allclose(corners.numpy()[0, 0], [[1.0, 1.5, 2.0], [2.0, 2.5, 3.0], [3.0, 3.5, 4.0]], rtol=1e-6)


def test_nearest_matches_pytorch_printout() -> None:
    # nearest picks floor(destination * in / out): 10 -> 4 reads cells 0, 2, 5, 7
    x = Tensor(np.arange(10.0, dtype=np.float32).reshape(1, 1, 10))
    assert x.interpolate(size=4).tolist() == [[[0.0, 2.0, 5.0, 7.0]]]
    # nearest-exact picks floor((destination + 0.5) * in / out): 6 -> 4 reads cells 0, 2, 3, 5
    exact = Tensor(np.arange(6, dtype=np.int64).reshape(1, 1, 6)).interpolate(size=4, mode="nearest-exact")
    assert exact.dtype == dtypes.int64
    assert exact.tolist() == [[[0, 2, 3, 5]]]


def _source(destination: int, length: int, out: int, scale: float | None, align_corners: bool) -> float:
    if align_corners:
        step = (length - 1) / (out - 1) if out > 1 else 0.0
        return destination * step
    step = 1.0 / scale if scale is not None else length / out
    return max(step * (destination + 0.5) - 0.5, 0.0)


def linear_reference(x: Array, sizes: tuple[int, ...], scales: tuple[float | None, ...], align_corners: bool) -> Array:
    """Separable linear interpolation, one output cell at a time (PyTorch's area_pixel_compute_source_index)."""
    spatial = len(sizes)
    result = np.zeros((*x.shape[:2], *sizes))
    for cell in itertools.product(*(range(size) for size in sizes)):
        corners: list[list[tuple[int, float]]] = []
        for axis, destination in enumerate(cell):
            length = x.shape[2 + axis]
            source = _source(destination, length, sizes[axis], scales[axis], align_corners)
            low = int(source)
            high = low + 1 if low < length - 1 else low
            upper = min(max(source - low, 0.0), 1.0)
            corners.append([(low, 1.0 - upper), (high, upper)])
        total = np.zeros(x.shape[:2])
        for choice in itertools.product(*corners):
            weight = math.prod(w for _, w in choice)
            total = total + weight * x[(slice(None), slice(None), *(index for index, _ in choice))]
        result[(slice(None), slice(None), *cell)] = total
    assert result.ndim == spatial + 2
    return result


def nearest_reference(x: Array, sizes: tuple[int, ...], scales: tuple[float | None, ...], exact: bool) -> Array:
    """Nearest neighbour, one output cell at a time, with the float32 arithmetic PyTorch uses."""
    result = np.zeros((*x.shape[:2], *sizes), dtype=x.dtype)
    for cell in itertools.product(*(range(size) for size in sizes)):
        sources = []
        for axis, destination in enumerate(cell):
            length, out = x.shape[2 + axis], sizes[axis]
            step = np.float32(1.0 / scales[axis]) if scales[axis] is not None else np.float32(length) / np.float32(out)
            position = np.float32(destination) + np.float32(0.5) if exact else np.float32(destination)
            sources.append(min(int(np.floor(position * step)), length - 1))
        result[(slice(None), slice(None), *cell)] = x[(slice(None), slice(None), *sources)]
    return result


LINEAR_CASES: list[tuple[tuple[int, ...], dict[str, Any]]] = [
    ((2, 3, 5), {"size": 8, "mode": "linear"}),
    ((1, 2, 7), {"size": 3, "mode": "linear", "align_corners": True}),
    ((1, 2, 4, 3), {"size": (7, 5), "mode": "bilinear"}),
    ((1, 1, 4, 5), {"scale_factor": (1.5, 0.6), "mode": "bilinear"}),
    ((1, 2, 3, 4), {"size": (5, 2), "mode": "bilinear", "align_corners": True}),
    ((1, 1, 3, 2, 4), {"size": (2, 3, 6), "mode": "trilinear"}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "options"), LINEAR_CASES)
def test_linear_modes(shape: tuple[int, ...], options: dict[str, Any], dtype: Any) -> None:
    x = RNG.standard_normal(shape).astype(dtype)
    result = Tensor(x).interpolate(**options)
    spatial = len(shape) - 2
    if "size" in options:
        size = options["size"]
        sizes = tuple(size) if isinstance(size, tuple) else (size,) * spatial
        scales: tuple[float | None, ...] = (None,) * spatial
    else:
        scales = tuple(options["scale_factor"])
        sizes = tuple(math.floor(length * factor) for length, factor in zip(shape[2:], scales))
    expected = linear_reference(x.astype(np.float64), sizes, scales, bool(options.get("align_corners")))
    assert result.shape == expected.shape
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(result.numpy(), expected, rtol=tolerance, atol=tolerance)


NEAREST_CASES: list[tuple[tuple[int, ...], dict[str, Any]]] = [
    ((2, 2, 3), {"scale_factor": 3}),  # whole repeats: a reshape + expand
    ((1, 2, 9), {"size": 3}),  # every third cell: a shrink
    ((1, 1, 5, 4), {"size": (7, 3)}),  # general: a selection matrix
    ((1, 2, 3, 5), {"scale_factor": (2, 0.5)}),
    ((1, 1, 5, 6), {"size": (3, 4), "mode": "nearest-exact"}),
    ((1, 1, 2, 3, 2), {"scale_factor": 2}),
    ((1, 1, 7), {"scale_factor": 0.3}),
]


@pytest.mark.parametrize(("shape", "options"), NEAREST_CASES)
def test_nearest_modes(shape: tuple[int, ...], options: dict[str, Any]) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    result = Tensor(x).interpolate(**options)
    spatial = len(shape) - 2
    if "size" in options:
        size = options["size"]
        sizes = tuple(size) if isinstance(size, tuple) else (size,) * spatial
        scales: tuple[float | None, ...] = (None,) * spatial
    else:
        factor = options["scale_factor"]
        scales = tuple(factor) if isinstance(factor, tuple) else (float(factor),) * spatial
        sizes = tuple(math.floor(length * scale) for length, scale in zip(shape[2:], scales))
    expected = nearest_reference(x, sizes, scales, options.get("mode") == "nearest-exact")
    np.testing.assert_array_equal(result.numpy(), expected)


def test_nearest_keeps_integer_and_bool_dtypes() -> None:
    ints = RNG.integers(-9, 9, (1, 2, 3, 3)).astype(np.int32)
    result = Tensor(ints).interpolate(size=(5, 2))
    assert result.dtype == dtypes.int32
    np.testing.assert_array_equal(result.numpy(), nearest_reference(ints, (5, 2), (None, None), False))
    flags = np.array([[[True, False, True]]])
    # 3 -> 5 reads cells floor(0.6 * d) = 0, 0, 1, 1, 2
    assert Tensor(flags).interpolate(size=5).tolist() == [[[True, True, False, False, True]]]


# ---------------------------------------------------------------------------------------------------------------
# errors at the call
# ---------------------------------------------------------------------------------------------------------------


def test_interpolate_errors() -> None:
    x = Tensor.zeros(1, 1, 4, 4)
    with pytest.raises(ValueError, match="interpolate needs exactly one of size and scale_factor"):
        x.interpolate()
    with pytest.raises(ValueError, match="interpolate needs exactly one of size and scale_factor"):
        x.interpolate(size=2, scale_factor=2)
    with pytest.raises(ValueError, match=r"interpolate mode must be one of .*, got 'bicubc'"):
        x.interpolate(size=2, mode="bicubc")
    with pytest.raises(
        ValueError, match=r"interpolate mode 'linear' needs 1 spatial dims, got input shape \(1, 1, 4, 4\)"
    ):
        x.interpolate(size=2, mode="linear")
    with pytest.raises(ValueError, match="align_corners is only for the linear and bicubic modes, not 'nearest'"):
        x.interpolate(size=2, align_corners=True)
    with pytest.raises(ValueError, match=r"interpolate size \(2, 2, 2\) needs 2 values for input shape \(1, 1, 4, 4\)"):
        x.interpolate(size=(2, 2, 2))
    with pytest.raises(ValueError, match=r"interpolate size must be positive, got \(0, 2\)"):
        x.interpolate(size=(0, 2))
    with pytest.raises(ValueError, match=r"scale_factor \(0.1, 0.1\) gives an empty output \(0, 0\)"):
        x.interpolate(scale_factor=0.1)
    with pytest.raises(ValueError, match=r"interpolate needs a \(batch, channels, \*spatial\) input .* got \(4, 4\)"):
        Tensor.zeros(4, 4).interpolate(size=2)
    with pytest.raises(TypeError, match=r"interpolate mode 'bilinear' needs a floating-point tensor, got dtypes.int32"):
        Tensor.zeros(1, 1, 2, 2, dtype=dtypes.int32).interpolate(size=3, mode="bilinear")
    with pytest.raises(ValueError, match=r"scale_factor must be positive numbers, got \(-1.0, -1.0\)"):
        x.interpolate(scale_factor=-1.0)
