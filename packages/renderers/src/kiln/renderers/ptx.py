"""PTX emitted directly from the linear program (no C compiler in between), validated by `ptxas` when present.

Every value lives in typed virtual registers (ptxas allocates the real ones): bool in predicates, 8/16/32-bit
integers in 32-bit registers (8- and 16-bit values kept sign- or zero-extended, re-normalized after each op so they
wrap like the IR says), 64-bit integers and pointers in 64-bit registers, float32/float64 in float registers.
float16, fp8 and bfloat16 are emulated by codegen (`emulated_dtypes`). Transcendentals are decomposed by codegen
(PTX only has approximate ex2/lg2/sin); sqrt, division and reciprocals use the correctly rounded `.rn` forms and
adds and multiplies are `.rn` too, so ptxas never fuses them.

The kernel is `.entry kiln_kernel(.param .u64 data<slot>..., .param .s32|.s64 var_<name>...)`, PTX ISA 7.8
(CUDA 11.8+) for sm_75 .. sm_90, newer ISAs for newer targets (`ptx_version`). Facts about instructions are
from NVIDIA's PTX ISA reference (cited per section).
"""

from __future__ import annotations

import functools
import os
import shutil
import struct
import subprocess
import tempfile

from kiln.codegen import TensorCore, WmmaArg
from kiln.renderers.c_style import ENTRY_NAME, local_size, variable_name
from kiln.renderers.target import NVIDIA, TargetRenderer, architecture_number, nvidia_target
from kiln.renderers.toolchain import ToolchainCompiler, ToolchainNotFoundError
from kiln.uops import DType, GroupOp, MemoryScope, Ops, PtrDType, UOp, dtypes, register_knob

PTXAS = register_knob("PTXAS", str, "", "ptxas used to validate PTX; empty: `ptxas` on PATH, else /usr/local/cuda/bin.")

PTX_VERSION = "7.8"
"""The PTX ISA of code for sm_75 .. sm_90: the first with sm_90 (CUDA 11.8)."""
_NEWER_PTX_VERSIONS = {100: "8.8", 103: "8.8", 120: "8.8", 121: "8.8", 110: "9.0"}
"""Newer targets need newer ISAs (PTX ISA release notes: sm_100/103/120/121 by 8.8, sm_110 by 9.0)."""


def ptx_version(arch: str) -> str:
    """The PTX ISA version the renderer writes for `arch`."""
    return _NEWER_PTX_VERSIONS.get(architecture_number(arch), PTX_VERSION)


# dtype -> (register kind, instruction type, memory type); the register kinds are declared as .reg .<kind>
_TYPES: dict[DType, tuple[str, str, str]] = {
    dtypes.bool: ("pred", "pred", "u8"),
    dtypes.int8: ("b32", "s32", "s8"),
    dtypes.uint8: ("b32", "u32", "u8"),
    dtypes.int16: ("b32", "s32", "s16"),
    dtypes.uint16: ("b32", "u32", "u16"),
    dtypes.int32: ("b32", "s32", "s32"),
    dtypes.uint32: ("b32", "u32", "u32"),
    dtypes.int64: ("b64", "s64", "s64"),
    dtypes.uint64: ("b64", "u64", "u64"),
    dtypes.float32: ("f32", "f32", "f32"),
    dtypes.float64: ("f64", "f64", "f64"),
}
_REGISTER_PREFIX = {"pred": "%p", "b16": "%h", "b32": "%r", "b64": "%rd", "f32": "%f", "f64": "%fd"}
_STATE_SPACE = {MemoryScope.GLOBAL: "global", MemoryScope.LOCAL: "shared", MemoryScope.REG: "local"}
_SPECIAL_REGISTERS = {"gidx": "%ctaid", "lidx": "%tid"}

_INT_BINARY = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul.lo", Ops.MAX: "max"}
_FLOAT_BINARY = {Ops.ADD: "add.rn", Ops.SUB: "sub.rn", Ops.MUL: "mul.rn", Ops.FDIV: "div.rn"}
_FLOAT_UNARY = {Ops.NEG: "neg", Ops.SQRT: "sqrt.rn", Ops.RECIPROCAL: "rcp.rn"}
_BITWISE = {Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}
_PREDICATE_BINARY = {Ops.ADD: "or", Ops.MUL: "and", Ops.MAX: "or", **_BITWISE, Ops.CMPNE: "xor"}
_COMPARE = {Ops.CMPLT: "lt", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}


def _types(dtype: DType) -> tuple[str, str, str]:
    found = _TYPES.get(dtype.scalar())
    if found is None:
        raise ValueError(f"PTXRenderer has no registers for {dtype!r}; expected one of {[d.name for d in _TYPES]}")
    return found


