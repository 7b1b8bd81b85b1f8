"""Gradient clipping (`clip_grad_norm_`, `clip_grad_value_`, torch.nn.utils' names): each replaces every
parameter's `.grad` by a lazy clipped version, so the clipping fuses into the optimizer step's kernels."""

from __future__ import annotations

import math
from collections.abc import Iterable

from kiln.tensor.grad_mode import no_grad
from kiln.tensor.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def _with_gradients(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    items = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for index, item in enumerate(items):
        if not isinstance(item, Tensor):
            raise TypeError(f"clipping needs Tensors, item {index} is {type(item).__name__}")
    return [item for item in items if item.grad is not None]


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False
) -> Tensor:
    """Scales all gradients together so their joint `norm_type`-norm is at most `max_norm` (PyTorch's rule:
    grad *= min(1, max_norm / (total_norm + 1e-6))); returns the total norm (a lazy 0-dim Tensor).

    `error_if_nonfinite=True` reads the norm (a host round trip) and raises RuntimeError when it is nan or inf.

    Example:
        >>> w = Tensor([3.0, 4.0], requires_grad=True); _ = (w * w).sum().backward() # grad (6, 8), norm 10
        >>> clip_grad_norm_([w], 1.0).item(), [round(g, 4) for g in w.grad.tolist()]
        (10.0, [0.6, 0.8])
    """
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)):
        raise TypeError(f"max_norm must be a number, got {max_norm!r}")
    if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)) or norm_type <= 0:
        raise ValueError(f"norm_type must be a positive number or inf, got {norm_type!r}")
    with_gradients = _with_gradients(parameters)
    if not with_gradients:
        return Tensor(0.0)
    with no_grad():
        gradients = [p.grad for p in with_gradients if p.grad is not None]
        if math.isinf(norm_type):
            norms = [g.abs().amax().float() for g in gradients]
            total = norms[0].stack(*norms[1:]).amax()
        elif norm_type == 2.0:  # the common case: squares need no abs (and no pow)
            squares = [(g.float() * g.float()).sum() for g in gradients]
            total = squares[0]
            for square in squares[1:]:  # 0-dim sums added up: fewer ops to build than stack().sum() on every step
                total = total + square
            total = total.sqrt()
        else:
            powers = [(g.abs().float() ** norm_type).sum() for g in gradients]
            total = powers[0].stack(*powers[1:]).sum() ** (1.0 / norm_type)
        if error_if_nonfinite and not math.isfinite(float(total.item())):
            raise RuntimeError(
                f"the total norm of order {norm_type} of the gradients is non-finite ({total.item()}), so it cannot "
                f"be clipped; pass error_if_nonfinite=False to clip anyway"
            )
        scale = (max_norm / (total + 1e-6)).minimum(1.0)
        for parameter in with_gradients:
            assert parameter.grad is not None
            parameter.grad = (parameter.grad * scale.cast(parameter.grad.dtype)).detach()
    return total


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamps every gradient element into [-clip_value, clip_value].

    Example:
        >>> w = Tensor([3.0, -4.0], requires_grad=True); _ = (w * w).sum().backward()
        >>> clip_grad_value_([w], 5.0); w.grad.tolist()
        [5.0, -5.0]
    """
    if isinstance(clip_value, bool) or not isinstance(clip_value, (int, float)):
        raise TypeError(f"clip_value must be a number, got {clip_value!r}")
    with no_grad():
        for parameter in _with_gradients(parameters):
            assert parameter.grad is not None
            parameter.grad = parameter.grad.clamp(-clip_value, clip_value).detach()
