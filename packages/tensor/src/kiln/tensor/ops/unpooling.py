"""`UnpoolingMixin`: max_unpool1d / 2d / 3d, the partial inverse of max pooling with `return_indices=True`.

Each value is written at its index, a flat position in its (batch, channel) plane of the output; every other output
cell is zero. The write is a comparison against the output positions inside a sum (no scatter): output cell p sums
the values whose index is p. Overlapping pooling windows can report one input cell twice; PyTorch then keeps one of
the writes (the last) and its gradient is a gather (every value receives the gradient of the cell it indexes). Both
hold here: the forward value is the last write, and the gradient flows through the sum, whose derivative is that
gather. Indices outside the plane cannot be detected without reading the data (the graph is lazy): they write
nothing (PyTorch raises).
"""

from __future__ import annotations

import math
from typing import Any

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import check_int, check_same_device
from kiln.tensor.ops.creation import iota
from kiln.tensor.ops.dimensioned import dimensioned
from kiln.tensor.ops.windows import int_tuple
from kiln.uops import dtypes

__all__ = ["UnpoolingMixin"]

Size = int | tuple[int, ...]


def _output_sizes(
    x: TensorCore,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    output_size: Any,
    name: str,
) -> tuple[int, ...]:
    spatial = len(kernel)
    inputs = x.shape[-spatial:]
    default = tuple(
        (size - 1) * step - 2 * pad + taps for size, step, pad, taps in zip(inputs, stride, padding, kernel)
    )
    if output_size is None:
        sizes = default
    else:
        items = list(output_size) if isinstance(output_size, (tuple, list)) else [output_size]
        if len(items) == spatial + 2 or len(items) == spatial + 1:
            items = items[-spatial:]
        if len(items) != spatial:
            raise ValueError(f"{name} output_size needs {spatial} (or {spatial + 2}) values, got {output_size!r}")
        sizes = tuple(check_int(item, f"{name} output_size") for item in items)
        for size, usual, step in zip(sizes, default, stride):
            if not usual - step < size < usual + step:
                lowest = tuple(value - step for value, step in zip(default, stride))
                highest = tuple(value + step for value, step in zip(default, stride))
                raise ValueError(
                    f"{name} output_size {sizes} must lie strictly between {lowest} and {highest} (the default "
                    f"{default} -/+ the stride)"
                )
    if any(size <= 0 for size in sizes):
        raise ValueError(f"{name}: the output size {sizes} is not positive (input shape {x.shape})")
    return sizes


def _max_unpool_nd(
    x: TensorT,
    spatial: int,
    indices: TensorT,
    kernel_size: Size,
    stride: Size | None = None,
    padding: Size = 0,
    output_size: tuple[int, ...] | None = None,
) -> TensorT:
    name = f"max_unpool{spatial}d"
    if not isinstance(indices, TensorCore):
        raise TypeError(f"{name} indices must be a Tensor, got {type(indices).__name__}")
    check_same_device(name, x, indices)
    if x.ndim not in (spatial + 1, spatial + 2):
        raise ValueError(
            f"{name} input must have {spatial + 2} dims (batch, channels, *spatial) or {spatial + 1} without the "
            f"batch dim, got shape {x.shape}"
        )
    if indices.shape != x.shape:
        raise ValueError(f"{name} indices shape {indices.shape} must equal the input shape {x.shape}")
    if not dtypes.is_int(indices.dtype):
        raise TypeError(f"{name} indices must be an integer tensor, got {indices.dtype!r}")
    kernel = int_tuple(kernel_size, spatial, f"{name} kernel_size", minimum=1)
    strides = kernel if stride is None or stride == () else int_tuple(stride, spatial, f"{name} stride", minimum=1)
    pads = int_tuple(padding, spatial, f"{name} padding")
    sizes = _output_sizes(x, kernel, strides, pads, output_size, name)
    leading = x.shape[:-spatial]
    count = math.prod(x.shape[-spatial:])
    plane = math.prod(sizes)
    # (*leading, count, plane): value l lands in output cell p
    positions = iota(type(x), plane, x.device)._cast(indices.dtype).reshape(*((1,) * len(leading)), 1, plane)
    flat_indices = indices.reshape(*leading, count, 1)
    hits = flat_indices == positions
    values = x.reshape(*leading, count, 1)
    summed = hits.where(values, 0)._cast(x.dtype).sum(-2)
    # the last write wins where one cell is indexed twice (overlapping windows)
    order = iota(type(x), count, x.device)._cast(dtypes.int32).reshape(*((1,) * len(leading)), count, 1)
    last = hits.where(order, -1).amax(-2, keepdim=True)
    kept = hits & (order == last)
    written = kept.where(values, 0)._cast(x.dtype).sum(-2)
    result = summed + (written - summed).detach()
    return result.reshape(*leading, *sizes)


class UnpoolingMixin(TensorCore):
    """Max unpooling (PyTorch's `torch.nn.functional.max_unpool*d` with the pooled values as `self`)."""

    max_unpool1d = dimensioned(
        _max_unpool_nd,
        1,
        """Max unpooling of the last dim; see `max_unpool2d`.

        Example:
            >>> Tensor([[[5.0, 7.0]]]).max_unpool1d(Tensor([[[1, 2]]]), 2).tolist()
            [[[0.0, 5.0, 7.0, 0.0]]]
        """,
    )
    max_unpool2d = dimensioned(
        _max_unpool_nd,
        2,
        """Each value placed at its index (a flat position in its (batch, channel) plane of the output), zeros
        elsewhere, like `torch.nn.functional.max_unpool2d`.

        Args:
            indices: the positions, as `max_pool2d(..., return_indices=True)` returns them.
            kernel_size, stride, padding: those of the max pool being inverted.
            output_size: the output's spatial size (or full shape), within the stride of the default
                (in - 1) * stride - 2 * padding + kernel_size.

        Example:
            >>> Tensor([[[[4.0]]]]).max_unpool2d(Tensor([[[[3]]]]), 2).tolist()
            [[[[0.0, 0.0], [0.0, 4.0]]]]
        """,
    )
    max_unpool3d = dimensioned(
        _max_unpool_nd,
        3,
        """Max unpooling of the last three dims; see `max_unpool2d`.

        Example:
            >>> Tensor([[[[[1.0]]]]]).max_unpool3d(Tensor([[[[[7]]]]]), 2).sum().item()
            1.0
        """,
    )
