"""The normalization functions of `kiln.tensor.nn.functional` (`layer_norm`, `group_norm`, `rms_norm`,
`batch_norm`, `instance_norm`, `local_response_norm`, `normalize`), with `torch.nn.functional`'s signatures.

Each calls the Tensor method of the same name where one exists; `instance_norm` treats each (sample, channel) as a
channel of `batch_norm` and updates running statistics itself; `local_response_norm` averages squares over a window
of neighbouring channels. Import them from `kiln.tensor.nn.functional`.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.tensor.nn.arguments import check_positive_int
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = [
    "batch_norm", "group_norm", "instance_norm", "layer_norm", "local_response_norm", "normalize", "rms_norm",
]  # fmt: skip


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """input / max(||input||_p along dim, eps), like `torch.nn.functional.normalize`."""
    return input.normalize(p, dim, eps)


def layer_norm(
    input: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None, bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:  # fmt: skip
    """Normalizes over the last dims `normalized_shape`, then weight * x + bias, like
    `torch.nn.functional.layer_norm`."""
    return input.layer_norm(normalized_shape, weight, bias, eps)


def group_norm(
    input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """Normalizes each of `num_groups` channel groups of (N, C, *), like `torch.nn.functional.group_norm`."""
    return input.group_norm(num_groups, weight, bias, eps)


def rms_norm(
    input: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None, eps: float | None = None
) -> Tensor:
    """x / sqrt(mean(x**2) + eps) over the last dims, times weight, like `torch.nn.functional.rms_norm`."""
    return input.rms_norm(normalized_shape, weight, eps)


def batch_norm(
    input: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
    bias: Tensor | None = None, training: bool = False, momentum: float = 0.1, eps: float = 1e-5,
) -> Tensor:  # fmt: skip
    """Normalizes each channel (dim 1) with the batch statistics (`training`, updating the running ones in place) or
    the running ones, like `torch.nn.functional.batch_norm`."""
    return input.batch_norm(running_mean, running_var, weight, bias, training, momentum, eps)


def instance_norm(
    input: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,
    weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True, momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:  # fmt: skip
    """Normalizes each (sample, channel) of (N, C, *) over its spatial dims, like
    `torch.nn.functional.instance_norm`.

    With `use_input_stats` (the default) each instance's own mean and biased variance normalize, and given running
    statistics are updated in place with the batch average of the instances' means and unbiased variances; without
    it the running statistics normalize, as in `batch_norm(training=False)`.
    """
    if input.ndim < 2:
        raise ValueError(f"instance_norm needs a (N, C, *) input, got shape {list(input.shape)}")
    batch, channels, *spatial = input.shape
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("Expected running_mean and running_var to be defined when use_input_stats is false")
        return input.batch_norm(running_mean, running_var, weight, bias, False, 0.0, eps)
    elements = 1
    for size in spatial:
        elements *= size
    if elements == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {list(input.shape)}")
    # each (sample, channel) is one channel of a batch of one: batch_norm's statistics and numerics
    instances = input.reshape(1, batch * channels, *spatial)
    normalized = instances.batch_norm(None, None, None, None, True, 0.0, eps).reshape(input.shape)
    view = (1, channels, *([1] * len(spatial)))
    if weight is not None:
        normalized = normalized * weight.reshape(view)
    if bias is not None:
        normalized = normalized + bias.reshape(view)
    if running_mean is not None or running_var is not None:
        _update_running(input, running_mean, running_var, momentum, elements)
    return normalized


def _update_running(
    input: Tensor, running_mean: Tensor | None, running_var: Tensor | None, momentum: float, elements: int
) -> None:
    axes = tuple(range(2, input.ndim))
    values = input.detach().cast(dtypes.float32 if input.dtype == dtypes.float16 else input.dtype)
    if running_mean is not None:
        mean = values.mean(axes).mean(0)
        running_mean.assign(((1 - momentum) * running_mean + momentum * mean)._cast(running_mean.dtype))
    if running_var is not None:
        variance = values.var(axes, correction=1 if elements > 1 else 0).mean(0)
        running_var.assign(((1 - momentum) * running_var + momentum * variance)._cast(running_var.dtype))


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> Tensor:
    """input / (k + alpha * mean of squares over `size` neighbouring channels)**beta, like
    `torch.nn.functional.local_response_norm` (the window is zero-padded: size // 2 channels before,
    (size - 1) // 2 after, and the mean divides by `size`)."""
    if input.ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {input.ndim} dimensions)")
    check_positive_int(size, "local_response_norm size")
    if input.numel() == 0:
        return input
    channels = input.shape[1]
    padding = [(0, 0)] * input.ndim
    padding[1] = (size // 2, (size - 1) // 2)
    squares = input.square().pad(padding)
    window = squares[:, 0:channels]
    for offset in range(1, size):
        window = window + squares[:, offset : offset + channels]
    return input / (window * (alpha / size) + k).pow(beta)
