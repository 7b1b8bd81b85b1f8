"""Symbolic math: the simplifier of index expressions and ALU graphs, plus render and sym_infer.

Exactness is the contract: no rule changes the value of an expression for any assignment of its variables within
their bounds (integer division and modulo by zero are undefined behaviour and never happen in a valid program).
Integer rules reason about exact integers, so every rule that depends on magnitudes first proves with range
analysis that no fixed-width operation involved can wrap around; rules that only use ring identities (a*c + a*d ==
a*(c+d)) hold under wrap-around too.

Two tables:
- `pm_symbolic_simple`: constant folding (with dtype truncation) and identities that need no analysis.
- `pm_symbolic`: the full simplifier: integer sums in one canonical form (like terms combined, terms in a fixed
  order, constants last), canonical order of commutative operands, decisions by range analysis (comparisons,
  max, where, whole expressions that are constant), comparison and division/modulo folding.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from typing import Any

from kiln.uops.alu import exec_alu
from kiln.uops.division_folding import fold_divmod
from kiln.uops.dtype import DType, dtypes, truncate
from kiln.uops.linear_form import (
    bool_const,
    build_sum,
    is_exact,
    is_exact_scalar,
    is_int_scalar,
    linear_bounds,
    linear_form,
    make_const,
    normalize_sum,
    order_commutative,
)
from kiln.uops.node_text import render as render  # re-exported: UOp.render, long importable from here
from kiln.uops.ops import GroupOp, Ops
from kiln.uops.pattern_matcher import PatternMatcher
from kiln.uops.range_analysis import fits
from kiln.uops.rewrite import graph_rewrite
from kiln.uops.uop import UOp, install_simplifier
from kiln.uops.upat import UPat

# ---- constant folding --------------------------------------------------------------------------------------------


def _fold_alu(root: UOp) -> UOp | None:
    try:
        value = exec_alu(root.op, root.dtype, tuple(source.arg for source in root.src))
    except (ZeroDivisionError, TypeError, ValueError):
        return None  # undefined (division by zero) or unsupported: leave it to the program
    return UOp.const(root.dtype, value)


def _fold_cast(root: UOp, c: UOp) -> UOp | None:
    if not (dtypes.is_int(root.dtype) or dtypes.is_float(root.dtype) or dtypes.is_bool(root.dtype)):
        return None
    scalar = root.dtype.scalar()
    if c.op is Ops.VCONST:
        return UOp.const(root.dtype, tuple(truncate(scalar, value) for value in c.arg))
    return UOp.const(root.dtype, truncate(scalar, c.arg))


def _fold_bitcast(root: UOp, c: UOp) -> UOp | None:
    source_format, target_format = c.dtype.scalar().fmt, root.dtype.scalar().fmt
    if c.op is not Ops.CONST or source_format is None or target_format is None or root.dtype.count != 1:
        return None
    if c.dtype.itemsize != root.dtype.itemsize:
        return None
    return UOp.const(root.dtype, struct.unpack(target_format, struct.pack(source_format, c.arg))[0])


def _safe_cast(source: DType, target: DType) -> bool:
    """Whether every value of `source` survives a round trip through `target`."""
    if source == target or dtypes.is_bool(source):
        return True
    if dtypes.is_int(source) and dtypes.is_int(target):
        return source != dtypes.index and fits(target, int(dtypes.min(source)), int(dtypes.max(source)))
    if dtypes.is_int(source) and dtypes.is_float(target):
        bits = source.itemsize * 8 - (0 if dtypes.is_unsigned(source) else 1)
        return source != dtypes.index and bits <= dtypes.finfo(target)[1] + 1
    if dtypes.is_float(source) and dtypes.is_float(target):
        source_exponent, source_mantissa = dtypes.finfo(source)
        target_exponent, target_mantissa = dtypes.finfo(target)
        return target_exponent >= source_exponent and target_mantissa >= source_mantissa
    return False


# ---- pm_symbolic_simple --------------------------------------------------------------------------------------------


def _add_zero(x: UOp, zero: UOp) -> UOp | None:
    # for floats only -0.0 is neutral: (-0.0) + (+0.0) == +0.0
    if dtypes.is_float(x.dtype):
        return x if math.copysign(1.0, zero.arg) < 0 else None
    return x


def _sub_zero(x: UOp, zero: UOp) -> UOp | None:
    if dtypes.is_float(x.dtype):
        return x if math.copysign(1.0, zero.arg) > 0 else None
    return x


def _all_ones(x: UOp, c: UOp) -> bool:
    return bool(c.arg == truncate(x.dtype.scalar(), -1))


def _int_or_bool(uop: UOp) -> bool:
    return dtypes.is_int(uop.dtype) or dtypes.is_bool(uop.dtype)


_x = UPat.var("x")
_CONSTS = (Ops.CONST, Ops.VCONST)
_TRUE = UPat.const(dtypes.bool, True)  # typed: a bare True would also match the integer 1
_FALSE = UPat.const(dtypes.bool, False)

pm_symbolic_simple = PatternMatcher(
    [
        # ** constant folding **
        (UPat(GroupOp.ALU, name="root", src=UPat(_CONSTS)), _fold_alu),
        (UPat(Ops.CAST, name="root", src=(UPat(_CONSTS, name="c"),)), _fold_cast),
        (UPat(Ops.BITCAST, name="root", src=(UPat.cvar("c"),)), _fold_bitcast),
        (UPat((Ops.CAST, Ops.BITCAST), name="root", src=(_x,)), lambda root, x: x if root.dtype == x.dtype else None),
        # ** neutral elements **
        (_x + UPat.const(None, 0).named("zero"), _add_zero),
        (_x - UPat.const(None, 0).named("zero"), _sub_zero),
        (_x * 1, lambda x: x),
        (_x / 1, lambda x: x),
        (_x // 1, lambda x: x),
        (_x // -1, lambda x: -x),
        (_x | 0, lambda x: x if _int_or_bool(x) else None),
        (_x ^ 0, lambda x: x if _int_or_bool(x) else None),
        (_x << 0, lambda x: x),
        (_x >> 0, lambda x: x),
        (_x & UPat.cvar("c", vec=False), lambda x, c: x if _all_ones(x, c) else None),
        (UPat(Ops.TRUNC, src=(_x,)), lambda x: x if _int_or_bool(x) else None),  # integers are whole already
        # pow(x, 1) is x (NaN and -0.0 included); pow(x, 2) is x * x, one rounding of the exact square as C's pow
        # gives, without the general power's log2, exp2 and special cases per element
        (UPat(Ops.POW, src=(_x, UPat.const(None, 1))), lambda x: x),
        (UPat(Ops.POW, src=(_x, UPat.const(None, 2))), lambda x: x * x),
        # ** absorbing elements **
        (_x * 0, lambda x: x.const_like(0) if _int_or_bool(x) else None),
        (_x & 0, lambda x: x.const_like(0) if _int_or_bool(x) else None),
        (_x % 1, lambda x: x.const_like(0) if is_int_scalar(x) else None),
        (_x % -1, lambda x: x.const_like(0) if is_int_scalar(x) else None),
        (_x | UPat.cvar("c", vec=False), lambda x, c: c if _all_ones(x, c) else None),
        # ** self folding **
        (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(_x,)),)), lambda x: x),
        (UPat(GroupOp.Idempotent, src=(_x, _x)), lambda x: x),
        (_x.lt(_x), lambda x: bool_const(x, False)),
        (_x.ne(_x), lambda x: bool_const(x, False) if is_exact_scalar(x) else None),
        (_x.eq(_x), lambda x: bool_const(x, True) if is_exact_scalar(x) else None),
        (_x // _x, lambda x: x.const_like(1) if is_int_scalar(x) else None),  # x == 0 is undefined behaviour
        (_x % _x, lambda x: x.const_like(0) if is_int_scalar(x) else None),
        (_x ^ _x, lambda x: x.const_like(0) if _int_or_bool(x) else None),
        (_x - _x, lambda x: x.const_like(0) if _int_or_bool(x) else None),
        # ** where **
        (UPat.var().where(_x, _x), lambda x: x),
        (UPat.cvar("c", vec=False).where(UPat.var("t"), UPat.var("f")), lambda c, t, f: t if c.arg else f),
        # ** booleans **
        (UPat.var("x", dtypes.bool).ne(True).ne(True), lambda x: x),
        (UPat.var("x", dtypes.bool).ne(False), lambda x: x),
        (UPat.var("x", dtypes.bool).eq(True), lambda x: x),
        (UPat.var("x", dtypes.bool).eq(False), lambda x: x.ne(True)),
        (UPat.var("x", dtypes.bool) ^ True, lambda x: x.ne(True)),
        (UPat.var("x", dtypes.bool).where(_TRUE, _FALSE), lambda x: x),
        (UPat.var("x", dtypes.bool).where(_FALSE, _TRUE), lambda x: x.ne(True)),
        (UPat.var("c", dtypes.bool).ne(True).where(UPat.var("t"), UPat.var("f")), lambda c, t, f: c.where(f, t)),
        # ** casts **
        (
            _x.cast(name="middle").cast(name="outer"),
            lambda x, middle, outer: x if x.dtype == outer.dtype and _safe_cast(x.dtype, middle.dtype) else None,
        ),
    ]
)


# ---- pm_symbolic: decisions by range analysis ----------------------------------------------------------------------


def _fold_by_range(x: UOp) -> UOp | None:
    """An integer or bool value whose range is a single point is that constant (decides comparisons too)."""
    if not is_exact_scalar(x) or x.vmin != x.vmax:
        return None
    return x.const_like(x.vmin)


def _fold_max(x: UOp, y: UOp) -> UOp | None:
    if not is_int_scalar(x):
        return None  # float max ignores nan, which ranges do not see
    if x.vmin >= y.vmax:
        return x
    if y.vmin >= x.vmax:
        return y
    # max(a, a+1): the sign of the difference decides, when both sides are exact
    x_terms, x_constant = linear_form(x)
    y_terms, y_constant = linear_form(y)
    if not (x_terms.keys() & y_terms.keys()) or not (
        is_exact(x.dtype, x_terms, x_constant) and is_exact(y.dtype, y_terms, y_constant)
    ):
        return None
    difference = dict(y_terms)
    for term, coefficient in x_terms.items():
        difference[term] = difference.get(term, 0) - coefficient
    low, high = linear_bounds({t: f for t, f in difference.items() if f}, y_constant - x_constant)
    if low >= 0:
        return y
    return x if high <= 0 else None


# ---- pm_symbolic: comparisons --------------------------------------------------------------------------------------


def _ceil_div(numerator: int, denominator: int) -> int:
    return -((-numerator) // denominator)


def _fold_less_than(x: UOp, c: UOp) -> UOp | None:
    """x < c for integer x and constant c: move constants, divide by common factors, drop terms too small to matter."""
    if not is_int_scalar(x):
        return None
    dtype, limit = x.dtype, int(c.arg)
    if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0:
        # x/d < c  <=>  x < c*d for c > 0, x < (c-1)*d + 1 for c <= 0 (division truncates toward zero)
        divisor = int(x.src[1].arg)
        bound = limit * divisor if limit > 0 else (limit - 1) * divisor + 1
        return x.src[0].lt(bound) if fits(dtype, bound, bound) else None
    terms, constant = linear_form(x)
    if not terms or not is_exact(dtype, terms, constant):
        return None
    if constant != 0:
        shifted = limit - constant
        low, high = linear_bounds(terms, 0)
        if fits(dtype, shifted, shifted) and fits(dtype, low, high):
            return build_sum(dtype, terms, 0).lt(shifted)
        return None
    common = math.gcd(*terms.values())
    if common > 1:  # g*T < c  <=>  T < ceil(c/g)
        return build_sum(dtype, {t: f // common for t, f in terms.items()}, 0).lt(_ceil_div(limit, common))
    for divisor in sorted({abs(f) for f in terms.values() if abs(f) > 1}, reverse=True):
        # d*K + P < c  <=>  K < ceil((c - P)/d), which is one value over the whole range of P
        kept = {t: f // divisor for t, f in terms.items() if f % divisor == 0}
        rest = {t: f for t, f in terms.items() if f % divisor}
        low, high = linear_bounds(rest, 0)
        bound = _ceil_div(limit - low, divisor)
        if kept and rest and bound == _ceil_div(limit - high, divisor):
            return build_sum(dtype, kept, 0).lt(bound)
    return None


def _fold_equality(root: UOp, x: UOp, c: UOp) -> UOp | None:
    """x == c / x != c for integer x: move constants and divide by the coefficients' common factor."""
    if not is_int_scalar(x):
        return None
    dtype = x.dtype
    terms, constant = linear_form(x)
    if not terms or not is_exact(dtype, terms, constant):
        return None
    target = int(c.arg) - constant
    common = math.gcd(*terms.values())
    if target % common:
        return bool_const(root, root.op is Ops.CMPNE)  # sum(g*k*t) is a multiple of g
    if all(f < 0 for f in terms.values()):
        common = -common
    if constant == 0 and common == 1:
        return None
    reduced = {t: f // common for t, f in terms.items()}
    target //= common
    if not (fits(dtype, target, target) and fits(dtype, *linear_bounds(reduced, 0))):
        return None
    return build_sum(dtype, reduced, 0).alu(root.op, make_const(dtype, target))


def _cancel_comparison(root: UOp, a: UOp, b: UOp) -> UOp | None:
    """a < b (==, !=) with terms or constants on both sides: subtract them from both sides."""
    if not is_int_scalar(a) or a.op in _CONSTS or b.op in _CONSTS:
        return None
    dtype = a.dtype
    left_terms, left_constant = linear_form(a)
    right_terms, right_constant = linear_form(b)
    if not (left_terms.keys() & right_terms.keys()) and not (left_constant and right_constant):
        return None
    if not (is_exact(dtype, left_terms, left_constant) and is_exact(dtype, right_terms, right_constant)):
        return None
    difference = dict(left_terms)
    for term, coefficient in right_terms.items():
        difference[term] = difference.get(term, 0) - coefficient
    left = {t: f for t, f in difference.items() if f > 0}
    right = {t: -f for t, f in difference.items() if f < 0}
    right_constant -= left_constant
    if not (fits(dtype, *linear_bounds(left, 0)) and fits(dtype, *linear_bounds(right, right_constant))):
        return None
    return build_sum(dtype, left, 0).alu(root.op, build_sum(dtype, right, right_constant))


def _fold_constant_chain(x: UOp, c1: UOp, c2: UOp, op: Ops) -> UOp | None:
    return x.alu(op, c1.alu(op, c2)) if _int_or_bool(x) else None


pm_symbolic = pm_symbolic_simple + PatternMatcher(
    [
        (UPat(GroupOp.ALU | {Ops.CAST, Ops.DEFINE_VAR}, name="x"), _fold_by_range),
        (UPat((Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL), name="root"), normalize_sum),
        (UPat(GroupOp.Commutative, name="root"), order_commutative),
        (UPat(Ops.CMPLT, src=(_x, UPat.cvar("c", vec=False))), _fold_less_than),
        (UPat((Ops.CMPEQ, Ops.CMPNE), name="root", src=(_x, UPat.cvar("c", vec=False))), _fold_equality),
        (UPat(GroupOp.Comparison, name="root", src=(UPat.var("a"), UPat.var("b"))), _cancel_comparison),
        (UPat((Ops.IDIV, Ops.MOD), name="root"), fold_divmod),
        (UPat(Ops.MAX, src=(_x, UPat.var("y"))), _fold_max),
        *(
            (
                _x.alu(op, UPat.cvar("c1", vec=False)).alu(op, UPat.cvar("c2", vec=False)),
                lambda x, c1, c2, op=op: _fold_constant_chain(x, c1, c2, op),
            )
            for op in (Ops.AND, Ops.OR, Ops.XOR, Ops.MAX)
        ),
    ]
)


def simplify(uop: UOp) -> UOp:
    """`uop` rewritten to a fixed point by `pm_symbolic` (the value is unchanged for every assignment)."""
    return graph_rewrite(uop, pm_symbolic, name="simplify")


install_simplifier(simplify)  # UOp.simplify() calls it (uop.py cannot import this module: it is built on UOp)


# ---- sym_infer (render lives in node_text) ---------------------------------------------------------------------------


def sym_infer(expr: UOp | int, var_vals: Mapping[str, int]) -> int:
    """The value of a symbolic integer expression with DEFINE_VARs (and SPECIALs) set by name from `var_vals`.

    A BIND uses `var_vals` when its variable is named there, else its bound value. Raises ValueError for a
    variable that is missing or outside its bounds, or for a node that has no value outside a kernel (a RANGE).
    """
    if isinstance(expr, int):
        return expr
    if not isinstance(expr, UOp):
        raise TypeError(f"sym_infer needs a UOp or an int, got {expr!r}")
    values: dict[UOp, Any] = {}
    for node in expr.toposort(gate=lambda node: node.op is not Ops.BIND):
        values[node] = _infer_node(node, values, var_vals)
    return int(values[expr])


def _infer_node(node: UOp, values: Mapping[UOp, Any], var_vals: Mapping[str, int]) -> Any:
    op = node.op
    if op is Ops.CONST:
        return node.arg
    if op is Ops.DEFINE_VAR:
        name, low, high = node.arg.name, node.arg.lo, node.arg.hi
        if name not in var_vals:
            raise ValueError(f"sym_infer has no value for variable {name!r}; got values for {sorted(var_vals)}")
        value = var_vals[name]
        if not low <= value <= high:
            raise ValueError(f"value {value} of variable {name!r} is outside its bounds [{low}, {high}]")
        return value
    if op is Ops.BIND:
        variable, bound = node.src
        return _infer_node(variable, values, var_vals) if variable.arg.name in var_vals else bound.arg
    if op is Ops.SPECIAL:
        if node.arg.name not in var_vals:
            raise ValueError(f"sym_infer has no value for hardware index {node.arg.name!r}")
        return var_vals[node.arg.name]
    if op is Ops.CAST:
        return truncate(node.dtype, values[node.src[0]])
    if op in GroupOp.ALU:
        return exec_alu(op, node.dtype, tuple(values[source] for source in node.src))
    raise ValueError(f"sym_infer cannot evaluate {op!r}: only constants, variables and ALU ops have a value here")
