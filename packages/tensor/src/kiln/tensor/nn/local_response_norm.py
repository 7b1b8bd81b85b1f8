"""`LocalResponseNorm`: each activation divided by a power of its neighbouring channels' mean square (AlexNet),
like `torch.nn.LocalResponseNorm`."""

from __future__ import annotations

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.applied import AppliedFunction

__all__ = ["LocalResponseNorm"]


class LocalResponseNorm(AppliedFunction, function=F.local_response_norm, arguments=("size", "alpha", "beta", "k")):
    """x / (k + alpha * mean of x**2 over `size` neighbouring channels)**beta, like `torch.nn.LocalResponseNorm`."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
