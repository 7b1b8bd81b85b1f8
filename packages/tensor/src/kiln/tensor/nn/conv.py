"""Convolution layers: `Conv1d`, `Conv2d`, `Conv3d`, `ConvTranspose1d`, `ConvTranspose2d`,
`ConvTranspose3d` (torch.nn's arguments and
default initialisation: weight kaiming_uniform(a=sqrt(5)), bias U(+-1/sqrt(fan_in)) with fan_in from the weight).

Example:
    >>> Conv1d(2, 4, 3)(Tensor.ones(1, 2, 10)).shape
    (1, 4, 8)
    >>> Conv2d(1, 8, 3, padding=1)(Tensor.ones(2, 1, 5, 5)).shape
    (2, 8, 5, 5)
    >>> ConvTranspose2d(4, 2, 2, stride=2)(Tensor.ones(1, 4, 3, 3)).shape
    (1, 2, 6, 6)
    >>> ConvTranspose3d(2, 3, 2, stride=2)(Tensor.ones(1, 2, 2, 2, 2)).shape
    (1, 3, 4, 4, 4)
"""

from __future__ import annotations

import math
from typing import Any

from kiln.tensor.nn import init
from kiln.tensor.nn.arguments import check_positive_int
from kiln.tensor.nn.dimensioned import Dimensioned
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]

Sizes = int | tuple[int, ...]
"""A size per spatial dim, or one int for every dim."""


def _tuple(value: Sizes, dims: int, what: str) -> tuple[int, ...]:
    items = (value,) * dims if isinstance(value, int) and not isinstance(value, bool) else value
    if (
        not isinstance(items, tuple)
        or len(items) != dims
        or any(isinstance(item, bool) or not isinstance(item, int) for item in items)
    ):
        raise ValueError(f"{what} must be an int or a tuple of {dims} ints, got {value!r}")
    return items


def _check_channels(in_channels: int, out_channels: int, groups: int, kind: str) -> None:
    for name, value in (("in_channels", in_channels), ("out_channels", out_channels), ("groups", groups)):
        check_positive_int(value, f"{kind} {name}")
    if in_channels % groups or out_channels % groups:
        raise ValueError(
            f"{kind} in_channels ({in_channels}) and out_channels ({out_channels}) must be divisible by groups "
            f"({groups})"
        )


class _Convolution(Module, Dimensioned):
    """What a convolution and a transposed one share: checked channel counts and per-dim sizes, and torch's default
    initialisation of the weight and bias."""

    def _set_sizes(
        self, in_channels: int, out_channels: int, kernel_size: Sizes, stride: Sizes, dilation: Sizes, groups: int
    ) -> str:
        """Checks and stores the sizes; returns the layer's class name for the messages of further checks."""
        kind = type(self).__name__
        _check_channels(in_channels, out_channels, groups, kind)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(kernel_size, self.dims, f"{kind} kernel_size")
        self.stride = _tuple(stride, self.dims, f"{kind} stride")
        self.dilation = _tuple(dilation, self.dims, f"{kind} dilation")
        return kind

    def _init_parameters(self, weight_shape: tuple[int, ...], bias: bool, device: str | None) -> None:
        self.weight = init.kaiming_uniform(weight_shape, device=device)
        fan_in = init.calculate_fan_in_and_fan_out(weight_shape)[0]
        bound = 1.0 / math.sqrt(fan_in)
        self.bias = init.uniform((self.out_channels,), -bound, bound, device=device) if bias else None


class _ConvNd(_Convolution, summary="{dims}-d convolution over (batch, in_channels, *spatial)"):
    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: Sizes, stride: Sizes = 1, padding: Sizes | str = 0,
        dilation: Sizes = 1, groups: int = 1, bias: bool = True, device: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        kind = self._set_sizes(in_channels, out_channels, kernel_size, stride, dilation, groups)
        self.padding: tuple[int, ...] | str = (
            padding if isinstance(padding, str) else _tuple(padding, self.dims, f"{kind} padding")
        )
        self._init_parameters((out_channels, in_channels // groups, *self.kernel_size), bias, device)

    def _convolve(self, x: Tensor) -> Any:
        method = getattr(x, f"conv{self.dims}d")
        return method(self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, x: Tensor) -> Tensor:
        """The convolution of x (batch, in_channels, *spatial) or unbatched (in_channels, *spatial)."""
        result: Tensor = self._convolve(x)
        return result

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}"
        )


class _ConvTransposeNd(_Convolution, summary="{dims}-d transposed convolution"):
    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: Sizes, stride: Sizes = 1, padding: Sizes = 0,
        output_padding: Sizes = 0, groups: int = 1, bias: bool = True, dilation: Sizes = 1, device: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        kind = self._set_sizes(in_channels, out_channels, kernel_size, stride, dilation, groups)
        self.padding = _tuple(padding, self.dims, f"{kind} padding")
        self.output_padding = _tuple(output_padding, self.dims, f"{kind} output_padding")
        # torch's transposed weight is (in, out / groups, *kernel); its fan_in is computed from dim 1 like any weight
        self._init_parameters((in_channels, out_channels // groups, *self.kernel_size), bias, device)

    def forward(self, x: Tensor) -> Tensor:
        """The transposed convolution of x (batch, in_channels, *spatial)."""
        method = getattr(x, f"conv_transpose{self.dims}d")
        result: Tensor = method(
            self.weight, self.bias, self.stride, self.padding, self.output_padding, self.groups, self.dilation
        )
        return result


class Conv1d(_ConvNd, dims=1): ...


class Conv2d(_ConvNd, dims=2): ...


class Conv3d(_ConvNd, dims=3): ...


class ConvTranspose1d(_ConvTransposeNd, dims=1): ...


class ConvTranspose2d(_ConvTransposeNd, dims=2): ...


class ConvTranspose3d(_ConvTransposeNd, dims=3): ...
