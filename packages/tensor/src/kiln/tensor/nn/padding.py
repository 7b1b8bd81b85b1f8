"""Padding layers (`ZeroPad*`, `ConstantPad*`, `ReflectionPad*`, `ReplicationPad*`, `CircularPad*` in 1, 2 and 3
spatial dims), like `torch.nn`'s: `padding` is an int (every side) or (left, right[, top, bottom[, front, back]]).

Example:
    >>> ZeroPad2d(1)(Tensor.ones(1, 1, 2, 2)).shape
    (1, 1, 4, 4)
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.dimensioned import Dimensioned
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = [
    "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
    "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
    "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
]  # fmt: skip


class _PadNd(Module, Dimensioned):
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


class _ConstantPadNd(_PadNd, summary="Pads {last_dims} with `value`"):
    def __init__(self, padding: int | Sequence[int], value: float) -> None:
        super().__init__(padding, value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class _ZeroPadNd(_PadNd, summary="Pads {last_dims} with zeros"):
    def __init__(self, padding: int | Sequence[int]) -> None:
        super().__init__(padding, 0.0)


class _ReflectionPadNd(_ZeroPadNd, summary="Pads {last_dims} by reflection (the edge not repeated)"):
    mode = "reflect"


class _ReplicationPadNd(_ZeroPadNd, summary="Pads {last_dims} by repeating the edges"):
    mode = "replicate"


class _CircularPadNd(_ZeroPadNd, summary="Pads {last_dims} by wrapping around"):
    mode = "circular"


class ConstantPad1d(_ConstantPadNd, dims=1): ...


class ConstantPad2d(_ConstantPadNd, dims=2): ...


class ConstantPad3d(_ConstantPadNd, dims=3): ...


class ZeroPad1d(_ZeroPadNd, dims=1): ...


class ZeroPad2d(_ZeroPadNd, dims=2): ...


class ZeroPad3d(_ZeroPadNd, dims=3): ...


class ReflectionPad1d(_ReflectionPadNd, dims=1): ...


class ReflectionPad2d(_ReflectionPadNd, dims=2): ...


class ReflectionPad3d(_ReflectionPadNd, dims=3): ...


class ReplicationPad1d(_ReplicationPadNd, dims=1): ...


class ReplicationPad2d(_ReplicationPadNd, dims=2): ...


class ReplicationPad3d(_ReplicationPadNd, dims=3): ...


class CircularPad1d(_CircularPadNd, dims=1): ...


class CircularPad2d(_CircularPadNd, dims=2): ...


class CircularPad3d(_CircularPadNd, dims=3): ...
