"""`AdaptivePoolingMixin`: adaptive average and max pooling over 1, 2 or 3 trailing spatial dims.

Adaptive pooling picks the window of output cell i along a dim of input size n and output size m as
[floor(i * n / m), ceil((i + 1) * n / m)) (PyTorch's rule), so windows vary in size and may overlap. The windows of a
multi-dim pool are products of per-dim windows, so both poolings are separable: each dim is reduced on its own with an
(m, n) membership matrix, the average as a multiply-sum with weights 1 / length and the maximum as a masked max. A
max pool's indices (flat positions in each (batch, channel) plane) are the first position of each window, in
row-major order, that holds the window's maximum. When the input needs a gradient, the values are read back at those
indices, so the gradient reaches only the chosen cell (PyTorch's; a plain max would split it among ties).
"""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import check_int
from kiln.tensor.ops.creation import iota
from kiln.tensor.ops.linalg import multiply_sum
from kiln.uops import dtypes

__all__ = ["AdaptivePoolingMixin", "adaptive_membership"]

OutputSize = int | None | tuple[int | None, ...]


def adaptive_membership(length: int, out: int) -> np.ndarray[Any, Any]:
    """The (out, length) bool matrix whose row i marks the input cells of adaptive window i."""
    rows = np.arange(out)
    starts = (rows * length) // out
    ends = -((-(rows + 1) * length) // out)
    cells = np.arange(length)
    membership: np.ndarray[Any, Any] = (cells[None, :] >= starts[:, None]) & (cells[None, :] < ends[:, None])
    return membership


def _sizes(x: TensorCore, output_size: Any, spatial: int, name: str) -> tuple[int, ...]:
    if x.ndim not in (spatial + 1, spatial + 2):
        raise ValueError(
            f"{name} input must have {spatial + 2} dims (batch, channels, *spatial) or {spatial + 1} without the "
            f"batch dim, got shape {x.shape}"
        )
    items = list(output_size) if isinstance(output_size, (tuple, list)) else [output_size] * spatial
    if len(items) != spatial:
        raise ValueError(f"{name} output_size needs 1 or {spatial} values, got {output_size!r}")
    lengths = x.shape[-spatial:]
    sizes = tuple(
        length if item is None else check_int(item, f"{name} output_size") for item, length in zip(items, lengths)
    )
    if any(size < 0 for size in sizes):
        raise ValueError(f"{name} output_size must be non-negative, got {sizes}")
    if any(length == 0 for length in lengths) and all(size > 0 for size in sizes):
        raise ValueError(f"{name} needs non-empty spatial dims, got input shape {x.shape}")
    return sizes


def _lowest(x: TensorCore) -> float | int:
    return -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)


def _membership_tensor(x: TensorT, length: int, out: int) -> TensorT:
    return type(x)(adaptive_membership(length, out), device=x.device)


def _adaptive_avg(x: TensorT, output_size: Any, spatial: int) -> TensorT:
    name = f"adaptive_avg_pool{spatial}d"
    sizes = _sizes(x, output_size, spatial, name)
    if not dtypes.is_float(x.dtype):
        raise TypeError(f"{name} needs a floating-point tensor, got {x.dtype!r}")
    result = x
    for position, out in enumerate(sizes):
        axis = x.ndim - spatial + position
        moved = result.transpose(axis, -1)
        length = moved.shape[-1]
        membership = adaptive_membership(length, out)
        weights = membership / np.maximum(membership.sum(1, keepdims=True), 1)
        matrix = type(x)(weights, dtype=x.dtype, device=x.device)
        full = (*moved.shape[:-1], out, length)
        summed = multiply_sum(matrix._broadcast_to(full), moved.unsqueeze(-2)._broadcast_to(full), (len(full) - 1,))
        result = summed.reshape(*moved.shape[:-1], out).transpose(axis, -1)
    return result


