"""Basic ALU ops a renderer does not render natively, rewritten in terms of ones it does.

Transcendental ops (EXP2, LOG2, SIN, POW) are decomposed by `kiln.codegen.transcendental`; this module covers the
plain ones (SUB, NEG, CMPEQ, MAX, RECIPROCAL, FDIV, SHL, SHR) and strength-reduces division and modulo of
non-negative integers by powers of two into shifts and masks. MULACC has its own pass (`fused_multiply_add.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from kiln.codegen.transcendental import transcendental_rewrites
from kiln.uops import ConstType, Ops, PatternMatcher, UOp, UPat, dtypes

_Rewrite = Callable[..., "UOp | None"]


def _minus_one(x: UOp) -> ConstType:
    return -1.0 if dtypes.is_float(x.dtype) else -1


def _power_of_two(c: UOp) -> int | None:
    value = c.arg
    if c.op is not Ops.CONST or not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return None
    return value.bit_length() - 1 if value & (value - 1) == 0 else None


def _shift_right(x: UOp, c: UOp) -> UOp | None:
    shift = _power_of_two(c)
    if shift is None or not dtypes.is_int(x.dtype) or x.vmin < 0:
        return None
    return x.alu(Ops.SHR, x.const_like(shift))


def _mask(x: UOp, c: UOp) -> UOp | None:
    if _power_of_two(c) is None or not dtypes.is_int(x.dtype) or x.vmin < 0:
        return None
    return x.alu(Ops.AND, x.const_like(c.arg - 1))


def _floor_divide(x: UOp, divisor: int) -> UOp:
    # an arithmetic right shift floors; IDIV truncates toward zero, so negative values are moved down first
    if dtypes.is_unsigned(x.dtype) or x.vmin >= 0:
        return x.idiv(x.const_like(divisor))
    return x.lt(0).where(x - (divisor - 1), x).idiv(x.const_like(divisor))


def _maximum(a: UOp, b: UOp) -> UOp:
    if not dtypes.is_float(a.dtype):
        return a.lt(b).where(b, a)
    # kiln.uops.exec_alu: a NaN operand is ignored (fmax), and -0.0 orders below +0.0
    pick_b = a.lt(b) | a.ne(a)
    pick_a = b.lt(a) | b.ne(b)
    zero = a.const_like(0.0)
    equal = a.eq(zero).where(a + b, a)  # equal zeros: +0 unless both are -0, which is what their sum gives
    return pick_b.where(b, pick_a.where(a, equal))


_FALLBACKS: dict[Ops, tuple[UPat, _Rewrite]] = {
    Ops.SUB: (UPat(Ops.SUB, src=(UPat.var("a"), UPat.var("b"))), lambda a, b: a + b * b.const_like(_minus_one(b))),
    Ops.NEG: (UPat(Ops.NEG, src=(UPat.var("x"),)), lambda x: x * x.const_like(_minus_one(x))),
    Ops.CMPEQ: (UPat(Ops.CMPEQ, src=(UPat.var("a"), UPat.var("b"))), lambda a, b: a.ne(b).ne(True)),
    Ops.MAX: (UPat(Ops.MAX, src=(UPat.var("a"), UPat.var("b"))), _maximum),
    Ops.RECIPROCAL: (UPat(Ops.RECIPROCAL, src=(UPat.var("x"),)), lambda x: x.const_like(1.0).alu(Ops.FDIV, x)),
    Ops.FDIV: (UPat(Ops.FDIV, src=(UPat.var("a"), UPat.var("b"))), lambda a, b: a * b.reciprocal()),
    Ops.SHL: (
        UPat(Ops.SHL, src=(UPat.var("x"), UPat.cvar("c", vec=False))),
        lambda x, c: x * x.const_like(1 << c.arg),
    ),
    Ops.SHR: (UPat(Ops.SHR, src=(UPat.var("x"), UPat.cvar("c", vec=False))), lambda x, c: _floor_divide(x, 1 << c.arg)),
}


@functools.cache
def decomposition_rewrites(native_ops: frozenset[Ops]) -> PatternMatcher:
    """Rules removing every op of this module and of the transcendental ones that is not in `native_ops`."""
    rules = [rule for op, rule in _FALLBACKS.items() if op not in native_ops]
    if Ops.SHR in native_ops:
        rules.append((UPat(Ops.IDIV, src=(UPat.var("x"), UPat.cvar("c", vec=False))), _shift_right))
    if Ops.AND in native_ops:
        rules.append((UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("c", vec=False))), _mask))
    return PatternMatcher(rules) + transcendental_rewrites(native_ops)
