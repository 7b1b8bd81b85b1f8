"""The padding argument of convolution and pooling, and padding that may crop.

Convolution and pooling take their padding in one of three spellings:

- an int: the same amount before and after every spatial dim;
- one int per spatial dim (PyTorch): that amount before and after the dim;
- two ints per spatial dim (tinygrad): flat and last dim first, (left, right, top, bottom, front, back), like
  `torch.nn.functional.pad`, so asymmetric padding is possible.

A negative amount crops that many cells from that side before the windows slide (tinygrad's convention; PyTorch's
convolution rejects it). `crop_and_pad` applies one (before, after) pair per dim: crops first, then pads.
"""

from __future__ import annotations

from typing import Any

from kiln.tensor.core import TensorT
from kiln.tensor.ops._checks import check_int
from kiln.tensor.symbolic import provably_le
from kiln.uops import Ops

__all__ = ["crop_and_pad", "spatial_padding"]

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
