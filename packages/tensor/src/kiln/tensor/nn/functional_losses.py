"""The loss functions of `kiln.tensor.nn.functional`, with `torch.nn.functional`'s signatures and defaults.

Each function is a thin layer over the Tensor method of the same name where one exists; what torch adds on top
(the legacy `size_average` / `reduce` arguments, the elementwise `weight` of `mse_loss` / `l1_loss` / `huber_loss`)
is handled here. Import them from `kiln.tensor.nn.functional`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

from kiln.tensor.tensor import Tensor

__all__ = [
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cosine_embedding_loss",
    "cross_entropy",
    "gaussian_nll_loss",
    "hinge_embedding_loss",
    "huber_loss",
    "kl_div",
    "l1_loss",
    "legacy_reduction",
    "margin_ranking_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "multilabel_soft_margin_loss",
    "triplet_margin_with_distance_loss",
    "mse_loss",
    "nll_loss",
    "poisson_nll_loss",
    "smooth_l1_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
]

_REDUCTIONS = ("none", "mean", "sum")


def legacy_reduction(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    """The `reduction` string that torch's deprecated `size_average` / `reduce` flags stand for (`reduction`
    itself when both are None): reduce=False -> 'none', else size_average=False -> 'sum', else 'mean'."""
    if size_average is None and reduce is None:
        return reduction
    averaged = True if size_average is None else size_average
    reduced = True if reduce is None else reduce
    legacy = "none" if not reduced else ("mean" if averaged else "sum")
    warnings.warn(
        f"size_average and reduce args will be deprecated, please use reduction='{legacy}' instead.",
        UserWarning,
        stacklevel=3,
    )
    return legacy


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if reduction == "none":
        return loss
    return loss.mean() if reduction == "mean" else loss.sum()


def _check_weight_shape(weight: Tensor, input: Tensor) -> None:
    if weight.shape != input.shape:
        raise ValueError(
            f"Weights and input must have the same size: weight {list(weight.shape)}, input {list(input.shape)}"
        )


def _weighted(errors: Tensor, weight: Tensor, reduction: str, mean_over_weight: bool) -> Tensor:
    # torch's weighted mse / l1 'mean' divides by the weights' sum, its weighted huber by the element count
    if reduction not in _REDUCTIONS:
        raise ValueError(f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'.")
    weighted = errors * weight
    if reduction == "mean" and mean_over_weight:
        return weighted.sum() / weight.sum()
    return _reduce(weighted, reduction)


def _distance_loss(input: Tensor, target: Tensor, reduction: str, weight: Tensor | None, squared: bool) -> Tensor:
    """mse_loss (`squared`) or l1_loss: the Tensor method, or torch's weighted form when an elementwise weight is
    given."""
    if weight is None:
        return input.mse_loss(target, reduction) if squared else input.l1_loss(target, reduction)
    _check_weight_shape(weight, input)
    difference = input - target
    errors = difference.square() if squared else difference.abs()
    return _weighted(errors, weight, reduction, mean_over_weight=True)


def _triplet(
    anchor: Tensor, positive: Tensor, negative: Tensor, distance: Callable[[Tensor, Tensor], Tensor], margin: float,
    swap: bool, reduction: str,
) -> Tensor:  # fmt: skip
    """max(0, margin + d(anchor, positive) - d(anchor, negative)), `swap` taking the smaller of d(anchor, negative)
    and d(positive, negative), reduced: the triplet losses over any distance."""
    to_positive = distance(anchor, positive)
    to_negative = distance(anchor, negative)
    if swap:
        to_negative = to_negative.minimum(distance(positive, negative))
    return _reduce((margin + to_positive - to_negative).relu(), reduction)


def cross_entropy(
    input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,
    ignore_index: int = -100, reduce: bool | None = None, reduction: str = "mean", label_smoothing: float = 0.0,
) -> Tensor:  # fmt: skip
    """Cross entropy of logits `input` (N, C, *) or (C,) against class indices or class probabilities `target`,
    like `torch.nn.functional.cross_entropy` (class `weight`, `ignore_index`, `label_smoothing`).

    Example:
        >>> cross_entropy(Tensor([[0.0, 0.0]]), Tensor([1])).item()  # log 2
        0.6931...
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    return input.cross_entropy(target, weight, ignore_index, reduction, label_smoothing)


