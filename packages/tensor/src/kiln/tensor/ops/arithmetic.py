"""Exact integer and floating-point arithmetic composed from the ALU primitives: Python's floor division and
remainder, C's fmod for floats, and integer powers.

The kernel spec keeps IDIV / MOD integer-only and POW float-only, and IDIV / MOD truncate toward zero like C, so the
PyTorch semantics (`//` floors, `%` takes the divisor's sign, `fmod` works on floats, `int ** int`) are built here.
"""

from __future__ import annotations

from kiln.tensor.core import TensorT
from kiln.tensor.ops.data_checks import guarded_integer_division
from kiln.uops import Ops, dtypes

__all__ = ["float_floor_divide", "integer_power", "sign_mismatch", "truncated_remainder"]


def sign_mismatch(remainder: TensorT, divisor: TensorT) -> TensorT:
    """Where a C remainder is nonzero and its sign differs from the divisor's (bool tensor)."""
    zero = remainder._const(0, remainder.shape, remainder.dtype, remainder.device)
    nonzero = remainder._binary(Ops.CMPNE, zero)
    differ = remainder._binary(Ops.CMPLT, zero)._binary(Ops.CMPNE, divisor._binary(Ops.CMPLT, zero))
    return nonzero._binary(Ops.AND, differ)


def float_floor_divide(left: TensorT, right: TensorT) -> TensorT:
    """Python's float floor division (CPython's float_floor_div): exact quotient of (a - fmod(a, b)) / b, floored.

    A zero divisor gives a / b (inf or nan), as numpy and PyTorch do.
    """
    zero = left._const(0, left.shape, left.dtype, left.device)
    one = left._const(1, left.shape, left.dtype, left.device)
    remainder = truncated_remainder(left, right)
    quotient = left._binary(Ops.SUB, remainder)._binary(Ops.FDIV, right)
    adjust = sign_mismatch(remainder, right)
    quotient = adjust._ternary(Ops.WHERE, quotient._binary(Ops.SUB, one), quotient)
    floored = quotient.floor()
    half = left._const(0.5, left.shape, left.dtype, left.device)
    floored = half._binary(Ops.CMPLT, quotient._binary(Ops.SUB, floored))._ternary(
        Ops.WHERE, floored._binary(Ops.ADD, one), floored
    )
    # a zero quotient takes the sign of the true quotient, like Python
    signed_zero = left._binary(Ops.FDIV, right)._binary(Ops.MUL, zero)
    floored = quotient._binary(Ops.CMPEQ, zero)._ternary(Ops.WHERE, signed_zero, floored)
    return right._binary(Ops.CMPEQ, zero)._ternary(Ops.WHERE, left._binary(Ops.FDIV, right), floored)


def truncated_remainder(left: TensorT, right: TensorT) -> TensorT:
    """C's remainder (sign of the dividend): the MOD primitive for integers; C's `fmod` for floats.

    MOD is integer-only in the kernel spec, so float fmod is built from FDIV, TRUNC, MUL and SUB:
    - float32 and narrower compute in float64 by long division: r -= trunc(r / s) * s for the scales s = b * 2**k,
      k stepping down 28 bits at a time to 0. Each quotient is below 2**28, so every step is exact and the result is
      exactly fmod's for all inputs.
    - float64 takes one step with an error-free product (Dekker's two-product) and a correction of an off-by-one
      quotient: exact while |a / b| < 2**53 (and no product overflows); beyond that the result is approximate.
    """
    if not dtypes.is_float(left.dtype):
        return guarded_integer_division(left, right, Ops.MOD, "remainder")
    if left.dtype.itemsize == 8:
        remainder = _float64_remainder(left, right)
    else:
        dividend, divisor = left._cast(dtypes.float64), right._cast(dtypes.float64)
        exponent_bits, mantissa_bits = dtypes.finfo(left.dtype)
        bias = (1 << (exponent_bits - 1)) - 1
        # the largest quotient of two values of the input dtype is below 2**(2 * bias + mantissa_bits + 1)
        top = 2 * bias + mantissa_bits + 1 - 28
        remainder = dividend
        for shift in [*range(top, 0, -28), 0]:
            scale = divisor if shift == 0 else divisor._binary(Ops.MUL, divisor._scalar_like(2.0**shift))
            quotient = remainder._binary(Ops.FDIV, scale)._unary(Ops.TRUNC)
            remainder = remainder._binary(Ops.SUB, quotient._binary(Ops.MUL, scale))
    dividend, divisor = left._cast(remainder.dtype), right._cast(remainder.dtype)
    zero = dividend._scalar_like(0)
    # a zero result takes the dividend's sign, like fmod; fmod(finite a, +-inf) is a itself
    remainder = remainder._binary(Ops.CMPEQ, zero)._ternary(Ops.WHERE, dividend._binary(Ops.MUL, zero), remainder)
    keep = divisor.isinf()._binary(Ops.AND, dividend.isfinite())
    return keep._ternary(Ops.WHERE, dividend, remainder)._cast(left.dtype)