def float_literal(value: float, dtype: DType) -> str:
    """PTX's exact hexadecimal float immediate: 0f<8 hex digits> (f32) or 0d<16 hex digits> (f64)."""
    if dtype == dtypes.float64:
        return "0d" + struct.pack(">d", value).hex().upper()
    return "0f" + struct.pack(">f", value).hex().upper()


class PTXWriter:
    """The state of rendering one kernel: registers of each uop (one per vector lane), lines, declarations."""

    def __init__(self, renderer: PTXRenderer) -> None:
        self.renderer = renderer
        self.values: dict[UOp, list[str]] = {}
        self.lines: list[str] = []
        self.declarations: list[str] = []
        self.parameters: list[str] = []
        self.counts: dict[str, int] = {}
        self.labels = 0
        self.loop_labels: dict[UOp, tuple[str, str]] = {}

    def register(self, kind: str) -> str:
        """A fresh virtual register of `kind` (pred, b16, b32, b64, f32, f64)."""
        number = self.counts.get(kind, 0)
        self.counts[kind] = number + 1
        return f"{_REGISTER_PREFIX[kind]}{number}"

    def scalar(self, uop: UOp) -> str:
        registers = self.values[uop]
        assert len(registers) == 1, f"{uop.op} is a vector"
        return registers[0]

    def emit(self, *lines: str) -> None:
        self.lines.extend("\t" + line for line in lines)

    def label(self, prefix: str) -> str:
        self.labels += 1
        return f"$L_{prefix}_{self.labels}"

    def normalize(self, register: str, dtype: DType) -> None:
        """Re-extend an 8/16-bit integer held in a 32-bit register after an op that may have left high bits."""
        scalar = dtype.scalar()
        if scalar.itemsize >= 4 or scalar == dtypes.bool or not dtypes.is_int(scalar):
            return
        bits = scalar.itemsize * 8
        if dtypes.is_unsigned(scalar):
            self.emit(f"and.b32 {register}, {register}, {(1 << bits) - 1};")
        else:
            self.emit(f"cvt.s32.s{bits} {register}, {register};")  # sign-extends the low bits (PTX ISA "cvt")

    def constant(self, value: object, dtype: DType) -> str:
        kind, _, _ = _types(dtype)
        register = self.register(kind)
        if kind == "pred":
            scratch = self.register("b32")
            self.emit(f"mov.b32 {scratch}, {1 if value else 0};", f"setp.ne.u32 {register}, {scratch}, 0;")
        elif dtypes.is_float(dtype):
            assert isinstance(value, (int, float))
            self.emit(f"mov.{kind} {register}, {float_literal(float(value), dtype)};")
        else:
            assert isinstance(value, (int, bool))
            bits = 64 if kind == "b64" else 32
            self.emit(f"mov.{kind} {register}, {int(value) & ((1 << bits) - 1)};")
        return register


# ---- the rendering of each op -------------------------------------------------------------------------------------


def _root(pointer: UOp) -> UOp:
    while pointer.op in (Ops.INDEX, Ops.AFTER):
        pointer = pointer.src[0]
    return pointer


def _space(pointer: UOp) -> str:
    root = _root(pointer)
    assert isinstance(root.dtype, PtrDType)
    return _STATE_SPACE[root.dtype.scope]


def _index(w: PTXWriter, uop: UOp) -> list[str]:
    assert isinstance(uop.dtype, PtrDType)
    base, offset = w.scalar(uop.src[0]), w.scalar(uop.src[1])
    itemsize = uop.dtype.base.scalar().itemsize
    scaled, address = w.register("b64"), w.register("b64")
    if uop.src[1].dtype.itemsize == 8:
        w.emit(f"mul.lo.s64 {scaled}, {offset}, {itemsize};")
    else:
        w.emit(f"mul.wide.s32 {scaled}, {offset}, {itemsize};")
    w.emit(f"add.s64 {address}, {base}, {scaled};")
    return [address]


