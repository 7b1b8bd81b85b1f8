"""Dropout layers: `Dropout` (each element), `Dropout1d` / `Dropout2d` / `Dropout3d` (whole channels) and the
SELU-preserving `AlphaDropout` / `FeatureAlphaDropout`, like `torch.nn`'s. Masks come from kiln's seeded generator
(`Tensor.manual_seed`), not torch's, so only their distribution matches torch."""

from __future__ import annotations

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = ["AlphaDropout", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "FeatureAlphaDropout"]


class Dropout(Module):
    """Zeroes each element with probability p and scales the rest by 1 / (1 - p) in training mode; the identity in
    eval mode, like `torch.nn.Dropout`.

    Example:
        >>> Dropout(0.5).eval()(Tensor.ones(3)).tolist()
        [1.0, 1.0, 1.0]
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p!r}")
        self.p = float(p)
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        """x with dropout applied when training."""
        return F.dropout(x, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zeroes whole channels of (N, C, L) or (C, L) with probability p in training mode, like `torch.nn.Dropout1d`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.dropout1d(x, p, training)."""
        return F.dropout1d(x, self.p, self.training, self.inplace)


class Dropout2d(Dropout):
    """Zeroes whole channels of (N, C, H, W) with probability p in training mode, like `torch.nn.Dropout2d` (which
    reads a 3-d input as (N, C, L), with a warning)."""

    def forward(self, x: Tensor) -> Tensor:
        """F.dropout2d(x, p, training)."""
        return F.dropout2d(x, self.p, self.training, self.inplace)


class Dropout3d(Dropout):
    """Zeroes whole channels of (N, C, D, H, W) or (C, D, H, W) with probability p in training mode, like
    `torch.nn.Dropout3d`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.dropout3d(x, p, training)."""
        return F.dropout3d(x, self.p, self.training, self.inplace)


class AlphaDropout(Dropout):
    """Dropout for SELU networks (keeps zero mean and unit variance), like `torch.nn.AlphaDropout`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.alpha_dropout(x, p, training)."""
        return F.alpha_dropout(x, self.p, self.training, self.inplace)


class FeatureAlphaDropout(Dropout):
    """Alpha dropout of whole channels, like `torch.nn.FeatureAlphaDropout`."""

    def forward(self, x: Tensor) -> Tensor:
        """F.feature_alpha_dropout(x, p, training)."""
        return F.feature_alpha_dropout(x, self.p, self.training, self.inplace)
