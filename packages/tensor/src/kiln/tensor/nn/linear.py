"""`Linear`, `Flatten` and `Identity` layers."""

from __future__ import annotations

import math

from kiln.tensor.nn import init
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["Flatten", "Identity", "Linear"]


def check_size(value: object, what: str, minimum: int = 1) -> int:
    """`value` when it is an int >= `minimum` (a layer's size argument); else ValueError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what} must be an int >= {minimum}, got {value!r}")
    return value


class Linear(Module):
    """y = x @ weight.T + bias, weight (out_features, in_features), like `torch.nn.Linear`.

    Initialisation (PyTorch's): weight kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(in_features)), bias U(+-1/sqrt(in)).

    Example:
        >>> Linear(3, 2)(Tensor.ones(4, 3)).shape
        (4, 2)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: str | None = None) -> None:
        super().__init__()
        self.in_features = check_size(in_features, "Linear in_features", 0)
        self.out_features = check_size(out_features, "Linear out_features", 0)
        self.weight = init.kaiming_uniform((out_features, in_features), device=device)
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.bias = init.uniform((out_features,), -bound, bound, device=device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """x @ weight.T + bias."""
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(f"Linear expects inputs with last dim {self.in_features}, got shape {x.shape}")
        return x.linear(self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Flatten(Module):
    """Flattens dims start_dim..end_dim into one (defaults 1..-1: keeps the batch dim), like `torch.nn.Flatten`."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        """x.flatten(start_dim, end_dim)."""
        return x.flatten(self.start_dim, self.end_dim)


class Identity(Module):
    """Returns its input."""

    def forward(self, x: Tensor) -> Tensor:
        """x itself."""
        return x
