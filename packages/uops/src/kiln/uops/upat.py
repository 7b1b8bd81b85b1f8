"""UPat: a pattern over UOps, compiled once into a flat Python matcher function."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeAlias

from kiln.uops.dtype import ConstType, DType
from kiln.uops.ops import GroupOp, Ops
from kiln.uops.uop import UOp


class _AnyArg(enum.Enum):
    # the sentinel for "any arg" (None is a real arg value to match)
    ANY = enum.auto()

    def __repr__(self) -> str:
        return "<any>"


ANY_ARG: Final = _AnyArg.ANY
"""Default of `UPat(arg=...)`: match any arg."""

PatternOperand: TypeAlias = "UPat | int | float | bool"
Matcher: TypeAlias = Callable[[UOp, dict[str, UOp]], bool]


class _SourceKind(enum.Enum):
    ANY = enum.auto()  # src=None: sources are not looked at
    EXACT = enum.auto()  # a tuple: these sources in this order
    PERMUTE = enum.auto()  # a list: these sources in any order
    REPEAT = enum.auto()  # one UPat: every source matches it


def _binary(op: Ops, doc: str | None = None) -> Callable[[UPat, PatternOperand], UPat]:
    # a UPat method: op over the pattern and one operand
    def method(self: UPat, other: PatternOperand) -> UPat:
        return self.alu(op, other)

    method.__doc__ = doc
    return method


def _reflected(op: Ops) -> Callable[[UPat, PatternOperand], UPat]:
    # a UPat method: op over the operand and the pattern (`1 + x`, `y > x`)
    def method(self: UPat, other: PatternOperand) -> UPat:
        return _as_pattern(other).alu(op, self)

    return method


def _unary(op: Ops, doc: str | None = None) -> Callable[[UPat], UPat]:
    # a UPat method: op over the pattern alone
    def method(self: UPat) -> UPat:
        return self.alu(op)

    method.__doc__ = doc
    return method


class UPat:
    """A pattern over UOps.

    op: an op or ops the node must have (None: any). dtype: a dtype or dtypes (None: any; a scalar dtype also
    matches vectors of it). src: None (anything), a tuple (exact sources in order; a prefix with allow_any_len),
    a list (the sources in any order), or a single UPat (every source matches it). arg: matched by equality when
    given. name: binds the matched UOp for the callback; a name used twice must bind the same UOp.
    """

    __slots__ = ("_compiled", "allow_any_len", "alternatives", "arg", "dtype", "name", "op", "src", "src_kind")

    def __init__(
        self,
        op: Ops | Iterable[Ops] | None = None,
        dtype: DType | Iterable[DType] | None = None,
        src: UPat | tuple[UPat, ...] | list[UPat] | None = None,
        arg: Any = ANY_ARG,
        name: str | None = None,
        allow_any_len: bool = False,
    ) -> None:
        self.op: frozenset[Ops] | None = None if op is None else frozenset((op,) if isinstance(op, Ops) else op)
        self.dtype: frozenset[DType] | None = (
            None if dtype is None else frozenset((dtype,) if isinstance(dtype, DType) else dtype)
        )
        self.src: tuple[UPat, ...] = ()
        if src is None:
            self.src_kind = _SourceKind.ANY
        elif isinstance(src, UPat):
            self.src_kind, self.src = _SourceKind.REPEAT, (src,)
        elif isinstance(src, tuple):
            self.src_kind, self.src = _SourceKind.EXACT, src
        elif isinstance(src, list):
            self.src_kind, self.src = _SourceKind.PERMUTE, tuple(src)
            if allow_any_len:
                raise ValueError("allow_any_len is only supported with a tuple src, not a list (permutation) src")
        else:
            raise TypeError(f"UPat src must be None, a UPat, a tuple or a list of UPats, got {src!r}")
        for child in self.src:
            if not isinstance(child, UPat):
                raise TypeError(f"UPat sources must be UPats, got {child!r}")
        if name == "ctx":
            raise ValueError("'ctx' is reserved for the rewrite context; pick another UPat name")
        self.arg = arg
        self.name = name
        self.allow_any_len = allow_any_len
        self.alternatives: tuple[UPat, ...] = ()
        self._compiled: list[tuple[frozenset[Ops] | None, Matcher]] | None = None

    # ------------------------------------------------------------------------------------------------------------
    # constructors
    # ------------------------------------------------------------------------------------------------------------

    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any UOp (optionally of `dtype`), bound to `name`."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None, vec: bool = True) -> UPat:
        """A constant (CONST, or also VCONST when `vec`), bound to `name`."""
        return UPat((Ops.CONST, Ops.VCONST) if vec else Ops.CONST, dtype, name=name)

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, value: ConstType) -> UPat:
        """The CONST with arg `value` (compared with ==, so 1 matches 1.0 and True)."""
        return UPat(Ops.CONST, dtype, arg=value)

    @staticmethod
    def any(*patterns: UPat) -> UPat:
        """A pattern matching whenever one of `patterns` matches (tried in order)."""
        if not patterns:
            raise ValueError("UPat.any needs at least one pattern")
        combined = UPat()
        combined.alternatives = tuple(patterns)
        ops = [p.op for p in patterns]
        combined.op = None if any(o is None for o in ops) else frozenset().union(*(o for o in ops if o is not None))
        return combined

    def named(self, name: str) -> UPat:
        """A copy of this pattern that binds `name`."""
        if self.alternatives:
            return UPat.any(*(alternative.named(name) for alternative in self.alternatives))
        copy = UPat(self.op, self.dtype, None, self.arg, name, self.allow_any_len)
        copy.src_kind, copy.src = self.src_kind, self.src
        return copy

    # ------------------------------------------------------------------------------------------------------------
    # operator sugar: ALU patterns (commutative ops match their sources in either order)
    # ------------------------------------------------------------------------------------------------------------

    def alu(self, op: Ops, *others: PatternOperand) -> UPat:
        """The pattern of ALU op `op` over this pattern and `others`."""
        sources = (self, *(_as_pattern(other) for other in others))
        return UPat(op, None, list(sources) if op in GroupOp.Commutative else sources)

    def cast(self, dtype: DType | Iterable[DType] | None = None, name: str | None = None) -> UPat:
        """A CAST of this pattern (to `dtype` if given)."""
        return UPat(Ops.CAST, dtype, (self,), name=name)

    def bitcast(self, dtype: DType | Iterable[DType] | None = None, name: str | None = None) -> UPat:
        """A BITCAST of this pattern (to `dtype` if given)."""
        return UPat(Ops.BITCAST, dtype, (self,), name=name)

    def where(self, if_true: PatternOperand, if_false: PatternOperand) -> UPat:
        """A WHERE with this pattern as the condition."""
        return self.alu(Ops.WHERE, if_true, if_false)

    def logical_not(self) -> UPat:
        """CMPNE(self, True), the form UOp.logical_not builds."""
        return self.ne(True)

    # one-op sugar (`_binary`, `_unary`, `_reflected`): `x.lt(y)` / `x < y` is CMPLT(x, y), `y > x` too
    lt = __lt__ = _binary(Ops.CMPLT, "CMPLT(self, other).")
    __gt__ = _reflected(Ops.CMPLT)
    ne = _binary(Ops.CMPNE, "CMPNE(self, other), either order.")
    eq = _binary(Ops.CMPEQ, "CMPEQ(self, other), either order.")
    maximum = _binary(Ops.MAX, "MAX(self, other), either order.")
    idiv = __floordiv__ = _binary(Ops.IDIV, "IDIV(self, other).")
    mod = __mod__ = _binary(Ops.MOD, "MOD(self, other).")
    reciprocal = _unary(Ops.RECIPROCAL, "RECIPROCAL(self).")
    __neg__ = _unary(Ops.NEG)
    __add__, __radd__ = _binary(Ops.ADD), _reflected(Ops.ADD)
    __sub__, __rsub__ = _binary(Ops.SUB), _reflected(Ops.SUB)
    __mul__, __rmul__ = _binary(Ops.MUL), _reflected(Ops.MUL)
    __truediv__ = _binary(Ops.FDIV)
    __and__, __or__, __xor__ = _binary(Ops.AND), _binary(Ops.OR), _binary(Ops.XOR)
    __lshift__, __rshift__ = _binary(Ops.SHL), _binary(Ops.SHR)

    # ------------------------------------------------------------------------------------------------------------
    # matching
    # ------------------------------------------------------------------------------------------------------------

    def bound_names(self) -> frozenset[str]:
        """Every name this pattern can bind."""
        names = {self.name} if self.name is not None else set()
        for child in (*self.src, *self.alternatives):
            names |= child.bound_names()
        return frozenset(names)

    def matchers(self) -> list[tuple[frozenset[Ops] | None, Matcher]]:
        """The compiled matchers of this pattern: one flat function per way the pattern can match.

        Permutation sources and `UPat.any` alternatives are expanded into separate deterministic variants, so each
        matcher either binds everything or fails; a PatternMatcher tries the variants in order. Each matcher comes
        with the ops its variant accepts at the top (None: any) and skips that check, which dispatch by op does.
        """
        if self._compiled is None:
            self._compiled = [(variant.op, _compile(variant, check_op=False)) for variant in _expand(self)]
        return self._compiled

    def match(self, uop: UOp) -> list[dict[str, UOp]]:
        """Every binding of names under which `uop` matches this pattern (empty list: no match)."""
        results = []
        for variant in _expand(self):
            store: dict[str, UOp] = {}
            if _compile(variant, check_op=True)(uop, store) and store not in results:
                results.append(store)
        return results

    def __repr__(self) -> str:
        if self.alternatives:
            return f"UPat.any({', '.join(repr(a) for a in self.alternatives)})"
        parts = []
        if self.op is not None:
            ops = sorted(self.op, key=lambda op: op.value)
            parts.append(repr(ops[0]) if len(ops) == 1 else f"({', '.join(repr(o) for o in ops)})")
        if self.dtype is not None:
            dts = sorted(self.dtype, key=repr)
            parts.append(f"dtype={dts[0]!r}" if len(dts) == 1 else f"dtype={{{', '.join(repr(d) for d in dts)}}}")
        if self.src_kind is _SourceKind.EXACT:
            parts.append(f"src=({''.join(repr(s) + ', ' for s in self.src)})")
        elif self.src_kind is _SourceKind.PERMUTE:
            parts.append(f"src=[{', '.join(repr(s) for s in self.src)}]")
        elif self.src_kind is _SourceKind.REPEAT:
            parts.append(f"src={self.src[0]!r}")
        if self.arg is not ANY_ARG:
            parts.append(f"arg={self.arg!r}")
        if self.name is not None:
            parts.append(f"name={self.name!r}")
        if self.allow_any_len:
            parts.append("allow_any_len=True")
        return f"UPat({', '.join(parts)})"


def _as_pattern(value: PatternOperand) -> UPat:
    if isinstance(value, UPat):
        return value
    if isinstance(value, (int, float)):
        return UPat(Ops.CONST, arg=value)
    raise TypeError(f"cannot use {value!r} of type {type(value).__name__} in a UPat expression")


# ----------------------------------------------------------------------------------------------------------------
# compilation: expand permutations and alternatives into deterministic variants, then generate one flat function
# ----------------------------------------------------------------------------------------------------------------


def _expand(pattern: UPat) -> list[UPat]:
    if pattern.alternatives:
        return [variant for alternative in pattern.alternatives for variant in _expand(alternative)]
    if pattern.src_kind in (_SourceKind.ANY, _SourceKind.REPEAT):
        # a REPEAT child is matched per source by its own compiled variants (see _emit)
        return [pattern]
    child_variants = [_expand(child) for child in pattern.src]
    orders: Iterable[tuple[int, ...]] = (
        itertools.permutations(range(len(pattern.src)))
        if pattern.src_kind is _SourceKind.PERMUTE
        else [tuple(range(len(pattern.src)))]
    )
    variants = []
    seen_orders: set[tuple[int, ...]] = set()
    for order in orders:
        if order in seen_orders:
            continue
        seen_orders.add(order)
        for combination in itertools.product(*(child_variants[i] for i in order)):
            variant = UPat(pattern.op, pattern.dtype, tuple(combination), pattern.arg, pattern.name)
            variant.allow_any_len = pattern.allow_any_len
            variants.append(variant)
    return variants


def _compile(pattern: UPat, check_op: bool) -> Matcher:
    constants: dict[str, Any] = {}
    lines: list[str] = []
    # names are bound after every structural check passed (binding is the costlier part and rarely fails), unless
    # a repeated-source matcher must see the names bound before it, in traversal order
    bindings: list[str] = lines if _has_repeat(pattern) else []
    _emit(pattern, "node", lines, bindings, constants, check_op)
    body = "\n".join(f"    {line}" for line in (lines if bindings is lines else lines + bindings))
    source = f"def match(node, store):\n{body}\n    return True\n"
    namespace: dict[str, Any] = dict(constants)
    exec(compile(source, f"<UPat {pattern!r}>"[:200], "exec"), namespace)
    matcher: Matcher = namespace["match"]
    return matcher


def _has_repeat(pattern: UPat) -> bool:
    return pattern.src_kind is _SourceKind.REPEAT or any(_has_repeat(child) for child in pattern.src)


def _emit(
    pattern: UPat, var: str, lines: list[str], bindings: list[str], constants: dict[str, Any], check_op: bool
) -> None:
    def constant(value: object) -> str:
        name = f"c{len(constants)}"
        constants[name] = value
        return name

    assert not pattern.alternatives, "alternatives are expanded before code generation"
    if check_op and pattern.op is not None:
        if len(pattern.op) == 1:
            lines.append(f"if {var}.op is not {constant(next(iter(pattern.op)))}: return False")
        else:
            lines.append(f"if {var}.op not in {constant(pattern.op)}: return False")
    if pattern.dtype is not None:
        dts = constant(pattern.dtype)
        lines.append(f"if {var}.dtype not in {dts} and {var}.dtype.scalar() not in {dts}: return False")
    if pattern.arg is not ANY_ARG:
        lines.append(f"if {var}.arg != {constant(pattern.arg)}: return False")
    if pattern.src_kind is _SourceKind.EXACT:
        count = len(pattern.src)
        sources = f"{var}s"
        lines.append(f"{sources} = {var}.src")
        lines.append(f"if len({sources}) {'<' if pattern.allow_any_len else '!='} {count}: return False")
        for position, child in enumerate(pattern.src):
            child_var = f"{var}_{position}"
            lines.append(f"{child_var} = {sources}[{position}]")
            _emit(child, child_var, lines, bindings, constants, check_op=True)
    elif pattern.src_kind is _SourceKind.REPEAT:
        variants = [_compile(variant, check_op=True) for variant in _expand(pattern.src[0])]
        lines.append(f"if not {constant(_repeat_matcher(variants))}({var}.src, store): return False")
    if pattern.name is not None:
        bindings.append(f"if store.setdefault({pattern.name!r}, {var}) is not {var}: return False")


def _repeat_matcher(variants: list[Matcher]) -> Callable[[tuple[UOp, ...], dict[str, UOp]], bool]:
    # every source must match one variant; the first variant that matches a source is kept (no backtracking
    # across sources), and a failed attempt must not leave bindings behind, hence the scratch copy
    def match_all(sources: tuple[UOp, ...], store: dict[str, UOp]) -> bool:
        for source in sources:
            for variant in variants:
                scratch = dict(store)
                if variant(source, scratch):
                    store.update(scratch)
                    break
            else:
                return False
        return True

    return match_all
