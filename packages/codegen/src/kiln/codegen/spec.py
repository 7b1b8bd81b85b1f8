"""The specs of codegen's three forms: kernel sinks, linear programs and PROGRAM uops.

Each is a PatternMatcher for `kiln.uops.type_verify`: every uop must match a rule whose callback returns True.
`verify_linear` adds the ordering rules of a linear program (definitions before uses, proper nesting).
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.codegen.kernel_info import KernelInfo
from kiln.codegen.kernel_signature import CORE_ID, KernelSignature
from kiln.codegen.lowering.index_dtype import HARDWARE_INDEX_DTYPE
from kiln.codegen.tensor_core import WmmaArg
from kiln.uops import (
    AxisKind,
    DType,
    MemoryScope,
    Ops,
    PatternMatcher,
    PtrDType,
    RangeArg,
    SpecError,
    SpecialArg,
    UOp,
    UPat,
    dtypes,
    pm_spec_alu,
    type_verify,
)


def _is_pointer(dtype: DType, scope: MemoryScope | None = None) -> bool:
    return isinstance(dtype, PtrDType) and (scope is None or dtype.scope is scope)


def _index_ok(x: UOp, *, linear: bool) -> bool:
    pointer, *rest = x.src
    if not _is_pointer(pointer.dtype) or not isinstance(x.dtype, PtrDType) or len(rest) not in (1, 2):
        return False
    offset = rest[0]
    if linear and (len(rest) != 1 or offset.dtype.count != 1 or x.dtype.count != 1):
        return False
    offset_ok = dtypes.is_int(offset.dtype) and (offset.dtype.scalar() != dtypes.index) == linear
    gate_ok = len(rest) == 1 or dtypes.is_bool(rest[1].dtype)
    assert isinstance(pointer.dtype, PtrDType)
    return offset_ok and gate_ok and x.dtype.scalar().base.scalar() == pointer.dtype.base.scalar()


def _load_ok(x: UOp) -> bool:
    index = x.src[0]
    if not isinstance(index.dtype, PtrDType):
        return False
    lanes = index.dtype.count * index.dtype.base.count
    if x.dtype != index.dtype.base.scalar().vec(lanes):
        return False
    if len(x.src) == 1:
        return True
    return len(x.src) == 3 and x.src[1].dtype == x.dtype and x.src[2].dtype == dtypes.bool


def _store_ok(x: UOp) -> bool:
    index, value = x.src[0], x.src[1]
    if not isinstance(index.dtype, PtrDType):
        return False
    lanes = index.dtype.count * index.dtype.base.count
    if value.dtype != index.dtype.base.scalar().vec(lanes):
        return False
    return len(x.src) == 2 or (len(x.src) == 3 and x.src[2].dtype == dtypes.bool)


def _range_ok(x: UOp) -> bool:
    return isinstance(x.arg, RangeArg) and x.src[0].dtype == x.dtype


def _reduce_ok(x: UOp) -> bool:
    return (
        x.arg in (Ops.ADD, Ops.MUL, Ops.MAX)
        and x.dtype == x.src[0].dtype
        and all(
            r.op is Ops.RANGE and r.arg.kind in (AxisKind.REDUCE, AxisKind.UNROLL, AxisKind.GROUP_REDUCE)
            for r in x.src[1:]
        )
    )


def _define_global_ok(x: UOp) -> bool:
    return type(x.arg) is int and x.arg >= 0 and _is_pointer(x.dtype, MemoryScope.GLOBAL)


def _wmma_ok(x: UOp) -> bool:
    if not isinstance(x.arg, WmmaArg) or len(x.src) != 3:
        return False
    a_layout, b_layout, c_layout = x.arg.layouts
    return (
        x.src[0].dtype in _carried(x.arg.dtype_in, a_layout.elements)
        and x.src[1].dtype in _carried(x.arg.dtype_in, b_layout.elements)
        and x.src[2].dtype == x.dtype
        and x.dtype in _carried(x.arg.dtype_out, c_layout.elements)
    )


_SMALL_FLOATS = frozenset({dtypes.float16, dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2})


def _carried(dtype: DType, lanes: int) -> tuple[DType, ...]:
    # after the dtype emulation pass a small float operand is carried in float32 (the arg keeps its real format)
    return (dtype.vec(lanes), dtypes.float32.vec(lanes)) if dtype in _SMALL_FLOATS else (dtype.vec(lanes),)


_pm_memory = [
    (UPat(Ops.DEFINE_GLOBAL, src=(), name="x"), _define_global_ok),
    (UPat(Ops.LOAD, name="x"), _load_ok),
    (UPat(Ops.STORE, name="x"), _store_ok),
]

pm_spec_kernel = PatternMatcher(
    [
        (UPat(Ops.SINK, name="x"), lambda x: isinstance(x.arg, KernelInfo) or x.arg is None),
        (UPat(Ops.INDEX, name="x"), lambda x: _index_ok(x, linear=False)),
        *_pm_memory,
        (
            UPat(Ops.END, src=(UPat((Ops.STORE, Ops.END, Ops.GROUP)),), allow_any_len=True, name="x"),
            lambda x: len(x.src) > 1 and all(r.op is Ops.RANGE for r in x.src[1:]),
        ),
        (UPat(Ops.GROUP, src=UPat((Ops.STORE, Ops.END, Ops.GROUP))), lambda: True),
        (UPat(Ops.RANGE, dtype=dtypes.index, src=(UPat(dtype=dtypes.index),), name="x"), _range_ok),
        (UPat(Ops.REDUCE, name="x"), _reduce_ok),
        (UPat(Ops.DEFINE_VAR, dtype=dtypes.index, src=()), lambda: True),
        (UPat(Ops.WMMA, name="x"), _wmma_ok),
        (UPat(Ops.AFTER, name="x"), lambda x: len(x.src) >= 1 and x.dtype == x.src[0].dtype),
    ]
)
"""The kernel sink format (README "Kernel sink format"), before and after optimization; extends pm_spec_alu."""
pm_spec_kernel = pm_spec_kernel + pm_spec_alu


def _no_index_dtype(x: UOp) -> bool | None:
    dtype = x.dtype.base if isinstance(x.dtype, PtrDType) else x.dtype
    return False if dtype.scalar() == dtypes.index else None


def _narrow_hardware_index(x: UOp) -> bool | None:
    # a hardware index reads a 32-bit register or `int core_id` in every format without index dtypes
    return None if x.dtype == HARDWARE_INDEX_DTYPE else False


def _special_ok(x: UOp) -> bool:
    name = x.arg.name if isinstance(x.arg, SpecialArg) else ""
    return name == CORE_ID or (name[:4] in ("gidx", "lidx") and name[4:] in ("0", "1", "2"))


_pm_lowered_definitions: list[tuple[UPat, Callable[..., bool]]] = [
    (
        UPat(Ops.DEFINE_LOCAL, src=(), name="x"),
        lambda x: type(x.arg) is int and _is_pointer(x.dtype, MemoryScope.LOCAL),
    ),
    (
        UPat(Ops.DEFINE_REG, src=(), name="x"),
        lambda x: type(x.arg) is int and _is_pointer(x.dtype, MemoryScope.REG),
    ),
    (UPat(Ops.DEFINE_VAR, src=(), name="x"), lambda x: dtypes.is_int(x.dtype)),
    (
        UPat(Ops.SPECIAL, src=(UPat.var("size"),), name="x"),
        lambda x, size: _special_ok(x) and size.dtype == x.dtype,
    ),
    (UPat(Ops.RANGE, src=(UPat.var(),), name="x"), _range_ok),
]
"""Registers, local memory, variables, hardware indices and loops as both lowered formats define them."""

pm_spec_linear = PatternMatcher(
    [
        (UPat(name="x"), _no_index_dtype),
        (UPat(Ops.SPECIAL, name="x"), _narrow_hardware_index),
        (UPat(Ops.INDEX, name="x"), lambda x: _index_ok(x, linear=True)),
        *_pm_memory,
        *_pm_lowered_definitions,
        (UPat(Ops.END, src=(UPat(Ops.RANGE),)), lambda: True),
        (UPat(Ops.IF, src=(UPat(dtype=dtypes.bool),), name="x"), lambda x: type(x.arg) is int),
        (UPat(Ops.ENDIF, src=(UPat(Ops.IF),)), lambda: True),
        (UPat(Ops.BARRIER), lambda: True),
        (UPat(Ops.AFTER, name="x"), lambda x: len(x.src) >= 1 and x.dtype == x.src[0].dtype),
        (UPat(Ops.WMMA, name="x"), _wmma_ok),
        (UPat((Ops.SINK, Ops.VCONST, Ops.REDUCE, Ops.UNROLL, Ops.CONTRACT, Ops.GROUP)), lambda: False),
    ]
)
"""Uops of the linear program format (README "Linear program format"); extends pm_spec_alu."""
pm_spec_linear = pm_spec_linear + pm_spec_alu


def _index_either_form(x: UOp) -> bool:
    # between the two formats an INDEX may have an index or machine-int offset, vector lanes and a gate (a gated
    # store keeps its gate in the INDEX until the renderer's own passes)
    pointer, *rest = x.src
    if not _is_pointer(pointer.dtype) or not isinstance(x.dtype, PtrDType) or len(rest) not in (1, 2):
        return False
    gate_ok = len(rest) == 1 or dtypes.is_bool(rest[1].dtype)
    assert isinstance(pointer.dtype, PtrDType)
    return dtypes.is_int(rest[0].dtype) and gate_ok and x.dtype.scalar().base.scalar() == pointer.dtype.base.scalar()


pm_spec_lowering = PatternMatcher(
    [
        (UPat(Ops.SINK, name="x"), lambda x: isinstance(x.arg, KernelInfo) or x.arg is None),
        (UPat(Ops.INDEX, name="x"), _index_either_form),
        *_pm_memory,
        *_pm_lowered_definitions,
        (UPat(Ops.END, name="x"), lambda x: len(x.src) >= 2 and all(r.op is Ops.RANGE for r in x.src[1:])),
        (UPat(Ops.GROUP), lambda: True),
        (UPat(Ops.REDUCE, name="x"), _reduce_ok),
        (UPat((Ops.UNROLL, Ops.CONTRACT)), lambda: True),
        (UPat(Ops.IF, src=(UPat(dtype=dtypes.bool),), allow_any_len=True), lambda: True),
        (UPat(Ops.ENDIF, src=(UPat(Ops.IF),)), lambda: True),
        (UPat(Ops.BARRIER), lambda: True),
        (UPat(Ops.AFTER, name="x"), lambda x: len(x.src) >= 1 and x.dtype == x.src[0].dtype),
        (UPat(Ops.WMMA, name="x"), _wmma_ok),
    ]
)
"""The graphs between the kernel sink format and the linear program format (the lowering passes from
"accumulators" on: registers, hardware indices, linear or kernel-form INDEX side by side); extends pm_spec_alu."""
pm_spec_lowering = pm_spec_lowering + pm_spec_alu

pm_spec_lowered = (
    PatternMatcher([(UPat(name="x"), _no_index_dtype), (UPat(Ops.SPECIAL, name="x"), _narrow_hardware_index)])
    + pm_spec_lowering
)
"""pm_spec_lowering once index arithmetic has a machine dtype (the passes from "index dtype" on): no index dtype,
hardware indices (SPECIAL) int32."""


def verify_linear(uops: list[UOp]) -> None:
    """Check a linear program: each uop against pm_spec_linear, definitions before uses, loops and IFs nested."""
    type_verify(uops, pm_spec_linear)
    seen: set[UOp] = set()
    open_blocks: list[UOp] = []
    for uop in uops:
        if uop in seen:
            raise SpecError(f"{uop.op!r} appears twice in the linear program", uop)
        for source in uop.src:
            if source not in seen:
                raise SpecError(f"{uop.op!r} uses a {source.op!r} that is not defined before it", uop)
        if uop.op in (Ops.RANGE, Ops.IF):
            open_blocks.append(uop)
        elif uop.op in (Ops.END, Ops.ENDIF):
            if not open_blocks or open_blocks[-1] is not uop.src[0]:
                raise SpecError(f"{uop.op!r} does not close the innermost open loop or IF", uop)
            open_blocks.pop()
        seen.add(uop)
    if open_blocks:
        raise SpecError(f"{open_blocks[-1].op!r} is never closed", open_blocks[-1])


def _program_ok(x: UOp) -> bool:
    kinds = tuple(s.op for s in x.src)
    stages = ((Ops.SINK, Ops.DEVICE), (Ops.LINEAR,), (Ops.SOURCE,), (Ops.BINARY,))
    expected: tuple[Ops, ...] = ()
    for stage in stages:
        expected += stage
        if kinds == expected:
            return _signature_ok(x.arg, linearized=len(kinds) > 2, compiled=len(kinds) > 4)
    return False


def _signature_ok(signature: object, linearized: bool, compiled: bool) -> bool:
    # no signature before linearizing; from then on one, with the compiler's identity once there is a binary
    if not linearized:
        return signature is None
    return isinstance(signature, KernelSignature) and (signature.compiler is not None) == compiled


pm_spec_program = PatternMatcher(
    [
        (UPat(Ops.PROGRAM, name="x"), _program_ok),
        (UPat(Ops.DEVICE, src=(), name="x"), lambda x: isinstance(x.arg, str) and bool(x.arg)),
        (UPat(Ops.LINEAR, name="x"), lambda x: x.arg is None),
        (UPat(Ops.SOURCE, src=(), name="x"), lambda x: isinstance(x.arg, str)),
        (UPat(Ops.BINARY, src=(), name="x"), lambda x: isinstance(x.arg, bytes)),
    ]
)
"""PROGRAM(SINK, DEVICE[, LINEAR[, SOURCE[, BINARY]]]) and its stage uops (check the PROGRAM node itself); its arg is
the KernelSignature from LINEAR on, with the compiler's identity once it has a BINARY."""


def verify_program(program: UOp) -> None:
    """Check a PROGRAM uop: its stage structure, its kernel sink and (once linearized) its linear program."""
    type_verify([program, *program.src[1:]], pm_spec_program)
    type_verify(program.src[0], pm_spec_kernel)
    if len(program.src) > 2:
        verify_linear(list(program.src[2].src))
