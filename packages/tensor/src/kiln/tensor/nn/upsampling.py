"""Resampling layers: `Upsample` (and its deprecated fixed-mode forms `UpsamplingNearest2d`,
`UpsamplingBilinear2d`), `PixelShuffle` and `PixelUnshuffle`, like `torch.nn`'s."""

from __future__ import annotations

from typing import Any

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.applied import AppliedFunction
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["PixelShuffle", "PixelUnshuffle", "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"]


class Upsample(Module):
    """Resamples (N, C, *) to `size` or by `scale_factor` with `mode`, like `torch.nn.Upsample` (see
    `F.interpolate`).

    Example:
        >>> Upsample(scale_factor=2)(Tensor.ones(1, 1, 2, 2)).shape
        (1, 1, 4, 4)
    """

    def __init__(
        self, size: Any = None, scale_factor: Any = None, mode: str = "nearest", align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, (tuple, list)):
            self.scale_factor: Any = tuple(float(factor) for factor in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor is not None else None
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        """F.interpolate(x, size, scale_factor, mode, align_corners)."""
        return F.interpolate(
            x, self.size, self.scale_factor, self.mode, self.align_corners, self.recompute_scale_factor
        )

    def extra_repr(self) -> str:
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return f"{info}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """`Upsample(mode='nearest')` of (N, C, H, W), like `torch.nn.UpsamplingNearest2d`."""

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """`Upsample(mode='bilinear', align_corners=True)` of (N, C, H, W), like `torch.nn.UpsamplingBilinear2d`."""

    def __init__(self, size: Any = None, scale_factor: Any = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class PixelShuffle(AppliedFunction, function=F.pixel_shuffle, arguments=("upscale_factor",)):
    """(*, C r**2, H, W) -> (*, C, H r, W r), like `torch.nn.PixelShuffle`."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor


class PixelUnshuffle(AppliedFunction, function=F.pixel_unshuffle, arguments=("downscale_factor",)):
    """(*, C, H r, W r) -> (*, C r**2, H, W), like `torch.nn.PixelUnshuffle`."""

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor
