"""Normalization layers: `BatchNorm1d`, `BatchNorm2d`, `BatchNorm3d` (running statistics), `LayerNorm`, `GroupNorm`,
`RMSNorm`.

BatchNorm in training mode writes its running mean, variance and batch count in place, after computing its output, as
one simultaneous write (`write_many`: one schedule per layer and forward, in program order like PyTorch's three
in-place updates; the forward's input, which the statistics read, is computed in that schedule). TinyJit captures
that schedule, so every replay updates the statistics.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.tensor.nn import init
from kiln.tensor.nn.arguments import check_positive_int
from kiln.tensor.nn.module import Module
from kiln.tensor.ops.normalization import running_updates
from kiln.tensor.realize.mutation import write_many
from kiln.tensor.tensor import Tensor
from kiln.uops import Ops, dtypes

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "LayerNorm", "RMSNorm"]


class _ChannelNorm(Module):
    """What batch and instance normalization share: a checked feature count, a per-channel weight (ones) and bias
    (zeros) when affine, and with `track_running_stats` the running mean, variance and batch-count buffers."""

    def _set_features(
        self, num_features: int, eps: float, momentum: float | None, affine: bool, track_running_stats: bool,
        device: str | None, bias: bool = True,
    ) -> None:  # fmt: skip
        check_positive_int(num_features, f"{type(self).__name__} num_features")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = init.ones((num_features,), device=device) if affine else None
        self.bias = init.zeros((num_features,), device=device) if affine and bias else None
        if track_running_stats:
            self.register_buffer("running_mean", init.fresh_buffer(Tensor.zeros(num_features, device=device)))
            self.register_buffer("running_var", init.fresh_buffer(Tensor.ones(num_features, device=device)))
            self.register_buffer(
                "num_batches_tracked", init.fresh_buffer(Tensor.zeros((), dtype=dtypes.int64, device=device))
            )


class _BatchNorm(_ChannelNorm):
    expected_dims: tuple[int, ...] = ()
    running_mean: Tensor
    running_var: Tensor
    num_batches_tracked: Tensor

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: str | None = None,
    ) -> None:
        super().__init__()
        self._set_features(num_features, eps, momentum, affine, track_running_stats, device)

    def forward(self, x: Tensor) -> Tensor:
        """Normalizes each channel (dim 1) with batch statistics (training) or the running ones (eval)."""
        if x.ndim not in self.expected_dims:
            dims = " or ".join(f"{count}-d" for count in self.expected_dims)
            raise ValueError(f"{type(self).__name__} expects a {dims} input, got shape {x.shape}")
        running = self.track_running_stats
        if running:
            stale = [
                t for t in (self.running_mean, self.running_var, self.num_batches_tracked) if t.uop.op is Ops.ASSIGN
            ]
            if stale:  # an earlier training forward's update nobody realized yet
                Tensor.realize_all(*stale)
        use_batch = self.training or not running
        if not use_batch:
            return x.batch_norm(self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
        if not running:
            return x.batch_norm(None, None, self.weight, self.bias, True, 0.0, self.eps)
        momentum = self.momentum
        if momentum is None:
            # cumulative moving average: momentum 1 / batches seen; that count is on the host after the realize
            count = int(self.num_batches_tracked.item()) + 1
            momentum = 1.0 / count
        result = x.batch_norm(None, None, self.weight, self.bias, True, momentum, self.eps)
        # the three statistics in one simultaneous write: one schedule per layer and forward, not three
        updates = running_updates(x, self.running_mean, self.running_var, momentum)
        write_many([*updates, (self.num_batches_tracked, self.num_batches_tracked + 1)])
        return result

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}"


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (batch, features) or (batch, features, length), like `torch.nn.BatchNorm1d`.

    Example:
        >>> BatchNorm1d(3)(Tensor.randn(8, 3)).shape
        (8, 3)
    """

    expected_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (batch, channels, height, width), like `torch.nn.BatchNorm2d`."""

    expected_dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalization of (batch, channels, depth, height, width), like `torch.nn.BatchNorm3d`."""

    expected_dims = (5,)


class _LastDimsNorm(Module):
    """What LayerNorm and RMSNorm share: the normalized last dims as a tuple and a weight of ones when affine."""

    def __init__(self, normalized_shape: int | Sequence[int], affine: bool, device: str | None) -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.weight = init.ones(self.normalized_shape, device=device) if affine else None


class LayerNorm(_LastDimsNorm):
    """Normalizes over the last dims `normalized_shape` (weight ones, bias zeros), like `torch.nn.LayerNorm`.

    Example:
        >>> LayerNorm(4)(Tensor.randn(2, 4)).shape
        (2, 4)
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: str | None = None,
    ) -> None:
        super().__init__(normalized_shape, elementwise_affine, device)
        self.eps = eps
        self.bias = init.zeros(self.normalized_shape, device=device) if elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        """The layer normalization of x."""
        return x.layer_norm(self.normalized_shape, self.weight, self.bias, self.eps)


class GroupNorm(Module):
    """Normalizes groups of channels, like `torch.nn.GroupNorm` (per-channel weight ones, bias zeros)."""

    def __init__(
        self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device: str | None = None
    ) -> None:
        super().__init__()
        check_positive_int(num_groups, "GroupNorm num_groups")
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight = init.ones((num_channels,), device=device) if affine else None
        self.bias = init.zeros((num_channels,), device=device) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        """The group normalization of x (batch, channels, *)."""
        return x.group_norm(self.num_groups, self.weight, self.bias, self.eps)


class RMSNorm(_LastDimsNorm):
    """x / sqrt(mean(x**2) + eps) * weight over the last dims, like `torch.nn.RMSNorm` (eps None: the dtype's
    machine epsilon)."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: str | None = None,
    ) -> None:
        super().__init__(normalized_shape, elementwise_affine, device)
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        """The RMS normalization of x."""
        return x.rms_norm(self.normalized_shape, self.weight, self.eps)
