"""Activation layers (`ReLU`, `GELU`, `SiLU`, `Tanh`, `Sigmoid`, `Softmax`) and `Dropout`, as modules over the
Tensor methods of the same names."""

from __future__ import annotations

from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["Dropout", "GELU", "ReLU", "SiLU", "Sigmoid", "Softmax", "Tanh"]


class ReLU(Module):
    """max(x, 0), like `torch.nn.ReLU`."""

    def forward(self, x: Tensor) -> Tensor:
        """x.relu()."""
        return x.relu()


class GELU(Module):
    """The Gaussian error linear unit (`approximate` 'none' or 'tanh'), like `torch.nn.GELU`."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        """x.gelu(approximate)."""
        return x.gelu(self.approximate)


class SiLU(Module):
    """x * sigmoid(x), like `torch.nn.SiLU`."""

    def forward(self, x: Tensor) -> Tensor:
        """x.silu()."""
        return x.silu()


class Tanh(Module):
    """tanh(x), like `torch.nn.Tanh`."""

    def forward(self, x: Tensor) -> Tensor:
        """x.tanh()."""
        return x.tanh()


class Sigmoid(Module):
    """1 / (1 + exp(-x)), like `torch.nn.Sigmoid`."""

    def forward(self, x: Tensor) -> Tensor:
        """x.sigmoid()."""
        return x.sigmoid()


class Softmax(Module):
    """softmax along `dim`, like `torch.nn.Softmax`."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        """x.softmax(dim)."""
        return x.softmax(self.dim)


class Dropout(Module):
    """Zeroes each element with probability p and scales the rest by 1 / (1 - p) in training mode; the identity in
    eval mode, like `torch.nn.Dropout`. Masks come from kiln's seeded generator (`Tensor.manual_seed`).

    Example:
        >>> Dropout(0.5).eval()(Tensor.ones(3)).tolist()
        [1.0, 1.0, 1.0]
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p!r}")
        self.p = float(p)

    def forward(self, x: Tensor) -> Tensor:
        """x with dropout applied when training."""
        return x.dropout(self.p, self.training)
