"""`NormalizationMixin`: layer_norm, batch_norm, group_norm and rms_norm in PyTorch's functional form.

Each normalizes by statistics over some dims, (x - mean) / sqrt(var + eps) with the biased variance, then applies an
optional per-feature weight and bias. 16-bit floats compute their statistics in float32 and round once at the end.
batch_norm in training mode also updates the running statistics in place: both buffers in one simultaneous write
(`write_many`, one schedule); `running_updates` gives those writes to a caller that adds its own (BatchNorm's
batch counter).

batch_norm in training mode reads its input once for its statistics (`batch_statistics`: the sums of x - s and
(x - s)**2 per channel, one reduce kernel, s a value of the channel), and its result carries a gradient shortcut
(`kiln.tensor.gradient`): the input gradient w * inv_std * (g - mean(g) - x_hat * mean(g * x_hat)) and the weight and
bias gradients sum(g * x_hat) and sum(g) from one pair of reductions (one kernel), where the primitives' rules took
the mean and the variance apart again (a BatchNorm2d forward and backward: 13 -> 11 kernels; the ResNet block of
benchmarks/train_bench.py keeps 47 a step, 38 -> 33 distinct kernels).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.gradient import Gradients, set_gradient_shortcut
from kiln.tensor.ops._checks import check_int, check_same_device
from kiln.tensor.realize.mutation import write_many
from kiln.uops import DType, Ops, UOp, dtypes

__all__ = ["NormalizationMixin", "batch_statistics", "running_updates"]


def _require_optional(value: TensorT | None, what: str) -> TensorT | None:
    if value is not None and not isinstance(value, TensorCore):
        raise TypeError(f"{what} must be a Tensor or None, got {type(value).__name__}")
    return value


def _check_parameter(value: TensorT | None, shape: tuple[int, ...], what: str) -> TensorT | None:
    tensor = _require_optional(value, what)
    if tensor is not None and tensor.shape != shape:
        raise ValueError(f"{what} must have shape {shape}, got {tensor.shape}")
    return tensor


def _check_eps(eps: object, what: str) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"{what} eps must be a non-negative number, got {eps!r}")
    return float(eps)


def _compute_dtype(x: TensorCore, what: str) -> DType:
    if not dtypes.is_float(x.dtype):
        raise TypeError(f"{what} needs a floating-point tensor, got {x.dtype!r}; cast first")
    return dtypes.float32 if x.dtype.itemsize < 4 else x.dtype


def _normalized(x: TensorT, axes: tuple[int, ...], eps: float) -> TensorT:
    """(x - mean) / sqrt(var + eps) with statistics over `axes` (biased variance)."""
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    variance = (centered * centered).mean(axes, keepdim=True)
    return centered * (variance + eps).rsqrt()


def batch_statistics(x: TensorT, axes: tuple[int, ...]) -> tuple[TensorT, TensorT]:
    """(mean, biased variance) of `x` over `axes` (kept as size-1 dims) in one pass over the data: the means of
    d = x - s and of d * d, s the first value of each channel (detached: neither statistic depends on it), then
    mean = s + mean(d), variance = mean(d * d) - mean(d)**2. The shift keeps the subtraction from cancelling where
    the mean is large against the spread (E[x**2] - E[x]**2 unshifted loses all digits of a channel around 1e4 with
    spread 1); both sums are one reduce kernel, where mean then variance of x - mean were two passes."""
    bounds = tuple((0, 1) if axis in axes else (0, size) for axis, size in enumerate(x.shape))
    shifted = x - x._movement(Ops.SHRINK, bounds).detach()
    offset = shifted.mean(axes, keepdim=True)
    square = (shifted * shifted).mean(axes, keepdim=True)
    return x._movement(Ops.SHRINK, bounds).detach() + offset, (square - offset * offset).maximum(0.0)


def _attach_batch_norm_gradient(
    result: TensorT,
    x: TensorT,
    normalized: TensorT,
    inverse: TensorT,
    weight: TensorT | None,
    bias: TensorT | None,
    axes: tuple[int, ...],
    view: Sequence[int],
) -> None:
    """Gives `result` (weight * normalized + bias, normalized = (x - mean) * inverse with the batch statistics of
    `x` over `axes`) the gradients of x, weight and bias from two per-channel reductions of the upstream gradient g
    (see the module doc): g - mean(g) - normalized * mean(g * normalized), times weight * inverse, for x."""
    wrap = type(x)._from_uop
    count = math.prod(x.shape[axis] for axis in axes)
    inputs = tuple(t.uop for t in (x, weight, bias) if t is not None)

    def rule(node: UOp, upstream: UOp, wanted: tuple[bool, ...]) -> Gradients:
        gradient = wrap(upstream)
        # the sums without the kept dims: the weight and bias gradients are these buffers themselves (no copy)
        total, correlation = gradient.sum(axes), (gradient * normalized).sum(axes)
        found: list[UOp | None] = [None]
        if wanted[0]:
            scale = inverse if weight is None else inverse * weight._cast(x.dtype).reshape(*view)
            # one elementwise kernel: the per-channel terms are combined per element, not in kernels of their own
            mean_terms = (total.reshape(*view) + normalized * correlation.reshape(*view)) * (1.0 / count)
            found[0] = ((gradient - mean_terms) * scale).uop
        for parameter, summed in ((weight, correlation), (bias, total)):
            if parameter is not None:
                flag = wanted[len(found)]
                found.append(summed._cast(parameter.dtype).uop if flag else None)
        return tuple(found)

    set_gradient_shortcut(result.uop, inputs, rule)


def _affine(x: TensorT, weight: TensorT | None, bias: TensorT | None, view: Sequence[int]) -> TensorT:
    """x * weight + bias with the parameters reshaped to `view` (None skips one)."""
    if weight is not None:
        x = x * weight._cast(x.dtype).reshape(*view)
    if bias is not None:
        x = x + bias._cast(x.dtype).reshape(*view)
    return x


def running_updates(
    x: TensorT, running_mean: TensorT | None, running_var: TensorT | None, momentum: float
) -> list[tuple[TensorT, TensorT]]:
    """The training-mode updates of batch norm's running statistics from the input `x` (batch, channels, *):
    (buffer, new value) pairs, running = (1 - momentum) * running + momentum * batch statistic (the variance
    unbiased), for `write_many` to apply as one simultaneous write (one schedule)."""
    compute = _compute_dtype(x, "batch_norm")
    axes = (0, *range(2, x.ndim))
    channels = (x.shape[1],)
    count = math.prod(x.shape[axis] for axis in axes)
    mean, variance = batch_statistics(x._cast(compute).detach(), axes)
    updates: list[tuple[TensorT, TensorT]] = []
    if running_mean is not None:
        blended = running_mean._cast(compute) * (1 - momentum) + mean.reshape(*channels) * momentum
        updates.append((running_mean, blended._cast(running_mean.dtype)))
    if running_var is not None:
        unbiased = variance.reshape(*channels) * (count / max(count - 1, 1))
        blended = running_var._cast(compute) * (1 - momentum) + unbiased * momentum
        updates.append((running_var, blended._cast(running_var.dtype)))
    return updates


class NormalizationMixin(TensorCore):
    """Normalization layers in functional form (the input is `self`)."""

    def layer_norm(
        self,
        normalized_shape: int | Sequence[int],
        weight: Self | None = None,
        bias: Self | None = None,
        eps: float = 1e-5,
    ) -> Self:
        """Normalizes over the last dims given by `normalized_shape`, then scales by `weight` and shifts by `bias`
        (both of that shape), like `torch.nn.functional.layer_norm`.

        Example:
            >>> [round(v, 4) for v in Tensor([1.0, 3.0]).layer_norm(2).tolist()]
            [-1.0, 1.0]
        """
        items = list(normalized_shape) if isinstance(normalized_shape, (tuple, list)) else [normalized_shape]
        shape = tuple(check_int(item, "layer_norm normalized_shape") for item in items)
        if not shape or len(shape) > self.ndim or self.shape[self.ndim - len(shape) :] != shape:
            raise ValueError(
                f"layer_norm normalized_shape {shape} must be non-empty and match the last dims of the input "
                f"{self.shape}"
            )
        checked_weight = _check_parameter(weight, shape, "layer_norm weight")
        checked_bias = _check_parameter(bias, shape, "layer_norm bias")
        compute = _compute_dtype(self, "layer_norm")
        axes = tuple(range(self.ndim - len(shape), self.ndim))
        result = _normalized(self._cast(compute), axes, _check_eps(eps, "layer_norm"))
        return _affine(result, checked_weight, checked_bias, shape)._cast(self.dtype)

    def batch_norm(
        self,
        running_mean: Self | None,
        running_var: Self | None,
        weight: Self | None = None,
        bias: Self | None = None,
        training: bool = False,
        momentum: float = 0.1,
        eps: float = 1e-5,
    ) -> Self:
        """Normalizes each channel (dim 1) of (batch, channels, *) over every other dim, like
        `torch.nn.functional.batch_norm`.

        With `training=False` the running statistics normalize. With `training=True` the batch's statistics
        normalize and, when given, the running statistics are updated in place:
        running = (1 - momentum) * running + momentum * batch statistic (the variance unbiased).

        Example:
            >>> Tensor([[1.0], [3.0]]).batch_norm(None, None, training=True, eps=0.0).tolist()
            [[-1.0], [1.0]]
        """
        if self.ndim < 2:
            raise ValueError(f"batch_norm needs a (batch, channels, *) input with at least 2 dims, got {self.shape}")
        if not isinstance(training, bool):
            raise TypeError(f"batch_norm training must be a bool, got {training!r}")
        channels = (self.shape[1],)
        mean_in = _check_parameter(running_mean, channels, "batch_norm running_mean")
        var_in = _check_parameter(running_var, channels, "batch_norm running_var")
        checked_weight = _check_parameter(weight, channels, "batch_norm weight")
        checked_bias = _check_parameter(bias, channels, "batch_norm bias")
        given = [tensor for tensor in (mean_in, var_in, checked_weight, checked_bias) if tensor is not None]
        check_same_device("batch_norm", self, *given)
        compute = _compute_dtype(self, "batch_norm")
        epsilon = _check_eps(eps, "batch_norm")
        view = (1, channels[0], *((1,) * (self.ndim - 2)))
        axes = (0, *range(2, self.ndim))
        x = self._cast(compute)
        if not training:
            if mean_in is None or var_in is None:
                raise ValueError("batch_norm with training=False needs running_mean and running_var")
            mean = mean_in._cast(compute).reshape(*view)
            scale = (var_in._cast(compute).reshape(*view) + epsilon).rsqrt()
            return _affine((x - mean) * scale, checked_weight, checked_bias, view)._cast(self.dtype)
        count = math.prod(self.shape[axis] for axis in axes)
        if count <= 1:
            raise ValueError(f"batch_norm training needs more than 1 value per channel, got input shape {self.shape}")
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
            raise TypeError(f"batch_norm momentum must be a number, got {momentum!r}")
        mean, variance = batch_statistics(x, axes)
        inverse = (variance + epsilon).rsqrt()
        normalized = (x - mean) * inverse
        affine = _affine(normalized, checked_weight, checked_bias, view)
        _attach_batch_norm_gradient(affine, x, normalized, inverse, checked_weight, checked_bias, axes, view)
        result = affine._cast(self.dtype)
        updates = running_updates(self, mean_in, var_in, momentum)
        if updates:
            write_many(updates)
        return result

    def group_norm(
        self, num_groups: int, weight: Self | None = None, bias: Self | None = None, eps: float = 1e-5
    ) -> Self:
        """Normalizes each of `num_groups` groups of channels (dim 1) of (batch, channels, *) over the group's
        channels and the other dims, then applies the per-channel `weight` and `bias`, like
        `torch.nn.functional.group_norm`.

        Example:
            >>> Tensor([[1.0, 3.0]]).group_norm(1, eps=0.0).tolist()
            [[-1.0, 1.0]]
        """
        if self.ndim < 2:
            raise ValueError(f"group_norm needs a (batch, channels, *) input with at least 2 dims, got {self.shape}")
        groups = check_int(num_groups, "group_norm num_groups")
        channels = self.shape[1]
        if groups < 1 or channels % groups:
            raise ValueError(f"group_norm num_groups {groups} must be >= 1 and divide the {channels} channels")
        checked_weight = _check_parameter(weight, (channels,), "group_norm weight")
        checked_bias = _check_parameter(bias, (channels,), "group_norm bias")
        compute = _compute_dtype(self, "group_norm")
        grouped = self._cast(compute).reshape(self.shape[0], groups, -1)
        result = _normalized(grouped, (2,), _check_eps(eps, "group_norm")).reshape(self.shape)
        view = (1, channels, *((1,) * (self.ndim - 2)))
        return _affine(result, checked_weight, checked_bias, view)._cast(self.dtype)

    def rms_norm(
        self, normalized_shape: int | Sequence[int], weight: Self | None = None, eps: float | None = None
    ) -> Self:
        """x / sqrt(mean(x ** 2) + eps) over the last dims given by `normalized_shape`, times `weight`, like
        `torch.nn.functional.rms_norm` (eps defaults to the dtype's machine epsilon).

        Example:
            >>> [round(v, 4) for v in Tensor([3.0, 4.0]).rms_norm(2, eps=0.0).tolist()]
            [0.8485, 1.1314]
        """
        items = list(normalized_shape) if isinstance(normalized_shape, (tuple, list)) else [normalized_shape]
        shape = tuple(check_int(item, "rms_norm normalized_shape") for item in items)
        if not shape or len(shape) > self.ndim or self.shape[self.ndim - len(shape) :] != shape:
            raise ValueError(
                f"rms_norm normalized_shape {shape} must be non-empty and match the last dims of the input {self.shape}"
            )
        checked_weight = _check_parameter(weight, shape, "rms_norm weight")
        compute = _compute_dtype(self, "rms_norm")
        epsilon = _machine_epsilon(self.dtype) if eps is None else _check_eps(eps, "rms_norm")
        axes = tuple(range(self.ndim - len(shape), self.ndim))
        x = self._cast(compute)
        result = x * ((x * x).mean(axes, keepdim=True) + epsilon).rsqrt()
        return _affine(result, checked_weight, None, shape)._cast(self.dtype)


def _machine_epsilon(dtype: DType) -> float:
    """The gap between 1 and the next representable value of float `dtype`."""
    mantissa = dtypes.finfo(dtype)[1]
    return 2.0**-mantissa
