"""`LocalResponseNorm`: each activation divided by a power of its neighbouring channels' mean square (AlexNet),
like `torch.nn.LocalResponseNorm`."""

from __future__ import annotations

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["LocalResponseNorm"]


class LocalResponseNorm(Module):
    """x / (k + alpha * mean of x**2 over `size` neighbouring channels)**beta, like `torch.nn.LocalResponseNorm`."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, x: Tensor) -> Tensor:
        """F.local_response_norm(x, size, alpha, beta, k)."""
        return F.local_response_norm(x, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
