"""Linear forms: an integer expression as sum(coefficient * term) + constant, and its one canonical UOp.

`linear_form` reads a sum through ADD/SUB/NEG/MUL-by-constant; `build_sum` writes the canonical form back (terms in
a fixed order, like terms combined, the constant last). `normalize_sum` is the rewrite rule that keeps every integer
sum canonical, which is what lets the symbolic simplifier combine like terms and see through reassociation.
The helpers here are internal to the symbolic modules (symbolic.py, division_folding.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from kiln.uops.dtype import ConstType, DType, dtypes
from kiln.uops.node_slot import NodeSlot
from kiln.uops.ops import Ops
from kiln.uops.range_analysis import fits
from kiln.uops.uop import UOp

# ---- shared helpers ------------------------------------------------------------------------------------------------


# scalar dtypes compare by value and PtrDType never equals a DType, so membership is one hash lookup
_INT_SCALARS = frozenset((*dtypes.ints, dtypes.index))
_EXACT_SCALARS = _INT_SCALARS | {dtypes.bool}


def is_int_scalar(uop: UOp) -> bool:
    """A scalar integer (index included) value: the domain of the exact integer rules."""
    return uop.dtype in _INT_SCALARS


def is_exact_scalar(uop: UOp) -> bool:
    """Scalar ints and bools: values for which x == x always holds (no nan)."""
    return uop.dtype in _EXACT_SCALARS


def make_const(dtype: DType, value: ConstType) -> UOp:
    """UOp.const, with a fast path for index integers (already exact, nothing to truncate)."""
    if dtype is dtypes.index and type(value) is int:
        return UOp(Ops.CONST, dtype, (), value)  # the common case needs no truncation
    return UOp.const(dtype, value)


def bool_const(like: UOp, value: bool) -> UOp:
    """A bool constant with as many lanes as `like` (the result of a comparison of `like`)."""
    return UOp.const(dtypes.bool.vec(like.dtype.count), value)


def order_key(uop: UOp) -> tuple[int, str, int, bytes]:
    """The canonical order of operands: variables by name, hardware indices, loops by axis, other terms, constants."""
    if uop.op is Ops.DEFINE_VAR:
        return (0, uop.arg.name, 0, uop.key)
    if uop.op is Ops.SPECIAL:
        return (1, uop.arg.name, 0, uop.key)
    if uop.op is Ops.RANGE:
        return (2, "", uop.arg.axis, uop.key)
    if uop.op in (Ops.CONST, Ops.VCONST):
        return (4, "", 0, uop.key)
    return (3, "", uop.op.value, uop.key)


def _ordered_pair(first: UOp, second: UOp) -> tuple[UOp, UOp]:
    return (second, first) if order_key(second) < order_key(first) else (first, second)


# ---- linear forms: an integer expression as sum(coefficient * term) + constant ---------------------------------------

Terms = dict[UOp, int]

# Sums built by build_sum are canonical, and so is every prefix of their chain. Remembering them on the node (the
# fact dies with the UOp) makes re-normalizing a canonical node O(1) and lets linear_form reuse a whole sum's terms,
# which keeps growing a long sum one term at a time quadratic instead of cubic. Node slots rather than weak
# containers: a lookup is one dict probe, where a WeakKeyDictionary builds a weak reference per lookup.
_CANONICAL_SUM: NodeSlot[tuple[Terms, int]] = NodeSlot(
    "canonical_sum", __name__, "the (terms, constant) of a canonical sum that build_sum made"
)
_CANONICAL_PREFIX: NodeSlot[bool] = NodeSlot("canonical_prefix", __name__, "True on each prefix of a canonical sum")


def _wrap_signed(dtype: DType, value: int) -> int:
    # the representative of value modulo 2**bits closest to zero (signed), so coefficients compare by sign
    if dtype.scalar() == dtypes.index:
        return value
    bits = dtype.itemsize * 8
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _split_factor(uop: UOp) -> tuple[UOp, int]:
    """`uop` as (term, constant factor)."""
    if uop.op is Ops.MUL:
        if uop.src[1].op is Ops.CONST:
            return uop.src[0], int(uop.src[1].arg)
        if uop.src[0].op is Ops.CONST:
            return uop.src[1], int(uop.src[0].arg)
    if uop.op is Ops.NEG:
        return uop.src[0], -1
    return uop, 1


def linear_form(uop: UOp) -> tuple[Terms, int]:
    """`uop` (a scalar integer expression) as ({term: coefficient}, constant), walking ADD/SUB/NEG/MUL-by-constant.

    The identity uop == sum(c*t) + constant holds modulo 2**bits (ring arithmetic); it holds exactly when
    `linear_bounds` of the result fits the dtype.
    """
    cached = _CANONICAL_SUM.get(uop)
    if cached is not None:
        return dict(cached[0]), cached[1]
    dtype = uop.dtype
    terms: Terms = {}
    constant = 0
    stack: list[tuple[UOp, int]] = [(uop, 1)]
    while stack:
        node, coefficient = stack.pop()
        op = node.op
        if (known := _CANONICAL_SUM.get(node)) is not None:
            for term, term_coefficient in known[0].items():
                terms[term] = terms.get(term, 0) + coefficient * term_coefficient
            constant += coefficient * known[1]
        elif op is Ops.CONST:
            constant += coefficient * int(node.arg)
        elif op is Ops.ADD:
            stack.append((node.src[1], coefficient))
            stack.append((node.src[0], coefficient))
        elif op is Ops.SUB:
            stack.append((node.src[1], -coefficient))
            stack.append((node.src[0], coefficient))
        elif op is Ops.NEG:
            stack.append((node.src[0], -coefficient))
        elif op is Ops.MUL and (node.src[0].op is Ops.CONST or node.src[1].op is Ops.CONST):
            term, factor = _split_factor(node)
            stack.append((term, coefficient * factor))
        elif op is Ops.MUL:
            # a product of two non-constants is one term; constant factors of either side move to the coefficient
            left, left_factor = _split_factor(node.src[0])
            right, right_factor = _split_factor(node.src[1])
            if left_factor * right_factor != 1 or left is not node.src[0]:
                node = UOp(Ops.MUL, dtype, _ordered_pair(left, right))
                coefficient *= left_factor * right_factor
            terms[node] = terms.get(node, 0) + coefficient
        else:
            terms[node] = terms.get(node, 0) + coefficient
    normalized = {term: _wrap_signed(dtype, c) for term, c in terms.items()}
    return {term: c for term, c in normalized.items() if c != 0}, _wrap_signed(dtype, constant)


def linear_bounds(terms: Mapping[UOp, int], constant: int) -> tuple[int, int]:
    """Exact integer bounds of sum(c*t) + constant from the terms' ranges (terms taken as independent)."""
    low = high = constant
    for term, coefficient in terms.items():
        term_low, term_high = int(term.vmin), int(term.vmax)
        if coefficient > 0:
            low += coefficient * term_low
            high += coefficient * term_high
        else:
            low += coefficient * term_high
            high += coefficient * term_low
    return low, high


