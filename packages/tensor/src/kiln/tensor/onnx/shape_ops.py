"""Shape and data-movement operators: Reshape ... Pad, Gather / Scatter families, Shape, Cast, Constant, Range."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln.tensor import dtypes
from kiln.tensor.onnx.attributes import Attributes
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import one_of, operator
from kiln.tensor.onnx.types import dtype_of_element_type
from kiln.tensor.tensor import Tensor

__all__: list[str] = []


def _shape_array(values: list[int] | tuple[int, ...]) -> np.ndarray[Any, Any]:
    return np.array(values, dtype=np.int64).reshape(len(values))


@operator("Shape", attributes=["start", "end"])
def _shape(call: NodeCall) -> np.ndarray[Any, Any]:
    shape = call.tensor(0).shape
    start = call.attributes.int("start", 0)
    end = call.attributes.values.get("end")
    return _shape_array(shape[start : None if end is None else int(end)])


@operator("Size")
def _size(call: NodeCall) -> np.ndarray[Any, Any]:
    return np.array(math.prod(call.tensor(0).shape), dtype=np.int64)


def _check_constant(attributes: Attributes, opset: int) -> str | None:
    if "sparse_value" in attributes:
        return "attribute sparse_value (sparse tensors)"
    if len(attributes.values) != 1:
        return "Constant with other than one value attribute"
    return None


@operator(
    "Constant",
    attributes=["value", "value_float", "value_floats", "value_int", "value_ints", "sparse_value"],
    check=_check_constant,
)
def _constant(call: NodeCall) -> np.ndarray[Any, Any]:
    (name, value), *_ = call.attributes.values.items()
    if name == "value_float":
        return np.array(value, dtype=np.float32)
    if name == "value_floats":
        return np.array(value, dtype=np.float32)
    if name in ("value_int", "value_ints"):
        return np.array(value, dtype=np.int64)
    return np.asarray(value)


@operator("ConstantOfShape", attributes=["value"])
def _constant_of_shape(call: NodeCall) -> Tensor:
    shape = call.ints(0)
    value = call.attributes.array("value")
    fill = np.zeros(1, np.float32) if value is None else value.reshape(-1)
    return Tensor(fill).reshape(()).expand(shape).contiguous() if shape else Tensor(fill).reshape(())


@operator("Reshape", attributes=["allowzero"])
def _reshape(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    shape = call.ints(1) if call.opset >= 5 else (call.attributes.ints("shape", []) or [])
    if not call.attributes.int("allowzero", 0):
        shape = [x.shape[index] if size == 0 else size for index, size in enumerate(shape)]
    return x.reshape(shape)


@operator("Transpose", attributes=["perm"])
def _transpose(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    order = call.attributes.ints("perm") or list(reversed(range(x.ndim)))
    return x.permute(order)


def _axes_of(call: NodeCall, since: int) -> list[int] | None:
    if call.opset >= since:
        return call.optional_ints(1)
    return call.attributes.ints("axes")


@operator("Squeeze", attributes=["axes"])
def _squeeze(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    axes = _axes_of(call, 13)
    if axes is None:
        return x.reshape([size for size in x.shape if size != 1])
    axes = [axis % x.ndim for axis in axes]
    return x.reshape([size for axis, size in enumerate(x.shape) if axis not in axes])


@operator("Unsqueeze", attributes=["axes"])
def _unsqueeze(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    axes = _axes_of(call, 13) or []
    rank = x.ndim + len(axes)
    axes = sorted(axis % rank for axis in axes)
    shape = list(x.shape)
    for axis in axes:
        shape.insert(axis, 1)
    return x.reshape(shape)


@operator("Flatten", attributes=["axis"])
def _flatten(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    axis = call.attributes.int("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@operator("Concat", attributes=["axis"])
def _concat(call: NodeCall) -> Tensor:
    tensors = [call.tensor(index) for index in range(len(call.inputs))]
    axis = call.attributes.int("axis", 0) % tensors[0].ndim
    return Tensor.cat(*tensors, dim=axis)


@operator("Split", attributes=["axis", "split", "num_outputs"])
def _split(call: NodeCall) -> list[Tensor]:
    x = call.tensor(0)
    axis = call.attributes.int("axis", 0) % x.ndim
    sizes = call.optional_ints(1) if call.opset >= 13 else call.attributes.ints("split")
    if not sizes:
        parts = call.attributes.int("num_outputs", call.num_outputs)
        chunk = -(-x.shape[axis] // parts)
        sizes = [min(chunk, x.shape[axis] - chunk * index) for index in range(parts)]
    starts = np.cumsum([0, *sizes])
    return [
        x.shrink([None if dim != axis else (int(starts[i]), int(starts[i + 1])) for dim in range(x.ndim)])
        for i in range(len(sizes))
    ]


@operator("Slice", attributes=["starts", "ends", "axes"])
def _slice(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    if call.opset < 10:
        starts, ends = call.attributes.ints("starts") or [], call.attributes.ints("ends") or []
        axes, steps = call.attributes.ints("axes") or list(range(len(starts))), [1] * len(starts)
    else:
        starts, ends = call.ints(1), call.ints(2)
        axes = call.optional_ints(3) or list(range(len(starts)))
        steps = call.optional_ints(4) or [1] * len(starts)
    index: list[slice] = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        size = x.shape[axis % x.ndim]
        # clamp to the range numpy's slicing accepts (ONNX ends may be +-INT64_MAX)
        start, end = max(-size - 1, min(size + 1, start)), max(-size - 1, min(size + 1, end))
        index[axis % x.ndim] = slice(start, end, step)
    bounds = [(s.indices(size)) for s, size in zip(index, x.shape)]
    if any(len(range(*bound)) == 0 for bound in bounds):
        return Tensor.zeros([len(range(*bound)) for bound in bounds], dtype=x.dtype)
    return x[tuple(index)]


def _normalized_indices(indices: Tensor, size: int) -> Tensor:
    indices = indices.cast(dtypes.int64)
    return (indices < 0).where(indices + size, indices)


_INT32_RANGE = (-(2**31), 2**31 - 1)


def _row_indices(indices: Tensor, size: int) -> Tensor:
    """Gather's indices wrapped into [0, size) as int32 where `size` allows: codegen's gather rewrite reads one row
    per index for int32 positions but keeps int64 ones a compare against every row (bert.onnx's (100, 32) token
    table at batch 16: ~0.12 ms of process CPU per call). A value past int32 saturates, so it stays out of range."""
    normalized = _normalized_indices(indices, size)
    if not isinstance(size, int) or size > _INT32_RANGE[1]:
        return normalized
    return normalized.clip(*_INT32_RANGE).cast(dtypes.int32)


@operator("Gather", attributes=["axis"])
def _gather(call: NodeCall) -> Tensor:
    x, indices = call.tensor(0), call.tensor(1)
    axis = call.attributes.int("axis", 0) % x.ndim
    flat = _row_indices(indices, x.shape[axis]).reshape(-1)
    picked = (
        x.index_select(axis, flat)
        if flat.shape[0]
        else x.shrink([None if dim != axis else (0, 0) for dim in range(x.ndim)])
    )
    return picked.reshape(*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :])


@operator("GatherElements", attributes=["axis"])
def _gather_elements(call: NodeCall) -> Tensor:
    x, indices = call.tensor(0), call.tensor(1)
    axis = call.attributes.int("axis", 0) % x.ndim
    return x.gather(axis, _normalized_indices(indices, x.shape[axis]))


def _flat_positions(data_shape: tuple[int, ...], indices: Tensor, batch_dims: int) -> tuple[Tensor, int]:
    """GatherND / ScatterND positions as flat offsets into (batch, rest) and the size of the rest's leading part."""
    depth = indices.shape[-1]
    strides = [math.prod(data_shape[batch_dims + level + 1 : batch_dims + depth]) for level in range(depth)]
    offset = indices.const_like(0).sum(-1)
    for level in range(depth):
        size = data_shape[batch_dims + level]
        component = _normalized_indices(indices[..., level], size)
        offset = offset + component * strides[level]
    return offset, math.prod(data_shape[batch_dims : batch_dims + depth])


