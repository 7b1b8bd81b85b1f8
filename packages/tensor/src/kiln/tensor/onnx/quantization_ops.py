"""The quantization family: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger,
QLinearMatMul, QLinearConv. Integer products are accumulated in float64, exact for the sums int8 models make."""

from __future__ import annotations

from kiln.tensor import dtypes
from kiln.tensor.onnx.neural_ops import convolution, spatial_pads
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import operator
from kiln.tensor.onnx.types import dtype_of_element_type
from kiln.tensor.tensor import Tensor
from kiln.uops.dtype import DType

__all__: list[str] = []

_QUANTIZED = (dtypes.uint8, dtypes.int8, dtypes.uint16, dtypes.int16, dtypes.int32)


def _broadcast_parameter(parameter: Tensor, x: Tensor, axis: int, block_size: int) -> Tensor:
    """A scale or zero point (scalar, one per slice of `axis`, or blocked) shaped to broadcast against `x`."""
    if parameter.ndim == 0 or (parameter.numel() == 1 and parameter.ndim <= 1):
        return parameter.reshape(())
    axis %= x.ndim
    if block_size > 0:
        return parameter.repeat_interleave(block_size, axis).shrink(
            [None if dim != axis else (0, x.shape[axis]) for dim in range(x.ndim)]
        )
    return parameter.reshape([-1 if dim == axis else 1 for dim in range(x.ndim)])


def _saturate(values: Tensor, dtype: DType) -> Tensor:
    return values.clip(dtypes.min(dtype), dtypes.max(dtype)).cast(dtype)


@operator("QuantizeLinear", attributes=["axis", "block_size", "saturate", "output_dtype", "precision"])
def _quantize_linear(call: NodeCall) -> Tensor:
    x, scale, zero_point = call.tensor(0), call.tensor(1), call.optional(2)
    axis, block_size = call.attributes.int("axis", 1), call.attributes.int("block_size", 0)
    output_type = call.attributes.int("output_dtype", 0)
    if zero_point is not None:
        dtype = zero_point.dtype
    elif output_type:
        dtype = dtype_of_element_type(output_type, f"node {call.name}: output_dtype")
    else:
        dtype = dtypes.uint8
    if dtype not in _QUANTIZED:
        raise NotImplementedError(f"QuantizeLinear to {dtype} (kiln quantizes to 8, 16 and 32-bit integers)")
    scaled = (x.cast(dtypes.float32) / _broadcast_parameter(scale, x, axis, block_size).cast(dtypes.float32)).round()
    if zero_point is not None:
        scaled = scaled + _broadcast_parameter(zero_point, x, axis, block_size).cast(dtypes.float32)
    return _saturate(scaled, dtype)


@operator("DequantizeLinear", attributes=["axis", "block_size", "output_dtype"])
def _dequantize_linear(call: NodeCall) -> Tensor:
    x, scale, zero_point = call.tensor(0), call.tensor(1), call.optional(2)
    axis, block_size = call.attributes.int("axis", 1), call.attributes.int("block_size", 0)
    values = x.cast(dtypes.float32)
    if zero_point is not None:
        values = values - _broadcast_parameter(zero_point, x, axis, block_size).cast(dtypes.float32)
    output_type = call.attributes.int("output_dtype", 0)
    dtype = dtype_of_element_type(output_type, f"node {call.name}") if output_type else scale.dtype
    return (values * _broadcast_parameter(scale, x, axis, block_size).cast(dtypes.float32)).cast(dtype)


@operator("DynamicQuantizeLinear")
def _dynamic_quantize_linear(call: NodeCall) -> tuple[Tensor, Tensor, Tensor]:
    x = call.tensor(0).cast(dtypes.float32)
    low, high = x.min().minimum(0.0), x.max().maximum(0.0)
    scale = (high - low) / 255.0
    zero_point = _saturate((-low / scale).round(), dtypes.uint8)
    quantized = _saturate((x / scale).round() + zero_point.cast(dtypes.float32), dtypes.uint8)
    return quantized, scale, zero_point


