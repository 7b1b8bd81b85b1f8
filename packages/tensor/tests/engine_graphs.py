"""Graphs built straight from the tensor-graph primitives, with numpy references, for the engine's tests.

The engine tests use only the primitive builders of `Tensor` (`_binary`, `_movement`, `_reduce`, ...), so they test
the scheduler independently of the public methods the ops helper builds on top of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from kiln.tensor import Tensor
from kiln.tensor.realize import default_engine
from kiln.tensor.schedule import SchedulePlan, normalize
from kiln.uops import Ops

FAST_DEVICE = "PYTHON"  # the interpreter device: no compiler, so the many small test kernels build quickly


def plan_of(*tensors: Tensor) -> SchedulePlan:
    """The schedule plan realizing `tensors` together would run."""
    return default_engine().schedule.plan(normalize([tensor.uop for tensor in tensors]).sink)


def const_like(tensor: Tensor, value: float | int | bool) -> Tensor:
    """`value` broadcast to `tensor`'s shape, dtype and device."""
    return Tensor._const(value, tensor.shape, tensor.dtype, tensor.device)


def broadcast(tensor: Tensor, shape: Sequence[int]) -> Tensor:
    """`tensor` reshaped (ones prepended) and expanded to `shape`."""
    padded = (1,) * (len(shape) - tensor.ndim) + tensor.shape
    return tensor._movement(Ops.RESHAPE, padded)._movement(Ops.EXPAND, tuple(shape))


def relu(tensor: Tensor) -> Tensor:
    """max(x, 0)."""
    return tensor._binary(Ops.MAX, const_like(tensor, 0.0))


def add(a: Tensor, b: Tensor) -> Tensor:
    """a + b with b broadcast to a's shape."""
    return a._binary(Ops.ADD, broadcast(b, a.shape) if b.shape != a.shape else b)


def matmul(x: Tensor, w: Tensor) -> Tensor:
    """(M, K) @ (K, N) as reshape / expand / mul / sum over K."""
    rows, inner = x.shape
    columns = w.shape[1]
    left = x._movement(Ops.RESHAPE, (rows, 1, inner))._movement(Ops.EXPAND, (rows, columns, inner))
    right = w._movement(Ops.PERMUTE, (1, 0))._movement(Ops.RESHAPE, (1, columns, inner))
    right = right._movement(Ops.EXPAND, (rows, columns, inner))
    return left._binary(Ops.MUL, right)._reduce(Ops.ADD, (2,))._movement(Ops.RESHAPE, (rows, columns))


def softmax_last_axis(x: Tensor) -> Tensor:
    """Softmax over the last axis of a 2-D tensor: exp2((x - max) * log2(e)) / sum."""
    maximum = x._reduce(Ops.MAX, (1,))._movement(Ops.EXPAND, x.shape)
    scaled = x._binary(Ops.SUB, maximum)._binary(Ops.MUL, const_like(x, 1 / math.log(2)))
    exponent = scaled._unary(Ops.EXP2)
    total = exponent._reduce(Ops.ADD, (1,))._movement(Ops.EXPAND, x.shape)
    return exponent._binary(Ops.FDIV, total)


def softmax_reference(values: np.ndarray) -> np.ndarray:
    """numpy softmax over the last axis."""
    shifted = np.exp(values - values.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


# -- random movement chains ----------------------------------------------------------------------------------------

Movement = tuple[Ops, Any]


def apply_numpy(array: np.ndarray, movement: Movement) -> np.ndarray:
    """The numpy result of one movement op."""
    op, arg = movement
    if op is Ops.RESHAPE:
        return array.reshape(arg)
    if op is Ops.PERMUTE:
        return array.transpose(arg)
    if op is Ops.EXPAND:
        return np.broadcast_to(array, arg)
    if op is Ops.PAD:
        return np.pad(array, arg)
    if op is Ops.SHRINK:
        return array[tuple(slice(start, end) for start, end in arg)]
    if op is Ops.FLIP:
        return np.flip(array, [axis for axis, flag in enumerate(arg) if flag]) if any(arg) else array
    raise AssertionError(op)


def _factorizations(total: int, dims: int) -> list[tuple[int, ...]]:
    if total == 0:
        return [(0,) + (1,) * (dims - 1), (1,) * (dims - 1) + (0,)]
    if dims == 1:
        return [(total,)]
    found = []
    for first in range(1, total + 1):
        if total % first == 0:
            found.extend((first, *rest) for rest in _factorizations(total // first, dims - 1))
    return found


@st.composite
def movement_op(draw: st.DrawFn, shape: tuple[int, ...]) -> Movement:
    """One random legal movement op for `shape` (keeping tensors small)."""
    kinds = [Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.RESHAPE]
    if 1 in shape and math.prod(shape) <= 64:
        kinds.append(Ops.EXPAND)
    op = draw(st.sampled_from(kinds))
    if op is Ops.RESHAPE:
        dims = draw(st.integers(1, 4))
        return op, draw(st.sampled_from(_factorizations(math.prod(shape), dims)))
    if op is Ops.PERMUTE:
        return op, tuple(draw(st.permutations(range(len(shape)))))
    if op is Ops.EXPAND:
        return op, tuple(draw(st.integers(1, 3)) if size == 1 else size for size in shape)
    if op is Ops.PAD:
        return op, tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    if op is Ops.SHRINK:
        bounds = []
        for size in shape:
            start = draw(st.integers(0, size))
            bounds.append((start, draw(st.integers(start, size))))
        return op, tuple(bounds)
    return op, tuple(draw(st.booleans()) for _ in shape)


@st.composite
def movement_chain(draw: st.DrawFn, shape: tuple[int, ...], length: int) -> list[Movement]:
    """A chain of `length` random movement ops starting from `shape` (sizes capped so tests stay fast)."""
    chain = []
    probe = np.zeros(shape, np.int8)
    for _ in range(length):
        movement = draw(movement_op(probe.shape))
        result = apply_numpy(probe, movement)
        if result.size > 512:
            continue
        chain.append(movement)
        probe = result
    return chain
