"""Range analysis: the proven minimum and maximum value of every UOp (`UOp.vmin` / `UOp.vmax`).

A bound is proven for every assignment of the variables within their bounds (DEFINE_VAR lo..hi, RANGE and SPECIAL
0..size-1). Fixed-width integers wrap around, so an op whose exact result could leave its dtype gets the dtype's
whole range; `index` is an exact integer and never wraps. Floats are only tracked where it is cheap and exact
(constants, casts from integers, where/max of tracked values); everything else gets the dtype's range.
An integer division or modulo by zero is undefined behaviour, so a divisor's zero is left out of the analysis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeAlias

from kiln.uops.alu import truncated_div
from kiln.uops.args import VarArg
from kiln.uops.dtype import ConstType, DType, PtrDType, dtypes, truncate
from kiln.uops.node import GraphNode
from kiln.uops.ops import GroupOp, Ops

Bounds: TypeAlias = tuple[ConstType, ConstType]
IntBounds: TypeAlias = tuple[int, int]

_UNKNOWN: Bounds = (-math.inf, math.inf)  # the range of a value that is not a number (pointers, void)


def dtype_bounds(dtype: DType) -> Bounds:
    """The whole range of `dtype`: what any value of it may be. Non-numeric dtypes get (-inf, inf)."""
    if isinstance(dtype, PtrDType) or dtype.scalar() == dtypes.void:
        return _UNKNOWN
    return dtypes.min(dtype), dtypes.max(dtype)


def _is_integer_dtype(dtype: DType) -> bool:
    return not isinstance(dtype, PtrDType) and dtypes.is_int(dtype)


def fits(dtype: DType, low: int, high: int) -> bool:
    """True when every integer in [low, high] is a value of integer `dtype` (always true for the exact `index`)."""
    if dtype.scalar() == dtypes.index:
        return True
    minimum, maximum = dtypes.min(dtype), dtypes.max(dtype)
    return minimum <= low and high <= maximum


def _wrap(dtype: DType, low: int, high: int) -> Bounds:
    # exact bounds that leave the dtype mean the value may wrap around: then it can be anything
    return (low, high) if fits(dtype, low, high) else dtype_bounds(dtype)


def _int_pair(bounds: Bounds) -> IntBounds | None:
    low, high = bounds
    if isinstance(low, float) or isinstance(high, float):
        return None  # an unknown (infinite) range
    return int(low), int(high)


def _magnitude_bits(value: int) -> int:
    # every int v with _magnitude_bits(v) <= k lies in [-2**k, 2**k - 1]
    return value.bit_length() if value >= 0 else (~value).bit_length()


def _bitwise_bounds(op: Ops, a: IntBounds, b: IntBounds) -> IntBounds:
    if a[0] >= 0 and b[0] >= 0:
        width = 1 << max(_magnitude_bits(a[1]), _magnitude_bits(b[1]))
        if op is Ops.AND:
            return 0, min(a[1], b[1])
        if op is Ops.OR:
            return max(a[0], b[0]), width - 1
        return 0, width - 1
    if op is Ops.AND and (a[0] >= 0 or b[0] >= 0):
        return 0, a[1] if a[0] >= 0 else b[1]  # and-ing with a non-negative value keeps it in [0, that value]
    # two's complement: and/or/xor of values in [-2**k, 2**k - 1] stay there
    width = 1 << max(_magnitude_bits(v) for v in (*a, *b))
    return -width, width - 1


def _division_bounds(a: IntBounds, b: IntBounds) -> IntBounds | None:
    # x/y truncated is monotone in x and, on each sign of y, in y: the extremes are at corners of the box
    divisors = [d for d in {b[0], b[1], -1, 1} if d != 0 and b[0] <= d <= b[1]]
    if not divisors:
        return None  # the divisor is always zero: undefined behaviour
    quotients = [truncated_div(x, d) for x in a for d in divisors]
    return min(quotients), max(quotients)


def _modulo_bounds(a: IntBounds, b: IntBounds) -> IntBounds | None:
    if b[0] == b[1] != 0:
        divisor = b[0]
        quotient = truncated_div(a[0], divisor)
        if quotient == truncated_div(a[1], divisor):
            # inside one period x % c == x - q*c, monotone in x
            return a[0] - quotient * divisor, a[1] - quotient * divisor
    largest = max(abs(b[0]), abs(b[1])) - 1  # |x % y| < |y|
    if largest < 0:
        return None
    low = 0 if a[0] >= 0 else max(a[0], -largest)  # the remainder takes the dividend's sign
    high = 0 if a[1] <= 0 else min(a[1], largest)
    return low, high


def _shift_counts(dtype: DType, b: IntBounds) -> list[int]:
    # exec_alu reads the count as unsigned and clamps it to the width; the effective count is monotone in the count
    bits = dtype.itemsize * 8
    counts = {min(max(b[0], 0), bits), min(max(b[1], 0), bits)}
    if b[0] < 0:
        counts.add(bits)
    return sorted(counts)


def _power_bounds(a: IntBounds, b: IntBounds) -> IntBounds | None:
    if a[0] < 0 or b[0] < 0 or b[1] * max(a[1].bit_length(), 1) > 4096:
        return None  # only the monotone, small case
    values = [x**y for x in a for y in b]
    return min(values), max(values)


def _int_bounds(op: Ops, dtype: DType, sources: Sequence[IntBounds]) -> Bounds:
    """Bounds of integer `op` with result `dtype` from its sources' bounds (all known integer ranges)."""
    if op is Ops.NEG:
        return _wrap(dtype, -sources[0][1], -sources[0][0])
    if op is Ops.TRUNC:
        return sources[0]
    a, b = sources[0], sources[1] if len(sources) > 1 else sources[0]
    if op is Ops.ADD:
        return _wrap(dtype, a[0] + b[0], a[1] + b[1])
    if op is Ops.SUB:
        return _wrap(dtype, a[0] - b[1], a[1] - b[0])
    if op in (Ops.MUL, Ops.MULACC):
        products = [x * y for x in a for y in b]
        if op is Ops.MUL:
            return _wrap(dtype, min(products), max(products))
        c = sources[2]
        return _wrap(dtype, min(products) + c[0], max(products) + c[1])
    if op is Ops.MAX:
        return max(a[0], b[0]), max(a[1], b[1])
    result: IntBounds | None = None
    if op is Ops.IDIV:
        result = _division_bounds(a, b)
    elif op is Ops.MOD:
        result = _modulo_bounds(a, b)
    elif op in (Ops.AND, Ops.OR, Ops.XOR):
        result = _bitwise_bounds(op, a, b)
    elif op in (Ops.SHL, Ops.SHR):
        counts = _shift_counts(dtype, b)
        shifted = [x << s if op is Ops.SHL else x >> s for x in a for s in counts]
        result = min(shifted), max(shifted)
    elif op is Ops.POW:
        result = _power_bounds(a, b)
    if result is None:
        return dtype_bounds(dtype)
    return _wrap(dtype, result[0], result[1])


