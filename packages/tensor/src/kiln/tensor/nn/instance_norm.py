"""Instance normalization layers `InstanceNorm1d/2d/3d`: each (sample, channel) normalized over its own spatial
dims, like `torch.nn`'s (same constructor, parameters, buffers, state-dict names and repr).

With `track_running_stats` the running mean and variance are updated in training mode (batch averages of the
instances' statistics, as `F.instance_norm` does) and normalize in eval mode; like torch, `num_batches_tracked` is
kept in the state dict but never counted. The running updates are lazy writes (ASSIGN) realized when read or,
at the latest, before the layer's next forward.

Example:
    >>> InstanceNorm2d(3)(Tensor.randn(2, 3, 4, 4)).shape
    (2, 3, 4, 4)
"""

from __future__ import annotations

import warnings

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.dimensioned import Dimensioned
from kiln.tensor.nn.normalization import _ChannelNorm
from kiln.tensor.tensor import Tensor
from kiln.uops import Ops

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]


class _InstanceNorm(
    _ChannelNorm,
    Dimensioned,
    summary="Instance normalization of (N, C, *spatial) or (C, *spatial), {dims} spatial dims",
):
    running_mean: Tensor | None
    running_var: Tensor | None

    def __init__(
        self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = False,
        track_running_stats: bool = False, device: str | None = None, *, bias: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        self.use_bias = bias
        self._set_features(num_features, eps, momentum, affine, track_running_stats, device, bias)
        if not track_running_stats:
            self.running_mean = self.running_var = None

    def forward(self, x: Tensor) -> Tensor:
        """Normalizes each instance of (N, C, *spatial) or unbatched (C, *spatial)."""
        unbatched = self.dims + 1
        if x.ndim not in (unbatched, unbatched + 1):
            raise ValueError(f"expected {unbatched}D or {unbatched + 1}D input (got {x.ndim}D input)")
        feature_dim = x.ndim - unbatched
        if x.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(
                    f"expected input's size at dim={feature_dim} to match num_features ({self.num_features}), "
                    f"but got: {x.shape[feature_dim]}."
                )
            warnings.warn(
                f"input's size at dim={feature_dim} does not match num_features. You can silence this warning by "
                "not passing in num_features, which is not used because affine=False",
                stacklevel=2,
            )
        stale = [t for t in (self.running_mean, self.running_var) if t is not None and t.uop.op is Ops.ASSIGN]
        if stale:  # an earlier training forward's update nobody realized yet
            Tensor.realize_all(*stale)
        batched = x.unsqueeze(0) if x.ndim == unbatched else x
        result = F.instance_norm(
            batched, self.running_mean, self.running_var, self.weight, self.bias,
            self.training or not self.track_running_stats, self.momentum if self.momentum is not None else 0.0,
            self.eps,
        )  # fmt: skip
        return result.squeeze(0) if x.ndim == unbatched else result

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
            f"bias={self.affine and self.use_bias}, track_running_stats={self.track_running_stats}"
        )


class InstanceNorm1d(_InstanceNorm, dims=1): ...


class InstanceNorm2d(_InstanceNorm, dims=2): ...


class InstanceNorm3d(_InstanceNorm, dims=3): ...
