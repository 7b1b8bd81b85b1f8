"""Rangeify: movement ops turned into index expressions.

A value at position `indices` (one `dtypes.index` UOp per dim) of a movement op's result is the value of its source
at other indices, possibly only where a `valid` condition holds (PAD). These functions compute the source indices
with plain index math: no data is moved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kiln.uops import Ops, UOp, dtypes

Indices = tuple[UOp, ...]


def index_const(value: int) -> UOp:
    """An index-typed constant (a symbolic size, a UOp of bound variables, as itself)."""
    return value if isinstance(value, UOp) else UOp.const(dtypes.index, value)


ZERO = index_const(0)


def strides_of(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= size
    return tuple(reversed(strides))


def linear_index(indices: Sequence[UOp], shape: Sequence[int]) -> UOp:
    """The row-major element offset of `indices` in a buffer of `shape` (size-1 dims contribute nothing)."""
    total: UOp | None = None
    for index, size, stride in zip(indices, shape, strides_of(shape)):
        if size == 1:
            continue
        term = index if stride == 1 else index * stride
        total = term if total is None else total + term
    return ZERO if total is None else total


def reshape_indices(indices: Indices, new_shape: Sequence[int], old_shape: Sequence[int]) -> Indices:
    """Indices into `old_shape` of the element at `indices` of the same data reshaped to `new_shape`.

    Dims are matched in groups of equal element count, so splitting or merging dims costs one div/mod per split dim
    and dims that merely move between size-1 dims map straight through.
    """
    if math.prod(old_shape) == 0:
        return tuple(ZERO for _ in old_shape)
    if not all(isinstance(size, int) for size in (*old_shape, *new_shape)):
        mapped = _reshape_around_variables(indices, new_shape, old_shape)
        return mapped if mapped is not None else _unravel(linear_index(indices, new_shape), old_shape)
    new = [(size, index) for size, index in zip(new_shape, indices) if size != 1]
    old_positions = [position for position, size in enumerate(old_shape) if size != 1]
    result: list[UOp] = [ZERO] * len(old_shape)
    i = j = 0
    while i < len(old_positions):
        old_group, old_product = [old_positions[i]], old_shape[old_positions[i]]
        new_group, new_product = [new[j]], new[j][0]
        i, j = i + 1, j + 1
        while old_product != new_product:
            if old_product < new_product:
                old_group.append(old_positions[i])
                old_product *= old_shape[old_positions[i]]
                i += 1
            else:
                new_group.append(new[j])
                new_product *= new[j][0]
                j += 1
        if len(old_group) == 1 and len(new_group) == 1:
            result[old_group[0]] = new_group[0][1]
            continue
        flat = linear_index([index for _, index in new_group], [size for size, _ in new_group])
        group_sizes = [old_shape[position] for position in old_group]
        for position, size, stride in zip(old_group, group_sizes, strides_of(group_sizes)):
            part = flat if stride == 1 else flat // stride
            result[position] = part if position == old_group[0] else part % size
    return tuple(result)


def _is_one(size: int | UOp) -> bool:
    return isinstance(size, int) and size == 1


def _reshape_around_variables(indices: Indices, new_shape: Sequence[int], old_shape: Sequence[int]) -> Indices | None:
    """`reshape_indices` for shapes with symbolic sizes that keep each of them as one dim, in the same order (size-1
    dims added or dropped, int dims split or merged between them): each symbolic dim maps straight through and the
    int runs between them are matched as plain int shapes. None for any other reshape (it goes through the flat
    index). Without this, inserting a size-1 dim next to a variable-length one (as matmul does) divided by the
    variable on every element."""
    new = [(size, index) for size, index in zip(new_shape, indices) if not _is_one(size)]
    old = [position for position, size in enumerate(old_shape) if not _is_one(size)]
    new_cuts = [k for k, (size, _) in enumerate(new) if not isinstance(size, int)]
    old_cuts = [k for k, position in enumerate(old) if not isinstance(old_shape[position], int)]
    if len(new_cuts) != len(old_cuts) or any(new[a][0] is not old_shape[old[b]] for a, b in zip(new_cuts, old_cuts)):
        return None
    result: list[UOp] = [ZERO] * len(old_shape)
    new_from = old_from = 0
    for new_cut, old_cut in [*zip(new_cuts, old_cuts), (len(new), len(old))]:
        run = new[new_from:new_cut]
        positions = old[old_from:old_cut]
        old_sizes = [int(old_shape[position]) for position in positions]
        if math.prod(size for size, _ in run) != math.prod(old_sizes):
            return None
        if positions:
            mapped = reshape_indices(tuple(index for _, index in run), [int(size) for size, _ in run], old_sizes)
            for position, index in zip(positions, mapped):
                result[position] = index
        if new_cut < len(new):
            result[old[old_cut]] = new[new_cut][1]
        new_from, old_from = new_cut + 1, old_cut + 1
    return tuple(result)


def _unravel(flat: UOp, shape: Sequence[int]) -> Indices:
    # a symbolic reshape: the row-major offset split into `shape`'s indices by its (possibly symbolic) strides
    result = []
    for position, (size, stride) in enumerate(zip(shape, strides_of(shape))):
        if isinstance(size, int) and size == 1:
            result.append(ZERO)
            continue
        part = flat if isinstance(stride, int) and stride == 1 else flat // stride
        result.append(part if position == 0 else part % size)
    return tuple(result)


def _and(gate: UOp | None, condition: UOp | None) -> UOp | None:
    if condition is None:
        return gate
    return condition if gate is None else gate & condition


def movement_indices(node: UOp, indices: Indices, source_shape: Sequence[int]) -> tuple[Indices, UOp | None]:
    """(source indices, valid) for movement node `node` read at `indices`; valid is None when always true.

    `valid` is only produced by PAD: the positions that come from the source rather than from the padding.
    """
    op, arg = node.op, node.arg
    if op is Ops.RESHAPE:
        return reshape_indices(indices, arg, source_shape), None
    if op is Ops.PERMUTE:
        source: list[UOp] = [ZERO] * len(indices)
        for position, axis in enumerate(arg):
            source[axis] = indices[position]
        return tuple(source), None
    if op is Ops.EXPAND:
        return tuple(ZERO if size == 1 else index for index, size in zip(indices, source_shape)), None
    if op is Ops.SHRINK:
        return tuple(index if start == 0 else index + start for index, (start, _) in zip(indices, arg)), None
    if op is Ops.FLIP:
        return tuple(
            index_const(size - 1) - index if flag else index for index, size, flag in zip(indices, source_shape, arg)
        ), None
    if op is Ops.PAD:
        valid: UOp | None = None
        shifted = []
        for index, size, (before, after) in zip(indices, source_shape, arg):
            if before:
                valid = _and(valid, index_const(before - 1).lt(index))
            if after:
                valid = _and(valid, index.lt(before + size))
            shifted.append(index - before if before else index)
        return tuple(shifted), valid
    raise ValueError(f"{op!r} is not a movement op")


def and_gates(first: UOp | None, second: UOp | None) -> UOp | None:
    """The conjunction of two optional conditions."""
    return _and(first, second)