def _comparison_bounds(op: Ops, a: Bounds, b: Bounds) -> Bounds:
    # nan bounds make every test below false, which leaves the undecided (False, True)
    if op is Ops.CMPLT:
        if a[1] < b[0]:
            return True, True
        if a[0] >= b[1]:
            return False, False
        return False, True
    always_equal = a[0] == a[1] == b[0] == b[1]
    never_equal = a[1] < b[0] or b[1] < a[0]
    if always_equal or never_equal:
        decided = never_equal if op is Ops.CMPNE else always_equal
        return decided, decided
    return False, True


def _bool_bounds(op: Ops, sources: Sequence[Bounds]) -> Bounds | None:
    flags = [(bool(low), bool(high)) for low, high in sources]
    if op in (Ops.AND, Ops.MUL):
        return flags[0][0] and flags[1][0], flags[0][1] and flags[1][1]
    if op in (Ops.OR, Ops.ADD, Ops.MAX):
        return flags[0][0] or flags[1][0], flags[0][1] or flags[1][1]
    if op is Ops.NEG:
        return not flags[0][1], not flags[0][0]
    if op in (Ops.XOR, Ops.CMPNE) and flags[0][0] == flags[0][1] and flags[1][0] == flags[1][1]:
        value = flags[0][0] != flags[1][0]
        return value, value
    return None


def _cast_bounds(dtype: DType, source_dtype: DType, source: Bounds) -> Bounds:
    low, high = source
    if dtypes.is_bool(dtype):
        if isinstance(low, float) and math.isnan(low):
            return False, True
        if low == high == 0:
            return False, False
        return (True, True) if low > 0 or high < 0 else (False, True)
    if dtypes.is_float(dtype):
        if dtypes.is_int(source_dtype) or dtypes.is_bool(source_dtype) or dtypes.is_float(source_dtype):
            # rounding to a float is monotone, so the rounded ends bound the rounded values
            return truncate(dtype, low), truncate(dtype, high)
        return dtype_bounds(dtype)
    if dtypes.is_int(source_dtype) or dtypes.is_bool(source_dtype):
        return _wrap(dtype, int(low), int(high))
    if dtypes.is_float(source_dtype) and math.isfinite(low) and math.isfinite(high):
        # float -> int truncates toward zero (monotone); out-of-range conversions are undefined in C
        return _wrap(dtype, int(low), int(high))
    return dtype_bounds(dtype)


