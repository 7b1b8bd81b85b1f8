"""`ConvolutionMixin`: conv1d / conv2d / conv3d and conv_transpose1d / 2d / 3d with PyTorch's arguments.

A convolution is sliding windows (`kiln.tensor.ops.windows`: movement ops only) multiplied by the weight and summed
over (in_channels / groups, *kernel): one broadcast multiply and one ADD reduce, which the scheduler turns into a single
reduce kernel that reads the input through index arithmetic (no im2col buffer). A transposed convolution is the
convolution of the input spread out by the stride (zeros in between), padded by dilation * (kernel - 1) - padding,
with the kernel flipped and its channel dims swapped within each group.

Gradients: a convolution's result carries a gradient shortcut (`kiln.tensor.gradient`). Its input gradient is the
transposed convolution of the upstream gradient with the same weight (one reduce kernel, like the forward), where
the primitives' rules would write the gradient of every window (batch x in_channels x out x kernel elements) and
then scatter-add the overlapping windows back (conv2d (32,16,32,32) x (32,16,3,3) padding 1: ~10 ms -> ~1.5 ms on
the CPU device). Its weight gradient is the primitives' rule (already one reduce over the batch and the image).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Self

from kiln.tensor import graph
from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.gradient import Gradients, partial_gradient, set_gradient_shortcut
from kiln.tensor.ops._checks import check_int, check_same_device
from kiln.tensor.ops.linalg import accumulate_dtype, product_dtype
from kiln.tensor.ops.padding import crop_and_pad, spatial_padding
from kiln.tensor.ops.windows import int_tuple, sliding_windows
from kiln.uops import Ops, UOp

__all__ = ["ConvolutionMixin"]

Padding = int | tuple[int, ...] | str
_NAMES = {1: "conv1d", 2: "conv2d", 3: "conv3d"}


PADDED_INPUT_BUFFER_MINIMUM = 2**16
"""Elements of a padded convolution input from which the padding is written to a buffer first (one extra kernel)."""


def _check_layout(x: TensorT, weight: TensorT, spatial: int, name: str, weight_layout: str) -> tuple[TensorT, bool]:
    """(weight as a Tensor, whether the input lacks the batch dim); errors name the expected layouts."""
    if not isinstance(weight, TensorCore):
        raise TypeError(f"{name} weight must be a Tensor, got {type(weight).__name__}")
    if weight.ndim != spatial + 2:
        raise ValueError(f"{name} weight must have {spatial + 2} dims {weight_layout}, got shape {weight.shape}")
    if x.ndim not in (spatial + 1, spatial + 2):
        raise ValueError(
            f"{name} input must have {spatial + 2} dims (batch, channels, *spatial) or {spatial + 1} without the "
            f"batch dim, got shape {x.shape}"
        )
    check_same_device(name, x, weight)
    return weight, x.ndim == spatial + 1


def _check_bias(bias: TensorT | None, channels: int, name: str) -> TensorT | None:
    if bias is None:
        return None
    if not isinstance(bias, TensorCore):
        raise TypeError(f"{name} bias must be a Tensor or None, got {type(bias).__name__}")
    if bias.shape != (channels,):
        raise ValueError(f"{name} bias must have shape ({channels},) (one value per output channel), got {bias.shape}")
    return bias


def _check_groups(groups: object, name: str) -> int:
    count = check_int(groups, f"{name} groups")
    if count < 1:
        raise ValueError(f"{name} groups must be >= 1, got {count}")
    return count


def _padding_pairs(
    padding: Any, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...], name: str
) -> tuple[tuple[int, int], ...]:
    """(before, after) padding per spatial dim for an int, a tuple (one per dim, or tinygrad's flat (left, right,
    top, bottom, ...)) or 'same' / 'valid'; negative amounts crop."""
    if isinstance(padding, str):
        if padding == "valid":
            return tuple((0, 0) for _ in kernel)
        if padding == "same":
            if any(step != 1 for step in stride):
                raise ValueError(f"{name} padding='same' needs stride 1, got stride {stride}")
            # the odd element of an even total goes after (PyTorch's choice)
            totals = [rate * (size - 1) for size, rate in zip(kernel, dilation)]
            return tuple((total // 2, total - total // 2) for total in totals)
        raise ValueError(f"{name} padding must be an int, a tuple of ints, 'same' or 'valid', got {padding!r}")
    return spatial_padding(padding, len(kernel), f"{name} padding")


class _Steps(NamedTuple):
    """How a convolution's windows step (stride and dilation per spatial dim), its groups, and its name in errors."""

    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    name: str


