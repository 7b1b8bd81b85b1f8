"""Specs: PatternMatchers of the allowed UOp forms, and `type_verify` that checks a graph against one."""

from __future__ import annotations

import math
from collections.abc import Iterable

from kiln.uops.args import RangeArg, SpecialArg, VarArg
from kiln.uops.dtype import DType, PtrDType, dtypes, truncate
from kiln.uops.ops import GroupOp, Ops
from kiln.uops.pattern_matcher import PatternMatcher
from kiln.uops.printing import format_node
from kiln.uops.uop import UOp
from kiln.uops.upat import UPat


class SpecError(ValueError):
    """A UOp that no spec rule accepts; `uop` is the offender, the message shows its sources and users."""

    def __init__(self, message: str, uop: UOp) -> None:
        super().__init__(message)
        self.uop = uop


def type_verify(uops: UOp | Iterable[UOp], spec: PatternMatcher) -> None:
    """Check every UOp (a graph given by its root, or a list such as a linearized program) against `spec`.

    Each UOp must match a rule of `spec`; the first rule whose callback returns a non-None value decides, and
    that value must be True. Raises SpecError naming the first offending UOp with its sources and users.
    """
    nodes = uops.toposort() if isinstance(uops, UOp) else list(uops)
    for node in nodes:
        result, rule = spec.rewrite_with_rule(node)
        if result is True:
            continue
        why = "no spec rule matches it" if rule is None else f"the spec rule at {rule.location} rejects it"
        raise SpecError(_describe(node, nodes, why), node)


def _describe(node: UOp, nodes: list[UOp], why: str) -> str:
    numbers = {uop: position for position, uop in enumerate(nodes)}
    for source in node.src:
        numbers.setdefault(source, len(numbers))
    users = [uop for uop in nodes if node in uop.src]
    lines = [f"UOp fails the spec ({why}):", f"  {format_node(node, numbers)}", "its sources:"]
    lines.extend(f"  {format_node(source, numbers)}" for source in node.src)
    if not node.src:
        lines.append("  (none)")
    lines.append("its users:")
    lines.extend(f"  {format_node(user, numbers)}" for user in users)
    if not users:
        lines.append("  (none)")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# pm_spec_alu: constants, variables, ALU ops, casts and vectors; other specs extend it with `+`
# ----------------------------------------------------------------------------------------------------------------


def _const_value_ok(dtype: DType, value: object) -> bool:
    if dtypes.is_bool(dtype):
        return type(value) is bool
    if dtypes.is_int(dtype):
        return type(value) is int and truncate(dtype, value) == value
    if dtypes.is_float(dtype):
        if type(value) is not float:
            return False
        return math.isnan(value) or truncate(dtype, value) == value
    return False


def _const_ok(x: UOp) -> bool:
    return x.dtype.count == 1 and not isinstance(x.dtype, PtrDType) and _const_value_ok(x.dtype, x.arg)


def _vconst_ok(x: UOp) -> bool:
    return (
        isinstance(x.arg, tuple)
        and len(x.arg) == x.dtype.count > 1
        and all(_const_value_ok(x.dtype.scalar(), v) for v in x.arg)
    )


def _same_dtype(x: UOp) -> bool:
    return all(source.dtype == x.dtype for source in x.src)


def _unary_ok(x: UOp) -> bool:
    if x.op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL) and not dtypes.is_float(x.dtype):
        return False
    return len(x.src) == 1 and _same_dtype(x)


def _binary_ok(x: UOp) -> bool:
    if len(x.src) != 2:
        return False
    if x.op in GroupOp.Comparison:
        left, right = x.src
        return left.dtype == right.dtype and x.dtype == dtypes.bool.vec(left.dtype.count)
    if not _same_dtype(x):
        return False
    if x.op in (Ops.FDIV, Ops.POW):
        return dtypes.is_float(x.dtype)
    if x.op in (Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR):
        return dtypes.is_int(x.dtype)
    if x.op in (Ops.AND, Ops.OR, Ops.XOR):
        return dtypes.is_int(x.dtype) or dtypes.is_bool(x.dtype)
    if x.op is Ops.THREEFRY:
        return x.dtype == dtypes.uint64
    return x.dtype != dtypes.void


def _where_ok(x: UOp) -> bool:
    if len(x.src) != 3:
        return False
    condition, if_true, if_false = x.src
    return condition.dtype == dtypes.bool.vec(x.dtype.count) and if_true.dtype == if_false.dtype == x.dtype


def _cast_ok(x: UOp) -> bool:
    (source,) = x.src
    return x.dtype != dtypes.void and source.dtype != dtypes.void and x.dtype.count == source.dtype.count


def _gep_ok(x: UOp) -> bool:
    (source,) = x.src
    lanes = x.arg
    return (
        isinstance(lanes, tuple)
        and len(lanes) > 0
        and all(type(lane) is int and 0 <= lane < source.dtype.count for lane in lanes)
        and x.dtype == source.dtype.scalar().vec(len(lanes))
    )


pm_spec_alu = PatternMatcher(
    [
        (UPat(Ops.CONST, src=(), name="x"), _const_ok),
        (UPat(Ops.VCONST, src=(), name="x"), _vconst_ok),
        (
            UPat(Ops.DEFINE_VAR, src=(), name="x"),
            lambda x: isinstance(x.arg, VarArg) and dtypes.is_int(x.dtype) and x.dtype.count == 1,
        ),
        (
            UPat(Ops.BIND, src=(UPat(Ops.DEFINE_VAR), UPat(Ops.CONST)), name="x"),
            lambda x: _same_dtype(x) and x.src[0].arg.lo <= x.src[1].arg <= x.src[0].arg.hi,
        ),
        (
            UPat(Ops.RANGE, src=(UPat.var("size"),), name="x"),
            lambda x, size: isinstance(x.arg, RangeArg) and dtypes.is_int(x.dtype) and size.dtype == x.dtype,
        ),
        (
            UPat(Ops.SPECIAL, src=(UPat.var("size"),), name="x"),
            lambda x, size: isinstance(x.arg, SpecialArg) and dtypes.is_int(x.dtype) and size.dtype == x.dtype,
        ),
        (UPat(GroupOp.Unary, name="x"), _unary_ok),
        (UPat(GroupOp.Binary, name="x"), _binary_ok),
        (UPat(Ops.WHERE, name="x"), _where_ok),
        (UPat(Ops.MULACC, src=(UPat.var(), UPat.var(), UPat.var()), name="x"), _same_dtype),
        (UPat(Ops.CAST, src=(UPat.var(),), name="x"), _cast_ok),
        (
            UPat(Ops.BITCAST, src=(UPat.var("y"),), name="x"),
            lambda x, y: x.dtype.nbytes == y.dtype.nbytes and x.dtype != dtypes.void,
        ),
        (
            UPat(Ops.VECTORIZE, name="x"),
            lambda x: len(x.src) == x.dtype.count > 1 and all(s.dtype == x.dtype.scalar() for s in x.src),
        ),
        (UPat(Ops.GEP, src=(UPat.var(),), name="x"), _gep_ok),
        (UPat(Ops.SINK, name="x"), lambda x: x.dtype == dtypes.void),
    ]
)
"""The spec of symbolic and ALU graphs: constants, variables, ranges, ALU ops, casts, vectors and SINK."""