def is_exact(dtype: DType, terms: Mapping[UOp, int], constant: int) -> bool:
    """True when sum(c*t) + constant never leaves the dtype, so the ring identity of linear_form is exact."""
    return fits(dtype, *linear_bounds(terms, constant))


def build_sum(dtype: DType, terms: Mapping[UOp, int], constant: int) -> UOp:
    """The canonical UOp of sum(c*t) + constant: positive terms first, each group in `order_key` order, the
    constant last; negative coefficients become SUB (a lone leading one NEG), so `a-b` stays `a-b`.

    Terms that are sums themselves are expanded first, so the result is canonical whatever the caller passes.
    """
    if not all(_is_atom(term) for term in terms):
        expanded: Terms = {}
        for term, coefficient in terms.items():
            constant = _add_scaled(expanded, constant, term, coefficient)
        terms = {t: _wrap_signed(dtype, f) for t, f in expanded.items() if _wrap_signed(dtype, f)}
        constant = _wrap_signed(dtype, constant)
    result = _build_sum(dtype, terms, constant)
    if result.op in (Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL) and _CANONICAL_SUM.missing(result):
        _CANONICAL_SUM.set(result, (dict(terms), constant))
    return result


def _is_atom(uop: UOp) -> bool:
    """A term linear_form keeps whole: not a sum, not a constant, not a product carrying a constant factor."""
    if uop.op in (Ops.ADD, Ops.SUB, Ops.NEG, Ops.CONST):
        return False
    if uop.op is Ops.MUL:
        return _split_factor(uop)[1] == 1 and _split_factor(uop.src[0])[1] == 1 and _split_factor(uop.src[1])[1] == 1
    return True