@operator("GatherND", attributes=["batch_dims"])
def _gather_nd(call: NodeCall) -> Tensor:
    x, indices = call.tensor(0), call.tensor(1).cast(dtypes.int64)
    batch_dims = call.attributes.int("batch_dims", 0)
    depth = indices.shape[-1]
    batch = math.prod(x.shape[:batch_dims])
    offset, rows = _flat_positions(x.shape, indices, batch_dims)
    tail = x.shape[batch_dims + depth :]
    table = x.reshape(batch, rows, math.prod(tail))
    positions = offset.reshape(batch, -1)
    picked = table.gather(1, positions.unsqueeze(-1).expand(batch, positions.shape[1], math.prod(tail)))
    return picked.reshape(*indices.shape[:-1], *tail)


def _scatter_reduce(reduction: str) -> str | None:
    return {"none": None, "add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[reduction]


@operator(
    "ScatterElements",
    "Scatter",
    attributes=["axis", "reduction"],
    check=one_of("reduction", ["none", "add", "mul", "max", "min"], "none"),
)
def _scatter_elements(call: NodeCall) -> Tensor:
    x, indices, updates = call.tensor(0), call.tensor(1), call.tensor(2)
    axis = call.attributes.int("axis", 0) % x.ndim
    indices = _normalized_indices(indices, x.shape[axis])
    reduction = _scatter_reduce(call.attributes.string("reduction", "none"))
    if reduction is None:
        return x.scatter(axis, indices, updates)
    return x.scatter_reduce(axis, indices, updates, reduction, include_self=True)


@operator(
    "ScatterND", attributes=["reduction"], check=one_of("reduction", ["none", "add", "mul", "max", "min"], "none")
)
def _scatter_nd(call: NodeCall) -> Tensor:
    x, indices, updates = call.tensor(0), call.tensor(1).cast(dtypes.int64), call.tensor(2)
    depth = indices.shape[-1]
    offset, rows = _flat_positions(x.shape, indices, 0)
    tail = math.prod(x.shape[depth:])
    table = x.reshape(rows, tail)
    positions = offset.reshape(-1, 1).expand(-1, tail)
    values = updates.reshape(-1, tail)
    reduction = _scatter_reduce(call.attributes.string("reduction", "none"))
    if reduction is None:
        result = table.scatter(0, positions, values)
    else:
        result = table.scatter_reduce(0, positions, values, reduction, include_self=True)
    return result.reshape(x.shape)


@operator("Expand")
def _expand(call: NodeCall) -> Tensor:
    x, shape = call.tensor(0), call.ints(1)
    rank = max(x.ndim, len(shape))
    padded_x = (1,) * (rank - x.ndim) + x.shape
    padded_shape = [1] * (rank - len(shape)) + shape
    target = [a if b == 1 else b for a, b in zip(padded_x, padded_shape)]
    return x.reshape(padded_x).expand(target)


@operator("Tile")
def _tile(call: NodeCall) -> Tensor:
    return call.tensor(0).repeat(call.ints(1))


@operator(
    "Pad",
    attributes=["mode", "pads", "value"],
    check=one_of("mode", ["constant", "reflect", "edge", "wrap"], "constant"),
)
def _pad(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    mode = call.attributes.string("mode", "constant")
    if call.opset < 11:
        pads, value = call.attributes.ints("pads") or [], call.attributes.float("value", 0.0)
        axes = list(range(x.ndim))
    else:
        pads = call.ints(1)
        value = call.scalar(2) if call.has(2) else 0
        axes = [axis % x.ndim for axis in (call.optional_ints(3) or range(x.ndim))]
    half = len(pads) // 2
    padding: list[tuple[int, int]] = [(0, 0)] * x.ndim
    for position, axis in enumerate(axes):
        padding[axis] = (pads[position], pads[position + half])
    kiln_mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}[mode]
    if kiln_mode == "constant":
        return x.pad(padding, mode="constant", value=value)
    return x.pad(padding, mode=kiln_mode)


@operator("Cast", attributes=["to", "saturate", "round_mode"])
def _cast(call: NodeCall) -> Tensor:
    # saturate / round_mode concern float8 targets only, which have no kiln dtype (refused at load)
    x = call.tensor(0)
    dtype = dtype_of_element_type(call.attributes.int("to", 0), f"node {call.name}")
    return x if dtype == x.dtype else x.cast(dtype)


@operator("CastLike", attributes=["saturate", "round_mode"])
def _cast_like(call: NodeCall) -> Tensor:
    return call.tensor(0).cast(call.tensor(1).dtype)


@operator("Range")
def _range(call: NodeCall) -> Tensor:
    start, limit, delta = call.scalar(0), call.scalar(1), call.scalar(2)
    count = max(math.ceil((limit - start) / delta), 0)
    dtype = call.tensor(0).dtype
    return (
        Tensor.arange(count, dtype=dtypes.float64 if dtypes.is_float(dtype) else dtypes.int64) * delta + start
    ).cast(dtype)


@operator("Dropout", attributes=["seed", "ratio"])
def _dropout(call: NodeCall) -> tuple[Tensor, Tensor]:
    # inference: the identity, and a mask of ones (training_mode, input 2, must be false)
    ratio = float(call.scalar(1)) if call.has(1) else call.attributes.float("ratio", 0.5)
    if call.has(2) and bool(call.scalar(2)) and ratio != 0.0:
        raise NotImplementedError("Dropout with training_mode=True and a nonzero ratio (random masks)")
    x = call.tensor(0)
    return x, Tensor.ones(x.shape, dtype=dtypes.bool)


@operator("Trilu", attributes=["upper"])
def _trilu(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    k = call.ints(1)[0] if call.has(1) else 0
    return x.triu(k) if call.attributes.int("upper", 1) else x.tril(k)


@operator("OneHot", attributes=["axis"])
def _one_hot(call: NodeCall) -> Tensor:
    indices, values = call.tensor(0), call.tensor(2)
    depth = int(call.scalar(1))
    indices = indices.cast(dtypes.int64)
    indices = (indices < 0).where(indices + depth, indices)
    axis = call.attributes.int("axis", -1) % (indices.ndim + 1)
    hot = indices.unsqueeze(-1) == Tensor.arange(depth, dtype=dtypes.int64)
    result = hot.where(values[1], values[0])
    return result.movedim(-1, axis)


@operator("EyeLike", attributes=["dtype", "k"])
def _eye_like(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    element_type = call.attributes.int("dtype", 0)
    dtype = dtype_of_element_type(element_type, f"node {call.name}") if element_type else x.dtype
    rows, columns = x.shape
    k = call.attributes.int("k", 0)
    row_index = Tensor.arange(rows, dtype=dtypes.int64).reshape(rows, 1)
    column_index = Tensor.arange(columns, dtype=dtypes.int64).reshape(1, columns)
    return (column_index - row_index == k).cast(dtype)


@operator("DepthToSpace", attributes=["blocksize", "mode"], check=one_of("mode", ["DCR", "CRD"], "DCR"))
def _depth_to_space(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    block = call.attributes.int("blocksize", 1)
    batch, channels, height, width = x.shape
    if call.attributes.string("mode", "DCR") == "DCR":
        split = x.reshape(batch, block, block, channels // block**2, height, width).permute(0, 3, 4, 1, 5, 2)
    else:
        split = x.reshape(batch, channels // block**2, block, block, height, width).permute(0, 1, 4, 2, 5, 3)
    return split.reshape(batch, channels // block**2, height * block, width * block)


@operator("SpaceToDepth", attributes=["blocksize", "mode"], check=one_of("mode", ["DCR", "CRD"], "DCR"))
def _space_to_depth(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    block = call.attributes.int("blocksize", 1)
    batch, channels, height, width = x.shape
    split = x.reshape(batch, channels, height // block, block, width // block, block)
    if call.attributes.string("mode", "DCR") == "DCR":
        split = split.permute(0, 3, 5, 1, 2, 4)
    else:
        split = split.permute(0, 1, 3, 5, 2, 4)
    return split.reshape(batch, channels * block**2, height // block, width // block)


@operator("NonZero")
def _nonzero(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    if x.ndim == 0:
        x = x.reshape(1)
    # kiln gives one row per nonzero element; ONNX one row per dim
    positions: Tensor = x.nonzero()
    return positions.cast(dtypes.int64).transpose(0, 1)


@operator("Compress", attributes=["axis"])
def _compress(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    condition = np.asarray(call.host(1)).astype(bool).reshape(-1)
    axis_value = call.attributes.values.get("axis")
    if axis_value is None:
        x, axis = x.reshape(-1), 0
    else:
        axis = int(axis_value) % x.ndim
    kept = np.nonzero(condition[: x.shape[axis]])[0].astype(np.int64)
    return x.index_select(axis, Tensor(kept))


@operator("BitCast", attributes=["to"], since=26)
def _bitcast(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    dtype = dtype_of_element_type(call.attributes.int("to", 0), f"node {call.name}")
    if dtype.itemsize != x.dtype.itemsize:
        raise ValueError(f"BitCast from {x.dtype} to {dtype}: the bit widths differ")
    return x.bitcast(dtype)


@operator("CenterCropPad", attributes=["axes"], since=18)
def _center_crop_pad(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    target = call.ints(1)
    axes = [axis % x.ndim for axis in (call.attributes.ints("axes") or range(x.ndim))]
    padding: list[tuple[int, int]] = [(0, 0)] * x.ndim
    for axis, size in zip(axes, target):
        difference = x.shape[axis] - size
        if difference >= 0:
            # negative padding crops; an odd excess leaves the extra element on the right of the window
            padding[axis] = (-(difference // 2), -(difference - difference // 2))
        else:
            padding[axis] = (-difference // 2, -difference - (-difference // 2))
    return x.pad(padding)


@operator("ReverseSequence", attributes=["batch_axis", "time_axis"])
def _reverse_sequence(call: NodeCall) -> Tensor:
    x, lengths = call.tensor(0), call.tensor(1).cast(dtypes.int64)
    batch_axis, time_axis = call.attributes.int("batch_axis", 1), call.attributes.int("time_axis", 0)
    steps = x.shape[time_axis]
    shape = [1] * x.ndim
    shape[time_axis] = steps
    time = Tensor.arange(steps, dtype=dtypes.int64).reshape(shape)
    length_shape = [1] * x.ndim
    length_shape[batch_axis] = x.shape[batch_axis]
    length = lengths.reshape(length_shape)
    source = (time < length).where(length - 1 - time, time)
    return x.gather(time_axis, source.expand(x.shape))


@operator(
    "TensorScatter", attributes=["axis", "mode"], since=24, check=one_of("mode", ["linear", "circular"], "linear")
)
def _tensor_scatter(call: NodeCall) -> Tensor:
    cache, update = call.tensor(0), call.tensor(1)
    axis = call.attributes.int("axis", -2) % cache.ndim
    written = call.optional(2)
    batch = cache.shape[0]
    starts = (written.cast(dtypes.int64) if written is not None else Tensor.zeros(batch, dtype=dtypes.int64)).reshape(
        batch, *[1] * (cache.ndim - 1)
    )
    shape = [1] * cache.ndim
    shape[axis] = update.shape[axis]
    positions = starts + Tensor.arange(update.shape[axis], dtype=dtypes.int64).reshape(shape)
    if call.attributes.string("mode", "linear") == "circular":
        positions = positions.remainder(cache.shape[axis])
    return cache.scatter(axis, positions.expand(update.shape), update)


def _check_unique(attributes: Attributes, opset: int) -> str | None:
    return "attribute axis (kiln's Tensor.unique works on the flattened tensor)" if "axis" in attributes else None


@operator("Unique", attributes=["axis", "sorted"], check=_check_unique)
def _unique(call: NodeCall) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    x = call.tensor(0)
    values, inverse, counts = x.unique(sorted=True, return_inverse=True, return_counts=True)
    inverse = inverse.cast(dtypes.int64).reshape(-1)
    distinct, length = counts.shape[0], inverse.shape[0]
    # the first position of each distinct value (or slice): the smallest position mapped to it
    matches = inverse.reshape(1, length) == Tensor.arange(distinct, dtype=dtypes.int64).reshape(distinct, 1)
    first = matches.where(Tensor.arange(length, dtype=dtypes.int64).reshape(1, length), length).amin(1)
    counts = counts.cast(dtypes.int64)
    if call.attributes.int("sorted", 1):
        return values, first, inverse, counts
    # unsorted: distinct values in order of first appearance
    order = first.argsort()
    rank = order.argsort().cast(dtypes.int64)
    picked = values.index_select(0, order)
    return picked, first.index_select(0, order), rank.index_select(0, inverse), counts.index_select(0, order)
