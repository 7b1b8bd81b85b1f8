"""Loss modules with `torch.nn`'s names, constructor arguments (the deprecated `size_average` / `reduce` included)
and buffers (`weight`, `pos_weight` are registered buffers, so they appear in the state dict as in torch), each
calling the function of the same name in `kiln.tensor.nn.functional`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from kiln.tensor.nn import functional as F
from kiln.tensor.nn.distance import PairwiseDistance
from kiln.tensor.nn.functional_losses import legacy_reduction
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor

__all__ = [
    "BCELoss", "BCEWithLogitsLoss", "CTCLoss", "CosineEmbeddingLoss", "CrossEntropyLoss", "GaussianNLLLoss",
    "HingeEmbeddingLoss", "HuberLoss", "KLDivLoss", "L1Loss", "MSELoss", "MarginRankingLoss", "MultiLabelMarginLoss",
    "MultiLabelSoftMarginLoss", "MultiMarginLoss", "NLLLoss", "NLLLoss2d", "PoissonNLLLoss", "SmoothL1Loss",
    "SoftMarginLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss",
]  # fmt: skip


class _Loss(Module):
    def __init__(self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = legacy_reduction(size_average, reduce, reduction)


class _PairLoss(_Loss):
    """A loss of (input, target) whose forward is `_function(input, target, **keywords)`: subclasses set `_function`
    (a staticmethod of the functional form) and `_keywords` (the attributes passed by name)."""

    _function: ClassVar[Callable[..., Tensor]]
    _keywords: ClassVar[tuple[str, ...]] = ("reduction",)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        """`_function` of input and target with the loss's settings."""
        return type(self)._function(input, target, **{name: getattr(self, name) for name in self._keywords})


class _WeightedLoss(_PairLoss):
    weight: Tensor | None

    def __init__(
        self, weight: Tensor | None = None, size_average: bool | None = None, reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        _optional_buffer(self, "weight", weight)


def _optional_buffer(module: Module, name: str, tensor: Tensor | None) -> None:
    # torch registers None buffers too; they stay out of the state dict
    if tensor is None:
        setattr(module, name, None)
    else:
        module.register_buffer(name, tensor)


class L1Loss(_PairLoss):
    """Mean (or sum) of |input - target|, like `torch.nn.L1Loss`."""

    _function = staticmethod(F.l1_loss)


class MSELoss(_PairLoss):
    """Mean (or sum) of (input - target)**2, like `torch.nn.MSELoss`.

    Example:
        >>> MSELoss()(Tensor([1.0, 3.0]), Tensor([0.0, 0.0])).item()
        5.0
    """

    _function = staticmethod(F.mse_loss)


class CrossEntropyLoss(_WeightedLoss):
    """Cross entropy of logits against class indices or probabilities, like `torch.nn.CrossEntropyLoss`."""

    _function = staticmethod(F.cross_entropy)
    _keywords = ("weight", "ignore_index", "reduction", "label_smoothing")

    def __init__(
        self, weight: Tensor | None = None, size_average: bool | None = None, ignore_index: int = -100,
        reduce: bool | None = None, reduction: str = "mean", label_smoothing: float = 0.0,
    ) -> None:  # fmt: skip
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing


class NLLLoss(_WeightedLoss):
    """Negative log likelihood of log-probabilities at class indices, like `torch.nn.NLLLoss`."""

    _function = staticmethod(F.nll_loss)
    _keywords = ("weight", "ignore_index", "reduction")

    def __init__(
        self, weight: Tensor | None = None, size_average: bool | None = None, ignore_index: int = -100,
        reduce: bool | None = None, reduction: str = "mean",
    ) -> None:  # fmt: skip
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities, like `torch.nn.BCELoss`."""

    _function = staticmethod(F.binary_cross_entropy)
    _keywords = ("weight", "reduction")


class BCEWithLogitsLoss(_PairLoss):
    """Binary cross entropy of logits (`pos_weight` scaling the positive term), like `torch.nn.BCEWithLogitsLoss`."""

    _function = staticmethod(F.binary_cross_entropy_with_logits)
    _keywords = ("weight", "reduction", "pos_weight")

    weight: Tensor | None
    pos_weight: Tensor | None

    def __init__(
        self, weight: Tensor | None = None, size_average: bool | None = None, reduce: bool | None = None,
        reduction: str = "mean", pos_weight: Tensor | None = None,
    ) -> None:  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        _optional_buffer(self, "weight", weight)
        _optional_buffer(self, "pos_weight", pos_weight)


class SmoothL1Loss(_PairLoss):
    """Quadratic below `beta`, linear above, like `torch.nn.SmoothL1Loss`."""

    _function = staticmethod(F.smooth_l1_loss)
    _keywords = ("reduction", "beta")

    def __init__(
        self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean", beta: float = 1.0
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.beta = beta


class HuberLoss(_PairLoss):
    """Quadratic below `delta`, delta-scaled linear above, like `torch.nn.HuberLoss`."""

    _function = staticmethod(F.huber_loss)
    _keywords = ("reduction", "delta")

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction)
        self.delta = delta


class KLDivLoss(_PairLoss):
    """Kullback-Leibler divergence of log-probabilities from `target`, like `torch.nn.KLDivLoss`."""

    _function = staticmethod(F.kl_div)
    _keywords = ("reduction", "log_target")

    def __init__(
        self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean",
        log_target: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target


class _MarginLoss(_Loss):
    def __init__(
        self, margin: float = 0.0, size_average: bool | None = None, reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.margin = margin


class CosineEmbeddingLoss(_MarginLoss):
    """1 - cos for similar pairs (target 1), max(0, cos - margin) for dissimilar (-1), like
    `torch.nn.CosineEmbeddingLoss`."""

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        """F.cosine_embedding_loss(input1, input2, target, margin, reduction)."""
        return F.cosine_embedding_loss(input1, input2, target, self.margin, reduction=self.reduction)


class MarginRankingLoss(_MarginLoss):
    """max(0, -target (input1 - input2) + margin), like `torch.nn.MarginRankingLoss`."""

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        """F.margin_ranking_loss(input1, input2, target, margin, reduction)."""
        return F.margin_ranking_loss(input1, input2, target, self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_MarginLoss):
    """input for target 1, max(0, margin - input) for -1, like `torch.nn.HingeEmbeddingLoss` (margin 1.0)."""

    def __init__(
        self, margin: float = 1.0, size_average: bool | None = None, reduce: bool | None = None,
        reduction: str = "mean",
    ) -> None:  # fmt: skip
        super().__init__(margin, size_average, reduce, reduction)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        """F.hinge_embedding_loss(input, target, margin, reduction)."""
        return F.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class SoftMarginLoss(_PairLoss):
    """log(1 + exp(-target input)), like `torch.nn.SoftMarginLoss`."""

    _function = staticmethod(F.soft_margin_loss)


class TripletMarginLoss(_Loss):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)), like `torch.nn.TripletMarginLoss`."""

    def __init__(
        self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False,
        size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean",
    ) -> None:  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead")
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        """F.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, reduction)."""
        return F.triplet_margin_loss(
            anchor, positive, negative, self.margin, self.p, self.eps, self.swap, reduction=self.reduction
        )


class PoissonNLLLoss(_Loss):
    """Poisson negative log likelihood, like `torch.nn.PoissonNLLLoss`."""

    def __init__(
        self, log_input: bool = True, full: bool = False, size_average: bool | None = None, eps: float = 1e-8,
        reduce: bool | None = None, reduction: str = "mean",
    ) -> None:  # fmt: skip
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input: Tensor, target: Tensor) -> Tensor:
        """F.poisson_nll_loss(input, target, log_input, full, eps, reduction)."""
        return F.poisson_nll_loss(log_input, target, self.log_input, self.full, eps=self.eps, reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    """Gaussian negative log likelihood with predicted variance `var`, like `torch.nn.GaussianNLLLoss`."""

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean") -> None:
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input: Tensor, target: Tensor, var: Tensor | float) -> Tensor:
        """F.gaussian_nll_loss(input, target, var, full, eps, reduction)."""
        return F.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class NLLLoss2d(NLLLoss):
    """`NLLLoss` under its deprecated 2-d name, like `torch.nn.NLLLoss2d`."""


class MultiLabelSoftMarginLoss(_WeightedLoss):
    """Per-class logistic loss averaged over classes, like `torch.nn.MultiLabelSoftMarginLoss`."""

    _function = staticmethod(F.multilabel_soft_margin_loss)
    _keywords = ("weight", "reduction")


class MultiLabelMarginLoss(_PairLoss):
    """Hinge loss between each target class and each other class, like `torch.nn.MultiLabelMarginLoss`."""

    _function = staticmethod(F.multilabel_margin_loss)


class MultiMarginLoss(_WeightedLoss):
    """Multi-class hinge loss, like `torch.nn.MultiMarginLoss`."""

    _function = staticmethod(F.multi_margin_loss)
    _keywords = ("p", "margin", "weight", "reduction")

    def __init__(
        self, p: int = 1, margin: float = 1.0, weight: Tensor | None = None, size_average: bool | None = None,
        reduce: bool | None = None, reduction: str = "mean",
    ) -> None:  # fmt: skip
        if p not in (1, 2):
            raise ValueError(f"only p == 1 and p == 2 supported, got {p!r}")
        if weight is not None and weight.ndim != 1:
            raise ValueError(f"MultiMarginLoss: expected weight to be None or 1D tensor, got {weight.ndim}D instead")
        super().__init__(weight, size_average, reduce, reduction)
        self.p, self.margin = p, margin


class TripletMarginWithDistanceLoss(_Loss):
    """Triplet loss with any distance function (a `PairwiseDistance()` submodule by default, as in torch), like
    `torch.nn.TripletMarginWithDistanceLoss`."""

    def __init__(
        self, *, distance_function: Callable[[Tensor, Tensor], Tensor] | None = None, margin: float = 1.0,
        swap: bool = False, reduction: str = "mean",
    ) -> None:  # fmt: skip
        super().__init__(reduction=reduction)
        if margin <= 0:
            raise ValueError(
                f"TripletMarginWithDistanceLoss: expected margin to be greater than 0, got {margin} instead"
            )
        self.distance_function = distance_function if distance_function is not None else PairwiseDistance()
        self.margin, self.swap = margin, swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        """F.triplet_margin_with_distance_loss(anchor, positive, negative, ...)."""
        return F.triplet_margin_with_distance_loss(
            anchor, positive, negative, distance_function=self.distance_function, margin=self.margin,
            swap=self.swap, reduction=self.reduction,
        )  # fmt: skip


class CTCLoss(_Loss):
    """The connectionist temporal classification loss, like `torch.nn.CTCLoss`."""

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False) -> None:
        super().__init__(reduction=reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(
        self, log_probs: Tensor, targets: Tensor, input_lengths: Tensor | Sequence[int],
        target_lengths: Tensor | Sequence[int],
    ) -> Tensor:  # fmt: skip
        """F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)."""
        return F.ctc_loss(
            log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction, self.zero_infinity
        )