def _convolve(
    x: TensorT, weight: TensorT, bias: TensorT | None, padding: tuple[tuple[int, int], ...], steps: _Steps
) -> TensorT:
    """The convolution of batched `x` (batch, in_channels, *spatial) with `weight` (checked arguments)."""
    stride, dilation, groups, name = steps
    spatial = len(stride)
    batch, in_channels = x.shape[:2]
    out_channels, group_channels = weight.shape[:2]
    kernel = weight.shape[2:]
    if in_channels % groups or out_channels % groups or group_channels * groups != in_channels:
        raise ValueError(
            f"{name}: input of shape {x.shape} has {in_channels} channels, but weight of shape {weight.shape} with "
            f"groups={groups} expects {group_channels} * {groups} = {group_channels * groups} input channels and "
            f"out_channels ({out_channels}) divisible by groups"
        )
    if any(size == 0 for size in kernel):
        raise ValueError(f"{name}: kernel sizes must be >= 1, got weight shape {weight.shape}")
    padded_sizes = tuple(size + before + after for size, (before, after) in zip(x.shape[2:], padding))
    spans = tuple(rate * (size - 1) + 1 for size, rate in zip(kernel, dilation))
    if any(span > size for span, size in zip(spans, padded_sizes)):
        raise ValueError(
            f"{name}: the kernel (size {tuple(kernel)}, dilation {dilation}: spans {spans}) is larger than the padded "
            f"input {padded_sizes} (input shape {x.shape}, padding {padding})"
        )
    dtype = product_dtype(name, x, weight, *([bias] if bias is not None else []))
    x, weight = x._cast(dtype), weight._cast(dtype)
    padded = crop_and_pad(x, padding, f"{name} padding")
    if any(pair != (0, 0) for pair in padding) and math.prod(padded.shape) >= PADDED_INPUT_BUFFER_MINIMUM:
        # a cheap copy kernel writes the padded input: the convolution's inner loop then reads whole vectors with no
        # bounds guard per lane (conv2d (32,16,32,32)x(32,16,3,3) padding 1: 5.7 ms -> 3.2 ms on the CPU device);
        # small inputs keep the guard and stay one kernel
        padded = padded.contiguous()
    windows = sliding_windows(padded, kernel, stride, dilation)  # (batch, in_channels, *out, *kernel)
    out = windows.shape[2 : 2 + spatial]
    out_per_group = out_channels // groups
    # (batch, groups, 1, group_channels, *out, *kernel) -> (batch, groups, out_per_group, *out, group_channels, *kernel)
    # times the weight viewed so, summed over (group_channels, *kernel); built on graph nodes (everything is checked
    # above) and wrapped in one tensor: about a third of a conv2d's Python time was tensors for these views
    grouped = graph.reshape(windows.uop, (batch, groups, 1, group_channels, *out, *kernel))
    full = (batch, groups, out_per_group, group_channels, *out, *kernel)
    order = (0, 1, 2, *range(4, 4 + spatial), 3, *range(4 + spatial, 4 + 2 * spatial))
    compute = accumulate_dtype(dtype)
    inputs = graph.cast(graph.permute(graph.expand(grouped, full), order), compute)
    filters = graph.reshape(weight.uop, (1, groups, out_per_group, *((1,) * spatial), group_channels, *kernel))
    filters = graph.cast(graph.expand(filters, graph.shape_of(inputs)), compute)
    summed_axes = tuple(range(3 + spatial, len(full)))
    product = graph.reduce_axis(graph.binary_alu(Ops.MUL, inputs, filters), Ops.ADD, summed_axes)
    result = windows._result(graph.reshape(graph.cast(product, dtype), (batch, out_channels, *out)), weight)
    _attach_gradient_shortcut(result, x, weight, windows, padding, steps)
    if bias is not None:
        result = result + bias._cast(dtype).reshape(1, out_channels, *((1,) * spatial))
    return result