def _access_chunks(dtype: DType) -> list[tuple[int, int]]:
    """(first lane, lane count) of each ld/st a vector access needs: .v2/.v4 of at most 16 bytes (PTX ISA "ld")."""
    count, itemsize = dtype.count, dtype.scalar().itemsize
    if dtype.scalar() == dtypes.bool:
        return [(lane, 1) for lane in range(count)]
    per_access = max(1, min(count, 16 // itemsize))
    return [(first, per_access) for first in range(0, count, per_access)]


def _load(w: PTXWriter, uop: UOp) -> list[str]:
    kind, _, memory = _types(uop.dtype)
    space, address = _space(uop.src[0]), w.scalar(uop.src[0])
    registers = [w.register(kind) for _ in range(uop.dtype.count)]
    guard = ""
    if len(uop.src) == 3:
        alternative, gate = w.values[uop.src[1]], w.scalar(uop.src[2])
        for register, value in zip(registers, alternative):
            w.emit(f"mov.{'pred' if kind == 'pred' else kind} {register}, {value};")
        guard = f"@{gate} "
    for first, lanes in _access_chunks(uop.dtype):
        offset = f"+{first * uop.dtype.scalar().itemsize}" if first else ""
        if kind == "pred":
            raw, value = w.register("b32"), registers[first]
            w.emit(f"{guard}ld.{space}.u8 {raw}, [{address}{offset}];", f"{guard}setp.ne.u32 {value}, {raw}, 0;")
            continue
        targets = registers[first : first + lanes]
        vector = "" if lanes == 1 else f".v{lanes}"
        destination = targets[0] if lanes == 1 else "{" + ", ".join(targets) + "}"
        w.emit(f"{guard}ld.{space}{vector}.{memory} {destination}, [{address}{offset}];")
    return registers


def _store(w: PTXWriter, uop: UOp) -> None:
    value_dtype = uop.src[1].dtype
    kind, _, memory = _types(value_dtype)
    space, address, values = _space(uop.src[0]), w.scalar(uop.src[0]), w.values[uop.src[1]]
    for first, lanes in _access_chunks(value_dtype):
        offset = f"+{first * value_dtype.scalar().itemsize}" if first else ""
        if kind == "pred":
            raw = w.register("b32")
            w.emit(f"selp.u32 {raw}, 1, 0, {values[first]};", f"st.{space}.u8 [{address}{offset}], {raw};")
            continue
        sources = values[first : first + lanes]
        vector = "" if lanes == 1 else f".v{lanes}"
        source = sources[0] if lanes == 1 else "{" + ", ".join(sources) + "}"
        w.emit(f"st.{space}{vector}.{memory} [{address}{offset}], {source};")


def _alu(w: PTXWriter, uop: UOp) -> str:
    op, operands = uop.op, [w.scalar(s) for s in uop.src]
    operand_dtype = uop.src[-1].dtype
    kind, typed, _ = _types(operand_dtype)
    result_kind, _, _ = _types(uop.dtype)
    result = w.register(result_kind)
    if op is Ops.WHERE:
        condition, a, b = operands
        if kind == "pred":
            chosen, other, inverse = w.register("pred"), w.register("pred"), w.register("pred")
            w.emit(f"and.pred {chosen}, {condition}, {a};", f"not.pred {inverse}, {condition};")
            w.emit(f"and.pred {other}, {inverse}, {b};", f"or.pred {result}, {chosen}, {other};")
        else:
            w.emit(f"selp.{kind} {result}, {a}, {b}, {condition};")
        return result
    if kind == "pred":
        return _predicate_alu(w, op, operands, result)
    if op in GroupOp.Comparison:
        if dtypes.is_float(operand_dtype):
            comparison = "neu" if op is Ops.CMPNE else _COMPARE[op]  # NaN != x is true (unordered)
        else:
            comparison = _COMPARE[op]
        w.emit(f"setp.{comparison}.{typed} {result}, {operands[0]}, {operands[1]};")
        return result
    if dtypes.is_float(operand_dtype):
        if op is Ops.MULACC:  # rounded once (PTX ISA: fma.rn.{f32,f64} is IEEE 754 fusedMultiplyAdd)
            w.emit(f"fma.rn.{typed} {result}, {operands[0]}, {operands[1]}, {operands[2]};")
        elif op in _FLOAT_BINARY:
            w.emit(f"{_FLOAT_BINARY[op]}.{typed} {result}, {operands[0]}, {operands[1]};")
        elif op is Ops.MAX:
            _float_max(w, operands, typed, result)
        elif op is Ops.TRUNC:
            w.emit(f"cvt.rzi.{typed}.{typed} {result}, {operands[0]};")
        elif op in _FLOAT_UNARY:
            w.emit(f"{_FLOAT_UNARY[op]}.{typed} {result}, {operands[0]};")
        else:
            raise ValueError(f"PTXRenderer has no native {op!r} for {operand_dtype!r}; codegen should decompose it")
        return result
    _int_alu(w, uop, operands, kind, typed, result)
    w.normalize(result, uop.dtype)
    return result


def _float_max(w: PTXWriter, operands: list[str], typed: str, result: str) -> None:
    """exec_alu's MAX: a NaN operand is ignored (both NaN: NaN) and -0 < +0, whatever `max` does with ties.

    `max.f32/.f64` returns the other operand when one is NaN (PTX ISA, "Floating Point Instructions: max"); the
    order it gives +0 and -0 is not something older ISA versions promise, so a tie (operands that compare equal,
    hence equal bits or +0 / -0) takes the bitwise AND of the operands instead, which is +0 for +0 / -0.
    """
    a, b = operands
    bits = typed.replace("f", "b")
    larger, tie = w.register(typed), w.register("pred")
    a_bits, b_bits, both = w.register(bits), w.register(bits), w.register(typed)
    w.emit(f"max.{typed} {larger}, {a}, {b};", f"setp.eq.{typed} {tie}, {a}, {b};")
    w.emit(f"mov.{bits} {a_bits}, {a};", f"mov.{bits} {b_bits}, {b};", f"and.{bits} {a_bits}, {a_bits}, {b_bits};")
    w.emit(f"mov.{bits} {both}, {a_bits};", f"selp.{typed} {result}, {both}, {larger}, {tie};")


def _predicate_alu(w: PTXWriter, op: Ops, operands: list[str], result: str) -> str:
    if op in _PREDICATE_BINARY:
        w.emit(f"{_PREDICATE_BINARY[op]}.pred {result}, {operands[0]}, {operands[1]};")
    elif op is Ops.CMPEQ:
        different = w.register("pred")
        w.emit(f"xor.pred {different}, {operands[0]}, {operands[1]};", f"not.pred {result}, {different};")
    elif op is Ops.CMPLT:  # false < true only
        inverse = w.register("pred")
        w.emit(f"not.pred {inverse}, {operands[0]};", f"and.pred {result}, {inverse}, {operands[1]};")
    elif op is Ops.NEG:
        w.emit(f"not.pred {result}, {operands[0]};")
    elif op is Ops.TRUNC:
        w.emit(f"mov.pred {result}, {operands[0]};")
    else:
        raise ValueError(f"{op!r} is not defined on bool")
    return result


def _int_alu(w: PTXWriter, uop: UOp, operands: list[str], kind: str, typed: str, result: str) -> None:
    op, bits = uop.op, 64 if kind == "b64" else 32
    if op in _INT_BINARY:
        w.emit(f"{_INT_BINARY[op]}.{typed} {result}, {operands[0]}, {operands[1]};")
    elif op is Ops.MULACC:  # integers wrap: a multiply then an add
        product = w.register(kind)
        w.emit(f"mul.lo.{typed} {product}, {operands[0]}, {operands[1]};")
        w.emit(f"add.{typed} {result}, {product}, {operands[2]};")
    elif op in _BITWISE:
        w.emit(f"{_BITWISE[op]}.b{bits} {result}, {operands[0]}, {operands[1]};")
    elif op is Ops.NEG:
        w.emit(f"neg.s{bits} {result}, {operands[0]};")
    elif op is Ops.TRUNC:
        w.emit(f"mov.b{bits} {result}, {operands[0]};")
    elif op in (Ops.SHL, Ops.SHR):
        # shift counts are .u32 and clamped to the register width (PTX ISA "shl"/"shr"): a count outside [0, bits)
        # shifts everything out (0, or the sign for an arithmetic right shift), as the IR says
        count = operands[1]
        if bits == 64:
            clamped, count = w.register("b64"), w.register("b32")
            w.emit(f"min.u64 {clamped}, {operands[1]}, 64;", f"cvt.u32.u64 {count}, {clamped};")
        instruction = f"shl.b{bits}" if op is Ops.SHL else f"shr.{typed}"
        w.emit(f"{instruction} {result}, {operands[0]}, {count};")
    elif op in (Ops.IDIV, Ops.MOD):
        # PTX leaves x/0 unspecified; the IR's compiled form gives 0 (like the C renderers)
        zero, divisor, quotient = w.register("pred"), w.register(kind), w.register(kind)
        w.emit(f"setp.eq.{typed} {zero}, {operands[1]}, 0;", f"selp.b{bits} {divisor}, 1, {operands[1]}, {zero};")
        w.emit(f"{'div' if op is Ops.IDIV else 'rem'}.{typed} {quotient}, {operands[0]}, {divisor};")
        w.emit(f"selp.b{bits} {result}, 0, {quotient}, {zero};")
    elif op is Ops.THREEFRY:
        _threefry(w, operands[0], operands[1], result)
    else:
        raise ValueError(f"{op!r} is not defined on integer dtype {uop.src[-1].dtype!r}")


def _threefry(w: PTXWriter, counter: str, key: str, result: str) -> None:
    """Threefry-2x32, 20 rounds (Salmon et al., SC'11; rotation constants and 0x1BD11BDA from Random123)."""
    k = [w.register("b32") for _ in range(3)]
    x = [w.register("b32") for _ in range(2)]
    high, low = w.register("b32"), w.register("b32")
    w.emit(f"mov.b64 {{{k[0]}, {k[1]}}}, {key};", f"xor.b32 {k[2]}, {k[0]}, {k[1]};")
    w.emit(f"xor.b32 {k[2]}, {k[2]}, 466688986;", f"mov.b64 {{{low}, {high}}}, {counter};")
    w.emit(f"add.u32 {x[0]}, {low}, {k[0]};", f"add.u32 {x[1]}, {high}, {k[1]};")
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    left, right = w.register("b32"), w.register("b32")
    for group in range(5):
        for rotation in rotations[group % 2]:
            w.emit(f"add.u32 {x[0]}, {x[0]}, {x[1]};", f"shl.b32 {left}, {x[1]}, {rotation};")
            w.emit(f"shr.u32 {right}, {x[1]}, {32 - rotation};", f"or.b32 {x[1]}, {left}, {right};")
            w.emit(f"xor.b32 {x[1]}, {x[1]}, {x[0]};")
        w.emit(f"add.u32 {x[0]}, {x[0]}, {k[(group + 1) % 3]};", f"add.u32 {x[1]}, {x[1]}, {k[(group + 2) % 3]};")
        w.emit(f"add.u32 {x[1]}, {x[1]}, {group + 1};")
    w.emit(f"mov.b64 {result}, {{{x[0]}, {x[1]}}};")


def _cast(w: PTXWriter, uop: UOp) -> str:
    source, target, value = uop.src[0].dtype, uop.dtype, w.scalar(uop.src[0])
    source_kind, source_type, _ = _types(source)
    target_kind, target_type, _ = _types(target)
    result = w.register(target_kind)
    if target == dtypes.bool:
        comparison = "neu" if dtypes.is_float(source) else "ne"
        if source_kind == "pred":
            w.emit(f"mov.pred {result}, {value};")
        else:
            w.emit(f"setp.{comparison}.{source_type} {result}, {value}, {_zero(source)};")
    elif source == dtypes.bool:
        w.emit(f"selp.{target_type} {result}, {_one(target)}, {_zero(target)}, {value};")
    elif dtypes.is_float(source) and dtypes.is_float(target):
        rounding = ".rn" if target.itemsize < source.itemsize else ""
        w.emit(f"cvt{rounding}.{target_type}.{source_type} {result}, {value};")
    elif dtypes.is_float(target):
        w.emit(f"cvt.rn.{target_type}.{source_type} {result}, {value};")
    elif dtypes.is_float(source):
        wide = _float_to_int64(w, value, source, target)
        w.emit(f"cvt.{target_type}.s64 {result}, {wide};" if target_kind == "b32" else f"mov.b64 {result}, {wide};")
        w.normalize(result, target)
    else:
        if source_kind == target_kind:
            w.emit(f"mov.{target_kind} {result}, {value};")
        else:
            w.emit(f"cvt.{target_type}.{source_type} {result}, {value};")
        w.normalize(result, target)
    return result


def _zero(dtype: DType) -> str:
    return float_literal(0.0, dtype) if dtypes.is_float(dtype) else "0"


def _one(dtype: DType) -> str:
    return float_literal(1.0, dtype) if dtypes.is_float(dtype) else "1"


def _float_to_int64(w: PTXWriter, value: str, source: DType, target: DType) -> str:
    """The IR's float -> int: truncate, wrap modulo 2**64, NaN/inf -> the target's minimum (cvt would saturate)."""
    x = value
    if source != dtypes.float64:
        x = w.register("f64")
        w.emit(f"cvt.f64.{_types(source)[1]} {x}, {value};")
    truncated, magnitude = w.register("f64"), w.register("f64")
    small, finite, negative = w.register("pred"), w.register("pred"), w.register("pred")
    direct, bits, mantissa, exponent = (w.register("b64") for _ in range(4))
    shift, shifted, negated, result = w.register("b32"), w.register("b64"), w.register("b64"), w.register("b64")
    w.emit(f"cvt.rzi.f64.f64 {truncated}, {x};", f"abs.f64 {magnitude}, {truncated};")
    w.emit(f"setp.lt.f64 {small}, {magnitude}, {float_literal(2.0**63, dtypes.float64)};")
    w.emit(f"cvt.rzi.s64.f64 {direct}, {truncated};", f"mov.b64 {bits}, {truncated};")
    # |x| >= 2**63: x = mantissa * 2**(exponent - 1075) with a shift >= 11, so x mod 2**64 is the shifted mantissa
    w.emit(f"and.b64 {mantissa}, {bits}, 4503599627370495;", f"or.b64 {mantissa}, {mantissa}, 4503599627370496;")
    w.emit(f"shr.u64 {exponent}, {bits}, 52;", f"and.b64 {exponent}, {exponent}, 2047;")
    w.emit(f"cvt.u32.u64 {shift}, {exponent};", f"sub.s32 {shift}, {shift}, 1075;")
    w.emit(f"max.s32 {shift}, {shift}, 0;", f"shl.b64 {shifted}, {mantissa}, {shift};")
    w.emit(f"setp.lt.s64 {negative}, {bits}, 0;", f"neg.s64 {negated}, {shifted};")
    w.emit(
        f"selp.b64 {shifted}, {negated}, {shifted}, {negative};", f"selp.b64 {result}, {direct}, {shifted}, {small};"
    )
    minimum = int(dtypes.min(target)) & ((1 << 64) - 1)
    w.emit(f"testp.finite.f64 {finite}, {x};", f"selp.b64 {result}, {result}, {minimum}, {finite};")
    return result


def _bitcast(w: PTXWriter, uop: UOp) -> str:
    source, target = uop.src[0].dtype, uop.dtype
    if source.itemsize != target.itemsize or dtypes.bool in (source.scalar(), target.scalar()):
        raise ValueError(f"BITCAST needs two non-bool dtypes of one size, got {source!r} -> {target!r}")
    target_kind = _types(target)[0]
    result = w.register(target_kind)
    bits = 64 if target.itemsize == 8 else 32
    w.emit(f"mov.b{bits} {result}, {w.scalar(uop.src[0])};")
    w.normalize(result, target)
    return result


def _wmma(w: PTXWriter, uop: UOp, core: TensorCore) -> list[str]:
    """mma.sync m16n8k16 row.col on float32-carried f16 operands (PTX ISA "mma.m16n8k16" fragments)."""
    a, b, c = (w.values[s] for s in uop.src)

    def pack(low: str, high: str) -> str:
        packed = w.register("b32")
        w.emit(f"cvt.rn.f16x2.f32 {packed}, {high}, {low};")  # the first source goes to the upper half
        return packed

    a_packed = [pack(a[2 * i], a[2 * i + 1]) for i in range(4)]
    b_packed = [pack(b[0], b[1]), pack(b[2], b[3])]
    a_list, b_list = "{" + ", ".join(a_packed) + "}", "{" + ", ".join(b_packed) + "}"
    if core.dtype_out == dtypes.float32:
        d = [w.register("f32") for _ in range(4)]
        w.emit(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            f"{{{', '.join(d)}}}, {a_list}, {b_list}, {{{', '.join(c)}}};"
        )
        return d
    c_packed = [pack(c[0], c[1]), pack(c[2], c[3])]
    d_packed = [w.register("b32") for _ in range(2)]
    w.emit(
        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
        f"{{{', '.join(d_packed)}}}, {a_list}, {b_list}, {{{', '.join(c_packed)}}};"
    )
    result = []
    for packed in d_packed:
        halves = [w.register("b16"), w.register("b16")]
        w.emit(f"mov.b32 {{{halves[0]}, {halves[1]}}}, {packed};")
        for half in halves:
            lane = w.register("f32")
            w.emit(f"cvt.f32.f16 {lane}, {half};")
            result.append(lane)
    return result


# ---- the compiler -------------------------------------------------------------------------------------------------


class PTXAssemblerError(RuntimeError):
    """ptxas rejected a PTX module; the message carries its log."""


def find_ptxas() -> str | None:
    """The ptxas binary: the PTXAS knob, else `ptxas` on PATH, else under CUDA_HOME or /usr/local/cuda."""
    chosen = PTXAS.value().strip()
    if chosen:
        found = shutil.which(chosen)
        if found is None:
            raise ToolchainNotFoundError(f"PTXAS={chosen!r} names no executable; install the CUDA toolkit's ptxas")
        return found
    homes = [home for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda") if home]
    candidates = [os.path.join(home, "bin", "ptxas") for home in homes]
    found = shutil.which("ptxas")
    if found is not None:
        return found
    return next((path for path in candidates if os.path.isfile(path) and os.access(path, os.X_OK)), None)


@functools.cache
def _ptxas_version(path: str) -> str:
    output = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False).stdout
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown"


class PTXCompiler(ToolchainCompiler):
    """Returns the PTX text (the driver JIT-compiles it); when `ptxas` is found it first assembles it for `arch`
    to catch errors early (PTXAssemblerError with ptxas's log)."""

    def __init__(self, arch: str = "sm_80", validate: bool = True) -> None:
        self.arch = f"sm_{architecture_number(arch)}"
        self.validate = validate
        self.flags = (self.arch, "validated" if validate else "unvalidated")

    @property
    def ptxas(self) -> str | None:
        """Path of the ptxas used for validation (None: not found or validation off)."""
        return find_ptxas() if self.validate else None

    def toolchain_identity(self) -> str:
        ptxas = self.ptxas
        version = ptx_version(self.arch)
        return f"ptx {version} ptxas {_ptxas_version(ptxas)}" if ptxas else f"ptx {version}"

    def compile(self, source: str) -> bytes:
        ptxas = self.ptxas
        if ptxas is not None:
            self.assemble(source, ptxas)
        return source.encode()

    def assemble(self, source: str, ptxas: str | None = None) -> bytes:
        """A cubin of `source` made by ptxas (ToolchainNotFoundError without ptxas)."""
        ptxas = ptxas or find_ptxas()
        if ptxas is None:
            raise ToolchainNotFoundError("assembling PTX needs ptxas from the CUDA toolkit; install it or set PTXAS")
        with tempfile.TemporaryDirectory(prefix="kiln-ptx-") as directory:
            source_path, output_path = os.path.join(directory, "kernel.ptx"), os.path.join(directory, "kernel.cubin")
            with open(source_path, "w", encoding="utf-8") as file:
                file.write(source)
            completed = subprocess.run(
                [ptxas, f"-arch={self.arch}", "-o", output_path, source_path],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if completed.returncode != 0:
                log = (completed.stderr + completed.stdout).strip()
                raise PTXAssemblerError(f"ptxas -arch={self.arch} rejected the PTX:\n{log}")
            with open(output_path, "rb") as file:
                return file.read()

    def disassemble(self, binary: bytes) -> str:
        """The binary is the PTX text itself."""
        return binary.decode()

    def __repr__(self) -> str:
        return f"PTXCompiler(arch={self.arch!r})"


# ---- the renderer -------------------------------------------------------------------------------------------------


class PTXRenderer(TargetRenderer[PTXCompiler], target=NVIDIA):
    """PTX kernels for one architecture (`arch`, e.g. "sm_80"); its compiler validates them with ptxas."""

    vector_widths = (2, 4)
    native_ops = GroupOp.ALU - {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW}

    def __init__(self, arch: str = "sm_80", device: str = "CUDA") -> None:
        self.use_target(nvidia_target(arch))
        self.arch = self.target.architecture
        self.device = device

    def make_compiler(self) -> PTXCompiler:
        """ptxas validation for this architecture."""
        return PTXCompiler(self.arch)

    def render(self, uops: list[UOp], name: str) -> str:
        """The PTX module of kernel `name` (entry ENTRY_NAME, the name in the first comment) from `uops`."""
        w = PTXWriter(self)
        for uop in uops:
            self._render_uop(w, uop)
        registers = [f"\t.reg .{kind} {_REGISTER_PREFIX[kind]}<{count}>;" for kind, count in sorted(w.counts.items())]
        header = [
            f"// kiln {type(self).__name__} kernel {name}",
            f".version {ptx_version(self.arch)}",
            f".target {self.arch}",
            ".address_size 64",
            "",
            f".visible .entry {ENTRY_NAME}(",
            ",\n".join(f"\t{parameter}" for parameter in w.parameters),
            f")\n.maxntid {local_size(uops)}, 1, 1",
            "{",
        ]
        return "\n".join([*header, *registers, *w.declarations, *w.lines, "\tret;", "}"]) + "\n"

    def _render_uop(self, w: PTXWriter, uop: UOp) -> None:
        op = uop.op
        if op is Ops.DEFINE_GLOBAL:
            parameter, raw, pointer = f"data{uop.arg}", w.register("b64"), w.register("b64")
            w.parameters.append(f".param .u64 {parameter}")
            w.emit(f"ld.param.u64 {raw}, [{parameter}];", f"cvta.to.global.u64 {pointer}, {raw};")
            w.values[uop] = [pointer]
        elif op is Ops.DEFINE_VAR:
            kind, typed, _ = _types(uop.dtype)
            name, register = variable_name(uop.arg.name), w.register(kind)
            w.parameters.append(f".param .{typed} {name}")
            w.emit(f"ld.param.{typed} {register}, [{name}];")
            w.values[uop] = [register]
        elif op in (Ops.DEFINE_LOCAL, Ops.DEFINE_REG):
            assert isinstance(uop.dtype, PtrDType)
            space = _STATE_SPACE[uop.dtype.scope]
            name = f"{'smem' if space == 'shared' else 'acc'}{len(w.declarations)}"
            size = max(1, uop.dtype.size) * uop.dtype.base.scalar().itemsize
            w.declarations.append(f"\t.{space} .align 16 .b8 {name}[{size}];")
            register = w.register("b64")
            w.emit(f"mov.u64 {register}, {name};")
            w.values[uop] = [register]
        elif op is Ops.SPECIAL:
            self._special(w, uop)
        elif op is Ops.CONST:
            w.values[uop] = [w.constant(uop.arg, uop.dtype)]
        elif op is Ops.AFTER:
            w.values[uop] = w.values[uop.src[0]]
        elif op is Ops.INDEX:
            w.values[uop] = _index(w, uop)
        elif op is Ops.LOAD:
            w.values[uop] = _load(w, uop)
        elif op is Ops.STORE:
            _store(w, uop)
        elif op is Ops.RANGE:
            self._range(w, uop)
        elif op is Ops.END:
            counter, (start, end) = w.scalar(uop.src[0]), w.loop_labels[uop.src[0]]
            w.emit(f"add.{_types(uop.src[0].dtype)[1]} {counter}, {counter}, 1;", f"bra {start};")
            w.lines.append(f"{end}:")
        elif op is Ops.IF:
            end = w.label("endif")
            w.emit(f"@!{w.scalar(uop.src[0])} bra {end};")
            w.loop_labels[uop] = (end, end)
        elif op is Ops.ENDIF:
            w.lines.append(f"{w.loop_labels[uop.src[0]][1]}:")
        elif op is Ops.BARRIER:
            w.emit("bar.sync 0;")
        elif op in GroupOp.ALU:
            w.values[uop] = [_alu(w, uop)]
        elif op is Ops.CAST:
            w.values[uop] = [_cast(w, uop)]
        elif op is Ops.BITCAST:
            w.values[uop] = [_bitcast(w, uop)]
        elif op is Ops.VECTORIZE:
            w.values[uop] = [w.scalar(s) for s in uop.src]
        elif op is Ops.GEP:
            w.values[uop] = [w.values[uop.src[0]][lane] for lane in uop.arg]
        elif op is Ops.WMMA:
            w.values[uop] = _wmma(w, uop, self.tensor_core_of(uop))
        else:
            raise ValueError(f"{type(self).__name__} cannot render {op!r} of dtype {uop.dtype!r}")

    def _special(self, w: PTXWriter, uop: UOp) -> None:
        name = uop.arg.name
        if name[:4] not in _SPECIAL_REGISTERS or name[4:] not in ("0", "1", "2"):
            raise ValueError(f"PTXRenderer has no hardware index {name!r}; expected gidx0..2 or lidx0..2")
        hardware = f"{_SPECIAL_REGISTERS[name[:4]]}.{'xyz'[int(name[4])]}"
        index = w.register("b32")
        w.emit(f"mov.u32 {index}, {hardware};")
        if _types(uop.dtype)[0] == "b64":
            wide = w.register("b64")
            w.emit(f"cvt.u64.u32 {wide}, {index};")
            index = wide
        w.values[uop] = [index]

    def _range(self, w: PTXWriter, uop: UOp) -> None:
        kind, typed, _ = _types(uop.dtype)
        counter, done = w.register(kind), w.register("pred")
        start, end = w.label("loop"), w.label("end")
        w.emit(f"mov.{kind} {counter}, 0;")
        w.lines.append(f"{start}:")
        w.emit(f"setp.ge.{typed} {done}, {counter}, {w.scalar(uop.src[0])};", f"@{done} bra {end};")
        w.values[uop] = [counter]
        w.loop_labels[uop] = (start, end)

    def tensor_core_of(self, uop: UOp) -> TensorCore:
        """The tensor core a WMMA uop runs on (its `WmmaArg` names one of `tensor_cores`, with the same layouts)."""
        for core in self.tensor_cores:
            if isinstance(uop.arg, WmmaArg) and uop.arg == core.wmma_arg():
                return core
        raise ValueError(f"{self!r} ({self.arch}) has no tensor core {uop.arg!r}; it has {self.tensor_cores}")