def _build_sum(dtype: DType, terms: Mapping[UOp, int], constant: int) -> UOp:
    ordered = sorted(terms.items(), key=lambda item: (item[1] < 0, order_key(item[0])))
    result: UOp | None = None
    prefix_terms: Terms = {}
    prefix_constant = 0
    if ordered and ordered[0][1] < 0 and constant > 0:
        result, constant = make_const(dtype, constant), 0  # c - x rather than -x + c
        prefix_constant = int(result.arg)
    for term, coefficient in ordered:
        magnitude = abs(coefficient)
        scaled = term if magnitude == 1 else UOp(Ops.MUL, dtype, (term, make_const(dtype, magnitude)))
        if result is None:
            if coefficient == -1:
                result = UOp(Ops.NEG, dtype, (term,))
            else:
                result = term if coefficient == 1 else UOp(Ops.MUL, dtype, (term, make_const(dtype, coefficient)))
        else:
            result = UOp(Ops.ADD if coefficient > 0 else Ops.SUB, dtype, (result, scaled))
        _CANONICAL_PREFIX.set(result, True)
        # a prefix of the chain is the canonical sum of the terms it holds (sorted the same way, the same chain is
        # built): remember them, so that `prefix + c` (each lane of an unrolled address) takes _shift_canonical
        prefix_terms[term] = coefficient
        if result.op in (Ops.ADD, Ops.SUB) and _CANONICAL_SUM.missing(result):
            _CANONICAL_SUM.set(result, (dict(prefix_terms), prefix_constant))
    if result is None:
        return make_const(dtype, constant)
    if constant == 0:
        return result
    return UOp(Ops.ADD if constant > 0 else Ops.SUB, dtype, (result, make_const(dtype, abs(constant))))


def _add_scaled(terms: Terms, constant: int, source: UOp, scale: int) -> int:
    inner_terms, inner_constant = linear_form(source)
    for term, coefficient in inner_terms.items():
        terms[term] = terms.get(term, 0) + scale * coefficient
    return constant + scale * inner_constant


def _recombine(dtype: DType, terms: Terms, constant: int) -> tuple[Terms, int]:
    """Undo the splits of an index into digits (valid for every sign, by C's x == (x/c)*c + x%c):
    x%c*a + (x/c)*(a*c) -> x*a and ((x/c)%k)*(a*c) + (x%c)*a -> (x%(c*k))*a."""
    changed = True
    while changed:
        changed = False
        for term, coefficient in list(terms.items()):
            if term not in terms or term.op is not Ops.MOD or term.src[1].op is not Ops.CONST:
                continue
            value, divisor = term.src
            if divisor.arg <= 0:
                continue
            quotient = UOp(Ops.IDIV, dtype, (value, divisor))
            if terms.get(quotient) == _wrap_signed(dtype, coefficient * divisor.arg):
                del terms[term], terms[quotient]
                constant = _add_scaled(terms, constant, value, coefficient)
                changed = True
                continue
            for other, other_coefficient in list(terms.items()):
                if (
                    other.op is Ops.MOD
                    and other.src[0] is quotient
                    and other.src[1].op is Ops.CONST
                    and other.src[1].arg > 0
                    and other_coefficient == _wrap_signed(dtype, coefficient * divisor.arg)
                    and fits(dtype, divisor.arg * other.src[1].arg, divisor.arg * other.src[1].arg)
                ):
                    del terms[term], terms[other]
                    merged = UOp(Ops.MOD, dtype, (value, make_const(dtype, divisor.arg * other.src[1].arg)))
                    terms[merged] = terms.get(merged, 0) + coefficient
                    changed = True
                    break
        terms = {term: _wrap_signed(dtype, c) for term, c in terms.items() if _wrap_signed(dtype, c) != 0}
    return terms, _wrap_signed(dtype, constant)


