"""PyTorch's default initialisers (`torch.nn.init`), drawing from kiln's seeded Threefry generator.

Each function returns a new realized float32 Tensor that requires grad (a parameter), so layers call them in their
constructors; `Tensor.manual_seed` makes the values reproducible on every device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes

__all__ = [
    "calculate_fan_in_and_fan_out",
    "fresh_buffer",
    "kaiming_uniform",
    "ones",
    "parameter",
    "uniform",
    "normal",
    "xavier_uniform",
    "zeros",
]


def fresh_buffer(tensor: Tensor) -> Tensor:
    """`tensor`'s values written into new memory of its own.

    (`tensor.contiguous().realize()` is not enough: equal graphs are one hash-consed node that remembers its
    buffer, so two layers' `Tensor.zeros(n).contiguous()` would share memory.)
    """
    result = Tensor.empty(*tensor.shape, dtype=tensor.dtype, device=tensor.device)
    return result.assign(tensor.detach()).realize()


def parameter(tensor: Tensor) -> Tensor:
    """`tensor` computed into a buffer of its own, as a leaf that requires grad."""
    return fresh_buffer(tensor).requires_grad_()


def calculate_fan_in_and_fan_out(shape: Sequence[int]) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight shape like torch: dim 1 times the receptive field, dim 0 times it."""
    if len(shape) < 2:
        raise ValueError(f"fan in and fan out need a weight with at least 2 dims, got shape {tuple(shape)}")
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def uniform(
    shape: Sequence[int],
    low: float,
    high: float,
    dtype: DType = dtypes.float32,
    device: str | tuple[str, ...] | None = None,
) -> Tensor:
    """A parameter of `shape` drawn uniformly from [low, high)."""
    return parameter(Tensor.uniform(*shape, low=low, high=high, dtype=dtype, device=device))


def normal(
    shape: Sequence[int],
    mean: float = 0.0,
    std: float = 1.0,
    dtype: DType = dtypes.float32,
    device: str | tuple[str, ...] | None = None,
) -> Tensor:
    """A parameter of `shape` drawn from N(mean, std**2)."""
    return parameter(Tensor.normal(*shape, mean=mean, std=std, dtype=dtype, device=device))


def zeros(shape: Sequence[int], dtype: DType = dtypes.float32, device: str | tuple[str, ...] | None = None) -> Tensor:
    """A parameter of zeros."""
    return parameter(Tensor.zeros(*shape, dtype=dtype, device=device))


def ones(shape: Sequence[int], dtype: DType = dtypes.float32, device: str | tuple[str, ...] | None = None) -> Tensor:
    """A parameter of ones."""
    return parameter(Tensor.ones(*shape, dtype=dtype, device=device))


def kaiming_uniform(
    shape: Sequence[int],
    a: float = math.sqrt(5),
    fan_in: int | None = None,
    device: str | tuple[str, ...] | None = None,
) -> Tensor:
    """torch's `kaiming_uniform_(w, a)` (leaky-ReLU gain, fan_in mode): U(-b, b) with
    b = sqrt(2 / (1 + a**2)) * sqrt(3 / fan_in); with the default a = sqrt(5), b = 1 / sqrt(fan_in)."""
    fan = calculate_fan_in_and_fan_out(shape)[0] if fan_in is None else fan_in
    bound = math.sqrt(2.0 / (1.0 + a * a)) * math.sqrt(3.0 / fan) if fan > 0 else 0.0
    return uniform(shape, -bound, bound, device=device)


def xavier_uniform(shape: Sequence[int], gain: float = 1.0, device: str | tuple[str, ...] | None = None) -> Tensor:
    """torch's `xavier_uniform_`: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform(shape, -bound, bound, device=device)
