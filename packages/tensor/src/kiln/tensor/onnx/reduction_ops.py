"""Reductions (attribute and input `axes` forms), ArgMax / ArgMin, Softmax family, CumSum, TopK."""

from __future__ import annotations

import math
from collections.abc import Callable

from kiln.tensor import dtypes
from kiln.tensor.onnx.materialize import materialized_if_computed
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import operator
from kiln.tensor.tensor import Tensor

__all__: list[str] = []

# The opset from which each reduction takes `axes` as its second input instead of an attribute.
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce_axes(call: NodeCall) -> tuple[int, ...] | None:
    """The dims to reduce, or None for 'no reduction' (noop_with_empty_axes with no axes)."""
    x = call.tensor(0)
    if call.opset >= _AXES_INPUT_SINCE.get(call.op_type, 18):
        axes = call.optional_ints(1) or []
    else:
        axes = call.attributes.ints("axes", []) or []
    if not axes:
        if call.attributes.int("noop_with_empty_axes", 0):
            return None
        return tuple(range(x.ndim))
    return tuple(sorted(axis % x.ndim if x.ndim else 0 for axis in axes))


def _reduction(function: Callable[[Tensor, tuple[int, ...], bool], Tensor]) -> Callable[[NodeCall], Tensor]:
    def handler(call: NodeCall) -> Tensor:
        x = call.tensor(0)
        axes = _reduce_axes(call)
        if axes is None:
            return x
        if x.ndim == 0:
            return function(x.reshape(1), (0,), False)
        return function(x, axes, bool(call.attributes.int("keepdims", 1)))

    return handler


def _sum(x: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
    return x.sum(axes, keepdim=keep, dtype=x.dtype)


def _max(x: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
    if any(x.shape[axis] == 0 for axis in axes):
        shape = [1 if axis in axes else size for axis, size in enumerate(x.shape)]
        empty = Tensor.full(shape, -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype), dtype=x.dtype)
        return empty if keep else empty.reshape([size for axis, size in enumerate(shape) if axis not in axes])
    return x.amax(axes, keepdim=keep)


def _min(x: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
    if any(x.shape[axis] == 0 for axis in axes):
        shape = [1 if axis in axes else size for axis, size in enumerate(x.shape)]
        empty = Tensor.full(shape, math.inf if dtypes.is_float(x.dtype) else dtypes.max(x.dtype), dtype=x.dtype)
        return empty if keep else empty.reshape([size for axis, size in enumerate(shape) if axis not in axes])
    return x.amin(axes, keepdim=keep)


_REDUCTIONS: dict[str, Callable[[Tensor, tuple[int, ...], bool], Tensor]] = {
    "ReduceSum": _sum,
    "ReduceMean": lambda x, axes, keep: x.mean(axes, keepdim=keep),
    "ReduceMax": _max,
    "ReduceMin": _min,
    "ReduceProd": lambda x, axes, keep: x.prod(axes, keepdim=keep, dtype=x.dtype),
    "ReduceL1": lambda x, axes, keep: _sum(x.abs(), axes, keep),
    "ReduceL2": lambda x, axes, keep: _sum(x * x, axes, keep).cast(dtypes.float32).sqrt().cast(x.dtype),
    "ReduceSumSquare": lambda x, axes, keep: _sum(x * x, axes, keep),
    "ReduceLogSum": lambda x, axes, keep: _sum(x, axes, keep).log(),
    "ReduceLogSumExp": lambda x, axes, keep: x.logsumexp(axes, keepdim=keep),
}

for _name, _function in _REDUCTIONS.items():
    operator(_name, attributes=["axes", "keepdims", "noop_with_empty_axes"])(_reduction(_function))


def _arg_reduction(largest: bool) -> Callable[[NodeCall], Tensor]:
    def handler(call: NodeCall) -> Tensor:
        x = call.tensor(0)
        axis = call.attributes.int("axis", 0) % max(x.ndim, 1)
        keep = bool(call.attributes.int("keepdims", 1))
        last = bool(call.attributes.int("select_last_index", 0))
        source = x.flip(axis) if last else x
        index = source.argmax(axis, keepdim=keep) if largest else source.argmin(axis, keepdim=keep)
        index = index.cast(dtypes.int64)
        return (x.shape[axis] - 1) - index if last else index

    return handler


operator("ArgMax", attributes=["axis", "keepdims", "select_last_index"])(_arg_reduction(True))
operator("ArgMin", attributes=["axis", "keepdims", "select_last_index"])(_arg_reduction(False))


def _softmax_family(function: Callable[[Tensor, int], Tensor]) -> Callable[[NodeCall], Tensor]:
    def handler(call: NodeCall) -> Tensor:
        # read three times (max, sum, result): an input still to compute would be computed thrice, in 3 kernels
        x = materialized_if_computed(call.tensor(0))
        if call.opset >= 13:
            return function(x, call.attributes.int("axis", -1) % x.ndim)
        # before opset 13 the input is seen as 2-D: dims before `axis` by dims from `axis`
        axis = call.attributes.int("axis", 1) % x.ndim
        rows = math.prod(x.shape[:axis])
        return function(x.reshape(rows, -1), 1).reshape(x.shape)

    return handler


def _hardmax(x: Tensor, axis: int) -> Tensor:
    return x.argmax(axis).one_hot(x.shape[axis]).movedim(-1, axis).cast(x.dtype)


operator("Softmax", attributes=["axis"])(_softmax_family(lambda x, axis: x.softmax(axis)))
operator("LogSoftmax", attributes=["axis"])(_softmax_family(lambda x, axis: x.log_softmax(axis)))
operator("Hardmax", attributes=["axis"])(_softmax_family(_hardmax))


def _cumulative(product: bool) -> Callable[[NodeCall], Tensor]:
    def handler(call: NodeCall) -> Tensor:
        x = call.tensor(0)
        axis = call.ints(1)[0] % x.ndim
        reverse, exclusive = call.attributes.int("reverse", 0), call.attributes.int("exclusive", 0)
        source = x.flip(axis) if reverse else x
        if exclusive:
            # shift by one along the axis, filling with the identity (0 for sums, 1 for products)
            padding = [(0, 0)] * x.ndim
            padding[axis] = (1, 0)
            bounds = [None if dim != axis else (0, x.shape[axis]) for dim in range(x.ndim)]
            source = source.pad(padding, value=1 if product else 0).shrink(bounds)
        result = source.cumprod(axis, dtype=x.dtype) if product else source.cumsum(axis, dtype=x.dtype)
        return result.flip(axis) if reverse else result

    return handler


operator("CumSum", attributes=["exclusive", "reverse"])(_cumulative(False))
operator("CumProd", attributes=["exclusive", "reverse"])(_cumulative(True))


@operator("TopK", attributes=["axis", "largest", "sorted", "k"])
def _topk(call: NodeCall) -> tuple[Tensor, Tensor]:
    x = call.tensor(0)
    k = call.attributes.int("k", 0) if call.opset < 10 else call.ints(1)[0]
    axis = call.attributes.int("axis", -1) % x.ndim
    values, indices = x.topk(k, dim=axis, largest=bool(call.attributes.int("largest", 1)), sorted=True)
    return values, indices.cast(dtypes.int64)
