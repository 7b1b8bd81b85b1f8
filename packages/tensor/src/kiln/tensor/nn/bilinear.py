"""`Bilinear`: y = x1^T A x2 + b, like `torch.nn.Bilinear` (same parameters, initialisation and repr)."""

from __future__ import annotations

import math

from kiln.tensor.nn import functional as F
from kiln.tensor.nn import init
from kiln.tensor.nn.arguments import check_positive_int
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["Bilinear"]


class Bilinear(Module):
    """y_o = x1 W_o x2 + b_o with weight (out_features, in1_features, in2_features), like `torch.nn.Bilinear`;
    weight and bias drawn from U(-1/sqrt(in1_features), 1/sqrt(in1_features)) as torch does.

    Example:
        >>> Bilinear(2, 3, 4)(Tensor.ones(5, 2), Tensor.ones(5, 3)).shape
        (5, 4)
    """

    def __init__(
        self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, device: str | None = None
    ) -> None:
        super().__init__()
        for name, value in (("in1_features", in1_features), ("in2_features", in2_features)):
            check_positive_int(value, f"Bilinear {name}")
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        bound = 1.0 / math.sqrt(in1_features)
        self.weight = init.uniform((out_features, in1_features, in2_features), -bound, bound, device=device)
        self.bias = init.uniform((out_features,), -bound, bound, device=device) if bias else None

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        """F.bilinear(input1, input2, weight, bias)."""
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )
