"""`LossMixin`: PyTorch's loss functions with the prediction as `self`, and `one_hot` for class targets.

Class-index targets pick their class with a one-hot comparison (target == arange(classes)) inside a sum, so no gather
is needed and the pick fuses into the loss's reduce. Like PyTorch, the 'mean' of a weighted class loss divides by the
sum of the picked weights, and ignored targets (`ignore_index`) count neither in the sum nor in the divisor.
Targets outside [0, classes) that are not `ignore_index` cannot be detected without reading the data (the graph is
lazy): they pick no class and contribute zero.
"""

from __future__ import annotations

from typing import Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import broadcast_shapes, check_int, check_same_device
from kiln.tensor.ops.creation import iota
from kiln.tensor.ops.data_checks import check_index_values
from kiln.uops import dtypes

__all__ = ["LossMixin"]

_REDUCTIONS = ("none", "mean", "sum")


def _require(value: TensorT, what: str) -> TensorT:
    if not isinstance(value, TensorCore):
        raise TypeError(f"{what} must be a Tensor, got {type(value).__name__}")
    return value


def _check_reduction(reduction: object, what: str, allowed: tuple[str, ...] = _REDUCTIONS) -> str:
    if reduction not in allowed:
        raise ValueError(f"{what} reduction must be one of {allowed}, got {reduction!r}")
    return str(reduction)


def _reduce(loss: TensorT, reduction: str) -> TensorT:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _floating_pair(prediction: TensorT, target: TensorT, what: str, same_shape: bool) -> tuple[TensorT, TensorT]:
    """(prediction, target) as one floating dtype; shapes equal (`same_shape`) or broadcast to one shape."""
    target = _require(target, f"{what} target")
    check_same_device(what, prediction, target)
    if same_shape and prediction.shape != target.shape:
        raise ValueError(f"{what}: target shape {target.shape} must equal the input shape {prediction.shape}")
    try:
        shape = broadcast_shapes(prediction.shape, target.shape)
    except ValueError:
        raise ValueError(
            f"{what}: target shape {target.shape} does not broadcast with input shape {prediction.shape}"
        ) from None
    dtype = prediction.dtype if dtypes.is_float(prediction.dtype) else dtypes.default_float
    if dtypes.is_float(target.dtype) and target.dtype.itemsize > dtype.itemsize:
        dtype = target.dtype
    return prediction._cast(dtype)._broadcast_to(shape), target._cast(dtype)._broadcast_to(shape)


def _class_shapes(prediction: TensorCore, target: TensorCore, what: str) -> None:
    """Checks (classes,) with (), (batch, classes) with (batch,) or (batch, classes, *d) with (batch, *d)."""
    if prediction.ndim == 0:
        raise ValueError(f"{what}: input must have a class dim, got a 0-dim tensor")
    expected = prediction.shape[:1] + prediction.shape[2:] if prediction.ndim > 1 else ()
    if target.shape != expected:
        raise ValueError(
            f"{what}: class-index target shape {target.shape} must be {expected} for input shape {prediction.shape} "
            "(the input's shape without its class dim, dim 1)"
        )


def _class_weight(weight: TensorT | None, classes: int, what: str) -> TensorT | None:
    if weight is None:
        return None
    checked = _require(weight, f"{what} weight")
    if checked.shape != (classes,):
        raise ValueError(f"{what} weight must have shape ({classes},) (one value per class), got {checked.shape}")
    return checked


def _class_axis_view(values: TensorT, ndim: int) -> TensorT:
    """A (classes,) tensor shaped to broadcast along dim 1 of an `ndim`-dim input (dim 0 when ndim == 1)."""
    if ndim == 1:
        return values
    return values.reshape(1, values.shape[0], *((1,) * (ndim - 2)))


def _picked_weights(log_probabilities: TensorT, target: TensorT, weight: TensorT | None, ignore_index: int) -> TensorT:
    """The input-shaped tensor holding weight[t] (1 without weights) at each kept target's class t, else 0."""
    class_dim = 0 if log_probabilities.ndim == 1 else 1
    classes = log_probabilities.shape[class_dim]
    check_index_values(target, classes, "class target", class_dim, negative=False, ignore=ignore_index)
    positions = _class_axis_view(iota(type(target), classes, target.device)._cast(target.dtype), log_probabilities.ndim)
    hits = target.unsqueeze(class_dim).eq(positions) & target.ne(ignore_index).unsqueeze(class_dim)
    dtype = log_probabilities.dtype
    scale = _class_axis_view(weight._cast(dtype), log_probabilities.ndim) if weight is not None else 1.0
    return hits.where(scale, 0.0)._cast(dtype)


def _nll(log_probabilities: TensorT, picked: TensorT, reduction: str) -> TensorT:
    """PyTorch's nll_loss over checked arguments, given `_picked_weights`."""
    class_dim = 0 if log_probabilities.ndim == 1 else 1
    # where, not a product: a -inf log-probability of a class that is not picked must not turn into NaN
    losses = -picked.ne(0).where(log_probabilities * picked, 0.0).sum(class_dim)
    if reduction == "none":
        return losses
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / picked.sum()


class LossMixin(TensorCore):
    """Loss functions (`torch.nn.functional.*_loss` with the input as `self`)."""

    def one_hot(self, num_classes: int = -1) -> Self:
        """An int64 tensor with a trailing dim of `num_classes` that is 1 at each value's position, like
        `torch.nn.functional.one_hot` (-1 infers max + 1, which reads the data).

        Example:
            >>> Tensor([0, 2]).one_hot(3).tolist()
            [[1, 0, 0], [0, 0, 1]]
        """
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"one_hot needs an integer tensor of class indices, got {self.dtype!r}")
        classes = check_int(num_classes, "one_hot num_classes")
        if classes == -1:
            if self.numel() == 0:
                raise ValueError("one_hot cannot infer num_classes from an empty tensor; pass num_classes")
            low, high = int(self.min().item()), int(self.max().item())
            if low < 0:
                raise ValueError(f"one_hot class values must be non-negative, got {low}")
            classes = high + 1
        elif classes < 0:
            raise ValueError(f"one_hot num_classes must be -1 (infer) or >= 0, got {classes}")
        check_index_values(self, classes, "one_hot", 0, negative=False, error=RuntimeError)
        positions = iota(type(self), classes, self.device)._cast(self.dtype)
        return (self.unsqueeze(-1) == positions)._cast(dtypes.int64)

    def nll_loss(
        self, target: Self, weight: Self | None = None, ignore_index: int = -100, reduction: str = "mean"
    ) -> Self:
        """The negative log likelihood of class-index `target` under log-probabilities `self` (classes in dim 1, or
        dim 0 for an unbatched (classes,) input), like `torch.nn.functional.nll_loss`.

        Example:
            >>> Tensor([[-1.0, -2.0], [-3.0, -0.5]]).nll_loss(Tensor([0, 1])).item()
            0.75
        """
        target = _require(target, "nll_loss target")
        if not dtypes.is_int(target.dtype):
            raise TypeError(f"nll_loss target must hold integer class indices, got {target.dtype!r}")
        _class_shapes(self, target, "nll_loss")
        check_same_device("nll_loss", self, target)
        mode = _check_reduction(reduction, "nll_loss")
        classes = self.shape[0 if self.ndim == 1 else 1]
        checked = _class_weight(weight, classes, "nll_loss")
        log_probabilities = self._floating()
        ignore = check_int(ignore_index, "nll_loss ignore_index")
        return _nll(log_probabilities, _picked_weights(log_probabilities, target, checked, ignore), mode)

    def cross_entropy(
        self,
        target: Self,
        weight: Self | None = None,
        ignore_index: int = -100,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> Self:
        """Cross entropy between logits `self` (classes in dim 1, or dim 0 unbatched) and `target`, like
        `torch.nn.functional.cross_entropy`.

        `target` is either integer class indices (the input's shape without the class dim; `ignore_index` skips
        entries) or class probabilities (the input's shape, floating point). `label_smoothing` mixes the target
        with the uniform distribution over classes.

        Example:
            >>> round(Tensor([[0.0, 0.0]]).cross_entropy(Tensor([1])).item(), 5)
            0.69315
        """
        target = _require(target, "cross_entropy target")
        check_same_device("cross_entropy", self, target)
        mode = _check_reduction(reduction, "cross_entropy")
        if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)):
            raise TypeError(f"cross_entropy label_smoothing must be a float, got {label_smoothing!r}")
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"cross_entropy label_smoothing must be in [0, 1], got {label_smoothing}")
        if self.ndim == 0:
            raise ValueError("cross_entropy: input must have a class dim, got a 0-dim tensor")
        class_dim = 0 if self.ndim == 1 else 1
        classes = self.shape[class_dim]
        checked = _class_weight(weight, classes, "cross_entropy")
        log_probabilities = self._floating().log_softmax(class_dim)
        scale = _class_axis_view(checked._cast(log_probabilities.dtype), self.ndim) if checked is not None else None
        if dtypes.is_float(target.dtype):
            if target.shape != self.shape:
                raise ValueError(
                    f"cross_entropy: probability target shape {target.shape} must equal the input shape {self.shape}"
                )
            probabilities = target._cast(log_probabilities.dtype)
            if label_smoothing > 0:
                probabilities = probabilities * (1 - label_smoothing) + label_smoothing / classes
            weighted = log_probabilities * scale if scale is not None else log_probabilities
            return _reduce(-(weighted * probabilities).sum(class_dim), mode)
        if not dtypes.is_int(target.dtype):
            raise TypeError(
                f"cross_entropy target must be class indices (integer) or probabilities (float), got {target.dtype!r}"
            )
        _class_shapes(self, target, "cross_entropy")
        ignore = check_int(ignore_index, "cross_entropy ignore_index")
        picked = _picked_weights(log_probabilities, target, checked, ignore)
        loss = _nll(log_probabilities, picked, mode)
        if label_smoothing == 0:
            return loss
        # PyTorch: (1 - s) * nll + s / classes * (the summed log-probabilities, weighted, of the kept entries)
        kept = target.ne(ignore)
        weighted = log_probabilities * scale if scale is not None else log_probabilities
        smooth = -kept.where(weighted.sum(class_dim), 0.0)
        if mode == "none":
            smoothed = smooth
        elif mode == "sum":
            smoothed = smooth.sum()
        else:
            smoothed = smooth.sum() / picked.sum()
        return loss * (1 - label_smoothing) + smoothed * (label_smoothing / classes)

    def binary_cross_entropy(self, target: Self, weight: Self | None = None, reduction: str = "mean") -> Self:
        """-(t * log(p) + (1 - t) * log(1 - p)) for probabilities `self` and targets `t` of one shape, with each log
        clamped at -100 like `torch.nn.functional.binary_cross_entropy`; `weight` broadcasts to the input.

        Example:
            >>> round(Tensor([0.5]).binary_cross_entropy(Tensor([1.0])).item(), 5)
            0.69315
        """
        prediction, truth = _floating_pair(self, target, "binary_cross_entropy", same_shape=True)
        mode = _check_reduction(reduction, "binary_cross_entropy")
        log_p = prediction.log().maximum(-100.0)
        log_not_p = (1 - prediction).log().maximum(-100.0)
        losses = -(truth * log_p + (1 - truth) * log_not_p)
        if weight is not None:
            losses = losses * _require(weight, "binary_cross_entropy weight")
        return _reduce(losses, mode)

    def binary_cross_entropy_with_logits(
        self,
        target: Self,
        weight: Self | None = None,
        reduction: str = "mean",
        pos_weight: Self | None = None,
    ) -> Self:
        """binary_cross_entropy(sigmoid(self), target) computed stably from logits, like
        `torch.nn.functional.binary_cross_entropy_with_logits`; `pos_weight` scales the positive term per class
        (broadcast along the last dim).

        Example:
            >>> round(Tensor([0.0]).binary_cross_entropy_with_logits(Tensor([1.0])).item(), 5)
            0.69315
        """
        logits, truth = _floating_pair(self, target, "binary_cross_entropy_with_logits", same_shape=True)
        mode = _check_reduction(reduction, "binary_cross_entropy_with_logits")
        # log(1 + exp(-x)) without overflow: max(-x, 0) + log(1 + exp(-|x|))
        softplus_negative = (-logits).maximum(0.0) + (1 + (-logits.abs()).exp()).log()
        if pos_weight is not None:
            positive = _require(pos_weight, "binary_cross_entropy_with_logits pos_weight")
            losses = (1 - truth) * logits + (1 + (positive - 1) * truth) * softplus_negative
        else:
            losses = (1 - truth) * logits + softplus_negative
        if weight is not None:
            losses = losses * _require(weight, "binary_cross_entropy_with_logits weight")
        return _reduce(losses, mode)

    def mse_loss(self, target: Self, reduction: str = "mean") -> Self:
        """(self - target) ** 2, reduced, like `torch.nn.functional.mse_loss` (shapes broadcast).

        Example:
            >>> Tensor([1.0, 2.0]).mse_loss(Tensor([0.0, 0.0])).item()
            2.5
        """
        prediction, truth = _floating_pair(self, target, "mse_loss", same_shape=False)
        difference = prediction - truth
        return _reduce(difference * difference, _check_reduction(reduction, "mse_loss"))

    def l1_loss(self, target: Self, reduction: str = "mean") -> Self:
        """|self - target|, reduced, like `torch.nn.functional.l1_loss` (shapes broadcast).

        Example:
            >>> Tensor([1.0, -2.0]).l1_loss(Tensor([0.0, 0.0])).item()
            1.5
        """
        prediction, truth = _floating_pair(self, target, "l1_loss", same_shape=False)
        return _reduce((prediction - truth).abs(), _check_reduction(reduction, "l1_loss"))

    def smooth_l1_loss(self, target: Self, reduction: str = "mean", beta: float = 1.0) -> Self:
        """0.5 * d ** 2 / beta where |d| < beta, else |d| - 0.5 * beta (d = self - target), like
        `torch.nn.functional.smooth_l1_loss`; beta = 0 is the L1 loss.

        Example:
            >>> Tensor([0.5, 3.0]).smooth_l1_loss(Tensor([0.0, 0.0])).item()
            1.3125
        """
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or beta < 0:
            raise ValueError(f"smooth_l1_loss beta must be a non-negative number, got {beta!r}")
        prediction, truth = _floating_pair(self, target, "smooth_l1_loss", same_shape=False)
        distance = (prediction - truth).abs()
        if beta == 0:
            losses = distance
        else:
            losses = (distance < beta).where(distance * distance * (0.5 / beta), distance - 0.5 * beta)
        return _reduce(losses, _check_reduction(reduction, "smooth_l1_loss"))

    def huber_loss(self, target: Self, reduction: str = "mean", delta: float = 1.0) -> Self:
        """0.5 * d ** 2 where |d| <= delta, else delta * (|d| - 0.5 * delta), like
        `torch.nn.functional.huber_loss` (delta times smooth_l1 with beta = delta).

        Example:
            >>> Tensor([0.5, 3.0]).huber_loss(Tensor([0.0, 0.0]), delta=2.0).item()
            2.0625
        """
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not delta > 0:
            raise ValueError(f"huber_loss delta must be a positive number, got {delta!r}")
        prediction, truth = _floating_pair(self, target, "huber_loss", same_shape=False)
        distance = (prediction - truth).abs()
        losses = (distance <= delta).where(distance * distance * 0.5, (distance - 0.5 * delta) * delta)
        return _reduce(losses, _check_reduction(reduction, "huber_loss"))

    def kl_div(self, target: Self, reduction: str = "mean", log_target: bool = False) -> Self:
        """The Kullback-Leibler divergence with the input as log-probabilities: target * (log(target) - self)
        (0 where target is 0), like `torch.nn.functional.kl_div`; 'batchmean' divides the sum by the batch size.

        Example:
            >>> round(Tensor([-0.5]).kl_div(Tensor([0.5]), reduction="sum").item(), 5)
            -0.09657
        """
        if not isinstance(log_target, bool):
            raise TypeError(f"kl_div log_target must be a bool, got {log_target!r}")
        mode = _check_reduction(reduction, "kl_div", (*_REDUCTIONS, "batchmean"))
        prediction, truth = _floating_pair(self, target, "kl_div", same_shape=False)
        if log_target:
            losses = truth.exp() * (truth - prediction)
        else:
            # xlogy: 0 * log(0) counts as 0
            losses = truth.eq(0).where(0.0, truth * (truth.log() - prediction))
        if mode == "batchmean":
            return losses.sum() / (prediction.shape[0] if prediction.ndim else 1)
        return _reduce(losses, mode)

    def margin_ranking_loss(self, x2: Self, target: Self, margin: float = 0.0, reduction: str = "mean") -> Self:
        """max(0, -target * (self - x2) + margin), reduced, like `torch.nn.functional.margin_ranking_loss`
        (target holds 1 where `self` should rank higher, -1 where `x2` should; shapes broadcast).

        Example:
            >>> Tensor([1.0, 2.0]).margin_ranking_loss(Tensor([2.0, 1.0]), Tensor([1.0, 1.0])).item()
            0.5
        """
        if isinstance(margin, bool) or not isinstance(margin, (int, float)):
            raise TypeError(f"margin_ranking_loss margin must be a number, got {margin!r}")
        mode = _check_reduction(reduction, "margin_ranking_loss")
        first, second = _floating_pair(self, x2, "margin_ranking_loss", same_shape=False)
        difference, truth = _floating_pair(first - second, target, "margin_ranking_loss", same_shape=False)
        return _reduce((-truth * difference + margin).maximum(0.0), mode)

    def hinge_embedding_loss(self, target: Self, margin: float = 1.0, reduction: str = "mean") -> Self:
        """self where target is 1 and max(0, margin - self) where target is -1 (PyTorch adds both terms for any
        other target value), reduced, like `torch.nn.functional.hinge_embedding_loss`.

        Example:
            >>> Tensor([0.3, 0.2]).hinge_embedding_loss(Tensor([1.0, -1.0])).item()
            0.55
        """
        if isinstance(margin, bool) or not isinstance(margin, (int, float)):
            raise TypeError(f"hinge_embedding_loss margin must be a number, got {margin!r}")
        mode = _check_reduction(reduction, "hinge_embedding_loss")
        prediction, truth = _floating_pair(self, target, "hinge_embedding_loss", same_shape=False)
        beyond_margin = truth.ne(1).where((margin - prediction).maximum(0.0), 0.0)
        kept = truth.ne(-1).where(prediction, 0.0)
        return _reduce(beyond_margin + kept, mode)

    # tinygrad's spellings

    def binary_crossentropy(self, Y: Self, reduction: str = "mean") -> Self:
        """tinygrad's name for `binary_cross_entropy` of probabilities `self` and targets `Y`.

        Example:
            >>> round(Tensor([0.5]).binary_crossentropy(Tensor([0.0])).item(), 5)
            0.69315
        """
        return self.binary_cross_entropy(Y, reduction=reduction)

    def binary_crossentropy_logits(self, Y: Self, reduction: str = "mean", pos_weight: Self | None = None) -> Self:
        """tinygrad's name for `binary_cross_entropy_with_logits` of logits `self` and targets `Y`.

        Example:
            >>> round(Tensor([0.0]).binary_crossentropy_logits(Tensor([0.0])).item(), 5)
            0.69315
        """
        return self.binary_cross_entropy_with_logits(Y, reduction=reduction, pos_weight=pos_weight)

    def sparse_categorical_crossentropy(
        self, Y: Self, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean"
    ) -> Self:
        """tinygrad's cross entropy of logits `self` with the classes in the LAST dim and integer class targets `Y`
        (self's shape without that dim); entries equal to `ignore_index` (default -1) count nowhere.

        Example:
            >>> round(Tensor([[0.0, 0.0], [5.0, 5.0]]).sparse_categorical_crossentropy(Tensor([1, -1])).item(), 5)
            0.69315
        """
        target = _require(Y, "sparse_categorical_crossentropy Y")
        if not dtypes.is_int(target.dtype):
            raise TypeError(f"sparse_categorical_crossentropy Y must hold integer class indices, got {target.dtype!r}")
        logits = self if self.ndim <= 2 else self.permute(0, self.ndim - 1, *range(1, self.ndim - 1))
        smoothing = label_smoothing
        return logits.cross_entropy(target, ignore_index=ignore_index, reduction=reduction, label_smoothing=smoothing)
