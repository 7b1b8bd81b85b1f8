"""Neural-network operators: MatMul, Gemm, Conv / ConvTranspose, pools, normalizations, Einsum, LRN."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from kiln.tensor import dtypes
from kiln.tensor.nn.functional import fold
from kiln.tensor.onnx.attributes import Attributes
from kiln.tensor.onnx.materialize import materialized_if_computed, materialized_if_costly
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import one_of, operator
from kiln.tensor.onnx.strided_conv import space_to_depth_convolution
from kiln.tensor.tensor import Tensor

__all__ = ["convolution", "spatial_pads"]

_AUTO_PAD = ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]


def _product(a: Tensor, b: Tensor) -> Tensor:
    """a @ b, each operand computed into memory first when it holds a transcendental the product would recompute
    at every read (each of a's elements is read once per column of b, each of b's once per row of a)."""
    rows = a.shape[-2] if a.ndim >= 2 else 1
    columns = b.shape[-1] if b.ndim >= 2 else 1
    return materialized_if_costly(a, columns).matmul(materialized_if_costly(b, rows))


@operator("MatMul")
def _matmul(call: NodeCall) -> Tensor:
    return _product(call.tensor(0), call.tensor(1))


@operator("Gemm", attributes=["alpha", "beta", "transA", "transB", "broadcast"])
def _gemm(call: NodeCall) -> Tensor:
    a, b, c = call.tensor(0), call.tensor(1), call.optional(2)
    if call.attributes.int("transA", 0):
        a = a.T
    if call.attributes.int("transB", 0):
        b = b.T
    alpha, beta = call.attributes.float("alpha", 1.0), call.attributes.float("beta", 1.0)
    result = _product(a, b)
    if alpha != 1.0:
        result = result * alpha
    if c is not None:
        result = result + (c * beta if beta != 1.0 else c)
    return result


def spatial_pads(
    attributes: Attributes,
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> list[tuple[int, int]]:
    """(before, after) padding per spatial dim from `pads` or `auto_pad`."""
    auto_pad = attributes.string("auto_pad", "NOTSET")
    count = len(spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, k, stride, dilation in zip(spatial, kernel, strides, dilations):
            output = -(-size // stride)
            total = max(0, (output - 1) * stride + (k - 1) * dilation + 1 - size)
            small, large = total // 2, total - total // 2
            pads.append((small, large) if auto_pad == "SAME_UPPER" else (large, small))
        return pads
    if auto_pad == "VALID":
        return [(0, 0)] * count
    flat = attributes.ints("pads") or [0] * (2 * count)
    return [(flat[index], flat[index + count]) for index in range(count)]


def _kernel_geometry(call: NodeCall, kernel: Sequence[int]) -> tuple[list[int], list[int]]:
    count = len(kernel)
    strides = call.attributes.ints("strides") or [1] * count
    dilations = call.attributes.ints("dilations") or [1] * count
    return strides, dilations


def _pad_spatial(x: Tensor, pads: Sequence[tuple[int, int]], value: float = 0.0) -> Tensor:
    if not any(before or after for before, after in pads):
        return x
    return x.pad([(0, 0), (0, 0), *pads], value=value)


def convolution(
    x: Tensor, weight: Tensor, bias: Tensor | None, strides: Sequence[int], dilations: Sequence[int], groups: int
) -> Tensor:
    """An N-d convolution (1 to 3 spatial dims) of an already padded input."""
    functions: dict[int, Callable[..., Tensor]] = {1: Tensor.conv1d, 2: Tensor.conv2d, 3: Tensor.conv3d}
    function = functions.get(x.ndim - 2)
    if function is None:
        raise NotImplementedError(f"convolution over {x.ndim - 2} spatial dims (kiln has 1 to 3)")
    return function(x, weight, bias, stride=tuple(strides), padding=0, dilation=tuple(dilations), groups=groups)


_CONV_ATTRIBUTES = ["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"]


@operator("Conv", attributes=_CONV_ATTRIBUTES, check=one_of("auto_pad", _AUTO_PAD, "NOTSET"))
def _conv(call: NodeCall) -> Tensor:
    x, weight, bias = call.tensor(0), call.tensor(1), call.optional(2)
    kernel = weight.shape[2:]
    strides, dilations = _kernel_geometry(call, kernel)
    pads = spatial_pads(call.attributes, x.shape[2:], kernel, strides, dilations)
    groups = call.attributes.int("group", 1)
    if math.prod(kernel) > 1 or groups > 1:
        # each input element is read once per tap (and per output channel): an input the scheduler would fuse (the
        # previous layer's bias, activation, residual add) is computed once into memory, not again at every read
        # (resnet18.onnx at batch 16: the kernels' CPU time 8.7 -> 4.5 ms; mobilenet.onnx 8.5 -> 6.7 ms)
        x = x.contiguous()
    padded = _pad_spatial(x, pads)
    weight_host = call.host_values[1] if len(call.host_values) > 1 else None
    regrouped = space_to_depth_convolution(padded, weight, weight_host, bias, strides, dilations, groups)
    if regrouped is not None:
        return regrouped
    return convolution(padded, weight, bias, strides, dilations, groups)


@operator(
    "ConvTranspose",
    attributes=[*_CONV_ATTRIBUTES, "output_padding", "output_shape"],
    check=one_of("auto_pad", _AUTO_PAD, "NOTSET"),
)
def _conv_transpose(call: NodeCall) -> Tensor:
    x, weight, bias = call.tensor(0), call.tensor(1), call.optional(2)
    kernel = weight.shape[2:]
    count = len(kernel)
    strides, dilations = _kernel_geometry(call, kernel)
    groups = call.attributes.int("group", 1)
    output_padding = call.attributes.ints("output_padding") or [0] * count
    output_shape = call.attributes.ints("output_shape")
    spatial = x.shape[2:]
    full = [
        (size - 1) * stride + (k - 1) * dilation + 1
        for size, stride, k, dilation in zip(spatial, strides, kernel, dilations)
    ]
    auto_pad = call.attributes.string("auto_pad", "NOTSET")
    if output_shape is not None:
        output_shape = output_shape[-count:]
        totals = [f + extra - out for f, extra, out in zip(full, output_padding, output_shape)]
        pads = [
            (total // 2, total - total // 2) if auto_pad == "SAME_UPPER" else (total - total // 2, total // 2)
            for total in totals
        ]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        totals = [f + extra - size * stride for f, extra, size, stride in zip(full, output_padding, spatial, strides)]
        pads = [
            (total - total // 2, total // 2) if auto_pad == "SAME_LOWER" else (total // 2, total - total // 2)
            for total in totals
        ]
    else:
        flat = call.attributes.ints("pads") or [0] * (2 * count)
        pads = [(flat[index], flat[index + count]) for index in range(count)]
    transposed: dict[int, Callable[..., Tensor]] = {
        1: Tensor.conv_transpose1d,
        2: Tensor.conv_transpose2d,
        3: Tensor.conv_transpose3d,
    }
    function = transposed.get(count)
    if function is None:
        raise NotImplementedError(f"ConvTranspose over {count} spatial dims (kiln has 1 to 3)")
    result = function(x, weight, None, stride=tuple(strides), padding=0, groups=groups, dilation=tuple(dilations))
    # crop the pads (and grow by output_padding) at the ends of each spatial dim, then add the bias everywhere
    result = result.pad(
        [(0, 0), (0, 0), *[(-before, extra - after) for (before, after), extra in zip(pads, output_padding)]]
    )
    if bias is not None:
        result = result + bias.reshape(1, -1, *[1] * count)
    return result


_POOL_ATTRIBUTES = ["auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides", "storage_order"]


def _pool_setup(call: NodeCall) -> tuple[list[int], list[int], list[int], list[tuple[int, int]], bool]:
    x = call.tensor(0)
    kernel = call.attributes.ints("kernel_shape") or []
    strides, dilations = _kernel_geometry(call, kernel)
    pads = spatial_pads(call.attributes, x.shape[2:], kernel, strides, dilations)
    return kernel, strides, dilations, pads, bool(call.attributes.int("ceil_mode", 0))


def _onnx_pool_crop(
    result: Tensor,
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[tuple[int, int]],
    ceil_mode: bool,
) -> Tensor:
    """`result` cut to ONNX's output size: with ceil_mode, a last window that starts in the end padding is dropped
    (the pool ran on the explicitly padded input, where that padding counts as input)."""
    sizes = []
    for size, k, stride, dilation, (before, after) in zip(spatial, kernel, strides, dilations, pads):
        span = size + before + after - ((k - 1) * dilation + 1)
        count = (-(-span // stride) if ceil_mode else span // stride) + 1
        if ceil_mode and (count - 1) * stride >= size + before:
            count -= 1
        sizes.append(count)
    if list(result.shape[2:]) == sizes:
        return result
    return result.shrink([None, None, *[(0, count) for count in sizes]])


def _pool_function(name: str, count: int) -> object:
    if count not in (1, 2, 3):
        raise NotImplementedError(f"{name} over {count} spatial dims (kiln has 1 to 3)")
    return getattr(Tensor, f"{name}{count}d")


@operator("MaxPool", attributes=_POOL_ATTRIBUTES, check=one_of("auto_pad", _AUTO_PAD, "NOTSET"))
def _max_pool(call: NodeCall) -> Tensor | tuple[Tensor, Tensor]:
    x = call.tensor(0)
    kernel, strides, dilations, pads, ceil_mode = _pool_setup(call)
    lowest = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
    padded = _pad_spatial(x, pads, lowest)
    function = _pool_function("max_pool", len(kernel))
    options = {"stride": tuple(strides), "dilation": tuple(dilations), "ceil_mode": ceil_mode}
    if call.num_outputs < 2:
        result: Tensor = function(padded, tuple(kernel), **options)  # type: ignore[operator]
        return _onnx_pool_crop(result, x.shape[2:], kernel, strides, dilations, pads, ceil_mode)
    values, positions = function(padded, tuple(kernel), return_indices=True, **options)  # type: ignore[operator]
    # kiln's positions are flat over the padded spatial dims; ONNX's are flat over the whole unpadded input
    spatial = x.shape[2:]
    padded_spatial = padded.shape[2:]
    remaining = positions.cast(dtypes.int64)
    flat = remaining.zeros_like()
    if call.attributes.int("storage_order", 0) == 1:
        steps = [math.prod(spatial[:axis]) for axis in range(len(spatial))]
    else:
        steps = [math.prod(spatial[axis + 1 :]) for axis in range(len(spatial))]
    for axis in reversed(range(len(spatial))):
        coordinate = remaining.remainder(padded_spatial[axis]) - pads[axis][0]
        remaining = remaining.div(padded_spatial[axis], rounding_mode="floor")
        flat = flat + coordinate * steps[axis]
    batch, channels = x.shape[0], x.shape[1]
    offsets = Tensor.arange(batch * channels, dtype=dtypes.int64).reshape(batch, channels, *[1] * len(spatial))
    return values, flat + offsets * math.prod(spatial)


@operator(
    "AveragePool",
    attributes=[*_POOL_ATTRIBUTES, "count_include_pad"],
    check=one_of("auto_pad", _AUTO_PAD, "NOTSET"),
)
def _average_pool(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    kernel, strides, dilations, pads, ceil_mode = _pool_setup(call)
    function = _pool_function("avg_pool", len(kernel))
    # the average of the padded input divided by the average of a mask of the cells that count: whatever divisor
    # the pool uses for a partial (ceil_mode) window cancels
    include_pad = bool(call.attributes.int("count_include_pad", 0))
    ones = Tensor.ones((1, 1, *x.shape[2:]), dtype=x.dtype)
    mask = ones.pad([(0, 0), (0, 0), *pads], value=1.0 if include_pad else 0.0)
    options = {
        "stride": tuple(strides),
        "ceil_mode": ceil_mode,
        "dilation": tuple(dilations),
        "count_include_pad": True,
    }
    total: Tensor = function(_pad_spatial(x, pads), tuple(kernel), **options)  # type: ignore[operator]
    counted: Tensor = function(mask, tuple(kernel), **options)  # type: ignore[operator]
    return _onnx_pool_crop(total / counted, x.shape[2:], kernel, strides, dilations, pads, ceil_mode)


@operator("LpPool", attributes=[*_POOL_ATTRIBUTES, "p"], check=one_of("auto_pad", _AUTO_PAD, "NOTSET"))
def _lp_pool(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    kernel, strides, dilations, pads, ceil_mode = _pool_setup(call)
    p = call.attributes.int("p", 2)
    function = _pool_function("avg_pool", len(kernel))
    options = {
        "stride": tuple(strides),
        "ceil_mode": ceil_mode,
        "dilation": tuple(dilations),
        "count_include_pad": True,
    }
    mean: Tensor = function(_pad_spatial(x.abs().pow(p), pads), tuple(kernel), **options)  # type: ignore[operator]
    result = (mean * math.prod(kernel)).pow(1.0 / p)
    return _onnx_pool_crop(result, x.shape[2:], kernel, strides, dilations, pads, ceil_mode)


@operator("GlobalAveragePool")
def _global_average_pool(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    return x.mean(tuple(range(2, x.ndim)), keepdim=True)


@operator("GlobalMaxPool")
def _global_max_pool(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    return x.amax(tuple(range(2, x.ndim)), keepdim=True)


@operator("GlobalLpPool", attributes=["p"])
def _global_lp_pool(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    p = call.attributes.int("p", 2)
    return x.abs().pow(p).sum(tuple(range(2, x.ndim)), keepdim=True).pow(1.0 / p)


def _channel_shape(x: Tensor) -> tuple[int, ...]:
    return (1, -1, *[1] * (x.ndim - 2))


@operator(
    "BatchNormalization",
    attributes=["epsilon", "momentum", "spatial", "training_mode", "is_test", "consumed_inputs"],
)
def _batch_normalization(call: NodeCall) -> Tensor | tuple[Tensor, Tensor, Tensor]:
    x, scale, bias, mean, variance = (call.tensor(index) for index in range(5))
    epsilon = call.attributes.float("epsilon", 1e-5)
    shape = _channel_shape(x)
    training = bool(call.attributes.int("training_mode", 0)) and call.opset >= 14
    if call.num_outputs > 1 and not training:
        raise NotImplementedError("BatchNormalization's statistics outputs outside training mode (opset < 14)")
    if not training:
        inverse = (variance.reshape(shape) + epsilon).rsqrt()
        return (x - mean.reshape(shape)) * inverse * scale.reshape(shape) + bias.reshape(shape)
    # batch statistics (population variance) normalize; the running ones move toward them by 1 - momentum
    axes = (0, *range(2, x.ndim))
    batch_mean = x.mean(axes)
    batch_centered = x - batch_mean.reshape(shape)
    batch_variance = (batch_centered * batch_centered).mean(axes)
    momentum = call.attributes.float("momentum", 0.9)
    running_mean = mean * momentum + batch_mean * (1 - momentum)
    running_variance = variance * momentum + batch_variance * (1 - momentum)
    inverse = (batch_variance.reshape(shape) + epsilon).rsqrt()
    result = batch_centered * inverse * scale.reshape(shape) + bias.reshape(shape)
    return result, running_mean, running_variance


@operator("InstanceNormalization", attributes=["epsilon"])
def _instance_normalization(call: NodeCall) -> Tensor:
    x, scale, bias = call.tensor(0), call.tensor(1), call.tensor(2)
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    variance = (centered * centered).mean(axes, keepdim=True)
    normalized = centered * (variance + call.attributes.float("epsilon", 1e-5)).rsqrt()
    shape = _channel_shape(x)
    return normalized * scale.reshape(shape) + bias.reshape(shape)


@operator("LayerNormalization", attributes=["axis", "epsilon", "stash_type"])
def _layer_normalization(call: NodeCall) -> tuple[Tensor, Tensor, Tensor]:
    # read three times (mean, variance, result): an input still to compute would be computed thrice, in 3 kernels
    x, scale, bias = materialized_if_computed(call.tensor(0)), call.tensor(1), call.optional(2)
    axis = call.attributes.int("axis", -1) % x.ndim
    axes = tuple(range(axis, x.ndim))
    compute = x.cast(dtypes.float32) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x
    mean = compute.mean(axes, keepdim=True)
    # squared as a product: `** 2` would be a general power (log2 and exp2 per element)
    centered = compute - mean
    variance = (centered * centered).mean(axes, keepdim=True)
    inverse = (variance + call.attributes.float("epsilon", 1e-5)).rsqrt()
    result = (centered * inverse).cast(x.dtype) * scale
    if bias is not None:
        result = result + bias
    return result, mean, inverse


@operator("RMSNormalization", attributes=["axis", "epsilon", "stash_type"], since=23)
def _rms_normalization(call: NodeCall) -> Tensor:
    x, scale = call.tensor(0), call.tensor(1)
    axis = call.attributes.int("axis", -1) % x.ndim
    axes = tuple(range(axis, x.ndim))
    compute = x.cast(dtypes.float32) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x
    inverse = ((compute * compute).mean(axes, keepdim=True) + call.attributes.float("epsilon", 1e-5)).rsqrt()
    return (compute * inverse).cast(x.dtype) * scale


@operator("GroupNormalization", attributes=["epsilon", "num_groups", "stash_type"], since=18)
def _group_normalization(call: NodeCall) -> Tensor:
    x, scale, bias = call.tensor(0), call.tensor(1), call.tensor(2)
    groups = call.attributes.int("num_groups", 1)
    batch, channels = x.shape[0], x.shape[1]
    grouped = x.reshape(batch, groups, -1)
    mean = grouped.mean(-1, keepdim=True)
    centered = grouped - mean
    variance = (centered * centered).mean(-1, keepdim=True)
    normalized = (centered * (variance + call.attributes.float("epsilon", 1e-5)).rsqrt()).reshape(x.shape)
    if call.opset < 21:
        # opset 18's scale and bias have one value per group
        scale = scale.repeat_interleave(channels // groups)
        bias = bias.repeat_interleave(channels // groups)
    shape = _channel_shape(x)
    return normalized * scale.reshape(shape) + bias.reshape(shape)


@operator("LpNormalization", attributes=["axis", "p"])
def _lp_normalization(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    axis = call.attributes.int("axis", -1) % x.ndim
    if call.attributes.int("p", 2) == 1:
        norm = x.abs().sum(axis, keepdim=True)
    else:
        norm = (x * x).sum(axis, keepdim=True).sqrt()
    # an all-zero slice stays zero (the reference's 0 / 0 guard)
    return x / (norm == 0).where(1.0, norm).cast(x.dtype)


@operator("MeanVarianceNormalization", attributes=["axes"])
def _mean_variance_normalization(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    axes = tuple(axis % x.ndim for axis in (call.attributes.ints("axes") or [0, 2, 3]))
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    variance = (centered * centered).mean(axes, keepdim=True)
    return centered / (variance.sqrt() + 1e-9)


@operator("LRN", attributes=["alpha", "beta", "bias", "size"])
def _local_response_normalization(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    size = call.attributes.int("size", 1)
    alpha, beta, bias = (
        call.attributes.float(name, default) for name, default in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0))
    )
    squares = (x * x).pad([(0, 0), ((size - 1) // 2, size // 2), *[(0, 0)] * (x.ndim - 2)])
    channels = x.shape[1]
    window = sum(
        (squares.shrink([None, (offset, offset + channels), *[None] * (x.ndim - 2)]) for offset in range(size)),
        start=x.zeros_like(),
    )
    return x / (window * (alpha / size) + bias).pow(beta)


@operator("Einsum", attributes=["equation"])
def _einsum(call: NodeCall) -> Tensor:
    operands = [call.tensor(index) for index in range(len(call.inputs))]
    return Tensor.einsum(call.attributes.string("equation", "").replace(" ", ""), *operands)


@operator("Det")
def _det(call: NodeCall) -> Tensor:
    return call.tensor(0).det()


@operator("MaxUnpool", attributes=["kernel_shape", "pads", "strides"])
def _max_unpool(call: NodeCall) -> Tensor:
    x, indices = call.tensor(0), call.tensor(1)
    kernel = call.attributes.ints("kernel_shape") or []
    count = len(kernel)
    strides = call.attributes.ints("strides") or [1] * count
    flat = call.attributes.ints("pads") or [0] * (2 * count)
    # the indices address the default output (what the max pool read); output_shape only grows it at the ends
    spatial = [
        (size - 1) * stride - (flat[axis] + flat[axis + count]) + k
        for axis, (size, stride, k) in enumerate(zip(x.shape[2:], strides, kernel))
    ]
    requested = call.ints(2)[-count:] if call.has(2) else spatial
    # ONNX's indices run over the whole tensor; kiln's over one (batch, channel) plane
    plane = math.prod(spatial)
    function = getattr(Tensor, f"max_unpool{count}d", None)
    if function is None:
        raise NotImplementedError(f"MaxUnpool over {count} spatial dims (kiln has 1 to 3)")
    result: Tensor = function(
        x, indices.cast(dtypes.int64).remainder(plane), tuple(kernel), tuple(strides), 0, output_size=tuple(spatial)
    )
    if requested == spatial:
        return result
    return result.pad([(0, 0), (0, 0), *[(0, want - have) for want, have in zip(requested, spatial)]])


@operator("Col2Im", attributes=["dilations", "pads", "strides"], since=18)
def _col2im(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    image, block = call.ints(1), call.ints(2)
    if len(image) != 2:
        raise NotImplementedError(f"Col2Im over {len(image)} spatial dims (kiln folds 2)")
    dilations = call.attributes.ints("dilations") or [1, 1]
    strides = call.attributes.ints("strides") or [1, 1]
    pads = call.attributes.ints("pads") or [0, 0, 0, 0]
    # fold into the padded image, then cut the padding (ONNX pads may differ at the two ends)
    padded = (image[0] + pads[0] + pads[2], image[1] + pads[1] + pads[3])
    result = fold(
        x,
        padded,
        (block[0], block[1]),
        dilation=(dilations[0], dilations[1]),
        padding=0,
        stride=(strides[0], strides[1]),
    )
    return result.shrink([None, None, (pads[0], pads[0] + image[0]), (pads[1], pads[1] + image[1])])
