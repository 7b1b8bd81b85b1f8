"""Sliding windows over the trailing dims of a tensor, built from movement ops only, and the argument checks that
convolution and pooling share.

`sliding_windows(x, kernel, stride, dilation)` turns a tensor of shape (*leading, *spatial) into one of shape
(*leading, *out, *kernel) whose element [..., o, j] is x[..., o * stride + j * dilation]. It copies nothing: it is a
chain of RESHAPE / EXPAND / SHRINK / PAD / PERMUTE nodes, so a multiply-sum over the window dims (a convolution) or a
max over them (max pooling) becomes one reduce kernel whose loads index the input directly.

How one dim of size `size` becomes (out, kernel) when windows overlap (kernel > stride) or are dilated:

1. tile the dim `repeats` times (reshape to (1, size), expand, flatten): flat position p holds x[p mod size];
2. cut the first kernel * width positions and view them as (kernel, width) with width = size * factor + dilation,
   so element (j, m) holds x[(j * width + m) mod size] = x[(j * dilation + m) mod size];
3. keep m < out * stride, view m as (out, stride) and keep the first of each stride: (j, o) holds
   x[(j * dilation + o * stride) mod size] = x[j * dilation + o * stride], because every window lies inside the dim;
4. swap to (out, kernel).

Non-overlapping undilated windows (kernel <= stride) need only steps 3 and 4 on the (padded or cut) dim itself.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from kiln.tensor import graph
from kiln.tensor.core import TensorT
from kiln.tensor.ops._checks import check_int
from kiln.uops import Ops, UOp, dtypes

__all__ = ["int_tuple", "output_size", "sliding_windows"]


def int_tuple(value: Any, count: int, what: str, minimum: int = 0) -> tuple[int, ...]:
    """`value` (an int, or a tuple / list of `count` ints) as `count` ints, each >= `minimum`.

    Raises TypeError for non-integers and ValueError for a wrong count or a value below `minimum`, naming `what`.
    """
    items = list(value) if isinstance(value, (tuple, list)) else [value] * count
    if len(items) != count:
        raise ValueError(f"{what} needs 1 or {count} values (one per spatial dim), got {tuple(items)!r}")
    result = tuple(check_int(item, what) for item in items)
    if any(item < minimum for item in result):
        raise ValueError(f"{what} must be >= {minimum}, got {result}")
    return result


def output_size(size: int, kernel: int, stride: int, dilation: int) -> int:
    """How many windows of `kernel` taps (spaced `dilation` apart) fit in `size` at step `stride` (floor mode)."""
    span = dilation * (kernel - 1) + 1
    return 0 if size < span else (size - span) // stride + 1


def sliding_windows(x: TensorT, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> TensorT:
    """The windows of the last len(kernel) dims of `x`: shape (*leading, *out, *kernel) (see the module docstring).

    Callers check the arguments: every kernel, stride and dilation is >= 1 and every window fits in its dim. The
    chain is built on graph nodes and wrapped in a tensor once (its links are no tensor anyone holds).
    """
    node = x.uop
    device = graph.placement_of(node)
    for op, arg, shape in _window_plan(graph.shape_of(node), tuple(kernel), tuple(stride), tuple(dilation)):
        # the plan's nodes were checked when it was made: each link is made directly, its shape and device known
        node = UOp(op, node.dtype, (node,), arg)
        graph.SHAPE.set(node, shape)
        graph.DEVICE.set(node, device)
    return x if node is x.uop else x._result(node)


@functools.lru_cache(maxsize=512)
def _window_plan(
    shape: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]
) -> tuple[tuple[Ops, Any, tuple[int, ...]], ...]:
    """The chain of movement ops (op, arg, result shape) that `sliding_windows` applies to a node of `shape`: built
    once per shape and window on a placeholder through graph's checked constructors, then replayed (a conv2d and
    its gradients build the same windows every step)."""
    placeholder = graph.contiguous(graph.const(0.0, dtypes.float32, "CPU", shape))
    node = _build_windows(placeholder, kernel, stride, dilation)
    chain = []
    while node is not placeholder:
        chain.append((node.op, node.arg, graph.shape_of(node)))
        node = node.src[0]
    return tuple(reversed(chain))


def _build_windows(x: UOp, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> UOp:
    spatial = len(kernel)
    leading = len(graph.shape_of(x)) - spatial
    assert leading >= 0 and len(stride) == spatial and len(dilation) == spatial
    node = x
    for position in range(spatial):
        # after `position` dims were split in two, spatial dim `position` sits at leading + 2 * position
        axis = leading + 2 * position
        node = _window_dim(node, axis, kernel[position], stride[position], dilation[position])
    order = (
        *range(leading),
        *(leading + 2 * position for position in range(spatial)),
        *(leading + 2 * position + 1 for position in range(spatial)),
    )
    return graph.permute(node, order)


def _resize_dim(x: UOp, axis: int, length: int) -> UOp:
    """`x` with dim `axis` cut or zero-padded at its end to `length`."""
    shape = graph.shape_of(x)
    if length <= shape[axis]:
        return graph.shrink(x, tuple((0, length if index == axis else extent) for index, extent in enumerate(shape)))
    return graph.pad(x, tuple((0, length - shape[axis] if index == axis else 0) for index in range(len(shape))))


def _split_dim(x: UOp, axis: int, sizes: tuple[int, ...]) -> UOp:
    shape = graph.shape_of(x)
    return graph.reshape(x, (*shape[:axis], *sizes, *shape[axis + 1 :]))


def _window_dim(x: UOp, axis: int, kernel: int, stride: int, dilation: int) -> UOp:
    """Dim `axis` of size `size` replaced by the two dims (out, kernel)."""
    shape = graph.shape_of(x)
    size = shape[axis]
    out = output_size(size, kernel, stride, dilation)
    assert out >= 1, "callers check that every window fits"
    if kernel <= stride and dilation == 1:
        # (out, stride) blocks, keep the first `kernel` of each block
        blocks = _split_dim(_resize_dim(x, axis, out * stride), axis, (out, stride))
        kept = tuple(
            (0, kernel) if index == axis + 1 else (0, extent) for index, extent in enumerate(graph.shape_of(blocks))
        )
        return graph.shrink(blocks, kept)
    # width = size * factor + dilation must be >= out * stride so step 3 can cut out * stride positions
    factor = max(1, -(-(out * stride - dilation) // size))
    width = size * factor + dilation
    repeats = -(-(kernel * width) // size)
    tiled = _split_dim(x, axis, (1, size))
    tiled = graph.expand(tiled, (*shape[:axis], repeats, size, *shape[axis + 1 :]))
    tiled = _merge_dims(tiled, axis)
    rows = _split_dim(_resize_dim(tiled, axis, kernel * width), axis, (kernel, width))
    rows = _split_dim(_resize_dim(rows, axis + 1, out * stride), axis + 1, (out, stride))
    rows_shape = graph.shape_of(rows)
    first = tuple((0, 1) if index == axis + 2 else (0, extent) for index, extent in enumerate(rows_shape))
    picked = graph.shrink(rows, first)
    picked_shape = graph.shape_of(picked)
    picked = graph.reshape(picked, (*picked_shape[: axis + 2], *picked_shape[axis + 3 :]))
    order = list(range(len(picked_shape) - 1))
    order[axis], order[axis + 1] = axis + 1, axis
    return graph.permute(picked, tuple(order))


def _merge_dims(x: UOp, axis: int) -> UOp:
    """Dims `axis` and `axis + 1` merged into one."""
    shape = graph.shape_of(x)
    return graph.reshape(x, (*shape[:axis], shape[axis] * shape[axis + 1], *shape[axis + 2 :]))
