"""`InitializerMixin`: random weight initialisers as Tensor class methods, with tinygrad's names and formulas, plus
PyTorch's xavier initialisers.

For a weight of shape (out, in, *kernel), tinygrad takes fan_in = prod(shape[1:]):

| method | distribution |
| --- | --- |
| scaled_uniform | U(-1, 1) / sqrt(prod(shape)) |
| glorot_uniform | U(-b, b), b = sqrt(6 / (shape[0] + prod(shape[1:]))) |
| kaiming_uniform(a) | U(-b, b), b = sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(fan_in) |
| kaiming_normal(a) | N(0, std), std = sqrt(2 / (1 + a^2)) / sqrt(fan_in) |
| xavier_uniform(gain) | U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)), PyTorch's fans (times the kernel size) |
| xavier_normal(gain) | N(0, std), std = gain * sqrt(2 / (fan_in + fan_out)) |

The numbers come from the global generator (`Tensor.manual_seed`), through `Tensor.uniform` and `Tensor.normal`.
"""

from __future__ import annotations

import math
from typing import Self, Unpack

from kiln.tensor.core import ShapeArgument, TensorCore, TensorT
from kiln.tensor.ops._checks import shape_argument
from kiln.tensor.ops.tensor_options import TensorOptions, torch_keywords

__all__ = ["InitializerMixin", "initializer_bound"]


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, got {value!r}")
    return float(value)


def _fan(count: int, shape: tuple[int, ...], name: str) -> int:
    if count <= 0:
        raise ValueError(f"{name} needs a non-empty fan, got shape {shape}")
    return count


def _torch_fans(shape: tuple[int, ...], name: str) -> tuple[int, int]:
    """PyTorch's (fan_in, fan_out): shape[1] and shape[0], each times the receptive field prod(shape[2:])."""
    if len(shape) < 2:
        raise ValueError(f"{name} needs a shape with at least 2 dims (out, in, *kernel), got {shape}")
    field = math.prod(shape[2:])
    return _fan(shape[1] * field, shape, name), _fan(shape[0] * field, shape, name)


def initializer_bound(name: str, shape: tuple[int, ...], parameter: float | None = None) -> float:
    """The half-width (uniform initialisers) or standard deviation (normal ones) that `name` uses for `shape`;
    `parameter` is kaiming's `a` or xavier's `gain`."""
    if name == "scaled_uniform":
        return 1.0 / math.sqrt(_fan(math.prod(shape), shape, name))
    if name == "glorot_uniform":
        if not shape:
            raise ValueError(f"{name} needs at least one dim, got shape {shape}")
        return math.sqrt(6.0 / _fan(shape[0] + math.prod(shape[1:]), shape, name))
    if name in ("kaiming_uniform", "kaiming_normal"):
        slope = 0.01 if parameter is None else parameter
        std = math.sqrt(2.0 / (1.0 + slope * slope)) / math.sqrt(_fan(math.prod(shape[1:]), shape, name))
        return math.sqrt(3.0) * std if name == "kaiming_uniform" else std
    if name in ("xavier_uniform", "xavier_normal"):
        gain = 1.0 if parameter is None else parameter
        fan_in, fan_out = _torch_fans(shape, name)
        factor = 6.0 if name == "xavier_uniform" else 2.0
        return gain * math.sqrt(factor / (fan_in + fan_out))
    raise ValueError(f"unknown initialiser {name!r}")


def _draw(
    kind: type[TensorT], name: str, shape: tuple[ShapeArgument, ...], parameter: float | None, options: TensorOptions
) -> TensorT:
    """A `name` initialiser's tensor: N(0, std) for the *_normal ones, else U(-bound, bound) (`initializer_bound`)."""
    dims = shape_argument(shape, f"{name} shape")
    spread = initializer_bound(name, dims, parameter)
    if name.endswith("_normal"):
        return kind.normal(dims, mean=0.0, std=spread, **options)
    return kind.uniform(dims, low=-spread, high=spread, **options)


class InitializerMixin(TensorCore):
    """Weight initialisers (class methods)."""

    @classmethod
    @torch_keywords
    def scaled_uniform(cls, *shape: ShapeArgument, **options: Unpack[TensorOptions]) -> Self:
        """U(-1, 1) / sqrt(prod(shape)) (tinygrad's).

        Example:
            >>> bool(Tensor.scaled_uniform(4, 4).abs().max().item() <= 0.25)
            True
        """
        return _draw(cls, "scaled_uniform", shape, None, options)

    @classmethod
    @torch_keywords
    def glorot_uniform(cls, *shape: ShapeArgument, **options: Unpack[TensorOptions]) -> Self:
        """U(-b, b) with b = sqrt(6 / (shape[0] + prod(shape[1:]))) (tinygrad's, Keras's GlorotUniform).

        Example:
            >>> bool(Tensor.glorot_uniform(3, 3).abs().max().item() <= 1.0)
            True
        """
        return _draw(cls, "glorot_uniform", shape, None, options)

    @classmethod
    @torch_keywords
    def kaiming_uniform(cls, *shape: ShapeArgument, a: float = 0.01, **options: Unpack[TensorOptions]) -> Self:
        """U(-b, b) with b = sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(prod(shape[1:])) (tinygrad's; PyTorch's
        kaiming_uniform_ with leaky-relu slope `a` and fan_in mode).

        Example:
            >>> Tensor.kaiming_uniform(8, 2, 3, 3).shape
            (8, 2, 3, 3)
        """
        return _draw(cls, "kaiming_uniform", shape, _number(a, "kaiming_uniform a"), options)

    @classmethod
    @torch_keywords
    def kaiming_normal(cls, *shape: ShapeArgument, a: float = 0.01, **options: Unpack[TensorOptions]) -> Self:
        """N(0, std) with std = sqrt(2 / (1 + a^2)) / sqrt(prod(shape[1:])) (tinygrad's).

        Example:
            >>> Tensor.kaiming_normal(8, 4).shape
            (8, 4)
        """
        return _draw(cls, "kaiming_normal", shape, _number(a, "kaiming_normal a"), options)

    @classmethod
    @torch_keywords
    def xavier_uniform(cls, *shape: ShapeArgument, gain: float = 1.0, **options: Unpack[TensorOptions]) -> Self:
        """U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)), PyTorch's xavier_uniform_ fans (shape[1] and
        shape[0], each times prod(shape[2:])).

        Example:
            >>> bool(Tensor.xavier_uniform(3, 3).abs().max().item() <= 1.0)
            True
        """
        return _draw(cls, "xavier_uniform", shape, _number(gain, "xavier_uniform gain"), options)

    @classmethod
    @torch_keywords
    def xavier_normal(cls, *shape: ShapeArgument, gain: float = 1.0, **options: Unpack[TensorOptions]) -> Self:
        """N(0, std) with std = gain * sqrt(2 / (fan_in + fan_out)) (PyTorch's xavier_normal_).

        Example:
            >>> Tensor.xavier_normal(4, 6).shape
            (4, 6)
        """
        return _draw(cls, "xavier_normal", shape, _number(gain, "xavier_normal gain"), options)
