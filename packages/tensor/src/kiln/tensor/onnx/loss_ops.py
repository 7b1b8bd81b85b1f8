"""Loss operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (reductions none / sum / mean,
class weights, ignore_index)."""

from __future__ import annotations

from kiln.tensor import dtypes
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import one_of, operator
from kiln.tensor.tensor import Tensor

__all__: list[str] = []

_REDUCTIONS = ["none", "sum", "mean"]


def negative_log_likelihood(
    log_probabilities: Tensor, target: Tensor, weight: Tensor | None, reduction: str, ignore_index: int | None
) -> Tensor:
    """-log_probabilities[n, target[n, ...], ...] weighted by class, with ONNX's reductions."""
    target = target.cast(dtypes.int64)
    ignored = target == ignore_index if ignore_index is not None else target.zeros_like().cast(dtypes.bool)
    safe = ignored.where(0, target)
    picked = log_probabilities.gather(1, safe.unsqueeze(1)).squeeze(1)
    if weight is None:
        weights = ignored.where(0.0, 1.0).cast(log_probabilities.dtype)
    else:
        weights = ignored.where(0.0, weight.index_select(0, safe.reshape(-1)).reshape(safe.shape))
        weights = weights.cast(log_probabilities.dtype)
    loss = -picked * weights
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / weights.sum()


@operator(
    "NegativeLogLikelihoodLoss",
    attributes=["reduction", "ignore_index"],
    check=one_of("reduction", _REDUCTIONS, "mean"),
)
def _negative_log_likelihood_loss(call: NodeCall) -> Tensor:
    ignore = call.attributes.values.get("ignore_index")
    return negative_log_likelihood(
        call.tensor(0),
        call.tensor(1),
        call.optional(2),
        call.attributes.string("reduction", "mean"),
        None if ignore is None else int(ignore),
    )


@operator(
    "SoftmaxCrossEntropyLoss",
    attributes=["reduction", "ignore_index"],
    check=one_of("reduction", _REDUCTIONS, "mean"),
)
def _softmax_cross_entropy_loss(call: NodeCall) -> tuple[Tensor, Tensor]:
    scores = call.tensor(0)
    log_probabilities = scores.log_softmax(1)
    ignore = call.attributes.values.get("ignore_index")
    loss = negative_log_likelihood(
        log_probabilities,
        call.tensor(1),
        call.optional(2),
        call.attributes.string("reduction", "mean"),
        None if ignore is None else int(ignore),
    )
    return loss, log_probabilities
