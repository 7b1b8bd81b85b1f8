"""Folding integer division and modulo (C semantics: truncation toward zero, the remainder takes the dividend's sign).

Each step is an identity of exact integers under bounds proven by range analysis: the sign of the dividend is
established first (for non-negative values truncation is floor division), and fixed-width arithmetic is only
reasoned about where it provably does not wrap around.
"""

from __future__ import annotations

import itertools
import math

from kiln.uops.dtype import DType, dtypes
from kiln.uops.linear_form import (
    Terms,
    build_sum,
    is_exact,
    is_int_scalar,
    linear_bounds,
    linear_form,
    make_const,
    split_constant,
)
from kiln.uops.ops import Ops
from kiln.uops.range_analysis import fits
from kiln.uops.uop import UOp

# ---- constant quotients and signs ------------------------------------------------------------------------------


def _divisor_bounds(y: UOp) -> tuple[int, int] | None:
    """The bounds of a divisor without zero (dividing by zero is undefined), if its sign is then known."""
    low, high = int(y.vmin), int(y.vmax)
    if low >= 0 and high >= 1:
        return max(low, 1), high
    if high <= 0 and low <= -1:
        return low, min(high, -1)
    return None


def _constant_quotient(x: UOp, y: UOp) -> int | None:
    """x/y if it is one value over every assignment: truncated division is monotone in x, and in y on each sign of
    y, so its extremes lie on the corners of the box of bounds."""
    divisor = _divisor_bounds(y)
    if divisor is None:
        return None
    quotients = {
        abs(numerator) // abs(d) * (1 if (numerator < 0) == (d < 0) else -1)
        for numerator in (int(x.vmin), int(x.vmax))
        for d in divisor
    }
    return quotients.pop() if len(quotients) == 1 else None


def _negation_exact(uop: UOp) -> bool:
    return uop.dtype == dtypes.index or uop.vmin > dtypes.min(uop.dtype)