def _centered(x: Tensor, zero_point: Tensor | None, axis_for_vector: int) -> Tensor:
    """x - zero_point in float64; a 1-D zero point runs along `axis_for_vector` (rows of A, columns of B)."""
    values = x.cast(dtypes.float64)
    if zero_point is None:
        return values
    point = zero_point.cast(dtypes.float64)
    if point.ndim == 1 and point.numel() > 1:
        point = point.reshape([-1 if dim == axis_for_vector % x.ndim else 1 for dim in range(x.ndim)])
    return values - point


@operator("MatMulInteger")
def _matmul_integer(call: NodeCall) -> Tensor:
    a = _centered(call.tensor(0), call.optional(2), -2)
    b = _centered(call.tensor(1), call.optional(3), -1)
    return a.matmul(b).cast(dtypes.int32)


_CONV_ATTRIBUTES = ["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"]


def _integer_convolution(call: NodeCall, x: Tensor, weight: Tensor) -> Tensor:
    kernel = weight.shape[2:]
    strides = call.attributes.ints("strides") or [1] * len(kernel)
    dilations = call.attributes.ints("dilations") or [1] * len(kernel)
    pads = spatial_pads(call.attributes, x.shape[2:], kernel, strides, dilations)
    # pads hold the zero point: x is already centred, so padding with 0 is padding with the zero point
    padded = x.pad([(0, 0), (0, 0), *pads]) if any(a or b for a, b in pads) else x
    return convolution(padded, weight, None, strides, dilations, call.attributes.int("group", 1))


@operator("ConvInteger", attributes=_CONV_ATTRIBUTES)
def _conv_integer(call: NodeCall) -> Tensor:
    x = _centered(call.tensor(0), call.optional(2), 1)
    weight = _centered(call.tensor(1), call.optional(3), 0)
    return _integer_convolution(call, x, weight).cast(dtypes.int32)


def _requantize(accumulated: Tensor, scale: Tensor, y_scale: Tensor, y_zero_point: Tensor, axis: int) -> Tensor:
    factor = scale.cast(dtypes.float64)
    if factor.ndim == 1 and factor.numel() > 1:
        factor = factor.reshape([-1 if dim == axis % accumulated.ndim else 1 for dim in range(accumulated.ndim)])
    result = (accumulated * factor / y_scale.cast(dtypes.float64)).round() + y_zero_point.cast(dtypes.float64)
    return _saturate(result, y_zero_point.dtype)


@operator("QLinearMatMul")
def _qlinear_matmul(call: NodeCall) -> Tensor:
    a = _centered(call.tensor(0), call.tensor(2), -2)
    b = _centered(call.tensor(3), call.tensor(5), -1)
    a_scale, b_scale = call.tensor(1).cast(dtypes.float64), call.tensor(4).cast(dtypes.float64)
    accumulated = a.matmul(b)
    if a_scale.numel() > 1:
        accumulated = accumulated * a_scale.reshape(-1, 1)
        a_scale = a_scale.const_like(1.0).reshape(())
    return _requantize(accumulated, a_scale.reshape(()) * b_scale, call.tensor(6), call.tensor(7), -1)


@operator("QLinearConv", attributes=_CONV_ATTRIBUTES)
def _qlinear_conv(call: NodeCall) -> Tensor:
    x = _centered(call.tensor(0), call.tensor(2), 1)
    weight = _centered(call.tensor(3), call.tensor(5), 0)
    accumulated = _integer_convolution(call, x, weight)
    bias = call.optional(8)
    if bias is not None:
        accumulated = accumulated + bias.cast(dtypes.float64).reshape(1, -1, *[1] * (accumulated.ndim - 2))
    scale = call.tensor(1).cast(dtypes.float64).reshape(()) * call.tensor(4).cast(dtypes.float64)
    return _requantize(accumulated, scale, call.tensor(6), call.tensor(7), 1)
