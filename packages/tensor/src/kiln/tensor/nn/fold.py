"""`Unfold` (im2col: sliding blocks as columns) and `Fold` (col2im, its adjoint), like `torch.nn`'s."""

from __future__ import annotations

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.applied import AppliedFunction

__all__ = ["Fold", "Unfold"]

Pair = int | tuple[int, int]


class Unfold(AppliedFunction, function=F.unfold, arguments=("kernel_size", "dilation", "padding", "stride")):
    """(N, C, H, W) -> (N, C kh kw, L) sliding blocks, like `torch.nn.Unfold`."""

    def __init__(self, kernel_size: Pair, dilation: Pair = 1, padding: Pair = 0, stride: Pair = 1) -> None:
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride


class Fold(AppliedFunction, function=F.fold, arguments=("output_size", "kernel_size", "dilation", "padding", "stride")):
    """(N, C kh kw, L) columns summed back into (N, C, *output_size), like `torch.nn.Fold`."""

    def __init__(
        self, output_size: Pair, kernel_size: Pair, dilation: Pair = 1, padding: Pair = 0, stride: Pair = 1
    ) -> None:
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride
