"""Adaptive pooling layers (`AdaptiveAvgPool1d/2d/3d`, `AdaptiveMaxPool1d/2d/3d`): pooling to a fixed output size
whatever the input size, like `torch.nn`'s (None in `output_size` keeps that input size)."""

from __future__ import annotations

from typing import Any

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = [
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
]  # fmt: skip

OutputSize = int | None | tuple[int | None, ...]


class _AdaptiveAvgPool(Module):
    def __init__(self, output_size: OutputSize) -> None:
        super().__init__()
        self.output_size = output_size

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPool):
    """Mean pooling of (N, C, L) to `output_size` positions, like `torch.nn.AdaptiveAvgPool1d`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.adaptive_avg_pool1d(x, output_size)."""
        return F.adaptive_avg_pool1d(x, self.output_size)


class AdaptiveAvgPool2d(_AdaptiveAvgPool):
    """Mean pooling of (N, C, H, W) to an `output_size` grid, like `torch.nn.AdaptiveAvgPool2d`.

    Example:
        >>> AdaptiveAvgPool2d(1)(Tensor.ones(2, 3, 5, 4)).shape
        (2, 3, 1, 1)
    """

    def forward(self, x: Tensor) -> Tensor:
        """F.adaptive_avg_pool2d(x, output_size)."""
        return F.adaptive_avg_pool2d(x, self.output_size)


class AdaptiveAvgPool3d(_AdaptiveAvgPool):
    """Mean pooling of (N, C, D, H, W) to an `output_size` grid, like `torch.nn.AdaptiveAvgPool3d`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.adaptive_avg_pool3d(x, output_size)."""
        return F.adaptive_avg_pool3d(x, self.output_size)


class _AdaptiveMaxPool(Module):
    def __init__(self, output_size: OutputSize, return_indices: bool = False) -> None:
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    """Max pooling of (N, C, L) to `output_size` positions, like `torch.nn.AdaptiveMaxPool1d`."""

    def forward(self, x: Tensor) -> Any:
        """F.adaptive_max_pool1d(x, output_size, return_indices)."""
        return F.adaptive_max_pool1d(x, self.output_size, self.return_indices)


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    """Max pooling of (N, C, H, W) to an `output_size` grid, like `torch.nn.AdaptiveMaxPool2d`."""

    def forward(self, x: Tensor) -> Any:
        """F.adaptive_max_pool2d(x, output_size, return_indices)."""
        return F.adaptive_max_pool2d(x, self.output_size, self.return_indices)


class AdaptiveMaxPool3d(_AdaptiveMaxPool):
    """Max pooling of (N, C, D, H, W) to an `output_size` grid, like `torch.nn.AdaptiveMaxPool3d`."""

    def forward(self, x: Tensor) -> Any:
        """F.adaptive_max_pool3d(x, output_size, return_indices)."""
        return F.adaptive_max_pool3d(x, self.output_size, self.return_indices)
