"""`Linear`, `Embedding`, `Flatten` and `Identity` layers."""

from __future__ import annotations

import math

from kiln.tensor.nn import init
from kiln.tensor.nn.module import Module
from kiln.tensor.ops.data_checks import check_index_values
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = ["Embedding", "Flatten", "Identity", "Linear"]


def _check_size(value: object, what: str, minimum: int = 1) -> int:
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
        self.in_features = _check_size(in_features, "Linear in_features", 0)
        self.out_features = _check_size(out_features, "Linear out_features", 0)
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


class Embedding(Module):
    """A lookup table: row i of weight (num_embeddings, embedding_dim) for index i, like `torch.nn.Embedding`
    (weight initialised from N(0, 1)).

    Example:
        >>> Embedding(10, 4)(Tensor([[1, 2]])).shape
        (1, 2, 4)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, device: str | None = None) -> None:
        super().__init__()
        self.num_embeddings = _check_size(num_embeddings, "Embedding num_embeddings")
        self.embedding_dim = _check_size(embedding_dim, "Embedding embedding_dim")
        self.weight = init.normal((num_embeddings, embedding_dim), device=device)

    def forward(self, indices: Tensor) -> Tensor:
        """The rows of weight picked by integer `indices` (any shape): shape (*indices.shape, embedding_dim)."""
        if not isinstance(indices, Tensor) or not dtypes.is_int(indices.dtype):
            raise TypeError(f"Embedding needs an integer index Tensor, got {getattr(indices, 'dtype', indices)!r}")
        # CHECK=1: an index outside [0, num_embeddings) raises IndexError; unchecked it selects a row of zeros
        check_index_values(indices, self.num_embeddings, "embedding", 0, negative=False)
        flat = indices.reshape(-1, 1)
        picked = (flat == Tensor.arange(self.num_embeddings, device=indices.device).reshape(1, -1)).where(1.0, 0.0)
        rows = picked.cast(self.weight.dtype) @ self.weight
        return rows.reshape(*indices.shape, self.embedding_dim)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


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
