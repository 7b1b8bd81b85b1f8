"""`InterpolationMixin`: `interpolate` (resizing the spatial dims) with PyTorch's nearest, (bi/tri)linear, bicubic and
area modes ('area' is adaptive average pooling, `kiln.tensor.ops.adaptive_pooling`).

Resizing is separable: each spatial dim is resampled on its own. The source positions depend only on the sizes, so
they are computed here on the host, with PyTorch's formulas and in its precision (float32 for 'nearest', the input's
compute precision for the linear modes), which makes the chosen source cells identical to PyTorch's. Then:

- a nearest resize that repeats every cell f times (out = f * in) is a reshape + expand, and one that keeps every
  k-th cell is a reshape + shrink: movement ops only;
- any other resize multiplies by an (out, in) matrix of weights (one 1 per row for nearest, two weights summing to
  1 for linear, four cubic-convolution taps for bicubic, edge taps folded onto the edge cell) and sums over `in`, a
  fused multiply-sum.
"""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import check_int
from kiln.tensor.ops.linalg import multiply_sum
from kiln.uops import Ops, dtypes

__all__ = ["InterpolationMixin"]

_LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}
_CORNER_MODES = {**_LINEAR_MODES, "bicubic": 2}
_MODES = ("nearest", "nearest-exact", "area", *_CORNER_MODES)
_CUBIC_A = -0.75  # PyTorch's (and OpenCV's) cubic convolution parameter


def _output_sizes(
    x: TensorCore, size: Any, scale_factor: Any, spatial: int
) -> tuple[tuple[int, ...], tuple[float | None, ...]]:
    """(output size, user scale or None) per spatial dim."""
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate needs exactly one of size and scale_factor")
    if size is not None:
        items = list(size) if isinstance(size, (tuple, list)) else [size] * spatial
        if len(items) != spatial:
            raise ValueError(f"interpolate size {tuple(items)} needs {spatial} values for input shape {x.shape}")
        sizes = tuple(check_int(item, "interpolate size") for item in items)
        if any(item <= 0 for item in sizes):
            raise ValueError(f"interpolate size must be positive, got {sizes}")
        return sizes, (None,) * spatial
    factors = list(scale_factor) if isinstance(scale_factor, (tuple, list)) else [scale_factor] * spatial
    if len(factors) != spatial:
        raise ValueError(f"interpolate scale_factor {tuple(factors)} needs {spatial} values for input shape {x.shape}")
    scales: list[float] = []
    for factor in factors:
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
            raise ValueError(f"interpolate scale_factor must be positive numbers, got {tuple(factors)}")
        scales.append(float(factor))
    sizes = tuple(math.floor(length * factor) for length, factor in zip(x.shape[2:], scales))
    if any(item <= 0 for item in sizes):
        raise ValueError(f"interpolate scale_factor {tuple(scales)} gives an empty output {sizes} for input {x.shape}")
    return sizes, tuple(scales)


def _scale(
    length: int, out: int, user_scale: float | None, align_corners: bool, precision: type[np.floating[Any]]
) -> Any:
    """PyTorch's source-per-destination step of one dim, rounded to `precision`."""
    if align_corners:
        return precision((length - 1) / (out - 1)) if out > 1 else precision(0)
    if user_scale is not None:
        return precision(1.0 / user_scale)
    return precision(length) / precision(out)


def _nearest_sources(length: int, out: int, user_scale: float | None, exact: bool) -> np.ndarray[Any, Any]:
    """The source cell of each output cell for 'nearest' / 'nearest-exact' (PyTorch computes these in float32)."""
    positions = np.arange(out, dtype=np.float32)
    if not exact and out == length:
        return np.arange(out)
    if not exact and out == 2 * length:
        return np.arange(out) >> 1
    scale = _scale(length, out, user_scale, False, np.float32)
    shifted = positions + np.float32(0.5) if exact else positions
    sources: np.ndarray[Any, Any] = np.minimum(np.floor(shifted * scale).astype(np.int64), length - 1)
    return sources


def _linear_weights(
    length: int, out: int, user_scale: float | None, align_corners: bool, precision: type[np.floating[Any]]
) -> np.ndarray[Any, Any]:
    """The (out, length) matrix of linear interpolation weights (two per row, summing to 1)."""
    scale = _scale(length, out, user_scale, align_corners, precision)
    positions = np.arange(out).astype(precision)
    if align_corners:
        source = scale * positions
    else:
        source = np.maximum(scale * (positions + precision(0.5)) - precision(0.5), precision(0))
    low = source.astype(np.int64)
    high = np.where(low < length - 1, low + 1, low)
    upper = np.clip(source - low.astype(precision), 0, 1)
    weights = np.zeros((out, length), dtype=np.float64)
    rows = np.arange(out)
    np.add.at(weights, (rows, low), 1 - upper.astype(np.float64))
    np.add.at(weights, (rows, high), upper.astype(np.float64))
    return weights


def _cubic_weights(
    length: int, out: int, user_scale: float | None, align_corners: bool, precision: type[np.floating[Any]]
) -> np.ndarray[Any, Any]:
    """The (out, length) matrix of bicubic weights: four taps per row around the source position, with positions
    past either edge reading the edge cell (PyTorch's)."""
    scale = _scale(length, out, user_scale, align_corners, precision)
    positions = np.arange(out).astype(precision)
    source = scale * positions if align_corners else scale * (positions + precision(0.5)) - precision(0.5)
    base = np.minimum(np.floor(source).astype(np.int64), length - 1)
    t = np.clip(source - base.astype(precision), 0, 1).astype(precision)
    a = precision(_CUBIC_A)

    def near(x: Any) -> Any:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: Any) -> Any:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    taps = (far(t + 1), near(t), near(1 - t), far(2 - t))
    weights = np.zeros((out, length), dtype=np.float64)
    rows = np.arange(out)
    for offset, tap in enumerate(taps):
        np.add.at(weights, (rows, np.clip(base - 1 + offset, 0, length - 1)), tap.astype(np.float64))
    return weights