def _adaptive_max(x: TensorCore, output_size: Any, spatial: int, return_indices: bool) -> Any:
    name = f"adaptive_max_pool{spatial}d"
    sizes = _sizes(x, output_size, spatial, name)
    if not isinstance(return_indices, bool):
        raise TypeError(f"{name} return_indices must be a bool, got {return_indices!r}")
    if x.dtype == dtypes.bool:
        raise TypeError(f"{name} is not defined for bool tensors; cast to an integer or float dtype first")
    lowest = _lowest(x)
    routed = x.requires_grad is True and not type(x)._grad_disabled
    result = x.detach() if routed else x
    for position, out in enumerate(sizes):
        axis = x.ndim - spatial + position
        moved = result.transpose(axis, -1)
        length = moved.shape[-1]
        full = (*moved.shape[:-1], out, length)
        inside = _membership_tensor(x, length, out)._broadcast_to(full)
        picked = inside.where(moved.unsqueeze(-2)._broadcast_to(full), lowest)._cast(x.dtype)
        result = picked.amax(-1).transpose(axis, -1)
    if not return_indices and not routed:
        return result
    # (*leading, *out, *in): a window cell holding the window's maximum; the first one's flat position is the index
    leading = x.ndim - spatial
    lengths = x.shape[leading:]
    plane = math.prod(lengths)
    inside_all: TensorCore | None = None
    for position, (length, out) in enumerate(zip(lengths, sizes)):
        shape = [1] * (2 * spatial)
        shape[position], shape[spatial + position] = out, length
        member = _membership_tensor(x, length, out).reshape(*shape)
        inside_all = member if inside_all is None else inside_all & member
    assert inside_all is not None
    cells = x.detach().reshape(*x.shape[:leading], *((1,) * spatial), *lengths)
    maxima = result.reshape(*result.shape, *((1,) * spatial))
    equal = cells == maxima
    if dtypes.is_float(x.dtype):
        equal = equal | (cells.isnan() & maxima.isnan())  # a NaN window maximum is its first NaN, like PyTorch's
    hits = inside_all & equal
    flat = hits.reshape(*result.shape, plane)._cast(dtypes.int32)
    indices = flat.argmax(-1)._cast(dtypes.default_int)
    if routed:
        # the value read at its index: the gradient goes to that one cell, as PyTorch's does
        chosen = indices.unsqueeze(-1) == iota(type(x), plane, x.device)._cast(dtypes.default_int)
        values = x.reshape(*x.shape[:leading], *((1,) * spatial), plane)
        result = chosen.where(values, 0)._cast(x.dtype).sum(-1)._cast(x.dtype)
    return (result, indices) if return_indices else result


class AdaptivePoolingMixin(TensorCore):
    """Adaptive pooling (PyTorch's `torch.nn.functional.adaptive_*_pool*d` with the input as `self`)."""

    def adaptive_avg_pool1d(self, output_size: OutputSize) -> Self:
        """Adaptive average pooling of the last dim to `output_size`; see `adaptive_avg_pool2d`.

        Example:
            >>> Tensor([[[1.0, 2.0, 3.0, 4.0]]]).adaptive_avg_pool1d(2).tolist()
            [[[1.5, 3.5]]]
        """
        return _adaptive_avg(self, output_size, 1)

    def adaptive_avg_pool2d(self, output_size: OutputSize) -> Self:
        """The last two dims averaged down (or up) to `output_size`, like `torch.nn.functional.adaptive_avg_pool2d`.

        Args:
            output_size: an int or one per spatial dim; None keeps that dim's size.

        Example:
            >>> Tensor.arange(16.0).reshape(1, 1, 4, 4).adaptive_avg_pool2d(1).item()
            7.5
        """
        return _adaptive_avg(self, output_size, 2)

    def adaptive_avg_pool3d(self, output_size: OutputSize) -> Self:
        """Adaptive average pooling of the last three dims; see `adaptive_avg_pool2d`.

        Example:
            >>> Tensor.arange(8.0).reshape(1, 1, 2, 2, 2).adaptive_avg_pool3d(1).item()
            3.5
        """
        return _adaptive_avg(self, output_size, 3)

    def adaptive_max_pool1d(self, output_size: OutputSize, return_indices: bool = False) -> Any:
        """Adaptive max pooling of the last dim; see `adaptive_max_pool2d`.

        Example:
            >>> Tensor([[[1.0, 5.0, 3.0, 4.0]]]).adaptive_max_pool1d(2).tolist()
            [[[5.0, 4.0]]]
        """
        return _adaptive_max(self, output_size, 1, return_indices)

    def adaptive_max_pool2d(self, output_size: OutputSize, return_indices: bool = False) -> Any:
        """The maximum of each adaptive window of the last two dims, like `torch.nn.functional.adaptive_max_pool2d`.

        Args:
            output_size: an int or one per spatial dim; None keeps that dim's size.
            return_indices: also return each maximum's flat position in its (batch, channel) plane
                (`dtypes.default_int`).

        Example:
            >>> Tensor.arange(16.0).reshape(1, 1, 4, 4).adaptive_max_pool2d(2).tolist()
            [[[[5.0, 7.0], [13.0, 15.0]]]]
        """
        return _adaptive_max(self, output_size, 2, return_indices)

    def adaptive_max_pool3d(self, output_size: OutputSize, return_indices: bool = False) -> Any:
        """Adaptive max pooling of the last three dims; see `adaptive_max_pool2d`.

        Example:
            >>> Tensor.arange(8.0).reshape(1, 1, 2, 2, 2).adaptive_max_pool3d(1).item()
            7.0
        """
        return _adaptive_max(self, output_size, 3, return_indices)
