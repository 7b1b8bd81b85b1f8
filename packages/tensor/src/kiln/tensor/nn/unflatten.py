"""`Unflatten`: splits one dim into several, the inverse of `Flatten`, like `torch.nn.Unflatten`."""

from __future__ import annotations

from collections.abc import Sequence

from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["Unflatten"]


class Unflatten(Module):
    """Splits dim `dim` into `unflattened_size` (one entry may be -1), like `torch.nn.Unflatten`.

    Example:
        >>> Unflatten(1, (2, 3))(Tensor.ones(4, 6)).shape
        (4, 2, 3)
    """

    def __init__(self, dim: int, unflattened_size: Sequence[int]) -> None:
        super().__init__()
        if isinstance(unflattened_size, (str, bytes)) or not isinstance(unflattened_size, Sequence):
            raise TypeError(f"unflattened_size must be a tuple or list of ints, got {type(unflattened_size).__name__}")
        if not all(isinstance(size, int) and not isinstance(size, bool) for size in unflattened_size):
            raise TypeError(f"unflattened_size must be a tuple or list of ints, got {unflattened_size!r}")
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size) if isinstance(unflattened_size, tuple) else unflattened_size

    def forward(self, x: Tensor) -> Tensor:
        """x.unflatten(dim, unflattened_size)."""
        return x.unflatten(self.dim, tuple(self.unflattened_size))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
