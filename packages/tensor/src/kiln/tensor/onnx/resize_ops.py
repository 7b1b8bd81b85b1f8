"""Resize (nearest / linear / cubic, every coordinate transformation mode, roi, axes, aspect-ratio policies) and
Upsample. Resizing is separable: each resized axis is one weighted sum of gathers along it, the taps and weights
computed on the host from the (static) sizes, as ONNX's reference defines them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln.tensor import dtypes
from kiln.tensor.onnx.attributes import Attributes
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import all_checks, one_of, operator
from kiln.tensor.tensor import Tensor

__all__: list[str] = []

_COORDINATE_MODES = [
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
]


def _source_coordinate(
    x: np.ndarray[Any, Any], mode: str, scale: float, size_in: int, size_out: int, roi: tuple[float, float]
) -> np.ndarray[Any, Any]:
    """Output positions `x` mapped to (fractional) input positions."""
    width = scale * size_in  # the real-valued output length the transformations use
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = size_in / 2 * (1 - size_out / width)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if width != 1 else np.full_like(x, -0.5)
    if mode == "align_corners":
        return x * (size_in - 1) / (width - 1) if width != 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    start, end = roi
    if width == 1:
        return np.full_like(x, (end - start) * (size_in - 1) / 2 + start * (size_in - 1))
    return x * (end - start) * (size_in - 1) / (width - 1) + start * (size_in - 1)


def _cubic_coefficients(ratio: np.ndarray[Any, Any], a: float) -> np.ndarray[Any, Any]:
    r = ratio
    return np.stack(
        [
            ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
            ((a * ((1 - r) + 1) - 5 * a) * ((1 - r) + 1) + 8 * a) * ((1 - r) + 1) - 4 * a,
        ],
        axis=-1,
    )


def _cubic_kernel(distance: np.ndarray[Any, Any], a: float) -> np.ndarray[Any, Any]:
    """Keys' cubic convolution kernel at |distance|."""
    d = distance
    near = (a + 2) * d**3 - (a + 3) * d**2 + 1
    far = a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _taps(
    attributes: Attributes, mode: str, scale: float, size_in: int, size_out: int, roi: tuple[float, float]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any] | None]:
    """(indices, weights) of shape (size_out, taps) along one axis, and a mask of outputs outside the roi."""
    coordinate_mode = attributes.string("coordinate_transformation_mode", "half_pixel")
    source = _source_coordinate(np.arange(size_out, dtype=np.float64), coordinate_mode, scale, size_in, size_out, roi)
    outside = None
    if coordinate_mode == "tf_crop_and_resize":
        outside = (source < 0) | (source > size_in - 1)
    integer = source == np.floor(source)
    # the left neighbour is preferred: an integral position is the right end of [x - 1, x] with ratio 1
    base = np.where(integer, source - 1, np.floor(source)).astype(np.int64)
    ratio = source - base
    if mode == "nearest":
        nearest_mode = attributes.string("nearest_mode", "round_prefer_floor")
        right = {
            "round_prefer_floor": ratio > 0.5,
            "round_prefer_ceil": ratio >= 0.5,
            "floor": np.zeros_like(ratio, dtype=bool),
            "ceil": np.ones_like(ratio, dtype=bool),
        }[nearest_mode] | integer
        indices = (base + right.astype(np.int64))[:, None]
        weights = np.ones_like(indices, dtype=np.float64)
    elif attributes.int("antialias", 0):
        # downsampling widens the kernel by 1 / scale so every input cell contributes
        stretch = min(scale, 1.0)
        reach = 1 if mode == "linear" else 2
        first = math.floor(-reach / stretch) + 1
        offsets = np.arange(first, 2 - first)
        indices = base[:, None] + offsets[None, :]
        distance = np.abs((offsets[None, :] - ratio[:, None]) * stretch)
        if mode == "linear":
            weights = np.clip(1 - distance, 0, 1)
        else:
            weights = _cubic_kernel(distance, attributes.float("cubic_coeff_a", -0.75))
        weights = weights / weights.sum(-1, keepdims=True)
    elif mode == "linear":
        indices = np.stack([base, base + 1], axis=-1)
        weights = np.stack([1 - ratio, ratio], axis=-1)
    else:
        indices = np.stack([base - 1, base, base + 1, base + 2], axis=-1)
        weights = _cubic_coefficients(ratio, attributes.float("cubic_coeff_a", -0.75))
    if attributes.int("exclude_outside", 0) and mode != "nearest":
        weights = np.where((indices < 0) | (indices >= size_in), 0.0, weights)
        weights = weights / weights.sum(-1, keepdims=True)
    return np.clip(indices, 0, size_in - 1), weights, outside


