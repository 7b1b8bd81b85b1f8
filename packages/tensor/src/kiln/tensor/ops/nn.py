"""`NNMixin`: the neural-network functions of Tensor, gathered from one mixin per concept, plus `dropout`.

| module | methods |
| --- | --- |
| linalg | matmul, @, dot, einsum, linear |
| convolution | conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d |
| pooling | max_pool1d/2d/3d, avg_pool1d/2d/3d, lp_pool1d/2d/3d |
| adaptive_pooling | adaptive_avg_pool1d/2d/3d, adaptive_max_pool1d/2d/3d |
| unpooling | max_unpool1d/2d/3d |
| interpolation | interpolate |
| sorting | sort, argsort, topk |
| losses | one_hot, cross_entropy, nll_loss, binary_cross_entropy(_with_logits), mse_loss, l1_loss, smooth_l1_loss, |
| | huber_loss, kl_div, margin_ranking_loss, hinge_embedding_loss; tinygrad's binary_crossentropy(_logits), |
| | sparse_categorical_crossentropy |
| similarity | cosine_similarity, pairwise_distance |
| normalization | layer_norm, batch_norm, group_norm, rms_norm |
| attention | scaled_dot_product_attention |
| initializers | kaiming_uniform, kaiming_normal, glorot_uniform, scaled_uniform, xavier_uniform, xavier_normal |
"""

from __future__ import annotations

from typing import Self

from kiln.tensor.ops.adaptive_pooling import AdaptivePoolingMixin
from kiln.tensor.ops.attention import AttentionMixin
from kiln.tensor.ops.convolution import ConvolutionMixin
from kiln.tensor.ops.initializers import InitializerMixin
from kiln.tensor.ops.interpolation import InterpolationMixin
from kiln.tensor.ops.linalg import LinalgMixin
from kiln.tensor.ops.losses import LossMixin
from kiln.tensor.ops.normalization import NormalizationMixin
from kiln.tensor.ops.pooling import PoolingMixin
from kiln.tensor.ops.similarity import SimilarityMixin
from kiln.tensor.ops.sorting import SortingMixin
from kiln.tensor.ops.unpooling import UnpoolingMixin
from kiln.uops import dtypes
from kiln.uops.knobs import register_knob

TRAINING = register_knob(
    "TRAINING",
    int,
    -1,
    "tinygrad's training switch (`with Context(TRAINING=1):`): 1 makes `Tensor.dropout()` called without `training` "
    "drop elements and tinygrad's `nn.BatchNorm` use batch statistics; 0 turns both off; -1 (unset) leaves dropout "
    "on (torch's `F.dropout` default) and the layer to its module's `train()` / `eval()` flag.",
    env="KILN_TRAINING",
    owner="kiln.tensor",
    choices=(-1, 0, 1),
)


def training_switch() -> bool | None:
    """The TRAINING knob as a bool (tinygrad's `Context(TRAINING=...)`), or None while it is unset (-1)."""
    value = TRAINING.value()
    return None if value == -1 else bool(value)


__all__ = ["NNMixin"]


class NNMixin(
    LinalgMixin,
    ConvolutionMixin,
    PoolingMixin,
    AdaptivePoolingMixin,
    UnpoolingMixin,
    InterpolationMixin,
    SortingMixin,
    LossMixin,
    SimilarityMixin,
    NormalizationMixin,
    AttentionMixin,
    InitializerMixin,
):
    """Neural-network functions: linear algebra, convolution, pooling, resizing, sorting, losses, normalization,
    attention and dropout."""

    def dropout(self, p: float = 0.5, training: bool | None = None) -> Self:
        """Each element zeroed with probability `p` and the rest scaled by 1 / (1 - p), like
        `torch.nn.functional.dropout`; the identity when not `training` or p = 0. `training` None follows tinygrad's
        switch `Context(TRAINING=0|1)` when it is set, else drops (torch's default). The mask comes from the global
        random generator (`Tensor.manual_seed`), so it is the same on every device.

        Example:
            >>> Tensor.ones(4).dropout(0.0).tolist()
            [1.0, 1.0, 1.0, 1.0]
        """
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability p must be in [0, 1], got {p!r}")
        if training is None:
            switch = training_switch()
            training = True if switch is None else switch
        if not isinstance(training, bool):
            raise TypeError(f"dropout training must be a bool or None, got {training!r}")
        if not training or p == 0:
            return self
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"dropout needs a floating-point tensor, got {self.dtype!r}")
        if p == 1:
            return self * 0
        keep = type(self).rand(*self.shape, device=self.device) >= p
        return keep.where(self * (1.0 / (1.0 - p)), 0.0)._cast(self.dtype)
