"""Algebra of lanes: GEP and VECTORIZE folding, and scalarization of vector ALU ops.

After expansion most values are vectors built from GEPs and VECTORIZEs of each other. These rules push lane
selection (GEP) down to where lanes are born (constants, VECTORIZE, loads) so that every value the program keeps
is either a scalar or a real vector load/store operand.
"""

from __future__ import annotations

from kiln.uops import GroupOp, Ops, PatternMatcher, PtrDType, UOp, UPat


def lane_of(value: UOp, lane: int) -> UOp:
    """Lane `lane` of `value`, folded through VECTORIZE / VCONST / GEP (a scalar is its own lane)."""
    while True:
        if value.dtype.count == 1:
            return value
        if value.op is Ops.VECTORIZE:
            return value.src[lane]
        if value.op is Ops.VCONST:
            return UOp.const(value.dtype.scalar(), value.arg[lane])
        if value.op is Ops.GEP:
            value, lane = value.src[0], value.arg[lane]
            continue
        return value.gep(lane)


def _fold_gep(gep: UOp, x: UOp) -> UOp | None:
    lanes: tuple[int, ...] = gep.arg
    if lanes == tuple(range(x.dtype.count)):
        return x
    if x.op is Ops.GEP:
        return x.src[0].gep(tuple(x.arg[lane] for lane in lanes))
    if x.op in (Ops.VECTORIZE, Ops.VCONST):
        return UOp.vectorize(*(lane_of(x, lane) for lane in lanes))
    if x.op in GroupOp.Elementwise and x.op is not Ops.BITCAST:
        return UOp(x.op, gep.dtype, tuple(source.gep(lanes) for source in x.src), x.arg)
    if x.op is Ops.INDEX and isinstance(x.dtype, PtrDType):
        return UOp(Ops.INDEX, x.dtype.scalar().vec(len(lanes)), (x.src[0], *(s.gep(lanes) for s in x.src[1:])), x.arg)
    return None


def _fold_vectorize(vector: UOp) -> UOp | None:
    first = vector.src[0]
    if all(source.op is Ops.CONST for source in vector.src):
        return UOp.const(vector.dtype, tuple(source.arg for source in vector.src))
    if first.op is Ops.GEP and all(
        source.op is Ops.GEP and source.src[0] is first.src[0] and len(source.arg) == 1 for source in vector.src
    ):
        return first.src[0].gep(tuple(source.arg[0] for source in vector.src))
    return None


def _scalarize(node: UOp) -> UOp | None:
    if node.dtype.count == 1 or isinstance(node.dtype, PtrDType):
        return None
    scalar = node.dtype.scalar()
    lanes = [UOp(node.op, scalar, tuple(lane_of(s, i) for s in node.src), node.arg) for i in range(node.dtype.count)]
    return UOp(Ops.VECTORIZE, node.dtype, tuple(lanes))


pm_vector_folding = PatternMatcher(
    [
        (UPat(Ops.GEP, src=(UPat.var("x"),), name="gep"), _fold_gep),
        (UPat(Ops.VECTORIZE, name="vector"), _fold_vectorize),
    ]
)
"""GEP of VECTORIZE/VCONST/GEP/elementwise/INDEX folded; VECTORIZE of constants or of every lane of one value folded."""

pm_scalarize_alu = PatternMatcher([(UPat(GroupOp.Elementwise, name="node"), _scalarize)])
"""Vector ALU / CAST / BITCAST ops -> a VECTORIZE of scalar ops (one per lane)."""
