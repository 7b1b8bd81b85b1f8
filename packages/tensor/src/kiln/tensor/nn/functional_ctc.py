"""`ctc_loss`: the connectionist temporal classification loss of `kiln.tensor.nn.functional`, with
`torch.nn.functional.ctc_loss`'s signature.

The loss is -log of the total probability of every alignment of the target with the input frames (blanks between
and around the labels, repeats merged). It runs the forward (alpha) recursion of Graves et al. 2006 in log space
over the extended label sequence (blank, l1, blank, l2, ..., blank), one step per frame, and its gradient is the
autodiff of that recursion (the same numbers as torch's alpha-beta gradient). The lengths are read on the host: they
shape the masks. A very negative finite number stands for log 0, so impossible paths keep finite gradients;
a loss whose every path is impossible is infinite (or 0 with `zero_infinity`), as in torch. Like torch, the
gradient reported for `log_probs` is the one of the logits under a log_softmax (it adds exp(log_probs)).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = ["ctc_loss"]

_LOG_ZERO = -1e30


def _lengths(value: Tensor | Sequence[int] | int, count: int, what: str) -> list[int]:
    if isinstance(value, Tensor):
        items = value.reshape(-1).tolist()
    else:
        items = [value] if isinstance(value, int) else list(value)
    lengths = [int(item) for item in items]
    if len(lengths) != count:
        raise RuntimeError(f"ctc_loss: expected {what} to have size {count}, but got {len(lengths)}")
    return lengths


def _logsumexp(*terms: Tensor) -> Tensor:
    stacked = Tensor.stack(*terms)
    top = stacked.amax(0).detach()
    return top + (stacked - top).exp().sum(0).log()


def ctc_loss(
    log_probs: Tensor, targets: Tensor, input_lengths: Tensor | Sequence[int] | int,
    target_lengths: Tensor | Sequence[int] | int,
    blank: int = 0, reduction: str = "mean", zero_infinity: bool = False,
) -> Tensor:  # fmt: skip
    """The CTC loss of log-probabilities `log_probs` (T, N, C) (or unbatched (T, C)) against `targets` (N, S) padded
    or the concatenated 1-d targets, like `torch.nn.functional.ctc_loss` ('mean' divides each loss by its target
    length, then averages)."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    unbatched = log_probs.ndim == 2
    if unbatched:
        log_probs = log_probs.unsqueeze(1)
        targets = targets.unsqueeze(0) if targets.ndim == 1 else targets
    if log_probs.ndim != 3:
        raise RuntimeError(f"ctc_loss: log_probs must be (T, N, C) or (T, C), got {list(log_probs.shape)}")
    frames, batch, classes = log_probs.shape
    if not 0 <= blank < classes:
        raise RuntimeError(f"blank must be in label range, got blank={blank} for {classes} classes")
    input_sizes = _lengths(input_lengths, batch, "input_lengths")
    target_sizes = _lengths(target_lengths, batch, "target_lengths")
    for n, (length, target_length) in enumerate(zip(input_sizes, target_sizes)):
        if not 0 <= length <= frames:
            raise RuntimeError(
                f"Expected input_lengths to have value at most {frames}, but got value {length} (sample {n})"
            )
        if target_length < 0:
            raise RuntimeError(f"ctc_loss: target_lengths must be non-negative, got {target_length} (sample {n})")
    longest = max(target_sizes, default=0)
    padded = _padded_targets(targets, target_sizes, longest)  # (N, S) int64 on the host
    extended = np.full((batch, 2 * longest + 1), blank, np.int64)
    extended[:, 1::2] = padded
    width = extended.shape[1]
    valid = np.arange(width)[None, :] < (2 * np.array(target_sizes)[:, None] + 1)
    # a skip from s - 2 to s is allowed onto a label that differs from the label two places back
    skip = np.zeros((batch, width), bool)
    skip[:, 2:] = (extended[:, 2:] != blank) & (extended[:, 2:] != extended[:, :-2])
    device = log_probs.device
    index = Tensor(extended, device=device).cast(dtypes.int32).reshape(1, batch, width).expand(frames, batch, width)
    emissions = log_probs.gather(2, index)  # (T, N, width): log p of each extended label at each frame
    valid_t, skip_t = Tensor(valid, device=device), Tensor(skip, device=device)
    start = np.zeros((batch, width), bool)
    start[:, 0] = True
    start[:, 1] = np.array(target_sizes) > 0
    alpha = Tensor(start, device=device).where(emissions[0], _LOG_ZERO)
    finals = [alpha]
    for t in range(1, frames):
        stay = alpha
        step = Tensor.full((batch, 1), _LOG_ZERO, dtype=alpha.dtype, device=device).cat(alpha[:, :-1], dim=1)
        jump = Tensor.full((batch, 2), _LOG_ZERO, dtype=alpha.dtype, device=device).cat(alpha[:, :-2], dim=1)
        jump = skip_t.where(jump, _LOG_ZERO)
        alpha = valid_t.where(_logsumexp(stay, step, jump) + emissions[t], _LOG_ZERO)
        finals.append(alpha)
    losses = []
    for n in range(batch):
        if input_sizes[n] == 0:
            losses.append(Tensor(0.0 if target_sizes[n] == 0 else float("inf"), dtype=log_probs.dtype, device=device))
            continue
        last = finals[input_sizes[n] - 1][n]
        end = 2 * target_sizes[n]
        total = last[end] if target_sizes[n] == 0 else _logsumexp(last[end], last[end - 1])
        losses.append(-total)
    loss = Tensor.stack(*losses) + _torch_gradient_term(log_probs, input_sizes)
    impossible = loss > -_LOG_ZERO / 2
    loss = impossible.where(0.0 if zero_infinity else float("inf"), loss)._cast(log_probs.dtype)
    if unbatched and reduction == "none":
        return loss[0]
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    divisors = Tensor([max(size, 1) for size in target_sizes], dtype=loss.dtype, device=device)
    return (loss / divisors).mean()


def _torch_gradient_term(log_probs: Tensor, input_sizes: list[int]) -> Tensor:
    """Zero per sample, with gradient exp(log_probs) on its frames: torch's ctc_loss reports the gradient of the
    logits under a log_softmax (exp(log_probs) - occupancy) as the gradient of log_probs; through a log_softmax
    both give the same logits' gradient (the occupancies of a frame sum to 1)."""
    frames = log_probs.shape[0]
    inside = Tensor(np.arange(frames)[:, None] < np.array(input_sizes)[None, :], device=log_probs.device)
    weighted = inside.unsqueeze(-1).where(log_probs.exp().detach() * log_probs, 0.0)
    return (weighted - weighted.detach()).sum((0, 2))


def _padded_targets(targets: Tensor, target_sizes: list[int], longest: int) -> np.ndarray:
    values = np.asarray(targets.numpy(), np.int64)
    batch = len(target_sizes)
    if values.ndim == 2:
        if values.shape[0] != batch or (longest > values.shape[1]):
            raise RuntimeError(
                f"ctc_loss: targets of shape {list(values.shape)} do not hold {batch} targets of lengths {target_sizes}"
            )
        return values[:, :longest]
    if values.ndim != 1 or values.shape[0] != sum(target_sizes):
        raise RuntimeError(
            f"ctc_loss: concatenated targets must have sum(target_lengths) = {sum(target_sizes)} entries, got "
            f"{list(values.shape)}"
        )
    padded = np.zeros((batch, longest), np.int64)
    offset = 0
    for n, size in enumerate(target_sizes):
        padded[n, :size] = values[offset : offset + size]
        offset += size
    return padded
