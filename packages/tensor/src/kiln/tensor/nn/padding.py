"""Padding layers (`ZeroPad*`, `ConstantPad*`, `ReflectionPad*`, `ReplicationPad*`, `CircularPad*` in 1, 2 and 3
spatial dims), like `torch.nn`'s: `padding` is an int (every side) or (left, right[, top, bottom[, front, back]])."""

from __future__ import annotations

from collections.abc import Sequence

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = [
    "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
    "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
    "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
]  # fmt: skip


class _PadNd(Module):
    dims = 0
    mode = "constant"

    def __init__(self, padding: int | Sequence[int], value: float = 0.0) -> None:
        super().__init__()
        amounts = (padding,) * (2 * self.dims) if isinstance(padding, int) else tuple(padding)
        if len(amounts) != 2 * self.dims or not all(isinstance(amount, int) for amount in amounts):
            raise ValueError(f"{type(self).__name__} padding must be an int or {2 * self.dims} ints, got {padding!r}")
        self.padding: tuple[int, ...] = amounts
        self.value = value

    def forward(self, x: Tensor) -> Tensor:
        """F.pad(x, padding, mode, value)."""
        return F.pad(x, self.padding, self.mode, self.value if self.mode == "constant" else None)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding: int | Sequence[int], value: float) -> None:
        super().__init__(padding, value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pads the last dim with `value`, like `torch.nn.ConstantPad1d`."""

    dims = 1


class ConstantPad2d(_ConstantPadNd):
    """Pads the last 2 dims with `value`, like `torch.nn.ConstantPad2d`."""

    dims = 2


class ConstantPad3d(_ConstantPadNd):
    """Pads the last 3 dims with `value`, like `torch.nn.ConstantPad3d`."""

    dims = 3


class _ZeroPadNd(_PadNd):
    def __init__(self, padding: int | Sequence[int]) -> None:
        super().__init__(padding, 0.0)


class ZeroPad1d(_ZeroPadNd):
    """Pads the last dim with zeros, like `torch.nn.ZeroPad1d`."""

    dims = 1


class ZeroPad2d(_ZeroPadNd):
    """Pads the last 2 dims with zeros, like `torch.nn.ZeroPad2d`.

    Example:
        >>> ZeroPad2d(1)(Tensor.ones(1, 1, 2, 2)).shape
        (1, 1, 4, 4)
    """

    dims = 2


class ZeroPad3d(_ZeroPadNd):
    """Pads the last 3 dims with zeros, like `torch.nn.ZeroPad3d`."""

    dims = 3


class ReflectionPad1d(_ZeroPadNd):
    """Pads the last dim by reflection (the edge not repeated), like `torch.nn.ReflectionPad1d`."""

    dims, mode = 1, "reflect"


class ReflectionPad2d(_ZeroPadNd):
    """Pads the last 2 dims by reflection, like `torch.nn.ReflectionPad2d`."""

    dims, mode = 2, "reflect"


class ReflectionPad3d(_ZeroPadNd):
    """Pads the last 3 dims by reflection, like `torch.nn.ReflectionPad3d`."""

    dims, mode = 3, "reflect"


class ReplicationPad1d(_ZeroPadNd):
    """Pads the last dim by repeating the edge, like `torch.nn.ReplicationPad1d`."""

    dims, mode = 1, "replicate"


class ReplicationPad2d(_ZeroPadNd):
    """Pads the last 2 dims by repeating the edges, like `torch.nn.ReplicationPad2d`."""

    dims, mode = 2, "replicate"


class ReplicationPad3d(_ZeroPadNd):
    """Pads the last 3 dims by repeating the edges, like `torch.nn.ReplicationPad3d`."""

    dims, mode = 3, "replicate"


class CircularPad1d(_ZeroPadNd):
    """Pads the last dim by wrapping around, like `torch.nn.CircularPad1d`."""

    dims, mode = 1, "circular"


class CircularPad2d(_ZeroPadNd):
    """Pads the last 2 dims by wrapping around, like `torch.nn.CircularPad2d`."""

    dims, mode = 2, "circular"


class CircularPad3d(_ZeroPadNd):
    """Pads the last 3 dims by wrapping around, like `torch.nn.CircularPad3d`."""

    dims, mode = 3, "circular"