def bounds_from_sources(uop: GraphNode, sources: Sequence[Bounds]) -> Bounds:
    """The bounds of `uop` given the bounds of its sources (`sources[i]` belongs to `uop.src[i]`)."""
    op, dtype = uop.op, uop.dtype
    if op is Ops.CONST:
        return uop.arg, uop.arg
    if op is Ops.VCONST:
        return min(uop.arg), max(uop.arg)
    if op is Ops.DEFINE_VAR:
        variable: VarArg = uop.arg
        return variable.lo, variable.hi
    if op in (Ops.RANGE, Ops.SPECIAL):
        size_high = sources[0][1]
        if isinstance(size_high, float):
            return dtype_bounds(dtype) if math.isinf(size_high) else (0, max(int(size_high) - 1, 0))
        return 0, max(int(size_high) - 1, 0)
    if op is Ops.BIND:
        return sources[0]
    if op in (Ops.VECTORIZE, Ops.GEP) and sources:
        return min(s[0] for s in sources), max(s[1] for s in sources)
    if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
        return _comparison_bounds(op, sources[0], sources[1])
    if op is Ops.WHERE:
        condition = sources[0]
        if condition[0] and condition[1]:
            return sources[1]
        if not condition[0] and not condition[1]:
            return sources[2]
        return _union(dtype, sources[1], sources[2])
    if op is Ops.CAST:
        return _cast_bounds(dtype, uop.src[0].dtype, sources[0])
    if dtypes.is_bool(dtype) and op in (Ops.AND, Ops.OR, Ops.XOR, Ops.MUL, Ops.ADD, Ops.MAX, Ops.NEG, Ops.CMPNE):
        found = _bool_bounds(op, sources)
        return found if found is not None else (False, True)
    if _is_integer_dtype(dtype) and op in _INT_OPS:
        pairs = [_int_pair(s) for s in sources]
        if all(p is not None for p in pairs):
            return _int_bounds(op, dtype, [p for p in pairs if p is not None])
    if dtypes.is_float(dtype) and op is Ops.MAX and not any(_has_nan(s) for s in sources):
        return max(sources[0][0], sources[1][0]), max(sources[0][1], sources[1][1])
    return dtype_bounds(dtype)


# the ops `_int_bounds` bounds on integers: every binary op but the comparisons, FDIV and THREEFRY; NEG, TRUNC, MULACC
_INT_OPS = (GroupOp.Binary - GroupOp.Comparison - {Ops.FDIV, Ops.THREEFRY}) | {Ops.NEG, Ops.TRUNC, Ops.MULACC}


def _has_nan(bounds: Bounds) -> bool:
    return any(isinstance(v, float) and math.isnan(v) for v in bounds)


def _union(dtype: DType, a: Bounds, b: Bounds) -> Bounds:
    if _has_nan(a) or _has_nan(b):
        return dtype_bounds(dtype)
    return min(a[0], b[0]), max(a[1], b[1])


def _cached(node: GraphNode) -> bool:
    # UOp keeps its bounds in its instance __dict__ under "_bounds" (see UOp.vmin)
    return "_bounds" in node.__dict__


def bounds(uop: GraphNode) -> Bounds:
    """(vmin, vmax) of `uop`: proven for every assignment of its variables within their bounds.

    Sources are analysed first, bottom-up and without recursion, so graphs of any depth work; each UOp's result is
    cached by `UOp.vmin` / `UOp.vmax`, which call this.
    """
    known: list[Bounds] = []
    for source in uop.src:
        found: Bounds | None = source.__dict__.get("_bounds")
        if found is None:
            break
        known.append(found)
    else:
        return bounds_from_sources(uop, known)  # the common case: every source's bounds are known already
    for node in uop.toposort(gate=lambda node: node is uop or not _cached(node)):
        if node is not uop and not _cached(node):
            node.vmin  # noqa: B018 - computes and caches the node's bounds while its sources are already cached
    return bounds_from_sources(uop, [(source.vmin, source.vmax) for source in uop.src])
