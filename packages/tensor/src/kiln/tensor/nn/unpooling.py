"""`MaxUnpool1d/2d/3d`: the partial inverse of max pooling (maxima back at their indices, zeros elsewhere), like
`torch.nn`'s (kernel_size, stride and padding kept as tuples, stride defaulting to the kernel size)."""

from __future__ import annotations

from collections.abc import Sequence

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.dimensioned import Dimensioned
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"]


def _spread(value: int | Sequence[int], dims: int, what: str) -> tuple[int, ...]:
    values = (value,) * dims if isinstance(value, int) else tuple(value)
    if len(values) != dims:
        raise ValueError(f"{what} must be an int or {dims} ints, got {value!r}")
    return values


class _MaxUnpoolNd(Module, Dimensioned, summary="The inverse of `MaxPool{dims}d(return_indices=True)`"):
    def __init__(
        self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
    ) -> None:  # fmt: skip
        super().__init__()
        name = type(self).__name__
        self.kernel_size = _spread(kernel_size, self.dims, f"{name} kernel_size")
        self.stride = _spread(stride if stride is not None else kernel_size, self.dims, f"{name} stride")
        self.padding = _spread(padding, self.dims, f"{name} padding")

    def forward(self, x: Tensor, indices: Tensor, output_size: Sequence[int] | None = None) -> Tensor:
        """Scatters `x` to `indices` (from max pooling with return_indices=True)."""
        unpool = (F.max_unpool1d, F.max_unpool2d, F.max_unpool3d)[self.dims - 1]
        size = tuple(output_size) if output_size is not None else None
        return unpool(x, indices, self.kernel_size, self.stride, self.padding, size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd, dims=1): ...


class MaxUnpool2d(_MaxUnpoolNd, dims=2): ...


class MaxUnpool3d(_MaxUnpoolNd, dims=3): ...
