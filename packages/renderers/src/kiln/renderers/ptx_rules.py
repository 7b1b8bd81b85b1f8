"""The PTX renderer's rules: one uop -> the instructions computing it, as a pattern table (`pm_ptx`).

Each rule takes the `PTXWriter` (ctx) and its uop, emits the instructions, and returns the uop's registers (one per
vector lane; `[]` for an effect). Every value lives in typed virtual registers (ptxas allocates the real ones): bool
in predicates, 8/16/32-bit integers in 32-bit registers (8- and 16-bit values kept sign- or zero-extended,
re-normalized after each op so they wrap like the IR says), 64-bit integers and pointers in 64-bit registers,
float32/float64 in float registers. Facts about instructions are from NVIDIA's PTX ISA reference (cited per section).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from kiln.codegen import KernelSignature, Renderer, TensorCore
from kiln.renderers.c_style import variable_name
from kiln.renderers.source_writer import root_buffer
from kiln.renderers.target import tensor_core_of
from kiln.uops import DType, GroupOp, MemoryScope, Ops, PatternMatcher, PtrDType, UOp, UPat, dtypes

__all__ = ["REGISTER_PREFIX", "PTXWriter", "float_literal", "parameter_declarations", "pm_ptx"]

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
REGISTER_PREFIX = {"pred": "%p", "b16": "%h", "b32": "%r", "b64": "%rd", "f32": "%f", "f64": "%fd"}
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


def parameter_declarations(signature: KernelSignature) -> list[str]:
    """The kernel's .param declarations in the signature's order: a u64 address per buffer, then each variable."""
    declarations = [f".param .u64 data{buffer.slot}" for buffer in signature.buffers]
    for variable in signature.variables:
        declarations.append(f".param .{_types(variable.dtype)[1]} {variable_name(variable.name)}")
    return declarations


def float_literal(value: float, dtype: DType) -> str:
    """PTX's exact hexadecimal float immediate: 0f<8 hex digits> (f32) or 0d<16 hex digits> (f64)."""
    if dtype == dtypes.float64:
        return "0d" + struct.pack(">d", value).hex().upper()
    return "0f" + struct.pack(">f", value).hex().upper()


class PTXWriter:
    """The state of rendering one kernel: registers of each uop (one per vector lane), lines, declarations."""

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer
        self.values: dict[UOp, list[str]] = {}
        self.lines: list[str] = []
        self.declarations: list[str] = []
        self.counts: dict[str, int] = {}
        self.labels = 0
        self.loop_labels: dict[UOp, tuple[str, str]] = {}

    def register(self, kind: str) -> str:
        """A fresh virtual register of `kind` (pred, b16, b32, b64, f32, f64)."""
        number = self.counts.get(kind, 0)
        self.counts[kind] = number + 1
        return f"{REGISTER_PREFIX[kind]}{number}"

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


# ---- the rules: one op each -------------------------------------------------------------------------------------


def _space(pointer: UOp) -> str:
    root = root_buffer(pointer)
    assert isinstance(root.dtype, PtrDType)
    return _STATE_SPACE[root.dtype.scope]


def _index(ctx: PTXWriter, uop: UOp) -> list[str]:
    assert isinstance(uop.dtype, PtrDType)
    base, offset = ctx.scalar(uop.src[0]), ctx.scalar(uop.src[1])
    itemsize = uop.dtype.base.scalar().itemsize
    scaled, address = ctx.register("b64"), ctx.register("b64")
    if uop.src[1].dtype.itemsize == 8:
        ctx.emit(f"mul.lo.s64 {scaled}, {offset}, {itemsize};")
    else:
        ctx.emit(f"mul.wide.s32 {scaled}, {offset}, {itemsize};")
    ctx.emit(f"add.s64 {address}, {base}, {scaled};")
    return [address]


