"""Distance layers `CosineSimilarity` and `PairwiseDistance`, like `torch.nn`'s."""

from __future__ import annotations

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["CosineSimilarity", "PairwiseDistance"]


class CosineSimilarity(Module):
    """x1 . x2 / max(||x1|| ||x2||, eps) along `dim`, like `torch.nn.CosineSimilarity`."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        """F.cosine_similarity(x1, x2, dim, eps)."""
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """||x1 - x2 + eps||_p over the last dim, like `torch.nn.PairwiseDistance`."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        """F.pairwise_distance(x1, x2, p, eps, keepdim)."""
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