def _fold_hermite(dtype: DType, terms: Terms, constant: int) -> tuple[Terms, int]:
    """Hermite's identity for unrolled divisions: sum((x+j+i)//n for i in 0..n-1) == x + j when x + j >= 0."""
    groups: dict[tuple[UOp, int, int], dict[int, UOp]] = {}
    for term, coefficient in terms.items():
        if term.op is Ops.IDIV and term.src[1].op is Ops.CONST and term.src[1].arg > 1:
            base, offset = split_constant(term.src[0])
            groups.setdefault((base, int(term.src[1].arg), coefficient), {})[offset] = term
    for (base, size, coefficient), by_offset in groups.items():
        if len(by_offset) < size or base.vmin + min(by_offset) < 0:
            continue
        for start in sorted(by_offset):
            if all(start + i in by_offset for i in range(size)) and _fits_shifted(dtype, base, start, size):
                for i in range(size):
                    del terms[by_offset[start + i]]
                constant = _add_scaled(terms, constant, base, coefficient) + coefficient * start
                return _fold_hermite(dtype, terms, constant)
    return terms, constant


def _fits_shifted(dtype: DType, base: UOp, start: int, size: int) -> bool:
    return fits(dtype, int(base.vmin) + start, int(base.vmax) + start + size - 1)


def split_constant(uop: UOp) -> tuple[UOp, int]:
    """`uop` as (rest, constant) when it is a canonical `rest + c` / `rest - c`, else (uop, 0)."""
    if uop.op is Ops.ADD and uop.src[1].op is Ops.CONST:
        return uop.src[0], int(uop.src[1].arg)
    if uop.op is Ops.SUB and uop.src[1].op is Ops.CONST:
        return uop.src[0], -int(uop.src[1].arg)
    return uop, 0


def _shift_canonical(dtype: DType, canonical: UOp, amount: int) -> UOp | None:
    """build_sum of `canonical`'s terms with its constant moved by `amount`, reusing its chain of terms.

    The fast path of `canonical + c` (every lane of an unrolled address is one): when the terms are already stable
    under the digit and Hermite folds and start with a positive term, the canonical result is the same chain of
    terms with only the trailing constant changed, so no sorting or rebuilding is needed. None: use the slow path.
    """
    terms, constant = _CANONICAL_SUM[canonical]
    if not any(coefficient > 0 for coefficient in terms.values()):
        return None  # the chain may start with the constant (c - x): its shape depends on the constant
    if any(term.op in (Ops.MOD, Ops.IDIV) for term in terms):
        return None  # the folds may apply: leave them to the slow path
    chain = canonical
    if constant != 0:
        assert canonical.op in (Ops.ADD, Ops.SUB) and canonical.src[1].op is Ops.CONST
        chain = canonical.src[0]
    new_constant = _wrap_signed(dtype, constant + amount)
    if new_constant == 0:
        result = chain
    else:
        result = UOp(Ops.ADD if new_constant > 0 else Ops.SUB, dtype, (chain, make_const(dtype, abs(new_constant))))
    if result.op in (Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL) and _CANONICAL_SUM.missing(result):
        _CANONICAL_SUM.set(result, (dict(terms), new_constant))
    return result


def normalize_sum(root: UOp) -> UOp | None:
    """Rewrite an integer ADD/SUB/NEG/MUL-by-constant tree into its canonical sum (see `build_sum`)."""
    if not is_int_scalar(root) or _CANONICAL_SUM.has(root) or _CANONICAL_PREFIX.has(root):
        return None
    if (
        root.op is Ops.MUL
        and root.src[0].op is not Ops.CONST
        and root.src[1].op is not Ops.CONST
        and _split_factor(root.src[0])[1] == 1
        and _split_factor(root.src[1])[1] == 1
    ):
        return None  # a plain product: only the order of its operands matters (see order_commutative)
    if root.op in (Ops.ADD, Ops.SUB) and root.src[1].op is Ops.CONST and _CANONICAL_SUM.has(root.src[0]):
        shifted = _shift_canonical(root.dtype, root.src[0], int(root.src[1].arg) * (1 if root.op is Ops.ADD else -1))
        if shifted is not None:
            return None if shifted is root else shifted
    terms, constant = linear_form(root)
    terms, constant = _recombine(root.dtype, terms, constant)
    terms, constant = _fold_hermite(root.dtype, terms, constant)
    rebuilt = build_sum(root.dtype, terms, constant)
    return None if rebuilt is root else rebuilt


def order_commutative(root: UOp) -> UOp | None:
    """Swap the operands of a commutative op into `order_key` order (constants last); integer sums excepted."""
    if len(root.src) != 2 or (root.op is Ops.ADD and is_int_scalar(root)):
        return None  # integer sums are ordered by normalize_sum
    first, second = root.src
    return root.replace(src=(second, first)) if order_key(second) < order_key(first) else None