def _last_dim_resampled(
    x: TensorT, sources: np.ndarray[Any, Any] | None, weights: np.ndarray[Any, Any] | None
) -> TensorT:
    """`x` with its last dim resampled: by source cells (nearest) or by a weight matrix (linear)."""
    length = x.shape[-1]
    lead = x.shape[:-1]
    if sources is not None:
        out = len(sources)
        if out % length == 0 and np.array_equal(sources, np.arange(out) // (out // length)):
            repeats = out // length
            return x.unsqueeze(-1)._broadcast_to((*lead, length, repeats)).reshape(*lead, out)
        step = int(sources[1] - sources[0]) if out > 1 else 1
        if step >= 1 and np.array_equal(sources, sources[0] + step * np.arange(out)):
            start = int(sources[0])
            window = x._movement(Ops.SHRINK, (*((0, extent) for extent in lead), (start, length)))
            window = window.pad(((0, 0),) * len(lead) + ((0, out * step - (length - start)),))
            picked = window.reshape(*lead, out, step)._movement(
                Ops.SHRINK, (*((0, extent) for extent in lead), (0, out), (0, 1))
            )
            return picked.reshape(*lead, out)
        selection = np.zeros((len(sources), length), dtype=np.bool_)
        selection[np.arange(len(sources)), sources] = True
        chosen = type(x)(selection, device=x.device)
        full = (*lead, len(sources), length)
        picked = chosen._broadcast_to(full).where(x.unsqueeze(-2)._broadcast_to(full), 0)
        return picked._reduce(Ops.ADD, (len(full) - 1,)).reshape(*lead, len(sources))._cast(x.dtype)
    assert weights is not None
    matrix = type(x)(weights, dtype=x.dtype, device=x.device)
    full = (*lead, weights.shape[0], length)
    product = multiply_sum(matrix._broadcast_to(full), x.unsqueeze(-2)._broadcast_to(full), (len(full) - 1,))
    return product.reshape(*lead, weights.shape[0])


class InterpolationMixin(TensorCore):
    """Resizing of the spatial dims."""

    def interpolate(
        self,
        size: int | tuple[int, ...] | None = None,
        scale_factor: float | tuple[float, ...] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ) -> Self:
        """The input (batch, channels, *spatial) with 1 to 3 spatial dims resized, like
        `torch.nn.functional.interpolate`.

        Args:
            size: the output spatial size (an int or one per dim), or
            scale_factor: multiplies each spatial size (output = floor(size * factor)).
            mode: 'nearest' (PyTorch's: source = floor(destination * scale)), 'nearest-exact' (pixel centres),
                'linear' (1 spatial dim), 'bilinear' (2), 'trilinear' (3), 'bicubic' (2; a = -0.75, edges
                repeated) or 'area' (adaptive average pooling).
            align_corners: linear and bicubic modes only: map the corner cells onto each other (default False).
            recompute_scale_factor: with scale_factor, derive the source step from the sizes instead.

        Example:
            >>> Tensor([[[1.0, 2.0]]]).interpolate(scale_factor=2).tolist()
            [[[1.0, 1.0, 2.0, 2.0]]]
            >>> Tensor([[[0.0, 1.0]]]).interpolate(size=4, mode="linear", align_corners=True).tolist()[0][0][1]
            0.3333333432674408
        """
        if mode not in _MODES:
            raise ValueError(f"interpolate mode must be one of {_MODES}, got {mode!r}")
        if not 3 <= self.ndim <= 5:
            raise ValueError(
                f"interpolate needs a (batch, channels, *spatial) input with 1 to 3 spatial dims, got {self.shape}"
            )
        spatial = self.ndim - 2
        if mode in _CORNER_MODES and _CORNER_MODES[mode] != spatial:
            raise ValueError(
                f"interpolate mode {mode!r} needs {_CORNER_MODES[mode]} spatial dims, got input shape {self.shape}"
            )
        if align_corners is not None and mode not in _CORNER_MODES:
            raise ValueError(f"interpolate align_corners is only for the linear and bicubic modes, not {mode!r}")
        corners = bool(align_corners)
        sizes, scales = _output_sizes(self, size, scale_factor, spatial)
        if recompute_scale_factor:
            scales = (None,) * spatial
        if mode == "area":
            pooled: Self = getattr(self, f"adaptive_avg_pool{spatial}d")(sizes)
            return pooled
        if mode in _CORNER_MODES and not dtypes.is_float(self.dtype):
            raise TypeError(f"interpolate mode {mode!r} needs a floating-point tensor, got {self.dtype!r}")
        precision: type[np.floating[Any]] = np.float64 if self.dtype == dtypes.float64 else np.float32
        result = self
        for position in range(spatial):
            axis = 2 + position
            length, out = self.shape[axis], sizes[position]
            if length == 0:
                raise ValueError(f"interpolate needs non-empty spatial dims, got input shape {self.shape}")
            moved = result.transpose(axis, -1)
            if mode in _LINEAR_MODES:
                weights = _linear_weights(length, out, scales[position], corners, precision)
                resampled = _last_dim_resampled(moved, None, weights)
            elif mode == "bicubic":
                weights = _cubic_weights(length, out, scales[position], corners, precision)
                resampled = _last_dim_resampled(moved, None, weights)
            else:
                sources = _nearest_sources(length, out, scales[position], mode == "nearest-exact")
                resampled = _last_dim_resampled(moved, sources, None)
            result = resampled.transpose(axis, -1)
        return result
