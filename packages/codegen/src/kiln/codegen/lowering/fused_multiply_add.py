"""MULACC (a fused multiply-add: a*b+c rounded once) computed exactly from ops a renderer without fma has.

Splitting MULACC into a MUL and an ADD rounds twice and changes results, so a renderer lacking MULACC gets an exact
decomposition instead (codegen never creates MULACC itself: a kernel only has the ones its author wrote):
- formats up to float32: the product of two float32 significands (<= 48 bits) is exact in float64, and so is the
  error of the float64 sum (TwoSum); the sum is *rounded to odd* in float64 (toward zero, last bit forced to 1 when
  inexact), and rounding that once more to a format at least two bits narrower than float64 gives the correctly
  rounded a*b+c (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using
  rounding to odd", IEEE Trans. Computers 2008). Needs float64 and int64 in the renderer.
- float64: the same paper's algorithm in float64 itself: (uh, ul) = TwoProduct(a, b) (Veltkamp/Dekker, exact),
  (th, tl) = TwoSum(c, uh), v = RoundToOdd(tl + ul), result = th + v. Exact while no intermediate leaves the
  normal range: |a|, |b| below 2**995 (the Veltkamp split of a larger value overflows), |a*b| below 2**1023 and
  either zero or above 2**-969 (a smaller product's rounding error is not representable); outside it the result may
  differ from the fused one. Infinite or NaN results are a*b+c's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.uops import DType, Ops, PatternMatcher, UOp, UPat, dtypes

if TYPE_CHECKING:
    from kiln.codegen.renderer import Renderer

_INT_OF: dict[DType, DType] = {dtypes.float32: dtypes.int32, dtypes.float64: dtypes.int64}


def _two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    total = a + b
    virtual = total - a
    return total, (a - (total - virtual)) + (b - virtual)


def _halves(a: UOp) -> tuple[UOp, UOp]:
    # Veltkamp's splitter 2**27 + 1 cuts a 53-bit significand into two halves whose products are exact
    scaled = a * a.const_like(float((1 << 27) + 1))
    high = scaled - (scaled - a)
    return high, a - high


def _two_product(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    product = a * b
    a_high, a_low = _halves(a)
    b_high, b_low = _halves(b)
    error = ((a_high * b_high - product) + a_high * b_low + a_low * b_high) + a_low * b_low
    return product, error


def round_to_odd(total: UOp, error: UOp) -> UOp:
    """The round-to-odd value of `total + error`, where `total` is that sum rounded to nearest (float32/float64)
    and `error` its exact remainder (any float dtype: only its sign and whether it is zero are read)."""
    integer = _INT_OF[total.dtype.scalar()].vec(total.dtype.count)
    zero = error.const_like(0.0)
    infinity = total.const_like(float("inf"))
    finite = total.lt(infinity) & (infinity * total.const_like(-1.0)).lt(total)  # false for inf and nan
    inexact = error.ne(zero) & finite
    # rounded away from zero when the remainder points back toward zero; one step down in magnitude is bits - 1
    away = error.lt(zero).ne(total.lt(total.const_like(0.0)))
    bits = total.bitcast(integer)
    toward_zero = away.where(bits - bits.const_like(1), bits)
    odd = (toward_zero | bits.const_like(1)).bitcast(total.dtype)
    return inexact.where(odd, total)


def fused_multiply_add(a: UOp, b: UOp, c: UOp) -> UOp:
    """a*b+c rounded once, from MUL/ADD/SUB/comparisons/WHERE/BITCAST/CAST only (see the module docstring)."""
    dtype = a.dtype
    scalar = dtype.scalar()
    if not dtypes.is_float(scalar):
        return a * b + c  # integers wrap: one multiply and one add are exact
    if scalar == dtypes.float64:
        product, product_error = _two_product(a, b)
        high, low = _two_sum(c, product)
        tail, tail_error = _two_sum(low, product_error)
        v = round_to_odd(tail, tail_error)
        result = v.eq(v.const_like(0.0)).where(high, high + v)  # keeps the sign of an exact zero
        infinity = high.const_like(float("inf"))
        finite = high.lt(infinity) & (infinity * high.const_like(-1.0)).lt(high)
        return finite.where(result, a * b + c)
    return _odd_float64_sum(a, b, c).cast(dtype)


def fused_multiply_add_to_odd_float32(a: UOp, b: UOp, c: UOp) -> UOp:
    """a*b+c of float32 operands rounded to odd into float32 (via float64; exact for every finite input).

    Rounding the result to nearest into a format of at most 22 significand bits (bfloat16, float16, fp8) gives the
    correctly rounded fused result: rounding to odd twice (53 then 24 bits) equals rounding to odd once to 24 bits.
    """
    odd = _odd_float64_sum(a, b, c)
    rounded = odd.cast(a.dtype)
    return round_to_odd(rounded, odd - rounded.cast(odd.dtype))


def _odd_float64_sum(a: UOp, b: UOp, c: UOp) -> UOp:
    wide = dtypes.float64.vec(a.dtype.count)
    x, y, z = (operand.cast(wide) for operand in (a, b, c))
    product = x * y  # exact: at most 2 * 24 significant bits, exponents well inside float64's range
    total, error = _two_sum(product, z)
    return round_to_odd(total, error)


NARROW_FLOATS: frozenset[DType] = frozenset({dtypes.float16, dtypes.fp8e4m3, dtypes.fp8e5m2})
"""Formats whose MULACC is computed through float64 even on a renderer with MULACC: hardware fma is float32/float64
only (bfloat16's is part of its emulation, `dtype_emulation`)."""


def _unfused(ctx: Renderer, root: UOp, a: UOp, b: UOp, c: UOp) -> UOp | None:
    scalar = root.dtype.scalar()
    if Ops.MULACC in ctx.native_ops and scalar not in NARROW_FLOATS:
        return None
    if scalar == dtypes.bfloat16 and scalar in ctx.emulated_dtypes:
        return None  # the dtype emulation pass computes it, rounding once
    return fused_multiply_add(a, b, c)


pm_multiply_add = PatternMatcher(
    [(UPat(Ops.MULACC, src=(UPat.var("a"), UPat.var("b"), UPat.var("c")), name="root"), _unfused)]
)
"""The multiply-add pass (ctx: the Renderer): every MULACC it cannot fuse -> `fused_multiply_add` (exact). With
MULACC native only NARROW_FLOATS are rewritten; bfloat16 ones are left to the dtype emulation when it emulates them."""