def fold_divmod(root: UOp) -> UOp | None:
    """Fold x/c and x%c (C semantics). Every step is an identity of exact integers under proven ranges."""
    if not is_int_scalar(root):
        return None
    x, y = root.src
    is_div = root.op is Ops.IDIV
    quotient = _constant_quotient(x, y)
    if quotient is not None:
        if is_div:
            return root.const_like(quotient)
        return x if quotient == 0 else x - y * quotient  # a ring identity whose value (the remainder) fits
    if y.vmax < 0 and _negation_exact(y):
        return -(x // -y) if is_div else x % -y  # x/-d == -(x/d) and x%-d == x%d in C
    if x.vmax <= 0 and _negation_exact(x):
        return -((-x) // y) if is_div else -((-x) % y)  # both ops are odd in the dividend
    if y.op is not Ops.CONST:
        return _fold_by_variable(root, x, y)
    divisor = int(y.arg)
    if divisor <= 1:
        return None
    nested = _fold_nested(root, x, divisor)
    if nested is not None or x.vmin < 0:
        return nested
    # from here on x >= 0, where truncated division is floor division
    terms, constant = linear_form(x)
    if not terms or not is_exact(root.dtype, terms, constant):
        return None
    for fold in (_fold_one_period, _fold_inner_mods, _fold_common_factor, _fold_remainder, _fold_by_factor):
        result = fold(root, x, terms, constant, divisor)
        if result is not None:
            return result
    return None


def _fold_nested(root: UOp, x: UOp, divisor: int) -> UOp | None:
    if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0 and root.op is Ops.IDIV:
        # (a/b)/c == a/(b*c) for b, c > 0 and every sign of a
        combined = int(x.src[1].arg) * divisor
        return x.src[0] // combined if fits(x.dtype, combined, combined) else None
    inner, offset = split_constant(x)
    if (
        root.op is Ops.IDIV
        and inner.op is Ops.IDIV
        and inner.src[1].op is Ops.CONST
        and inner.src[1].arg > 0
        and inner.src[0].vmin >= 0
        and offset >= 0
    ):
        # (a/b + k)/c == (a + k*b)/(b*c) for a, k >= 0: floor((floor(a/b) + k)/c) == floor((a + k*b)/(b*c))
        first = int(inner.src[1].arg)
        combined, shifted_high = first * divisor, int(inner.src[0].vmax) + offset * first
        if fits(x.dtype, combined, combined) and fits(x.dtype, 0, shifted_high):
            return (inner.src[0] + offset * first) // combined
    if x.op is Ops.MOD and x.src[1].op is Ops.CONST and x.src[1].arg != 0 and x.src[1].arg % divisor == 0:
        if root.op is Ops.MOD:
            return x.src[0] % divisor  # (a % (k*c)) % c == a % c: same sign, same residue, both below c
        if x.src[1].arg > 0:
            return (x.src[0] // divisor) % (int(x.src[1].arg) // divisor)  # (a % (k*c)) / c == (a/c) % k
    return None


def _remainder_choices(terms: Terms, divisor: int) -> list[dict[UOp, int]]:
    """Ways to write each coefficient f = q*c + r: r in [0, c) first, then with some r taken as r - c."""
    standard = {t: f % divisor for t, f in terms.items()}
    movable = [t for t, r in standard.items() if r]
    choices = [standard]
    if len(movable) <= 4:
        for count in range(1, len(movable) + 1):
            for moved in itertools.combinations(movable, count):
                choices.append({t: r - divisor if t in moved else r for t, r in standard.items()})
    else:
        choices.append({t: r if 2 * r <= divisor else r - divisor for t, r in standard.items()})
    return choices


def _fold_one_period(root: UOp, x: UOp, terms: Terms, constant: int, divisor: int) -> UOp | None:
    # x = c*Q + R with R inside one period [m*c, m*c + c): x/c = Q + m, x%c = R - m*c
    high_constant, low_constant = divmod(constant, divisor)
    for remainders in _remainder_choices(terms, divisor):
        rest = {t: r for t, r in remainders.items() if r}
        low, high = linear_bounds(rest, low_constant)
        period = low // divisor
        if high // divisor != period:
            continue
        if root.op is Ops.MOD:
            return build_sum(root.dtype, rest, low_constant - period * divisor)
        quotients = {t: (f - remainders[t]) // divisor for t, f in terms.items() if f != remainders[t]}
        return build_sum(root.dtype, quotients, high_constant + period)
    return None


def _fold_inner_mods(root: UOp, x: UOp, terms: Terms, constant: int, divisor: int) -> UOp | None:
    # (a%(k*c) + b) % c == (a + b) % c when both sides are non-negative: same residue modulo c
    if root.op is not Ops.MOD:
        return None
    stripped: Terms = {}
    for term, coefficient in terms.items():
        if term.op is Ops.MOD and term.src[1].op is Ops.CONST and term.src[1].arg and term.src[1].arg % divisor == 0:
            term = term.src[0]
        stripped[term] = stripped.get(term, 0) + coefficient
    stripped = {t: f for t, f in stripped.items() if f}
    if stripped == terms:
        return None
    low, high = linear_bounds(stripped, constant)
    if low < 0 or not fits(root.dtype, low, high):
        return None
    return build_sum(root.dtype, stripped, constant) % divisor


def _fold_common_factor(root: UOp, x: UOp, terms: Terms, constant: int, divisor: int) -> UOp | None:
    # x = g*M + r with 0 <= r < g dividing c: x/c == M/(c/g), x%c == (M%(c/g))*g + r; M >= 0 because x >= 0
    common = math.gcd(divisor, *terms.values())
    if common == 1:
        return None
    high_constant, low_constant = divmod(constant, common)
    reduced = build_sum(root.dtype, {t: f // common for t, f in terms.items()}, high_constant)
    if root.op is Ops.IDIV:
        return reduced // (divisor // common)
    return (reduced % (divisor // common)) * common + low_constant


def _fold_remainder(root: UOp, x: UOp, terms: Terms, constant: int, divisor: int) -> UOp | None:
    # x = c*Q + R with R >= 0: x/c == Q + R/c and x%c == R%c
    quotients = {t: f // divisor for t, f in terms.items() if f // divisor}
    rest = {t: f % divisor for t, f in terms.items() if f % divisor}
    high_constant, low_constant = divmod(constant, divisor)
    if rest == terms and low_constant == constant:
        return None
    low, high = linear_bounds(rest, low_constant)
    if low < 0 or not fits(root.dtype, low, high):
        return None
    remainder = build_sum(root.dtype, rest, low_constant)
    if root.op is Ops.MOD:
        return remainder % divisor
    return build_sum(root.dtype, quotients, high_constant) + remainder // divisor


def _fold_by_factor(root: UOp, x: UOp, terms: Terms, constant: int, divisor: int) -> UOp | None:
    # for x >= 0 and f dividing c: x/c == (x/f)/(c/f) and x%c == ((x/f)%(c/f))*f + x%f; worth it when x/f folds
    dtype = root.dtype
    for factor in sorted({abs(f) for f in terms.values() if 1 < abs(f) < divisor and divisor % abs(f) == 0}):
        inner_div = fold_divmod(UOp(Ops.IDIV, dtype, (x, make_const(dtype, factor))))
        if inner_div is None:
            continue
        if root.op is Ops.IDIV:
            return inner_div // (divisor // factor)
        inner_mod = fold_divmod(UOp(Ops.MOD, dtype, (x, make_const(dtype, factor))))
        if inner_mod is not None:
            return (inner_div % (divisor // factor)) * factor + inner_mod
    return None


def _product_fits(dtype: DType, a: UOp, b: UOp) -> bool:
    """True when a*b, computed exactly, never leaves the dtype (then the ring product equals the integer product)."""
    corners = [p * q for p in (int(a.vmin), int(a.vmax)) for q in (int(b.vmin), int(b.vmax))]
    return fits(dtype, min(corners), max(corners))


def _fold_by_variable(root: UOp, x: UOp, y: UOp) -> UOp | None:
    """x/y and x%y for a non-constant y: take the multiples of y out of x."""
    dtype = root.dtype
    terms, constant = linear_form(x)
    if not is_exact(dtype, terms, constant):
        return None
    quotients: Terms = {}
    quotient_constant = 0
    rest: Terms = {}
    for term, coefficient in terms.items():
        if term is y:
            quotient_constant += coefficient
        elif term.op is Ops.MUL and y in term.src:
            other = term.src[1] if term.src[0] is y else term.src[0]
            if not _product_fits(dtype, other, y):
                return None  # other*y wraps in this dtype, so (other*y)/y is not other: (a*a)/a in int8
            quotients[other] = quotients.get(other, 0) + coefficient
        else:
            rest[term] = coefficient
    if not quotients and not quotient_constant:
        return None
    if not rest and constant == 0:  # exact division: no rounding, any signs
        return build_sum(dtype, quotients, quotient_constant) if root.op is Ops.IDIV else root.const_like(0)
    low, high = linear_bounds(rest, constant)
    if x.vmin < 0 or y.vmin < 0 or low < 0 or not fits(dtype, low, high):
        return None
    remainder = build_sum(dtype, rest, constant)
    if root.op is Ops.MOD:
        return remainder % y
    return build_sum(dtype, quotients, quotient_constant) + remainder // y
