"""Fused multiply-adds (MULACC) of float formats narrower than float32, computed exactly.

MULACC rounds a*b+c once (`kiln.uops.exec_alu`). Hardware fma exists for float32 and float64 only; for float16 and
the fp8 formats the exact result is rounded twice, first to float64 with round-to-odd, then to the format: the
product of two such values is exact in float64, the sum's rounding error is exact by TwoSum, and a value rounded to
odd in a format at least two bits wider than the target rounds to nearest-even in the target like the exact value
would (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to odd",
IEEE Trans. Computers 2008). The interpreter computes MULACC the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.renderers.linear_rewrite import rewrite_linear
from kiln.uops import Ops, UOp, dtypes

NARROW_FLOATS = frozenset({dtypes.float16, dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.bfloat16})
"""Float dtypes whose MULACC `exact_narrow_multiply_adds` rewrites (float32/float64 have hardware fma)."""


def round_to_odd_multiply_add(a: UOp, b: UOp, c: UOp) -> UOp:
    """a*b+c in float64 rounded to odd, for float64 operands whose product is exact (at most 26 significant bits)."""
    product = a * b
    total = product + c
    virtual = total - product
    error = (product - (total - virtual)) + (c - virtual)  # TwoSum: total + error == product + c exactly
    zero = UOp.const(dtypes.float64, 0.0)
    inexact = error.ne(zero) & (total - total).eq(zero)  # (total - total) is NaN for inf and NaN: keep those
    bits = total.bitcast(dtypes.uint64)
    one = UOp.const(dtypes.uint64, 1)
    # rounded away from zero when the error points back toward zero: step the magnitude down one ulp
    away = error.lt(zero).ne(total.lt(zero))
    toward_zero = (inexact & away).where(bits - one, bits)
    even = (toward_zero & one).eq(UOp.const(dtypes.uint64, 0))
    return (inexact & even).where(toward_zero + one, toward_zero).bitcast(dtypes.float64)


def exact_narrow_multiply_adds(uops: Sequence[UOp]) -> list[UOp]:
    """The linear program `uops` with every MULACC of a NARROW_FLOATS dtype computed as a float64 multiply-add
    rounded to odd, then converted to its dtype (one correct rounding in all)."""
    if not any(u.op is Ops.MULACC and u.dtype.scalar() in NARROW_FLOATS for u in uops):
        return list(uops)

    def rewrite(uop: UOp, src: tuple[UOp, ...]) -> UOp | None:
        if uop.op is not Ops.MULACC or uop.dtype.scalar() not in NARROW_FLOATS:
            return None
        if uop.dtype.count > 1:
            raise ValueError(f"exact_narrow_multiply_adds works on scalar MULACCs, got {uop.dtype!r}")
        wide = [operand.cast(dtypes.float64) for operand in src]
        return round_to_odd_multiply_add(*wide).cast(uop.dtype)

    return rewrite_linear(uops, rewrite)