WEIGHT_GRADIENT_SPLIT_CHANNELS = 32
"""Weights with fewer (out_channels x in_channels / groups) pairs than this have their gradient summed in batch parts
(`_split_weight_gradient`): the weight gradient's register tile (4 x 4 channels, or 8 of one) leaves them less than
two iterations of channel loops for the CPU threads."""
WEIGHT_GRADIENT_PARTS = 2
"""How many batch parts `_split_weight_gradient` sums separately."""


def _split_weight_gradient(upstream: TensorT, windows: TensorT, weight: TensorT, groups: int) -> TensorT | None:
    """The weight gradient of a convolution with a small weight, summed over WEIGHT_GRADIENT_PARTS parts of the batch
    in one kernel (an outer output loop the CPU threads split) and the parts then added (a tiny second kernel); None
    for WEIGHT_GRADIENT_SPLIT_CHANNELS channel pairs or more, or a batch that does not split evenly.

    The plain weight gradient reduces over the whole batch and image into the few weight elements: its output loops
    are the kernel taps and channels the register tile left, often of odd sizes (3 x 3) that no thread count
    divides, so it ran on one core (the small CNN's first convolution, (8, 1, 3, 3) over (128, 26, 26): 1.4 ms, the
    step's longest kernel, loaded 2-core box)."""
    batch = windows.shape[0]
    parts = WEIGHT_GRADIENT_PARTS
    out_channels, group_channels, *kernel = weight.shape
    if out_channels * group_channels >= WEIGHT_GRADIENT_SPLIT_CHANNELS or batch % parts or batch < 2 * parts:
        return None
    out = windows.shape[2 : 2 + len(kernel)]
    ones = (1,) * len(kernel)
    # (parts, batch / parts, groups, 1, group_channels, *out, *kernel) x (.., groups, out / groups, 1, *out, *ones)
    inputs = windows.reshape(parts, batch // parts, groups, 1, group_channels, *out, *kernel)
    grads = upstream.reshape(parts, batch // parts, groups, out_channels // groups, 1, *out, *ones)
    summed = (1, *range(5, 5 + len(kernel)))
    compute = accumulate_dtype(weight.dtype)
    # (parts, groups, out / groups, group_channels, *kernel)
    partial = (grads._cast(compute) * inputs._cast(compute)).sum(summed)
    return partial.sum(0).reshape(out_channels, group_channels, *kernel)._cast(weight.dtype)


def _attach_gradient_shortcut(
    result: TensorT, x: TensorT, weight: TensorT, windows: TensorT, padding: tuple[tuple[int, int], ...], steps: _Steps
) -> None:
    """Gives `result` (the convolution of `x` with `weight`, both already of the result's dtype) the input gradient
    as a transposed convolution and the weight gradient by the primitives' rules (see the module doc)."""
    stride, dilation, groups, _ = steps
    wrap = type(x)._from_uop
    # the rule keeps graph nodes, not tensors: a tensor kept alive is a value someone may read, which the scheduler
    # stores in a buffer of its own (the windows: an im2col copy)
    window_node = windows.uop
    in_sizes, kernel, out = x.shape[2:], weight.shape[2:], result.shape[2:]
    # the padded input's tail that no window reaches ((padded - span) % stride elements) gets no gradient
    cuts = tuple(
        (before, after - (size + before + after - ((count - 1) * step + rate * (taps - 1) + 1)))
        for size, (before, after), count, step, rate, taps in zip(in_sizes, padding, out, stride, dilation, kernel)
    )

    def rule(node: UOp, upstream: UOp, wanted: tuple[bool, ...]) -> Gradients:
        input_gradient = weight_gradient = None
        if wanted[0]:
            adjoint = _adjoint_convolution(wrap(upstream), wrap(weight.uop), None, cuts, steps)
            input_gradient = adjoint.uop
        if wanted[1]:
            split = _split_weight_gradient(wrap(upstream), wrap(window_node), weight, groups)
            if split is not None:
                weight_gradient = split.uop
            else:
                weight_gradient = partial_gradient(node, upstream, weight.uop, constants=(x.uop,))
        return input_gradient, weight_gradient

    set_gradient_shortcut(result.uop, (x.uop, weight.uop), rule)


def _adjoint_convolution(
    x: TensorT, weight: TensorT, bias: TensorT | None, cuts: tuple[tuple[int, int], ...], steps: _Steps
) -> TensorT:
    """The transposed convolution of batched `x` with `weight` (in_channels, out_channels / groups, *kernel): the
    full output ((in - 1) * stride + dilation * (kernel - 1) + 1 per spatial dim) less `cuts` (before, after) per
    dim (a negative cut adds zeros). It is the stride-1 convolution of `x` spread out by the stride and framed by
    dilation * (kernel - 1) - cut zeros (cropped where negative), with the kernel flipped and its channel dims
    swapped within each group."""
    stride, dilation, groups, name = steps
    spatial = len(stride)
    in_channels, out_per_group = x.shape[1], weight.shape[1]
    kernel = weight.shape[2:]
    frame = tuple(
        (rate * (taps - 1) - before, rate * (taps - 1) - after)
        for rate, taps, (before, after) in zip(dilation, kernel, cuts)
    )
    # (in_channels, out_per_group, *kernel) -> (out_channels, in_channels / groups, *kernel), kernel flipped
    grouped = weight.reshape(groups, in_channels // groups, out_per_group, *kernel).permute(
        0, 2, 1, *range(3, 3 + spatial)
    )
    filters = grouped.reshape(out_per_group * groups, in_channels // groups, *kernel).flip(*range(2, 2 + spatial))
    return _convolve(_spread(x, stride), filters, bias, frame, _Steps((1,) * spatial, dilation, groups, name))


def _convolution(
    x: TensorT,
    weight: TensorT,
    bias: TensorT | None,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: Any,
    spatial: int,
) -> TensorT:
    name = _NAMES[spatial]
    weight, unbatched = _check_layout(x, weight, spatial, name, "(out_channels, in_channels / groups, *kernel)")
    strides = int_tuple(stride, spatial, f"{name} stride", minimum=1)
    dilations = int_tuple(dilation, spatial, f"{name} dilation", minimum=1)
    pads = _padding_pairs(padding, weight.shape[2:], strides, dilations, name)
    count = _check_groups(groups, name)
    checked_bias = _check_bias(bias, weight.shape[0], name)
    batched = x.unsqueeze(0) if unbatched else x
    result = _convolve(batched, weight, checked_bias, pads, _Steps(strides, dilations, count, name))
    return result.reshape(result.shape[1:]) if unbatched else result


def _transposed_convolution(
    x: TensorT,
    weight: TensorT,
    bias: TensorT | None,
    stride: Any,
    padding: Any,
    output_padding: Any,
    groups: Any,
    dilation: Any,
    spatial: int,
) -> TensorT:
    name = f"conv_transpose{spatial}d"
    weight, unbatched = _check_layout(x, weight, spatial, name, "(in_channels, out_channels / groups, *kernel)")
    strides = int_tuple(stride, spatial, f"{name} stride", minimum=1)
    dilations = int_tuple(dilation, spatial, f"{name} dilation", minimum=1)
    pads = spatial_padding(padding, spatial, f"{name} padding")
    extra = int_tuple(output_padding, spatial, f"{name} output_padding")
    count = _check_groups(groups, name)
    for amount, step, rate in zip(extra, strides, dilations):
        if amount >= max(step, rate):
            raise ValueError(
                f"{name} output_padding {extra} must be smaller than max(stride, dilation) in each dim "
                f"(stride {strides}, dilation {dilations})"
            )
    batched = x.unsqueeze(0) if unbatched else x
    in_channels = batched.shape[1]
    out_per_group = weight.shape[1]
    kernel = weight.shape[2:]
    if weight.shape[0] != in_channels or in_channels % count:
        raise ValueError(
            f"{name}: input of shape {x.shape} has {in_channels} channels, but weight of shape {weight.shape} "
            f"(in_channels, out_channels / groups, *kernel) has {weight.shape[0]} input channels, which groups={count} "
            "must divide"
        )
    if any(size == 0 for size in batched.shape[2:]):
        raise ValueError(f"{name}: spatial dims must be non-empty, got input shape {x.shape}")
    out_sizes = tuple(
        (size - 1) * step - before - after + rate * (taps - 1) + more + 1
        for size, step, (before, after), rate, taps, more in zip(
            batched.shape[2:], strides, pads, dilations, kernel, extra
        )
    )
    if any(size <= 0 for size in out_sizes):
        raise ValueError(f"{name}: the output size {out_sizes} is not positive (input {x.shape}, padding {pads})")
    out_channels = out_per_group * count
    checked_bias = _check_bias(bias, out_channels, name)
    # `padding` takes that much off each side of the full output, `output_padding` gives some back at the end
    cuts = tuple((before, after - more) for (before, after), more in zip(pads, extra))
    result = _adjoint_convolution(batched, weight, checked_bias, cuts, _Steps(strides, dilations, count, name))
    return result.reshape(result.shape[1:]) if unbatched else result


def _weight_spatial(x: TensorCore, weight: object) -> int:
    """The spatial dims of a conv2d / conv_transpose2d call: 2, or 1 / 3 for a 3-dim / 5-dim weight with a matching
    input (tinygrad's conv2d and conv_transpose2d read the spatial dims from the weight)."""
    if isinstance(weight, TensorCore) and weight.ndim in (3, 5) and x.ndim in (weight.ndim - 1, weight.ndim):
        return weight.ndim - 2
    return 2


def _spread(x: TensorT, stride: tuple[int, ...]) -> TensorT:
    """`x` with stride - 1 zeros between neighbours along each spatial dim (batch and channel dims untouched)."""
    result = x
    for position, step in enumerate(stride):
        if step == 1:
            continue
        axis = 2 + position
        size = result.shape[axis]
        shape = result.shape
        # (.., size, ..) -> (.., size, 1, ..) padded to (.., size, step, ..) -> (.., size * step, ..), cut the tail
        column = result.reshape(*shape[: axis + 1], 1, *shape[axis + 1 :])
        padding = tuple((0, step - 1) if index == axis + 1 else (0, 0) for index in range(column.ndim))
        flat = column._movement(Ops.PAD, padding).reshape(*shape[:axis], size * step, *shape[axis + 1 :])
        bounds = tuple(
            (0, (size - 1) * step + 1) if index == axis else (0, extent) for index, extent in enumerate(flat.shape)
        )
        result = flat._movement(Ops.SHRINK, bounds)
    return result


class ConvolutionMixin(TensorCore):
    """Convolutions (PyTorch's `torch.nn.functional.conv*` with the input as `self`)."""

    def conv1d(
        self,
        weight: Self,
        bias: Self | None = None,
        stride: int | tuple[int] = 1,
        padding: Padding = 0,
        dilation: int | tuple[int] = 1,
        groups: int = 1,
    ) -> Self:
        """1-D convolution (cross-correlation) of (batch, in_channels, length) with weight
        (out_channels, in_channels / groups, kernel); see `conv2d` for the arguments.

        Example:
            >>> Tensor([[[1.0, 2.0, 3.0]]]).conv1d(Tensor([[[1.0, 1.0]]])).tolist()
            [[[3.0, 5.0]]]
        """
        return _convolution(self, weight, bias, stride, padding, dilation, groups, 1)

    def conv2d(
        self,
        weight: Self,
        bias: Self | None = None,
        stride: int | tuple[int, int] = 1,
        padding: Padding = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
    ) -> Self:
        """2-D convolution (cross-correlation), like `torch.nn.functional.conv2d`.

        Args:
            weight: (out_channels, in_channels / groups, kernel_height, kernel_width).
            bias: (out_channels,) or None.
            stride: step between windows, an int or one per spatial dim.
            padding: zeros added on both sides (int or per dim), tinygrad's flat (left, right, top, bottom) for
                asymmetric padding (negative amounts crop), or 'valid' (none) or 'same' (output size = input size;
                needs stride 1; an odd total puts the extra zero after).
            dilation: spacing between kernel taps.
            groups: in and out channels split into this many independent groups.

        A 3-dim or 5-dim weight makes this a 1-d or 3-d convolution (tinygrad's conv2d is N-d).
        The input is (batch, in_channels, height, width) or (in_channels, height, width); the result is
        (batch, out_channels, out_height, out_width) with out = (in + 2 * padding - dilation * (kernel - 1) - 1)
        // stride + 1.

        Example:
            >>> Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()
            [[[[4.0, 4.0], [4.0, 4.0]]]]
        """
        return _convolution(self, weight, bias, stride, padding, dilation, groups, _weight_spatial(self, weight))

    def conv3d(
        self,
        weight: Self,
        bias: Self | None = None,
        stride: int | tuple[int, int, int] = 1,
        padding: Padding = 0,
        dilation: int | tuple[int, int, int] = 1,
        groups: int = 1,
    ) -> Self:
        """3-D convolution of (batch, in_channels, depth, height, width); see `conv2d` for the arguments.

        Example:
            >>> Tensor.ones(1, 1, 2, 2, 2).conv3d(Tensor.ones(1, 1, 2, 2, 2)).item()
            8.0
        """
        return _convolution(self, weight, bias, stride, padding, dilation, groups, 3)

    def conv_transpose1d(
        self,
        weight: Self,
        bias: Self | None = None,
        stride: int | tuple[int] = 1,
        padding: int | tuple[int, ...] = 0,
        output_padding: int | tuple[int] = 0,
        groups: int = 1,
        dilation: int | tuple[int] = 1,
    ) -> Self:
        """1-D transposed convolution; see `conv_transpose2d`.

        Example:
            >>> Tensor([[[1.0, 2.0]]]).conv_transpose1d(Tensor([[[1.0, 1.0]]])).tolist()
            [[[1.0, 3.0, 2.0]]]
        """
        return _transposed_convolution(self, weight, bias, stride, padding, output_padding, groups, dilation, 1)

    def conv_transpose2d(
        self,
        weight: Self,
        bias: Self | None = None,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, ...] = 0,
        output_padding: int | tuple[int, int] = 0,
        groups: int = 1,
        dilation: int | tuple[int, int] = 1,
    ) -> Self:
        """2-D transposed convolution (the gradient of conv2d with respect to its input), like
        `torch.nn.functional.conv_transpose2d`.

        Args:
            weight: (in_channels, out_channels / groups, kernel_height, kernel_width).
            bias: (out_channels,) or None.
            stride, padding, dilation, groups: as for the conv2d this transposes (padding may be tinygrad's flat
                (left, right, top, bottom): each amount is taken off that side of the full output).
            output_padding: extra size added on the far side of each output dim (< max(stride, dilation)).

        The output size is (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1. A 3-dim
        or 5-dim weight makes this a 1-d or 3-d transposed convolution (tinygrad's is N-d).

        Example:
            >>> Tensor.ones(1, 1, 2, 2).conv_transpose2d(Tensor.ones(1, 1, 2, 2), stride=2).shape
            (1, 1, 4, 4)
        """
        return _transposed_convolution(
            self, weight, bias, stride, padding, output_padding, groups, dilation, _weight_spatial(self, weight)
        )

    def conv_transpose3d(
        self,
        weight: Self,
        bias: Self | None = None,
        stride: int | tuple[int, int, int] = 1,
        padding: int | tuple[int, ...] = 0,
        output_padding: int | tuple[int, int, int] = 0,
        groups: int = 1,
        dilation: int | tuple[int, int, int] = 1,
    ) -> Self:
        """3-D transposed convolution; see `conv_transpose2d`.

        Example:
            >>> Tensor.ones(1, 1, 1, 1, 1).conv_transpose3d(Tensor.ones(1, 2, 2, 2, 2)).shape
            (1, 2, 2, 2, 2)
        """
        return _transposed_convolution(self, weight, bias, stride, padding, output_padding, groups, dilation, 3)
