"""Elementwise operators: math, comparison, logic, bitwise, activations, Where / Clip / variadic Max, Min, Sum, Mean."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce

from kiln.tensor import dtypes
from kiln.tensor.onnx.attributes import Attributes
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import operator
from kiln.tensor.onnx.values import Value
from kiln.tensor.tensor import Tensor

__all__: list[str] = []

_UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "Abs": Tensor.abs,
    "Neg": Tensor.neg,
    "Exp": Tensor.exp,
    "Log": Tensor.log,
    "Sqrt": Tensor.sqrt,
    "Floor": Tensor.floor,
    "Ceil": Tensor.ceil,
    "Round": Tensor.round,
    "Sign": Tensor.sign,
    "Sin": Tensor.sin,
    "Cos": Tensor.cos,
    "Tan": Tensor.tan,
    "Asin": Tensor.asin,
    "Acos": Tensor.acos,
    "Atan": Tensor.atan,
    "Sinh": Tensor.sinh,
    "Cosh": Tensor.cosh,
    "Asinh": Tensor.asinh,
    "Acosh": Tensor.acosh,
    "Atanh": Tensor.atanh,
    "Erf": Tensor.erf,
    "Sigmoid": Tensor.sigmoid,
    "Tanh": Tensor.tanh,
    "Relu": Tensor.relu,
    "Not": Tensor.logical_not,
    "IsNaN": Tensor.isnan,
    "BitwiseNot": Tensor.bitwise_not,
    "Softsign": Tensor.softsign,
}


def _unary_handler(function: Callable[[Tensor], Tensor]) -> Callable[[NodeCall], Tensor]:
    return lambda call: function(call.tensor(0))


for _name, _function in _UNARY.items():
    operator(_name)(_unary_handler(_function))


@operator("Identity")
def _identity(call: NodeCall) -> Value:
    value = call.value(0)  # a tensor, sequence or optional passes unchanged
    if value is None:
        raise ValueError(f"node {call.name!r} (Identity): input 0 is required but missing")
    return value


@operator("Reciprocal")
def _reciprocal(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    return x.const_like(1) / x


def _divide(a: Tensor, b: Tensor) -> Tensor:
    if dtypes.is_float(a.dtype):
        return a / b
    # integer Div truncates toward zero (C semantics, as the reference's numpy-with-cast does)
    return a.div(b, rounding_mode="trunc")


_BINARY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "Add": Tensor.add,
    "Sub": Tensor.sub,
    "Mul": Tensor.mul,
    "Div": _divide,
    "Equal": Tensor.eq,
    "Less": Tensor.lt,
    "LessOrEqual": Tensor.le,
    "Greater": Tensor.gt,
    "GreaterOrEqual": Tensor.ge,
    "And": Tensor.logical_and,
    "Or": Tensor.logical_or,
    "Xor": Tensor.logical_xor,
    "BitwiseAnd": Tensor.bitwise_and,
    "BitwiseOr": Tensor.bitwise_or,
    "BitwiseXor": Tensor.bitwise_xor,
}


def _binary_handler(function: Callable[[Tensor, Tensor], Tensor]) -> Callable[[NodeCall], Tensor]:
    return lambda call: function(call.tensor(0), call.tensor(1))


for _name, _binary_function in _BINARY.items():
    operator(_name)(_binary_handler(_binary_function))


@operator("Pow")
def _pow(call: NodeCall) -> Tensor:
    base, exponent = call.tensor(0), call.tensor(1)
    if dtypes.is_float(base.dtype):
        # a known exponent of 2 or 3 (a variance, tanh-GELU's cube) is products, not a general power: log2 and exp2
        # with the C99 special cases per element
        known = call.host_values[1]
        power = float(known.reshape(-1)[0]) if known is not None and known.size == 1 else None
        if power in (2.0, 3.0) and known is not None and known.ndim <= base.ndim:  # the result has base's shape
            square = base * base
            return square if power == 2.0 else square * base
        return base.pow(exponent.cast(base.dtype))
    # an integer base keeps its type: compute in float64 and round (the reference truncates exact results)
    return base.cast(dtypes.float64).pow(exponent.cast(dtypes.float64)).round().cast(base.dtype)


@operator("Mod", attributes=["fmod"])
def _mod(call: NodeCall) -> Tensor:
    a, b = call.tensor(0), call.tensor(1)
    if call.attributes.int("fmod", 0) == 1:
        return a.fmod(b)
    return a.remainder(b)


def _check_bitshift(attributes: Attributes, opset: int) -> str | None:
    direction = attributes.string("direction", "")
    return None if direction in ("LEFT", "RIGHT") else f"attribute direction={direction!r} (LEFT or RIGHT)"


@operator("BitShift", attributes=["direction"], check=_check_bitshift)
def _bit_shift(call: NodeCall) -> Tensor:
    a, b = call.tensor(0), call.tensor(1)
    if call.attributes.string("direction", "") == "LEFT":
        return a.bitwise_left_shift(b)
    return a.bitwise_right_shift(b)


@operator("IsInf", attributes=["detect_negative", "detect_positive"])
def _is_inf(call: NodeCall) -> Tensor:
    attributes = call.attributes
    return call.tensor(0).isinf(
        detect_positive=bool(attributes.int("detect_positive", 1)),
        detect_negative=bool(attributes.int("detect_negative", 1)),
    )


@operator("Where")
def _where(call: NodeCall) -> Tensor:
    return call.tensor(0).where(call.tensor(1), call.tensor(2))


@operator("Clip", attributes=["min", "max"])
def _clip(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    if call.opset < 11:
        low, high = call.attributes.float("min", -math.inf), call.attributes.float("max", math.inf)
        return x.clip(low, high)
    low_tensor, high_tensor = call.optional(1), call.optional(2)
    if low_tensor is not None:
        x = x.maximum(low_tensor.cast(x.dtype))
    if high_tensor is not None:
        x = x.minimum(high_tensor.cast(x.dtype))
    return x


def _variadic(function: Callable[[Tensor, Tensor], Tensor]) -> Callable[[NodeCall], Tensor]:
    return lambda call: reduce(function, [call.tensor(index) for index in range(len(call.inputs))])


operator("Max")(_variadic(Tensor.maximum))
operator("Min")(_variadic(Tensor.minimum))
operator("Sum")(_variadic(Tensor.add))


@operator("Mean")
def _mean(call: NodeCall) -> Tensor:
    total = reduce(Tensor.add, [call.tensor(index) for index in range(len(call.inputs))])
    return total / len(call.inputs)


# activations with attributes


@operator("LeakyRelu", attributes=["alpha"])
def _leaky_relu(call: NodeCall) -> Tensor:
    return call.tensor(0).leaky_relu(call.attributes.float("alpha", 0.01))


@operator("Elu", attributes=["alpha"])
def _elu(call: NodeCall) -> Tensor:
    return call.tensor(0).elu(call.attributes.float("alpha", 1.0))


@operator("Celu", attributes=["alpha"])
def _celu(call: NodeCall) -> Tensor:
    return call.tensor(0).celu(call.attributes.float("alpha", 1.0))


@operator("Selu", attributes=["alpha", "gamma"])
def _selu(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    alpha = call.attributes.float("alpha", 1.67326319217681884765625)
    gamma = call.attributes.float("gamma", 1.05070102214813232421875)
    return (x > 0).where(x, (x.exp() - 1) * alpha) * gamma


@operator("ThresholdedRelu", attributes=["alpha"])
def _thresholded_relu(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    return (x > call.attributes.float("alpha", 1.0)).where(x, 0.0)


@operator("HardSigmoid", attributes=["alpha", "beta"])
def _hard_sigmoid(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    return (x * call.attributes.float("alpha", 0.2) + call.attributes.float("beta", 0.5)).clip(0.0, 1.0)


@operator("HardSwish")
def _hard_swish(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    return x * (x / 6 + 0.5).clip(0.0, 1.0)


@operator("Softplus")
def _softplus(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    # log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))
    return x.maximum(0.0) + (-x.abs()).exp().log1p()


@operator("Mish")
def _mish(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    return x * (x.maximum(0.0) + (-x.abs()).exp().log1p()).tanh()


@operator("PRelu")
def _prelu(call: NodeCall) -> Tensor:
    x, slope = call.tensor(0), call.tensor(1)
    return (x < 0).where(x * slope, x)


@operator("Gelu", attributes=["approximate"], since=20)
def _gelu(call: NodeCall) -> Tensor:
    return call.tensor(0).gelu(approximate=call.attributes.string("approximate", "none"))


@operator("Swish", attributes=["alpha"])
def _swish(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    return x * (x * call.attributes.float("alpha", 1.0)).sigmoid()


@operator("Shrink", attributes=["bias", "lambd"])
def _shrink(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    bias, lambd = call.attributes.float("bias", 0.0), call.attributes.float("lambd", 0.5)
    return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)
