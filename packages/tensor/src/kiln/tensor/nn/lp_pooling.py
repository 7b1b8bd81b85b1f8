"""`LPPool1d/2d/3d`: power-average pooling, (sum of x**p over each window)**(1/p), like `torch.nn`'s."""

from __future__ import annotations

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.module import Module
from kiln.tensor.ops.pooling import Size
from kiln.tensor.tensor import Tensor

__all__ = ["LPPool1d", "LPPool2d", "LPPool3d"]


class _LPPoolNd(Module):
    def __init__(
        self, norm_type: float, kernel_size: Size, stride: Size | None = None, ceil_mode: bool = False
    ) -> None:
        super().__init__()
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def extra_repr(self) -> str:
        return (
            f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"ceil_mode={self.ceil_mode}"
        )


class LPPool1d(_LPPoolNd):
    """Power-average pooling of (N, C, L), like `torch.nn.LPPool1d`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.lp_pool1d(x, norm_type, kernel_size, stride, ceil_mode)."""
        return F.lp_pool1d(x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)


class LPPool2d(_LPPoolNd):
    """Power-average pooling of (N, C, H, W), like `torch.nn.LPPool2d`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.lp_pool2d(x, norm_type, kernel_size, stride, ceil_mode)."""
        return F.lp_pool2d(x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)


class LPPool3d(_LPPoolNd):
    """Power-average pooling of (N, C, D, H, W), like `torch.nn.LPPool3d`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.lp_pool3d(x, norm_type, kernel_size, stride, ceil_mode)."""
        return F.lp_pool3d(x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)
