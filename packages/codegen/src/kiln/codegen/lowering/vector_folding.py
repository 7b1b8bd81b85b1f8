"""Algebra of lanes: GEP and VECTORIZE folding, and scalarization of vector ALU ops.

After expansion most values are vectors built from GEPs and VECTORIZEs of each other. These rules push lane
selection (GEP) down to where lanes are born (constants, VECTORIZE, loads) so that every value the program keeps
is either a scalar or a real vector load/store operand. For a renderer with vector ALU ops
(`pm_vector_folding_keep_alu`) lane selection stops at data ALU ops: a vector op computes all its lanes at once, and
a VECTORIZE of all its lanes in order folds back into it. Index math (and bool math on it) is still split per lane,
since memory access reads each lane's address as a scalar expression.
"""

from __future__ import annotations

from kiln.uops import GroupOp, NodeSlot, Ops, PatternMatcher, PtrDType, UOp, UPat, dtypes


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


_INDEX_MATH: NodeSlot[bool] = NodeSlot(
    "index_math", __name__, "whether a node is index math: of dtypes.index, or bool computed from index math alone"
)


def _is_index_math(node: UOp) -> bool:
    # bool math is index math only when it is computed from index math (a gate's comparisons of indices); an OR of
    # float comparisons (a relu's `x < 0 or x == 0`) is data and stays a vector op
    scalar = node.dtype.scalar()
    if scalar == dtypes.index:
        return True
    if scalar != dtypes.bool:
        return False
    known = _INDEX_MATH.get(node)
    if known is None:
        known = all(
            _is_index_math(source) if source.dtype.scalar() == dtypes.bool else source.dtype.scalar() == dtypes.index
            for source in node.src
        )
        _INDEX_MATH.set(node, known)
    return known


def _fold_gep_keep_alu(gep: UOp, x: UOp) -> UOp | None:
    if x.op in GroupOp.Elementwise and not _stays_scalar(x):
        return x if gep.arg == tuple(range(x.dtype.count)) else None
    return _fold_gep(gep, x)


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

pm_vector_folding_keep_alu = PatternMatcher(
    [
        (UPat(Ops.GEP, src=(UPat.var("x"),), name="gep"), _fold_gep_keep_alu),
        (UPat(Ops.VECTORIZE, name="vector"), _fold_vectorize),
    ]
)
"""`pm_vector_folding` for renderers with vector ALU ops: GEPs stay outside data ALU ops (see the module docstring)."""

_VECTOR_ALU_FLOATS = frozenset({dtypes.float32, dtypes.float64})


def _stays_scalar(node: UOp) -> bool:
    # index math (see the module docstring), THREEFRY (scalar by the spec) and the narrow float formats, which
    # renderers emulate or compute exactly (MULACC) one lane at a time
    if _is_index_math(node) or node.op is Ops.THREEFRY:
        return True
    kinds = {node.dtype.scalar(), *(source.dtype.scalar() for source in node.src)}
    return any(dtypes.is_float(kind) and kind not in _VECTOR_ALU_FLOATS for kind in kinds)


pm_scalarize_index_math = PatternMatcher(
    [(UPat(GroupOp.Elementwise, name="node"), lambda node: _scalarize(node) if _stays_scalar(node) else None)]
)
"""Vector index math, THREEFRY and narrow-float ops -> a VECTORIZE of scalar ops (the rest stays vector)."""

pm_scalarize_alu = PatternMatcher([(UPat(GroupOp.Elementwise, name="node"), _scalarize)])
"""Vector ALU / CAST / BITCAST ops -> a VECTORIZE of scalar ops (one per lane)."""