def _access_chunks(dtype: DType, registers: list[str]) -> Iterator[tuple[str, str, str]]:
    """Each ld/st a vector access of `dtype` through `registers` (one per lane) needs: .v2/.v4 of at most 16 bytes
    (PTX ISA "ld"), a bool lane by lane. Yields (address offset "+bytes" or "", ".vN" or "", the operand: one register
    or "{r0, r1, ...}")."""
    count, itemsize = dtype.count, dtype.scalar().itemsize
    lanes = 1 if dtype.scalar() == dtypes.bool else max(1, min(count, 16 // itemsize))
    for first in range(0, count, lanes):
        offset = f"+{first * itemsize}" if first else ""
        if lanes == 1:
            yield offset, "", registers[first]
        else:
            yield offset, f".v{lanes}", "{" + ", ".join(registers[first : first + lanes]) + "}"


def _load(ctx: PTXWriter, uop: UOp) -> list[str]:
    kind, _, memory = _types(uop.dtype)
    space, address = _space(uop.src[0]), ctx.scalar(uop.src[0])
    registers = [ctx.register(kind) for _ in range(uop.dtype.count)]
    guard = ""
    if len(uop.src) == 3:
        alternative, gate = ctx.values[uop.src[1]], ctx.scalar(uop.src[2])
        for register, value in zip(registers, alternative):
            ctx.emit(f"mov.{'pred' if kind == 'pred' else kind} {register}, {value};")
        guard = f"@{gate} "
    for offset, vector, destination in _access_chunks(uop.dtype, registers):
        if kind == "pred":
            raw = ctx.register("b32")
            ctx.emit(
                f"{guard}ld.{space}.u8 {raw}, [{address}{offset}];", f"{guard}setp.ne.u32 {destination}, {raw}, 0;"
            )
        else:
            ctx.emit(f"{guard}ld.{space}{vector}.{memory} {destination}, [{address}{offset}];")
    return registers


def _store(ctx: PTXWriter, uop: UOp) -> list[str]:
    value_dtype = uop.src[1].dtype
    kind, _, memory = _types(value_dtype)
    space, address, values = _space(uop.src[0]), ctx.scalar(uop.src[0]), ctx.values[uop.src[1]]
    for offset, vector, source in _access_chunks(value_dtype, values):
        if kind == "pred":
            raw = ctx.register("b32")
            ctx.emit(f"selp.u32 {raw}, 1, 0, {source};", f"st.{space}.u8 [{address}{offset}], {raw};")
        else:
            ctx.emit(f"st.{space}{vector}.{memory} [{address}{offset}], {source};")
    return []


def _alu(ctx: PTXWriter, uop: UOp) -> str:
    op, operands = uop.op, [ctx.scalar(s) for s in uop.src]
    operand_dtype = uop.src[-1].dtype
    kind, typed, _ = _types(operand_dtype)
    result_kind, _, _ = _types(uop.dtype)
    result = ctx.register(result_kind)
    if op is Ops.WHERE:
        condition, a, b = operands
        if kind == "pred":
            chosen, other, inverse = ctx.register("pred"), ctx.register("pred"), ctx.register("pred")
            ctx.emit(f"and.pred {chosen}, {condition}, {a};", f"not.pred {inverse}, {condition};")
            ctx.emit(f"and.pred {other}, {inverse}, {b};", f"or.pred {result}, {chosen}, {other};")
        else:
            ctx.emit(f"selp.{kind} {result}, {a}, {b}, {condition};")
        return result
    if kind == "pred":
        return _predicate_alu(ctx, op, operands, result)
    if op in GroupOp.Comparison:
        if dtypes.is_float(operand_dtype):
            comparison = "neu" if op is Ops.CMPNE else _COMPARE[op]  # NaN != x is true (unordered)
        else:
            comparison = _COMPARE[op]
        ctx.emit(f"setp.{comparison}.{typed} {result}, {operands[0]}, {operands[1]};")
        return result
    if dtypes.is_float(operand_dtype):
        if op is Ops.MULACC:  # rounded once (PTX ISA: fma.rn.{f32,f64} is IEEE 754 fusedMultiplyAdd)
            ctx.emit(f"fma.rn.{typed} {result}, {operands[0]}, {operands[1]}, {operands[2]};")
        elif op in _FLOAT_BINARY:
            ctx.emit(f"{_FLOAT_BINARY[op]}.{typed} {result}, {operands[0]}, {operands[1]};")
        elif op is Ops.MAX:
            _float_max(ctx, operands, typed, result)
        elif op is Ops.TRUNC:
            ctx.emit(f"cvt.rzi.{typed}.{typed} {result}, {operands[0]};")
        elif op in _FLOAT_UNARY:
            ctx.emit(f"{_FLOAT_UNARY[op]}.{typed} {result}, {operands[0]};")
        else:
            raise ValueError(f"PTXRenderer has no native {op!r} for {operand_dtype!r}; codegen should decompose it")
        return result
    _int_alu(ctx, uop, operands, kind, typed, result)
    ctx.normalize(result, uop.dtype)
    return result


def _float_max(ctx: PTXWriter, operands: list[str], typed: str, result: str) -> None:
    """exec_alu's MAX: a NaN operand is ignored (both NaN: NaN) and -0 < +0, whatever `max` does with ties.

    `max.f32/.f64` returns the other operand when one is NaN (PTX ISA, "Floating Point Instructions: max"); the
    order it gives +0 and -0 is not something older ISA versions promise, so a tie (operands that compare equal,
    hence equal bits or +0 / -0) takes the bitwise AND of the operands instead, which is +0 for +0 / -0.
    """
    a, b = operands
    bits = typed.replace("f", "b")
    larger, tie = ctx.register(typed), ctx.register("pred")
    a_bits, b_bits, both = ctx.register(bits), ctx.register(bits), ctx.register(typed)
    ctx.emit(f"max.{typed} {larger}, {a}, {b};", f"setp.eq.{typed} {tie}, {a}, {b};")
    ctx.emit(f"mov.{bits} {a_bits}, {a};", f"mov.{bits} {b_bits}, {b};", f"and.{bits} {a_bits}, {a_bits}, {b_bits};")
    ctx.emit(f"mov.{bits} {both}, {a_bits};", f"selp.{typed} {result}, {both}, {larger}, {tie};")


def _predicate_alu(ctx: PTXWriter, op: Ops, operands: list[str], result: str) -> str:
    if op in _PREDICATE_BINARY:
        ctx.emit(f"{_PREDICATE_BINARY[op]}.pred {result}, {operands[0]}, {operands[1]};")
    elif op is Ops.CMPEQ:
        different = ctx.register("pred")
        ctx.emit(f"xor.pred {different}, {operands[0]}, {operands[1]};", f"not.pred {result}, {different};")
    elif op is Ops.CMPLT:  # false < true only
        inverse = ctx.register("pred")
        ctx.emit(f"not.pred {inverse}, {operands[0]};", f"and.pred {result}, {inverse}, {operands[1]};")
    elif op is Ops.NEG:
        ctx.emit(f"not.pred {result}, {operands[0]};")
    elif op is Ops.TRUNC:
        ctx.emit(f"mov.pred {result}, {operands[0]};")
    else:
        raise ValueError(f"{op!r} is not defined on bool")
    return result


def _int_alu(ctx: PTXWriter, uop: UOp, operands: list[str], kind: str, typed: str, result: str) -> None:
    op, bits = uop.op, 64 if kind == "b64" else 32
    if op in _INT_BINARY:
        ctx.emit(f"{_INT_BINARY[op]}.{typed} {result}, {operands[0]}, {operands[1]};")
    elif op is Ops.MULACC:  # integers wrap: a multiply then an add
        product = ctx.register(kind)
        ctx.emit(f"mul.lo.{typed} {product}, {operands[0]}, {operands[1]};")
        ctx.emit(f"add.{typed} {result}, {product}, {operands[2]};")
    elif op in _BITWISE:
        ctx.emit(f"{_BITWISE[op]}.b{bits} {result}, {operands[0]}, {operands[1]};")
    elif op is Ops.NEG:
        ctx.emit(f"neg.s{bits} {result}, {operands[0]};")
    elif op is Ops.TRUNC:
        ctx.emit(f"mov.b{bits} {result}, {operands[0]};")
    elif op in (Ops.SHL, Ops.SHR):
        # shift counts are .u32 and clamped to the register width (PTX ISA "shl"/"shr"): a count outside [0, bits)
        # shifts everything out (0, or the sign for an arithmetic right shift), as the IR says
        count = operands[1]
        if bits == 64:
            clamped, count = ctx.register("b64"), ctx.register("b32")
            ctx.emit(f"min.u64 {clamped}, {operands[1]}, 64;", f"cvt.u32.u64 {count}, {clamped};")
        instruction = f"shl.b{bits}" if op is Ops.SHL else f"shr.{typed}"
        ctx.emit(f"{instruction} {result}, {operands[0]}, {count};")
    elif op in (Ops.IDIV, Ops.MOD):
        # PTX leaves x/0 unspecified; the IR's compiled form gives 0 (like the C renderers)
        zero, divisor, quotient = ctx.register("pred"), ctx.register(kind), ctx.register(kind)
        ctx.emit(f"setp.eq.{typed} {zero}, {operands[1]}, 0;", f"selp.b{bits} {divisor}, 1, {operands[1]}, {zero};")
        ctx.emit(f"{'div' if op is Ops.IDIV else 'rem'}.{typed} {quotient}, {operands[0]}, {divisor};")
        ctx.emit(f"selp.b{bits} {result}, 0, {quotient}, {zero};")
    elif op is Ops.THREEFRY:
        _threefry(ctx, operands[0], operands[1], result)
    else:
        raise ValueError(f"{op!r} is not defined on integer dtype {uop.src[-1].dtype!r}")


def _threefry(ctx: PTXWriter, counter: str, key: str, result: str) -> None:
    """Threefry-2x32, 20 rounds (Salmon et al., SC'11; rotation constants and 0x1BD11BDA from Random123)."""
    k = [ctx.register("b32") for _ in range(3)]
    x = [ctx.register("b32") for _ in range(2)]
    high, low = ctx.register("b32"), ctx.register("b32")
    ctx.emit(f"mov.b64 {{{k[0]}, {k[1]}}}, {key};", f"xor.b32 {k[2]}, {k[0]}, {k[1]};")
    ctx.emit(f"xor.b32 {k[2]}, {k[2]}, 466688986;", f"mov.b64 {{{low}, {high}}}, {counter};")
    ctx.emit(f"add.u32 {x[0]}, {low}, {k[0]};", f"add.u32 {x[1]}, {high}, {k[1]};")
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    left, right = ctx.register("b32"), ctx.register("b32")
    for group in range(5):
        for rotation in rotations[group % 2]:
            ctx.emit(f"add.u32 {x[0]}, {x[0]}, {x[1]};", f"shl.b32 {left}, {x[1]}, {rotation};")
            ctx.emit(f"shr.u32 {right}, {x[1]}, {32 - rotation};", f"or.b32 {x[1]}, {left}, {right};")
            ctx.emit(f"xor.b32 {x[1]}, {x[1]}, {x[0]};")
        ctx.emit(f"add.u32 {x[0]}, {x[0]}, {k[(group + 1) % 3]};", f"add.u32 {x[1]}, {x[1]}, {k[(group + 2) % 3]};")
        ctx.emit(f"add.u32 {x[1]}, {x[1]}, {group + 1};")
    ctx.emit(f"mov.b64 {result}, {{{x[0]}, {x[1]}}};")


def _cast(ctx: PTXWriter, uop: UOp) -> str:
    source, target, value = uop.src[0].dtype, uop.dtype, ctx.scalar(uop.src[0])
    source_kind, source_type, _ = _types(source)
    target_kind, target_type, _ = _types(target)
    result = ctx.register(target_kind)
    if target == dtypes.bool:
        comparison = "neu" if dtypes.is_float(source) else "ne"
        if source_kind == "pred":
            ctx.emit(f"mov.pred {result}, {value};")
        else:
            ctx.emit(f"setp.{comparison}.{source_type} {result}, {value}, {_zero(source)};")
    elif source == dtypes.bool:
        ctx.emit(f"selp.{target_type} {result}, {_one(target)}, {_zero(target)}, {value};")
    elif dtypes.is_float(source) and dtypes.is_float(target):
        rounding = ".rn" if target.itemsize < source.itemsize else ""
        ctx.emit(f"cvt{rounding}.{target_type}.{source_type} {result}, {value};")
    elif dtypes.is_float(target):
        ctx.emit(f"cvt.rn.{target_type}.{source_type} {result}, {value};")
    elif dtypes.is_float(source):
        wide = _float_to_int64(ctx, value, source, target)
        ctx.emit(f"cvt.{target_type}.s64 {result}, {wide};" if target_kind == "b32" else f"mov.b64 {result}, {wide};")
        ctx.normalize(result, target)
    else:
        if source_kind == target_kind:
            ctx.emit(f"mov.{target_kind} {result}, {value};")
        else:
            ctx.emit(f"cvt.{target_type}.{source_type} {result}, {value};")
        ctx.normalize(result, target)
    return result


def _zero(dtype: DType) -> str:
    return float_literal(0.0, dtype) if dtypes.is_float(dtype) else "0"


def _one(dtype: DType) -> str:
    return float_literal(1.0, dtype) if dtypes.is_float(dtype) else "1"


def _float_to_int64(ctx: PTXWriter, value: str, source: DType, target: DType) -> str:
    """The IR's float -> int: truncate, wrap modulo 2**64, NaN/inf -> the target's minimum (cvt would saturate)."""
    x = value
    if source != dtypes.float64:
        x = ctx.register("f64")
        ctx.emit(f"cvt.f64.{_types(source)[1]} {x}, {value};")
    truncated, magnitude = ctx.register("f64"), ctx.register("f64")
    small, finite, negative = ctx.register("pred"), ctx.register("pred"), ctx.register("pred")
    direct, bits, mantissa, exponent = (ctx.register("b64") for _ in range(4))
    shift, shifted, negated, result = ctx.register("b32"), ctx.register("b64"), ctx.register("b64"), ctx.register("b64")
    ctx.emit(f"cvt.rzi.f64.f64 {truncated}, {x};", f"abs.f64 {magnitude}, {truncated};")
    ctx.emit(f"setp.lt.f64 {small}, {magnitude}, {float_literal(2.0**63, dtypes.float64)};")
    ctx.emit(f"cvt.rzi.s64.f64 {direct}, {truncated};", f"mov.b64 {bits}, {truncated};")
    # |x| >= 2**63: x = mantissa * 2**(exponent - 1075) with a shift >= 11, so x mod 2**64 is the shifted mantissa
    ctx.emit(f"and.b64 {mantissa}, {bits}, 4503599627370495;", f"or.b64 {mantissa}, {mantissa}, 4503599627370496;")
    ctx.emit(f"shr.u64 {exponent}, {bits}, 52;", f"and.b64 {exponent}, {exponent}, 2047;")
    ctx.emit(f"cvt.u32.u64 {shift}, {exponent};", f"sub.s32 {shift}, {shift}, 1075;")
    ctx.emit(f"max.s32 {shift}, {shift}, 0;", f"shl.b64 {shifted}, {mantissa}, {shift};")
    ctx.emit(f"setp.lt.s64 {negative}, {bits}, 0;", f"neg.s64 {negated}, {shifted};")
    ctx.emit(
        f"selp.b64 {shifted}, {negated}, {shifted}, {negative};", f"selp.b64 {result}, {direct}, {shifted}, {small};"
    )
    minimum = int(dtypes.min(target)) & ((1 << 64) - 1)
    ctx.emit(f"testp.finite.f64 {finite}, {x};", f"selp.b64 {result}, {result}, {minimum}, {finite};")
    return result


def _bitcast(ctx: PTXWriter, uop: UOp) -> str:
    source, target = uop.src[0].dtype, uop.dtype
    if source.itemsize != target.itemsize or dtypes.bool in (source.scalar(), target.scalar()):
        raise ValueError(f"BITCAST needs two non-bool dtypes of one size, got {source!r} -> {target!r}")
    target_kind = _types(target)[0]
    result = ctx.register(target_kind)
    bits = 64 if target.itemsize == 8 else 32
    ctx.emit(f"mov.b{bits} {result}, {ctx.scalar(uop.src[0])};")
    ctx.normalize(result, target)
    return result


def _wmma(ctx: PTXWriter, uop: UOp, core: TensorCore) -> list[str]:
    """mma.sync m16n8k16 row.col on float32-carried f16 or bf16 operands (PTX ISA "mma.m16n8k16" fragments)."""
    a, b, c = (ctx.values[s] for s in uop.src)
    pair = "bf16x2" if core.dtype_in == dtypes.bfloat16 else "f16x2"

    def pack(low: str, high: str) -> str:
        # exact: the float32 registers hold values of the input format; the first source goes to the upper half
        packed = ctx.register("b32")
        ctx.emit(f"cvt.rn.{pair}.f32 {packed}, {high}, {low};")
        return packed

    a_packed = [pack(a[2 * i], a[2 * i + 1]) for i in range(4)]
    b_packed = [pack(b[0], b[1]), pack(b[2], b[3])]
    a_list, b_list = "{" + ", ".join(a_packed) + "}", "{" + ", ".join(b_packed) + "}"
    if core.dtype_out == dtypes.float32:
        d = [ctx.register("f32") for _ in range(4)]
        inputs = "bf16.bf16" if core.dtype_in == dtypes.bfloat16 else "f16.f16"
        ctx.emit(
            f"mma.sync.aligned.m16n8k16.row.col.f32.{inputs}.f32 "
            f"{{{', '.join(d)}}}, {a_list}, {b_list}, {{{', '.join(c)}}};"
        )
        return d
    c_packed = [pack(c[0], c[1]), pack(c[2], c[3])]
    d_packed = [ctx.register("b32") for _ in range(2)]
    ctx.emit(
        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
        f"{{{', '.join(d_packed)}}}, {a_list}, {b_list}, {{{', '.join(c_packed)}}};"
    )
    result = []
    for packed in d_packed:
        halves = [ctx.register("b16"), ctx.register("b16")]
        ctx.emit(f"mov.b32 {{{halves[0]}, {halves[1]}}}, {packed};")
        for half in halves:
            lane = ctx.register("f32")
            ctx.emit(f"cvt.f32.f16 {lane}, {half};")
            result.append(lane)
    return result


# ---- definitions, hardware indices and control flow -------------------------------------------------------------


def _define_global(ctx: PTXWriter, uop: UOp) -> list[str]:
    # declared by parameter_declarations; loaded here
    parameter, raw, pointer = f"data{uop.arg}", ctx.register("b64"), ctx.register("b64")
    ctx.emit(f"ld.param.u64 {raw}, [{parameter}];", f"cvta.to.global.u64 {pointer}, {raw};")
    return [pointer]


def _define_variable(ctx: PTXWriter, uop: UOp) -> list[str]:
    kind, typed, _ = _types(uop.dtype)
    name, register = variable_name(uop.arg.name), ctx.register(kind)
    ctx.emit(f"ld.param.{typed} {register}, [{name}];")
    return [register]


def _define_memory(ctx: PTXWriter, uop: UOp) -> list[str]:
    assert isinstance(uop.dtype, PtrDType)
    space = _STATE_SPACE[uop.dtype.scope]
    name = f"{'smem' if space == 'shared' else 'acc'}{len(ctx.declarations)}"
    size = max(1, uop.dtype.size) * uop.dtype.base.scalar().itemsize
    ctx.declarations.append(f"\t.{space} .align 16 .b8 {name}[{size}];")
    register = ctx.register("b64")
    ctx.emit(f"mov.u64 {register}, {name};")
    return [register]


def _special(ctx: PTXWriter, uop: UOp) -> list[str]:
    name = uop.arg.name
    if name[:4] not in _SPECIAL_REGISTERS or name[4:] not in ("0", "1", "2"):
        raise ValueError(f"PTXRenderer has no hardware index {name!r}; expected gidx0..2 or lidx0..2")
    hardware = f"{_SPECIAL_REGISTERS[name[:4]]}.{'xyz'[int(name[4])]}"
    index = ctx.register("b32")
    ctx.emit(f"mov.u32 {index}, {hardware};")
    if _types(uop.dtype)[0] == "b64":
        wide = ctx.register("b64")
        ctx.emit(f"cvt.u64.u32 {wide}, {index};")
        index = wide
    return [index]


def _range(ctx: PTXWriter, uop: UOp) -> list[str]:
    kind, typed, _ = _types(uop.dtype)
    counter, done = ctx.register(kind), ctx.register("pred")
    start, end = ctx.label("loop"), ctx.label("end")
    ctx.emit(f"mov.{kind} {counter}, 0;")
    ctx.lines.append(f"{start}:")
    ctx.emit(f"setp.ge.{typed} {done}, {counter}, {ctx.scalar(uop.src[0])};", f"@{done} bra {end};")
    ctx.loop_labels[uop] = (start, end)
    return [counter]


def _end(ctx: PTXWriter, uop: UOp) -> list[str]:
    counter, (start, end) = ctx.scalar(uop.src[0]), ctx.loop_labels[uop.src[0]]
    ctx.emit(f"add.{_types(uop.src[0].dtype)[1]} {counter}, {counter}, 1;", f"bra {start};")
    ctx.lines.append(f"{end}:")
    return []


def _if(ctx: PTXWriter, uop: UOp) -> list[str]:
    end = ctx.label("endif")
    ctx.emit(f"@!{ctx.scalar(uop.src[0])} bra {end};")
    ctx.loop_labels[uop] = (end, end)
    return []


def _endif(ctx: PTXWriter, uop: UOp) -> list[str]:
    ctx.lines.append(f"{ctx.loop_labels[uop.src[0]][1]}:")
    return []


def _barrier(ctx: PTXWriter, uop: UOp) -> list[str]:
    ctx.emit("bar.sync 0;")
    return []


def _one_register(rule: Callable[[PTXWriter, UOp], str]) -> Callable[[PTXWriter, UOp], list[str]]:
    """A rule computing one register, as a pattern's rule (which returns the uop's registers)."""
    return lambda ctx, uop: [rule(ctx, uop)]


_RULES: dict[Ops | tuple[Ops, ...] | frozenset[Ops], Callable[[PTXWriter, UOp], list[str]]] = {
    Ops.DEFINE_GLOBAL: _define_global,
    Ops.DEFINE_VAR: _define_variable,
    (Ops.DEFINE_LOCAL, Ops.DEFINE_REG): _define_memory,
    Ops.SPECIAL: _special,
    Ops.CONST: lambda ctx, uop: [ctx.constant(uop.arg, uop.dtype)],
    Ops.AFTER: lambda ctx, uop: ctx.values[uop.src[0]],
    Ops.INDEX: _index,
    Ops.LOAD: _load,
    Ops.STORE: _store,
    Ops.RANGE: _range,
    Ops.END: _end,
    Ops.IF: _if,
    Ops.ENDIF: _endif,
    Ops.BARRIER: _barrier,
    GroupOp.ALU: _one_register(_alu),
    Ops.CAST: _one_register(_cast),
    Ops.BITCAST: _one_register(_bitcast),
    Ops.VECTORIZE: lambda ctx, uop: [ctx.scalar(s) for s in uop.src],
    Ops.GEP: lambda ctx, uop: [ctx.values[uop.src[0]][lane] for lane in uop.arg],
    Ops.WMMA: lambda ctx, uop: _wmma(ctx, uop, tensor_core_of(ctx.renderer, uop)),
}
"""The rule of each op (or group of ops): the uop's registers, its instructions emitted into the PTXWriter."""

pm_ptx = PatternMatcher([(UPat(ops, name="uop"), rule) for ops, rule in _RULES.items()])
"""uop -> its registers, the instructions computing them emitted into the PTXWriter (ctx)."""
