"""Reshape, permute and matmul of sharded tensors: which layout the result has, and which collective it needs.

- `permute` moves the split axis with the others.
- `reshape` keeps the split when each device's part stays one block of the result: the axes before the split one
  must regroup among themselves, and each shard's elements from the split axis on must fill whole rows of the
  result's axis that takes them. Other reshapes are refused (gather with `.to(device)` first).
- `matmul` (a @ b, contracting a's last axis with b's second to last, or b's only one):
    - row parallel: the contracted axis is split (a along its last axis, b along its rows; a replicated operand is
      sliced to match): each device multiplies its slices and an allreduce sums the partial products;
    - a split along another axis (its rows or a batch axis) with b replicated: each device computes its rows;
    - column parallel: a replicated, b split along its columns: each device computes its columns;
    - otherwise an operand is gathered (allgather) to make one of the cases above.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, Self, TypeVar

from kiln.tensor.core import TensorCore
from kiln.tensor.multi.collectives import allreduce
from kiln.tensor.multi.layout import normalize_axis, slice_along

__all__ = ["Sharded", "matmul", "permute", "reshape"]


class Sharded(Protocol):
    """What these rules read of a sharded tensor: `MultiTensor` (kiln.tensor.multi.sharded, which builds on this
    module) has it all; results are made with `type(x)(shards, axis)`."""

    shards: tuple[TensorCore, ...]
    axis: int | None

    def __init__(self, shards: Sequence[TensorCore], axis: int | None) -> None: ...

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def bounds(self) -> tuple[tuple[int, int], ...]: ...
    @property
    def devices(self) -> tuple[str, ...]: ...
    @property
    def ndim(self) -> int: ...
    def numel(self) -> int: ...
    def replicated(self) -> Self: ...


ShardedT = TypeVar("ShardedT", bound=Sharded)


def _resolve_shape(shape: Sequence[int], total: int, old: tuple[int, ...]) -> tuple[int, ...]:
    shape = tuple(int(size) for size in shape)
    if shape.count(-1) > 1 or any(size < -1 for size in shape):
        raise ValueError(f"reshape of {old}: bad shape {shape} (sizes are >= 0 with at most one -1)")
    if -1 in shape:
        known = math.prod(size for size in shape if size != -1)
        if known == 0 or total % known:
            raise ValueError(f"reshape of {old} ({total} elements) to {shape}: the -1 cannot be inferred")
        shape = tuple(total // known if size == -1 else size for size in shape)
    if math.prod(shape) != total:
        raise ValueError(f"cannot reshape {old} ({total} elements) to {shape} ({math.prod(shape)} elements)")
    return shape


def reshape(x: ShardedT, shape: Sequence[int]) -> ShardedT:
    """`x` in `shape`, split along the result axis that takes its split axis (see the module docstring)."""
    new_shape = _resolve_shape(shape, x.numel(), x.shape)
    if x.axis is None:
        return type(x)([shard.reshape(new_shape) for shard in x.shards], None)
    axis = x.axis
    prefix = math.prod(x.shape[:axis])
    inner = math.prod(x.shape[axis + 1 :])
    target = next(
        (j for j in range(len(new_shape)) if math.prod(new_shape[:j]) == prefix and new_shape[j] != 1),
        None,
    )
    refused = ValueError(
        f"reshape of a tensor of shape {x.shape} split along axis {axis} into {x.shape[axis]} as "
        f"{[b - a for a, b in x.bounds]} to {new_shape} would split a device's part; gather it first with "
        ".to(device) or shard along another axis"
    )
    if target is None:
        raise refused
    rows = math.prod(new_shape[target + 1 :])
    shards = []
    for shard, (start, end) in zip(x.shards, x.bounds):
        if ((end - start) * inner) % rows or (start * inner) % rows:
            raise refused
        local = (*new_shape[:target], (end - start) * inner // rows, *new_shape[target + 1 :])
        shards.append(shard.reshape(local))
    return type(x)(shards, target)


def permute(x: ShardedT, order: Sequence[int]) -> ShardedT:
    """`x` with its axes in `order`; the split axis goes where `order` puts it."""
    axes = [normalize_axis(dim, x.ndim, "permute dim") for dim in order]
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"permute of a {x.ndim}-d tensor needs each dim once, got {list(order)}")
    moved = None if x.axis is None else axes.index(x.axis)
    return type(x)([shard.permute(axes) for shard in x.shards], moved)


def _sliced(x: Sharded, axis: int, bounds: tuple[tuple[int, int], ...]) -> list[TensorCore]:
    """x's shards cut to `bounds` along `axis` (x re-laid out when it is not split that way already)."""
    if x.axis == axis and x.bounds == bounds:
        return list(x.shards)
    whole = x.replicated()
    return [slice_along(shard, axis, bound) for shard, bound in zip(whole.shards, bounds)]


def matmul(a: ShardedT, b: ShardedT) -> ShardedT:
    """a @ b with the layout of the module docstring's cases."""
    if not isinstance(b, type(a)):
        raise TypeError(
            f"matmul of a MultiTensor needs a MultiTensor on the same devices, got {type(b).__name__}; shard it with "
            ".shard(devices)"
        )
    if a.devices != b.devices:
        raise ValueError(f"matmul of MultiTensors on different devices: {list(a.devices)} and {list(b.devices)}")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul needs tensors of at least one dimension, got shapes {a.shape} and {b.shape}")
    a_contracted = a.ndim - 1
    b_contracted = b.ndim - 2 if b.ndim >= 2 else 0
    if a.shape[a_contracted] != b.shape[b_contracted]:
        raise ValueError(f"matmul of shapes {a.shape} and {b.shape}: contracted sizes differ")
    if a.axis == a_contracted or b.axis == b_contracted:  # row parallel
        bounds = a.bounds if a.axis == a_contracted else b.bounds
        left, right = _sliced(a, a_contracted, bounds), _sliced(b, b_contracted, bounds)
        return type(a)(allreduce([x @ y for x, y in zip(left, right)]), None)
    if a.axis is not None and ((a.ndim >= 2 and a.axis == a.ndim - 2) or b.ndim <= 2):
        # a split along its rows (or a batch axis b does not have): b whole on every device
        products = [x @ y for x, y in zip(a.shards, b.replicated().shards)]
        out_ndim = products[0].ndim
        offset = out_ndim - (a.ndim if b.ndim >= 2 else a.ndim - 1)
        return type(a)(products, a.axis + offset)
    if a.axis is not None:  # a split along a batch axis that b also has: gather a
        return matmul(a.replicated(), b)
    if b.axis is not None and b.ndim >= 2 and b.axis == b.ndim - 1:  # column parallel
        products = [x @ y for x, y in zip(a.shards, b.shards)]
        return type(a)(products, products[0].ndim - 1)
    if b.axis is not None:  # b split along a batch axis: gather it
        return matmul(a, b.replicated())
    return type(a)([x @ y for x, y in zip(a.shards, b.shards)], None)
