"""tinygrad's nn layer names where they differ from torch's, with tinygrad's constructor signatures: `BatchNorm`
(any rank, arguments (sz, eps, affine, track_running_stats, momentum)), `InstanceNorm` (affine by default, any
number of spatial dims) and `LayerNorm2d` (LayerNorm over the channels of (N, C, H, W)).

The layers that tinygrad and torch spell alike (`Linear`, `Conv2d`, `Embedding`, `LSTMCell`, `RMSNorm`,
`GroupNorm`, `LayerNorm`) keep torch's behaviour in kiln; where tinygrad's differs:
- training mode: `BatchNorm` here follows tinygrad's switch `Context(TRAINING=0|1)` (the TRAINING knob) while it
  is set, else the module's `training` flag (`model.train()` / `model.eval()`); the layers spelled as in torch
  follow the module flag only (`Tensor.dropout()` without `training` follows the switch too).
- `Embedding` draws its weight from N(0, 1) (tinygrad: glorot-uniform); `LSTMCell` draws its biases from
  U(-1/sqrt(hidden), 1/sqrt(hidden)) (tinygrad: zeros); `RMSNorm`'s default eps is None, the dtype's machine epsilon
  (tinygrad: 1e-6). Load a tinygrad checkpoint to get tinygrad's values.
- tinygrad's `Conv2d` takes any number of spatial dims from its kernel_size; kiln's `Conv1d/2d/3d` are fixed.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.tensor.nn import functional as F
from kiln.tensor.nn import init
from kiln.tensor.nn.arguments import check_positive_int
from kiln.tensor.nn.module import Module
from kiln.tensor.nn.normalization import LayerNorm, _BatchNorm
from kiln.tensor.ops.nn import training_switch
from kiln.tensor.tensor import Tensor

__all__ = ["BatchNorm", "InstanceNorm", "LayerNorm2d"]


class BatchNorm(_BatchNorm):
    """tinygrad's `nn.BatchNorm`: batch normalization over dim 1 of an input of any rank >= 2, with tinygrad's argument
    order (sz, eps, affine, track_running_stats, momentum) and torch's parameters, buffers and state-dict names.

    Example:
        >>> BatchNorm(3)(Tensor.randn(4, 3, 5)).shape
        (4, 3, 5)
    """

    expected_dims = (2, 3, 4, 5, 6)

    def __init__(
        self,
        sz: int,
        eps: float = 1e-5,
        affine: bool = True,
        track_running_stats: bool = True,
        momentum: float | None = 0.1,
        device: str | None = None,
    ) -> None:
        super().__init__(sz, eps, momentum, affine, track_running_stats, device)

    def forward(self, x: Tensor) -> Tensor:
        """Batch statistics in training, the running ones in inference; tinygrad's `Context(TRAINING=0|1)` decides
        while it is set, else the module's `train()` / `eval()` flag."""
        switch = training_switch()
        if switch is None or switch == self.training:
            return super().forward(x)
        flag = self.training
        self.training = switch
        try:
            return super().forward(x)
        finally:
            self.training = flag


class InstanceNorm(Module):
    """tinygrad's `nn.InstanceNorm`: each (sample, channel) of (N, C, *spatial) normalized over its spatial dims, then
    scaled and shifted per channel when affine (the default, unlike torch's InstanceNorm1d/2d/3d).

    Example:
        >>> InstanceNorm(3)(Tensor.randn(2, 3, 4, 4)).shape
        (2, 3, 4, 4)
    """

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True, device: str | None = None) -> None:
        super().__init__()
        check_positive_int(num_features, "InstanceNorm num_features")
        self.num_features, self.eps, self.affine = num_features, eps, affine
        self.weight = init.ones((num_features,), device=device) if affine else None
        self.bias = init.zeros((num_features,), device=device) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        """The instance normalization of x (N, C, *spatial)."""
        if x.ndim < 3 or x.shape[1] != self.num_features:
            raise ValueError(
                f"InstanceNorm expects (N, {self.num_features}, *spatial) with spatial dims, got {x.shape}"
            )
        return F.instance_norm(x, None, None, self.weight, self.bias, True, 0.0, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, affine={self.affine}"


class LayerNorm2d(LayerNorm):
    """tinygrad's `nn.LayerNorm2d`: LayerNorm over the channels of (N, C, H, W) (each pixel normalized across C).

    Example:
        >>> LayerNorm2d(3)(Tensor.randn(2, 3, 4, 4)).shape
        (2, 3, 4, 4)
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        device: str | None = None,
    ) -> None:
        super().__init__(normalized_shape, eps, elementwise_affine, device=device)

    def forward(self, x: Tensor) -> Tensor:
        """LayerNorm of x (N, C, H, W) over C."""
        if x.ndim != 4:
            raise ValueError(f"LayerNorm2d expects an (N, C, H, W) input, got shape {x.shape}")
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
