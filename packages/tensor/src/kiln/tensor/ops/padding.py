"""The padding argument of convolution and pooling, and padding that may crop.

Convolution and pooling take their padding in one of three spellings:

- an int: the same amount before and after every spatial dim;
- one int per spatial dim (PyTorch): that amount before and after the dim;
- two ints per spatial dim (tinygrad): flat and last dim first, (left, right, top, bottom, front, back), like
  `torch.nn.functional.pad`, so asymmetric padding is possible.

A negative amount crops that many cells from that side before the windows slide (tinygrad's convention; PyTorch's
convolution rejects it). `crop_and_pad` applies one (before, after) pair per dim: crops first, then pads.

`mode_pad_dim` pads one dim by mirroring ('reflect'), repeating the edge ('replicate') or wrapping ('circular'),
`Tensor.pad`'s non-constant modes; over a dim of bound-Variable size its amounts must fit every value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.tensor.core import TensorT
from kiln.tensor.ops._checks import check_int
from kiln.tensor.symbolic import describe_variables, format_size, provably_le
from kiln.uops import Ops

__all__ = ["check_mode_pad", "crop_and_pad", "mode_pad_dim", "spatial_padding"]

Pairs = tuple[tuple[int, int], ...]


def spatial_padding(padding: Any, spatial: int, what: str) -> Pairs:
    """`padding` (an int, `spatial` ints or 2 * `spatial` flat ints, last dim first) as one (before, after) pair per
    spatial dim, first spatial dim first.

    Example: spatial_padding((1, 2, 3, 4), 2, "conv2d padding") == ((3, 4), (1, 2)).
    """
    if isinstance(padding, (tuple, list)):
        items = [check_int(item, what) for item in padding]
        if len(items) == spatial:
            return tuple((item, item) for item in items)
        if len(items) == 2 * spatial:
            return tuple((items[2 * k], items[2 * k + 1]) for k in reversed(range(spatial)))
        raise ValueError(
            f"{what} needs 1, {spatial} (one per spatial dim) or {2 * spatial} (before, after per dim, last dim "
            f"first) values, got {tuple(items)!r}"
        )
    amount = check_int(padding, what)
    return tuple((amount, amount) for _ in range(spatial))


def crop_and_pad(x: TensorT, pairs: Pairs, what: str) -> TensorT:
    """`x` with one (before, after) amount per trailing dim (len(pairs) of them): negative amounts crop, then
    positive ones add zeros."""
    leading = x.ndim - len(pairs)
    full = ((0, 0),) * leading + tuple(pairs)
    bounds = tuple((max(0, -before), size - max(0, -after)) for (before, after), size in zip(full, x.shape))
    if any(not provably_le(start, end) for start, end in bounds):  # for every value of a symbolic size
        raise ValueError(f"{what} {tuple(pairs)} crops more than the input of shape {x.shape} holds")
    result = x
    if any(bound != (0, size) for bound, size in zip(bounds, x.shape)):
        result = result._movement(Ops.SHRINK, bounds)
    grow = tuple((max(0, before), max(0, after)) for before, after in full)
    if any(pair != (0, 0) for pair in grow):
        result = result._movement(Ops.PAD, grow)
    return result


def _take(x: TensorT, axis: int, start: int, end: int) -> TensorT:
    bounds: list[tuple[int, int] | None] = [None] * x.ndim
    bounds[axis] = (start, end)
    return x.shrink(bounds)


def check_mode_pad(pairs: Sequence[tuple[int, int]], mode: str) -> None:
    """A 'reflect' / 'replicate' / 'circular' pad of a tensor with a bound Variable in its shape takes int amounts
    >= 0 (ValueError otherwise): the amounts are the sizes of the copied edges."""
    for before, after in pairs:
        for amount in (before, after):
            if type(amount) is not int:
                raise ValueError(
                    f"pad mode {mode!r} takes int amounts, got {format_size(amount)} with variable(s) "
                    f"{describe_variables(amount)}: only mode 'constant' pads by a bound Variable"
                )
            if amount < 0:
                raise ValueError(
                    f"pad mode {mode!r} of a tensor with a bound Variable in its shape cannot crop: got amount "
                    f"{amount} (negative amounts need int shapes)"
                )


def _fits(amount: int, size: int, mode: str, rule: str) -> None:
    # `amount <= size` for every value of size's variables, else ValueError naming the mode, the rule and the range
    if not provably_le(amount, size):
        shown = format_size(size) if type(size) is int else f"{format_size(size)} ({describe_variables(size)})"
        raise ValueError(f"{mode} padding {rule}: needs the dim size >= {amount}, got {shown}")


def mode_pad_dim(x: TensorT, axis: int, before: int, after: int, mode: str) -> TensorT:
    """`x` with `before` / `after` cells added along dim `axis` by `mode` ('reflect': mirrored without the edge,
    'replicate': the edge repeated, 'circular': wrapped around); ValueError when the dim is too small for the amounts
    (for every value of its variables when its size holds a bound Variable)."""
    size = x.shape[axis]
    if mode == "reflect":
        _fits(max(before, after) + 1, size, mode, f"({before}, {after}) must be smaller than the dim size")
        head = _take(x, axis, 1, before + 1).flip(axis)
        tail = _take(x, axis, size - 1 - after, size - 1).flip(axis)
    elif mode == "replicate":
        _fits(1, size, mode, "needs a non-empty dim")
        head = _take(x, axis, 0, 1).repeat(*[before if i == axis else 1 for i in range(x.ndim)])
        tail = _take(x, axis, size - 1, size).repeat(*[after if i == axis else 1 for i in range(x.ndim)])
    else:
        _fits(max(before, after), size, mode, f"({before}, {after}) must not exceed the dim size")
        head = _take(x, axis, size - before, size)
        tail = _take(x, axis, 0, after)
    return head.cat(x, tail, dim=axis)