def _resize_axis(
    x: Tensor,
    axis: int,
    indices: np.ndarray[Any, Any],
    weights: np.ndarray[Any, Any],
    outside: np.ndarray[Any, Any] | None,
    extrapolation: float,
) -> Tensor:
    shape = [1] * x.ndim
    shape[axis] = indices.shape[0]
    result: Tensor | None = None
    for tap in range(indices.shape[1]):
        picked = x.index_select(axis, Tensor(np.ascontiguousarray(indices[:, tap])))
        if indices.shape[1] > 1 or not np.all(weights[:, tap] == 1.0):
            picked = picked * Tensor(weights[:, tap].astype(np.float32).reshape(shape))
        result = picked if result is None else result + picked
    assert result is not None
    if outside is not None and outside.any():
        result = Tensor(outside.reshape(shape)).where(extrapolation, result)
    return result


@operator(
    "Resize",
    attributes=[
        "antialias",
        "axes",
        "coordinate_transformation_mode",
        "cubic_coeff_a",
        "exclude_outside",
        "extrapolation_value",
        "keep_aspect_ratio_policy",
        "mode",
        "nearest_mode",
    ],
    check=all_checks(
        one_of("mode", ["nearest", "linear", "cubic"], "nearest"),
        one_of("coordinate_transformation_mode", _COORDINATE_MODES, "half_pixel"),
        one_of("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"], "round_prefer_floor"),
        one_of("keep_aspect_ratio_policy", ["stretch", "not_larger", "not_smaller"], "stretch"),
    ),
)
def _resize(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    rank = x.ndim
    if call.opset < 11:
        scales_given: list[float] | None = [float(value) for value in call.host(1).reshape(-1)]
        sizes_given, roi_given = None, None
    else:
        roi_given = [float(v) for v in call.host(1).reshape(-1)] if call.has(1) and call.tensor(1).numel() else None
        scales_given = [float(v) for v in call.host(2).reshape(-1)] if call.has(2) and call.tensor(2).numel() else None
        sizes_given = call.ints(3) if call.has(3) and call.tensor(3).numel() else None
    axes = [axis % rank for axis in (call.attributes.ints("axes") or range(rank))]
    scales = [1.0] * rank
    sizes = list(x.shape)
    roi = [(0.0, 1.0)] * rank
    if roi_given is not None:
        for position, axis in enumerate(axes):
            roi[axis] = (roi_given[position], roi_given[position + len(axes)])
    if sizes_given is not None:
        for position, axis in enumerate(axes):
            sizes[axis] = sizes_given[position]
            scales[axis] = sizes[axis] / x.shape[axis]
        policy = call.attributes.string("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            chosen = [scales[axis] for axis in axes]
            scale = min(chosen) if policy == "not_larger" else max(chosen)
            for axis in axes:
                scales[axis] = scale
                sizes[axis] = int(scale * x.shape[axis] + 0.5)
    elif scales_given is not None:
        for position, axis in enumerate(axes):
            scales[axis] = scales_given[position]
            sizes[axis] = int(scales[axis] * x.shape[axis])
    else:
        raise ValueError("Resize needs scales or sizes")
    mode = call.attributes.string("mode", "nearest")
    compute = (
        x if dtypes.is_float(x.dtype) and x.dtype not in (dtypes.float16, dtypes.bfloat16) else x.cast(dtypes.float32)
    )
    extrapolation = call.attributes.float("extrapolation_value", 0.0)
    for axis in range(rank):
        coordinate_mode = call.attributes.string("coordinate_transformation_mode", "half_pixel")
        if sizes[axis] == x.shape[axis] and scales[axis] == 1.0 and coordinate_mode != "tf_crop_and_resize":
            continue
        indices, weights, outside = _taps(call.attributes, mode, scales[axis], x.shape[axis], sizes[axis], roi[axis])
        compute = _resize_axis(compute, axis, indices, weights, outside, extrapolation)
    if compute.dtype == x.dtype:
        return compute
    if dtypes.is_float(x.dtype):
        return compute.cast(x.dtype)
    return compute.round().clip(dtypes.min(x.dtype), dtypes.max(x.dtype)).cast(x.dtype)


@operator("Upsample", attributes=["mode", "scales"], check=one_of("mode", ["nearest", "linear"], "nearest"))
def _upsample(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    scales = call.attributes.floats("scales") or [float(value) for value in call.host(1).reshape(-1)]
    mode = call.attributes.string("mode", "nearest")
    attributes = Attributes({"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"})
    result = x if dtypes.is_float(x.dtype) else x.cast(dtypes.float32)
    for axis, scale in enumerate(scales):
        if scale == 1.0:
            continue
        size_out = math.floor(x.shape[axis] * scale)
        indices, weights, _ = _taps(attributes, mode, scale, x.shape[axis], size_out, (0.0, 1.0))
        result = _resize_axis(result, axis, indices, weights, None, 0.0)
    return result.cast(x.dtype)