def _split(x: TensorT) -> tuple[TensorT, TensorT]:
    """Veltkamp's split of a float64 into two halves of 26 significant bits (hi + lo == x exactly)."""
    scaled = x._binary(Ops.MUL, x._scalar_like(134217729.0))  # 2**27 + 1
    high = scaled._binary(Ops.SUB, scaled._binary(Ops.SUB, x))
    return high, x._binary(Ops.SUB, high)


def _float64_remainder(dividend: TensorT, divisor: TensorT) -> TensorT:
    quotient = dividend._binary(Ops.FDIV, divisor)._unary(Ops.TRUNC)
    product = quotient._binary(Ops.MUL, divisor)
    # Dekker's two-product: product + error == quotient * divisor exactly
    quotient_high, quotient_low = _split(quotient)
    divisor_high, divisor_low = _split(divisor)
    error = quotient_high._binary(Ops.MUL, divisor_high)._binary(Ops.SUB, product)
    error = error._binary(Ops.ADD, quotient_high._binary(Ops.MUL, divisor_low))
    error = error._binary(Ops.ADD, quotient_low._binary(Ops.MUL, divisor_high))
    error = error._binary(Ops.ADD, quotient_low._binary(Ops.MUL, divisor_low))
    remainder = dividend._binary(Ops.SUB, product)._binary(Ops.SUB, error)
    # the rounded quotient can be one off: fix a remainder of the wrong sign or of a full divisor's size
    zero = dividend._scalar_like(0)
    magnitude = divisor.abs()
    step = dividend._binary(Ops.CMPLT, zero)._ternary(Ops.WHERE, magnitude._unary(Ops.NEG), magnitude)
    wrong_sign = remainder._binary(Ops.CMPNE, zero)._binary(
        Ops.AND, remainder._binary(Ops.CMPLT, zero)._binary(Ops.CMPNE, dividend._binary(Ops.CMPLT, zero))
    )
    remainder = wrong_sign._ternary(Ops.WHERE, remainder._binary(Ops.ADD, step), remainder)
    too_large = magnitude._binary(Ops.CMPLT, remainder.abs())._binary(
        Ops.OR, magnitude._binary(Ops.CMPEQ, remainder.abs())
    )
    return too_large._ternary(Ops.WHERE, remainder._binary(Ops.SUB, step), remainder)


def integer_power(base: TensorT, exponent: TensorT) -> TensorT:
    """base ** exponent for integers (POW is float-only in the kernel spec): square-and-multiply over the exponent's
    bits, wrapping like the dtype. Negative exponents give 1 / base**n truncated: 1 for 1, +-1 for -1, else 0."""
    one = base._const(1, base.shape, base.dtype, base.device)
    zero = base._const(0, base.shape, base.dtype, base.device)
    result, square, remaining = one, base, exponent
    for _ in range(8 * base.dtype.itemsize):
        odd = remaining._binary(Ops.AND, one)._binary(Ops.CMPNE, zero)
        result = odd._ternary(Ops.WHERE, result._binary(Ops.MUL, square), result)
        square = square._binary(Ops.MUL, square)
        remaining = remaining._binary(Ops.SHR, one)
    if dtypes.is_unsigned(base.dtype):
        return result
    exponent_odd = exponent._binary(Ops.AND, one)._binary(Ops.CMPNE, zero)
    minus_one = base._const(-1, base.shape, base.dtype, base.device)
    inverse = base._binary(Ops.CMPEQ, one)._ternary(
        Ops.WHERE,
        one,
        base._binary(Ops.CMPEQ, minus_one)._ternary(Ops.WHERE, exponent_odd._ternary(Ops.WHERE, minus_one, one), zero),
    )
    return exponent._binary(Ops.CMPLT, zero)._ternary(Ops.WHERE, inverse, result)