def nll_loss(
    input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,
    ignore_index: int = -100, reduce: bool | None = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """Negative log likelihood of log-probabilities `input` (N, C, *) at class indices `target`, like
    `torch.nn.functional.nll_loss`."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    return input.nll_loss(target, weight, ignore_index, reduction)


def mse_loss(
    input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
    reduction: str = "mean", weight: Tensor | None = None,
) -> Tensor:  # fmt: skip
    """(input - target)**2, reduced; an elementwise `weight` multiplies each term ('mean' then divides by the
    weights' sum), like `torch.nn.functional.mse_loss`."""
    return _distance_loss(input, target, legacy_reduction(size_average, reduce, reduction), weight, squared=True)


def l1_loss(
    input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
    reduction: str = "mean", weight: Tensor | None = None,
) -> Tensor:  # fmt: skip
    """|input - target|, reduced; an elementwise `weight` as in `mse_loss`, like `torch.nn.functional.l1_loss`."""
    return _distance_loss(input, target, legacy_reduction(size_average, reduce, reduction), weight, squared=False)


def smooth_l1_loss(
    input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
    reduction: str = "mean", beta: float = 1.0,
) -> Tensor:  # fmt: skip
    """0.5 d**2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target), like
    `torch.nn.functional.smooth_l1_loss`."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    return input.smooth_l1_loss(target, reduction, beta)


def huber_loss(
    input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0, weight: Tensor | None = None
) -> Tensor:
    """0.5 d**2 where |d| < delta, else delta (|d| - 0.5 delta); an elementwise `weight` multiplies each term
    ('mean' averages over the elements), like `torch.nn.functional.huber_loss`."""
    if weight is None:
        return input.huber_loss(target, reduction, delta)
    _check_weight_shape(weight, input)
    return _weighted(input.huber_loss(target, "none", delta), weight, reduction, mean_over_weight=False)


def binary_cross_entropy(
    input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,
    reduce: bool | None = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """-(target log(input) + (1 - target) log(1 - input)) for probabilities `input`, like
    `torch.nn.functional.binary_cross_entropy` (log terms clamped at -100)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    return input.binary_cross_entropy(target, weight, reduction)


def binary_cross_entropy_with_logits(
    input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,
    reduce: bool | None = None, reduction: str = "mean", pos_weight: Tensor | None = None,
) -> Tensor:  # fmt: skip
    """`binary_cross_entropy(sigmoid(input), target)` computed stably from logits, `pos_weight` scaling the positive
    term, like `torch.nn.functional.binary_cross_entropy_with_logits`."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    return input.binary_cross_entropy_with_logits(target, weight, reduction, pos_weight)


def kl_div(
    input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
    reduction: str = "mean", log_target: bool = False,
) -> Tensor:  # fmt: skip
    """target (log target - input) for log-probabilities `input` (`log_target`: target given as log-probabilities),
    like `torch.nn.functional.kl_div` ('batchmean' divides the sum by the batch size)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    return input.kl_div(target, reduction, log_target)


def margin_ranking_loss(
    input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0, size_average: bool | None = None,
    reduce: bool | None = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """max(0, -target (input1 - input2) + margin), like `torch.nn.functional.margin_ranking_loss`."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    return input1.margin_ranking_loss(input2, target, margin, reduction)


def hinge_embedding_loss(
    input: Tensor, target: Tensor, margin: float = 1.0, size_average: bool | None = None, reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """input where target is 1, max(0, margin - input) where it is -1, like
    `torch.nn.functional.hinge_embedding_loss`."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    return input.hinge_embedding_loss(target, margin, reduction)


def soft_margin_loss(
    input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """log(1 + exp(-target input)), like `torch.nn.functional.soft_margin_loss`."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    return _reduce((-target * input).softplus(), reduction)


def cosine_embedding_loss(
    input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0, size_average: bool | None = None,
    reduce: bool | None = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """1 - cos(input1, input2) where target is 1, max(0, cos - margin) where it is -1 (cosine over the last dim),
    like `torch.nn.functional.cosine_embedding_loss`."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if input1.shape != input2.shape or input1.ndim not in (1, 2):
        raise RuntimeError(
            f"cosine_embedding_loss needs two inputs of one shape with 1 or 2 dims, got {list(input1.shape)} and "
            f"{list(input2.shape)}"
        )
    if target.shape != input1.shape[:-1]:
        raise RuntimeError(
            f"cosine_embedding_loss target must have shape {list(input1.shape[:-1])}, got {list(target.shape)}"
        )
    # torch adds EPSILON = 1e-12 to each squared magnitude
    products = (input1 * input2).sum(-1)
    magnitudes = ((input1 * input1).sum(-1) + 1e-12) * ((input2 * input2).sum(-1) + 1e-12)
    cosine = products / magnitudes.sqrt()
    positive = (target == 1).where(1.0 - cosine, 0.0)
    negative = (target == -1).where((cosine - margin).relu(), 0.0)
    return _reduce(positive + negative, reduction)


def triplet_margin_loss(
    anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2, eps: float = 1e-6,
    swap: bool = False, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """max(0, margin + d(anchor, positive) - d(anchor, negative)) with the p-norm `pairwise_distance` (`swap`: the
    smaller of d(anchor, negative) and d(positive, negative)), like `torch.nn.functional.triplet_margin_loss`."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    dims = {anchor.ndim, positive.ndim, negative.ndim}
    if len(dims) != 1 or anchor.ndim not in (1, 2):
        raise RuntimeError(
            "triplet_margin_loss needs anchor, positive and negative with the same number of dims (1 or 2), got "
            f"{anchor.ndim}, {positive.ndim} and {negative.ndim}"
        )
    return _triplet(anchor, positive, negative, lambda a, b: a.pairwise_distance(b, p, eps), margin, swap, reduction)


def poisson_nll_loss(
    input: Tensor, target: Tensor, log_input: bool = True, full: bool = False, size_average: bool | None = None,
    eps: float = 1e-8, reduce: bool | None = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """Poisson negative log likelihood: exp(input) - target input (`log_input`), else input - target log(input + eps);
    `full` adds Stirling's term for target > 1, like `torch.nn.functional.poisson_nll_loss`."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        safe = (target > 1).where(target, 1.0)
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + (target > 1).where(stirling, 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(
    input: Tensor, target: Tensor, var: Tensor | float, full: bool = False, eps: float = 1e-6, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """0.5 (log(max(var, eps)) + (input - target)**2 / max(var, eps)) (+ 0.5 log(2 pi) with `full`), like
    `torch.nn.functional.gaussian_nll_loss` (a `var` with one dim fewer, or a last dim of 1, broadcasts)."""
    if not isinstance(var, Tensor):
        if var < 0:
            raise ValueError(f"gaussian_nll_loss var has negative entry/entries: {var!r}")
        var = Tensor.full(input.shape, float(var), dtype=input.dtype, device=input.device)
    if var.shape != input.shape:
        if input.shape[:-1] == var.shape or (input.shape[:-1] == var.shape[:-1] and var.shape[-1:] == (1,)):
            var = var.reshape(*input.shape[:-1], 1)
        else:
            raise ValueError(f"gaussian_nll_loss var of shape {list(var.shape)} does not fit input {list(input.shape)}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    # torch clamps a clone of var under no_grad: the values are clamped, the gradient passes as if unclamped
    clamped = var + (var.clamp(min=eps) - var).detach()
    loss = 0.5 * (clamped.log() + (input - target).square() / clamped)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def multilabel_soft_margin_loss(
    input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,
    reduce: bool | None = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """Per sample, the mean over classes of -(y log sigmoid(x) + (1 - y) log sigmoid(-x)) (times `weight`), like
    `torch.nn.functional.multilabel_soft_margin_loss`."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    loss = -(target * input.logsigmoid() + (1 - target) * (-input).logsigmoid())
    if weight is not None:
        loss = loss * weight
    classes = input.shape[-1] if input.ndim else 1
    return _reduce(loss.sum(-1) / classes, reduction)


def _class_mask(target: Tensor, classes: int, like: Tensor) -> Tensor:
    # (..., classes): 1 where the class is the sample's target
    positions = Tensor.arange(classes, device=target.device)
    return (target.unsqueeze(-1) == positions).cast(like.dtype)


def multi_margin_loss(
    input: Tensor, target: Tensor, p: int = 1, margin: float = 1.0, weight: Tensor | None = None,
    size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """Per sample, sum over classes j != y of max(0, margin - x[y] + x[j])**p / C (times weight[y]), like
    `torch.nn.functional.multi_margin_loss`."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError(f"only p == 1 and p == 2 supported, got {p!r}")
    if input.ndim not in (1, 2) or target.shape != input.shape[:-1]:
        raise RuntimeError(
            f"multi_margin_loss needs input (N, C) or (C,) and target (N,) or (): got input {list(input.shape)} and "
            f"target {list(target.shape)}"
        )
    classes = input.shape[-1]
    is_target = _class_mask(target, classes, input)
    chosen = (input * is_target).sum(-1, keepdim=True)
    terms = (margin - chosen + input).relu()
    if p == 2:
        terms = terms.square()
    if weight is not None:
        terms = terms * (is_target * weight).sum(-1, keepdim=True)
    return _reduce((terms * (1 - is_target)).sum(-1) / classes, reduction)


def multilabel_margin_loss(
    input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """Per sample, sum over its target classes j (the entries of `target` before the first -1) and the other
    classes i of max(0, 1 - (x[j] - x[i])) / C, like `torch.nn.functional.multilabel_margin_loss`."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if input.ndim not in (1, 2) or target.shape != input.shape:
        raise RuntimeError(
            f"multilabel_margin_loss needs input and target of one shape (N, C) or (C,), got {list(input.shape)} "
            f"and {list(target.shape)}"
        )
    classes = input.shape[-1]
    # a target entry counts while no -1 came before it
    valid = (target != -1).cast(input.dtype).cumprod(-1)
    picked = _class_mask(target.clamp(min=0), classes, input) * valid.unsqueeze(-1)  # (..., K, C)
    is_target = picked.amax(-2)  # (..., C)
    chosen = (picked * input.unsqueeze(-2)).sum(-1)  # (..., K): x[target_k]
    terms = (1 - chosen.unsqueeze(-1) + input.unsqueeze(-2)).relu()  # (..., K, C)
    mask = valid.unsqueeze(-1) * (1 - is_target).unsqueeze(-2)
    return _reduce((terms * mask).sum((-2, -1)) / classes, reduction)


def triplet_margin_with_distance_loss(
    anchor: Tensor, positive: Tensor, negative: Tensor, *, distance_function: Callable[[Tensor, Tensor], Tensor]
    | None = None, margin: float = 1.0, swap: bool = False, reduction: str = "mean",
) -> Tensor:  # fmt: skip
    """max(0, margin + d(anchor, positive) - d(anchor, negative)) with any `distance_function` (default
    `pairwise_distance`), like `torch.nn.functional.triplet_margin_with_distance_loss`."""
    if margin <= 0:
        raise ValueError(
            f"triplet_margin_with_distance_loss: expected margin to be greater than 0, got {margin} instead"
        )
    distance = distance_function if distance_function is not None else Tensor.pairwise_distance
    return _triplet(anchor, positive, negative, distance, margin, swap, reduction)
