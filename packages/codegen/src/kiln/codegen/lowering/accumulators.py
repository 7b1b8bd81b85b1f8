"""REDUCE -> a register accumulator updated inside the reduce loops.

    REDUCE(value, r0, r1, arg=ADD)
becomes
    acc = DEFINE_REG(T.ptr(lanes, REG))
    STORE(INDEX(AFTER(acc, *outer loops), lanes), identity)              once per outer iteration, before the loop
    STORE(INDEX(acc, lanes), LOAD(INDEX(AFTER(acc, init, r0, r1), lanes)) + value)   in the loop body
    END(that store, r0, r1)
    LOAD(INDEX(AFTER(acc, END), lanes))                                  the result, read after the loop
AFTER orders memory effects that hash-consing would otherwise merge (the three loads have the same address).
A sum of WMMA(a, b, 0) updates with WMMA(a, b, running) instead (D = A @ B + C accumulates on the unit).
A vector REDUCE gets one register per lane, addressed by a vector index (split into scalars by the devectorizer).
On a renderer that allows it (`Renderer.fuse_multiply_add`), a float32/float64 sum of products a*b updates with
MULACC(a, b, running): one rounding instead of two, and one fused instruction per lane.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.codegen.loop_structure import open_ranges, range_sort_key
from kiln.uops import ConstType, DType, MemoryScope, Ops, PatternMatcher, UOp, UPat, dtypes


@dataclass
class RegisterSlots:
    """Numbers the DEFINE_REG accumulators of one kernel (ctx of `pm_reduce_to_accumulator`)."""

    next_slot: int = 0
    fuse_multiply_add: bool = False
    """Sums of float32/float64 products update with MULACC (the renderer's `fuse_multiply_add`)."""

    def take(self) -> int:
        """A fresh slot number."""
        self.next_slot += 1
        return self.next_slot - 1


def reduce_identity(op: Ops, dtype: DType) -> ConstType:
    """The value `x op identity == x` for every x of `dtype`: 0 for ADD, 1 for MUL, the smallest value for MAX."""
    scalar = dtype.scalar()
    if op is Ops.MAX:
        return dtypes.min(scalar)
    value = 0 if op is Ops.ADD else 1
    if dtypes.is_float(scalar):
        return float(value)
    if dtypes.is_bool(scalar):
        return bool(value)
    return value


def _lane_index(lanes: int) -> UOp:
    if lanes == 1:
        return UOp.const(dtypes.index, 0)
    return UOp.const(dtypes.index.vec(lanes), tuple(range(lanes)))


def _address(pointer: UOp, lanes: int) -> UOp:
    # a vector index gives a vector of pointers (one per lane); the devectorizer turns it into real accesses
    return UOp(Ops.INDEX, pointer.dtype.vec(lanes), (pointer, _lane_index(lanes)))


def _after(pointer: UOp, *dependencies: UOp) -> UOp:
    return UOp(Ops.AFTER, pointer.dtype, (pointer, *dependencies)) if dependencies else pointer


def _is_zero(value: UOp) -> bool:
    return (value.op is Ops.CONST and value.arg == 0) or (value.op is Ops.VCONST and all(v == 0 for v in value.arg))


def _product_factors(reduction: UOp, value: UOp) -> tuple[UOp, UOp] | None:
    """(a, b) when a float32/float64 ADD reduce sums a*b (maybe lanes of it picked by a GEP, as expansion leaves it)."""
    if reduction.arg is not Ops.ADD or reduction.dtype.scalar() not in (dtypes.float32, dtypes.float64):
        return None
    lanes: tuple[int, ...] | None = None
    if value.op is Ops.GEP:
        value, lanes = value.src[0], value.arg
    if value.op is not Ops.MUL:
        return None
    a, b = value.src
    return (a, b) if lanes is None else (a.gep(lanes), b.gep(lanes))


def _reduce_to_accumulator(ctx: RegisterSlots, reduction: UOp) -> UOp:
    value, ranges = reduction.src[0], reduction.src[1:]
    if not ranges:
        return value
    lanes = reduction.dtype.count
    accumulator = UOp(Ops.DEFINE_REG, reduction.dtype.scalar().ptr(lanes, MemoryScope.REG), (), ctx.take())
    outer = sorted(open_ranges(value) - set(ranges), key=range_sort_key)
    identity = UOp.const(reduction.dtype, reduce_identity(reduction.arg, reduction.dtype))
    initialize = UOp(Ops.STORE, dtypes.void, (_address(_after(accumulator, *outer), lanes), identity))
    running = UOp(Ops.LOAD, reduction.dtype, (_address(_after(accumulator, initialize, *ranges), lanes),))
    if value.op is Ops.WMMA and reduction.arg is Ops.ADD and _is_zero(value.src[2]):
        updated = value.replace(src=(*value.src[:2], running))  # the tensor core adds the accumulator itself
    elif ctx.fuse_multiply_add and (factors := _product_factors(reduction, value)) is not None:
        updated = UOp(Ops.MULACC, reduction.dtype, (*factors, running))
    else:
        updated = running.alu(reduction.arg, value)
    update = UOp(Ops.STORE, dtypes.void, (_address(accumulator, lanes), updated))
    loop = UOp(Ops.END, dtypes.void, (update, *ranges))
    return UOp(Ops.LOAD, reduction.dtype, (_address(_after(accumulator, loop), lanes),))


pm_reduce_to_accumulator = PatternMatcher([(UPat(Ops.REDUCE, name="reduction"), _reduce_to_accumulator)])
"""REDUCE -> DEFINE_REG accumulator, initialized before and updated inside the reduce loops (ctx: RegisterSlots)."""
