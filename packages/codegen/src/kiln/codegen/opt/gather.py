"""Gathers out of one-hot reductions, on the kernel sink before optimization (the `gather` rewrite of `optimize`).

kiln.tensor builds `arange` from constants and movement ops only: position p is the sum of its binary digits, which
reach a kernel as `sum_k WHERE(0 < (p // 2^k) % 2, 2^k, 0)`. `pm_iota` folds such a complete digit sum back into
`CAST(p)`. An embedding lookup or a tensor index is a one-hot product reduced over the table,
`sum_r WHERE(v == r, 1, 0) * y(r)`; `pm_gather` turns it into `WHERE(0 <= v < n, y(clamp(v)), 0)`: one row read
instead of the whole table (`v` must not depend on `r`; out-of-range indices still select nothing).
"""

from __future__ import annotations

from kiln.uops import Ops, PatternMatcher, UOp, UPat, dtypes

__all__ = ["pm_gather"]


def _digit(leaf: UOp) -> tuple[UOp, int, bool] | None:
    # WHERE(0 < bit, 2^k, 0) -> (the position, k, whether the bit is taken modulo 2)
    if leaf.op is not Ops.WHERE:
        return None
    condition, value, zero = leaf.src
    if value.op is not Ops.CONST or zero.op is not Ops.CONST or zero.arg != 0 or not isinstance(value.arg, int):
        return None
    if condition.op is not Ops.CMPLT or condition.src[0].op is not Ops.CONST or condition.src[0].arg != 0:
        return None
    k = value.arg.bit_length() - 1
    if value.arg <= 0 or value.arg != 1 << k:
        return None
    bit, modulo = condition.src[1], False
    if bit.op is Ops.MOD and bit.src[1].op is Ops.CONST and bit.src[1].arg == 2:
        bit, modulo = bit.src[0], True
    if k == 0:
        return (bit, 0, modulo) if modulo else None
    if bit.op is Ops.IDIV and bit.src[1].op is Ops.CONST and bit.src[1].arg == 1 << k:
        return bit.src[0], k, modulo
    return None


def _leaves(node: UOp, dtype: object) -> list[UOp]:
    found, stack = [], [node]
    while stack:
        current = stack.pop()
        if current.op is Ops.ADD and current.dtype == dtype:
            stack.extend(current.src)
        else:
            found.append(current)
    return found


def _iota(total: UOp) -> UOp | None:
    if not dtypes.is_int(total.dtype) or total.dtype == dtypes.index:
        return None
    digits = [_digit(leaf) for leaf in _leaves(total, total.dtype)]
    if any(digit is None for digit in digits) or len(digits) < 2:
        return None
    positions = {digit[0] for digit in digits if digit is not None}
    ks = sorted(digit[1] for digit in digits if digit is not None)
    if len(positions) != 1 or ks != list(range(len(ks))):
        return None
    (position,) = positions
    bits = len(ks)
    low, high = position.vmin, position.vmax
    if not (isinstance(low, int) and isinstance(high, int) and low >= 0 and high < 1 << bits):
        return None
    # a digit without its modulo is only exact for the top one (position < 2^bits)
    if any(digit is not None and not digit[2] and digit[1] != bits - 1 for digit in digits):
        return None
    return position.cast(total.dtype)


def _one_hot(factor: UOp, rng: UOp) -> UOp | None:
    # WHERE(v == CAST(rng), 1, 0) (possibly cast) -> v, for v independent of rng
    while factor.op is Ops.CAST:
        factor = factor.src[0]
    if factor.op is not Ops.WHERE:
        return None
    condition, one, zero = factor.src
    if one.op is not Ops.CONST or one.arg != 1 or zero.op is not Ops.CONST or zero.arg != 0:
        return None
    if condition.op is not Ops.CMPEQ:
        return None
    for value, other in (condition.src, condition.src[::-1]):
        inner = other.src[0] if other.op is Ops.CAST else other
        if inner is rng and rng not in value.toposort():
            return value
    return None


def _gather(reduce: UOp) -> UOp | None:
    if reduce.arg is not Ops.ADD or len(reduce.src) != 2 or reduce.src[1].op is not Ops.RANGE:
        return None
    body, rng = reduce.src
    if body.op is not Ops.MUL:
        return None
    size = rng.src[0]
    if size.op is not Ops.CONST:
        return None
    for hot, rest in (body.src, body.src[::-1]):
        value = _one_hot(hot, rng)
        if value is None or rng in value.toposort():
            continue
        bound: int = size.arg
        index = value.cast(dtypes.index)
        valid: UOp = (index < bound) & (UOp.const(dtypes.index, -1) < index)
        picked = rest.substitute({rng: index.maximum(0).minimum(bound - 1)})
        gathered: UOp = valid.where(picked, picked.const_like(0))
        return gathered
    return None


pm_gather = PatternMatcher(
    [
        (UPat(Ops.ADD, name="total"), _iota),
        (UPat(Ops.REDUCE, name="reduce"), _gather),
    ]
)
"""Digit sums of an iota -> CAST(position); one-hot reductions -> gathers (see the module docstring)."""
