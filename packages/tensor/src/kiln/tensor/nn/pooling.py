"""Pooling layers: `MaxPool1d/2d/3d`, `AvgPool1d/2d/3d` over the Tensor methods, with torch.nn's arguments (the
stride defaults to the kernel size).

Example:
    >>> MaxPool2d(2)(Tensor.ones(1, 1, 4, 4)).shape
    (1, 1, 2, 2)
"""

from __future__ import annotations

from typing import Any

from kiln.tensor.nn.dimensioned import Dimensioned
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["AvgPool1d", "AvgPool2d", "AvgPool3d", "MaxPool1d", "MaxPool2d", "MaxPool3d"]

Size = int | tuple[int, ...]


class _MaxPool(Module, Dimensioned, summary="{dims}-d max pooling"):
    def __init__(
        self, kernel_size: Size, stride: Size | None = None, padding: Size = 0, dilation: Size = 1,
        return_indices: bool = False, ceil_mode: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x: Tensor) -> Any:
        """The max pool of x (values, and positions with return_indices)."""
        method = getattr(x, f"max_pool{self.dims}d")
        return method(self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, self.return_indices)


class MaxPool1d(_MaxPool, dims=1): ...


class MaxPool2d(_MaxPool, dims=2): ...


class MaxPool3d(_MaxPool, dims=3): ...


class _AvgPool(Module, Dimensioned, summary="{dims}-d average pooling"):
    def __init__(
        self, kernel_size: Size, stride: Size | None = None, padding: Size = 0, ceil_mode: bool = False,
        count_include_pad: bool = True, divisor_override: int | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        """The average pool of x."""
        arguments = [self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad]
        if self.dims > 1:  # torch's avg_pool1d has no divisor_override
            arguments.append(self.divisor_override)
        result: Tensor = getattr(x, f"avg_pool{self.dims}d")(*arguments)
        return result


class AvgPool1d(_AvgPool, dims=1): ...


class AvgPool2d(_AvgPool, dims=2): ...


class AvgPool3d(_AvgPool, dims=3): ...
