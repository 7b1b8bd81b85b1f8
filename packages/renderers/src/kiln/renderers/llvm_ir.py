"""The LLVM IR renderer for CPUs and its compiler: llvmlite, in process, no subprocess.

`LLVMRenderer.render` writes textual LLVM IR (opaque pointers, vector types for wide loads and stores) with one
rule per op in `pm_llvm_ir`; its compiler is `LLVMCompiler` (llvm_compiler.py: llvmlite, in process, to an object
file, loaded in process too).

Semantics are those of the C renderer (see c_style): integer ops wrap, shifts and divisions have no undefined
cases, float MAX is exec_alu's (NaN ignored, -0 < +0), float -> int truncates and wraps, no fast-math flags (so
no FMA contraction).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from kiln.codegen import Renderer
from kiln.renderers.c_style import ENTRY_NAME, variable_name
from kiln.renderers.float_emulation import emulate_floats
from kiln.renderers.llvm_compiler import LLVMCompiler
from kiln.renderers.llvm_ir_helpers import (
    INTRINSIC_SUFFIX,
    float_to_int_helper,
    llvm_constant,
    llvm_type,
    memory_type,
    threefry_helper,
)
from kiln.renderers.multiply_add import exact_narrow_multiply_adds
from kiln.uops import DType, GroupOp, MemoryScope, Ops, PatternMatcher, PtrDType, UOp, UPat, dtypes


class LLVMWriter:
    """The state of rendering one kernel: SSA names, body and entry-block lines, declarations, helpers."""

    def __init__(self) -> None:
        self.names: dict[UOp, str] = {}
        self.lines: list[str] = []
        self.entry: list[str] = []
        self.declarations: dict[str, str] = {}
        self.block_ids: dict[UOp, int] = {}
        self._counters: dict[str, int] = {}

    def __getitem__(self, uop: UOp) -> str:
        return self.names[uop]

    def typed(self, uop: UOp) -> str:
        """`T %name` of a rendered uop."""
        return f"{llvm_type(uop.dtype)} {self.names[uop]}"

    def next_id(self, kind: str) -> int:
        number = self._counters.get(kind, 0)
        self._counters[kind] = number + 1
        return number

    def declare(self, name: str, text: str) -> str:
        """Add a declaration or helper definition (once); returns `name`."""
        self.declarations.setdefault(name, text)
        return name

    def intrinsic(self, name: str, dtype: DType, arity: int = 1) -> str:
        """`@llvm.<name>.<suffix>` for float `dtype`, declared."""
        suffix, type_name = INTRINSIC_SUFFIX[dtype.scalar()], llvm_type(dtype)
        function = f"@llvm.{name}.{suffix}"
        return self.declare(function, f"declare {type_name} {function}({', '.join([type_name] * arity)})")

    def add(self, uop: UOp) -> None:
        """Render one uop of the linear program, in order."""
        if _is_alias(uop):
            self.names[uop] = self.names[uop.src[0]]
            return
        if uop.op is Ops.CONST:
            self.names[uop] = llvm_constant(uop.arg, uop.dtype)
            return
        self.names[uop] = _value_name(uop, self)
        text, _ = pm_llvm_ir.rewrite_with_rule(uop, self)
        if not isinstance(text, str):
            raise ValueError(f"the LLVM IR renderer cannot render {uop.op!r} of dtype {uop.dtype!r}")
        self.lines += text.splitlines()


def _value_name(uop: UOp, writer: LLVMWriter) -> str:
    if uop.op is Ops.DEFINE_GLOBAL:
        return f"%data{uop.arg}"
    if uop.op is Ops.DEFINE_VAR:
        return "%" + variable_name(uop.arg.name)
    if uop.op is Ops.SPECIAL:
        if uop.arg.name != "core_id":
            raise ValueError(f"the CPU has no hardware index {uop.arg.name!r}; only core_id (THREAD axes)")
        return "%core_id"
    if uop.op is Ops.RANGE:
        writer.block_ids[uop] = writer.next_id("loop")
        return f"%ridx{writer.block_ids[uop]}"
    if uop.op is Ops.IF:
        writer.block_ids[uop] = writer.next_id("if")
    return f"%v{writer.next_id('value')}"


def _is_alias(uop: UOp) -> bool:
    # uops that are their first source in LLVM: AFTER, integer TRUNC, casts between dtypes of one LLVM type
    if uop.op is Ops.AFTER:
        return True
    if uop.op is Ops.TRUNC and not dtypes.is_float(uop.dtype):
        return True
    if uop.op in (Ops.CAST, Ops.BITCAST):
        source, target = uop.src[0].dtype, uop.dtype
        return source != dtypes.bool and target != dtypes.bool and llvm_type(source) == llvm_type(target)
    return False


# ---- memory and control flow ----------------------------------------------------------------------------------


def _index(ctx: LLVMWriter, x: UOp) -> str:
    pointer = x.src[0].dtype
    assert isinstance(pointer, PtrDType)
    element = memory_type(pointer.base.scalar())
    return f"{ctx[x]} = getelementptr inbounds {element}, ptr {ctx[x.src[0]]}, {ctx.typed(x.src[1])}"


def _load(ctx: LLVMWriter, x: UOp) -> str:
    name, stored, align = ctx[x], memory_type(x.dtype), x.dtype.scalar().itemsize
    gated, is_bool = len(x.src) == 3, x.dtype.scalar() == dtypes.bool
    address, lines = ctx[x.src[0]], []
    if gated:
        # where the gate is off the load reads a private slot, so memory outside the buffer is never touched
        slot = f"%slot{ctx.next_id('slot')}"
        ctx.entry.append(f"{slot} = alloca {stored}, align {x.dtype.nbytes}")
        lines.append(f"{name}.address = select i1 {ctx[x.src[2]]}, ptr {address}, ptr {slot}")
        address = f"{name}.address"
    raw = f"{name}.raw" if gated or is_bool else name
    lines.append(f"{raw} = load {stored}, ptr {address}, align {align}")
    value = raw
    if is_bool:  # bools are bytes in memory
        value = f"{name}.value" if gated else name
        lines.append(f"{value} = icmp ne {stored} {raw}, zeroinitializer")
    if gated:
        lines.append(f"{name} = select i1 {ctx[x.src[2]]}, {llvm_type(x.dtype)} {value}, {ctx.typed(x.src[1])}")
    return "\n".join(lines)


def _store(ctx: LLVMWriter, x: UOp) -> str:
    value, dtype = x.src[1], x.src[1].dtype
    stored = memory_type(dtype)
    align = dtype.scalar().itemsize
    if dtype.scalar() == dtypes.bool:
        widened = f"{ctx[x]}.byte"
        return (
            f"{widened} = zext {ctx.typed(value)} to {stored}\n"
            f"store {stored} {widened}, ptr {ctx[x.src[0]]}, align {align}"
        )
    return f"store {stored} {ctx[value]}, ptr {ctx[x.src[0]]}, align {align}"


def _define_register(ctx: LLVMWriter, x: UOp) -> str:
    assert isinstance(x.dtype, PtrDType)
    if x.dtype.scope is not MemoryScope.REG:
        raise ValueError("the CPU has no block-shared memory (DEFINE_LOCAL)")
    element = memory_type(x.dtype.base)
    ctx.entry.append(f"{ctx[x]} = alloca [{x.dtype.size} x {element}], align {x.dtype.base.nbytes}")
    return ""


def _range(ctx: LLVMWriter, x: UOp) -> str:
    loop = ctx.block_ids[x]
    index_type = llvm_type(x.dtype)
    return (
        f"br label %loop_entry{loop}\n"
        f"loop_entry{loop}:\n"
        f"%loop_nonempty{loop} = icmp slt {index_type} 0, {ctx[x.src[0]]}\n"
        f"br i1 %loop_nonempty{loop}, label %loop_body{loop}, label %loop_exit{loop}\n"
        f"loop_body{loop}:\n"
        f"{ctx[x]} = phi {index_type} [0, %loop_entry{loop}], [{ctx[x]}.next, %loop_latch{loop}]"
    )


def _end(ctx: LLVMWriter, x: UOp) -> str:
    rng = x.src[0]
    loop, index_type = ctx.block_ids[rng], llvm_type(rng.dtype)
    return (
        f"br label %loop_latch{loop}\n"
        f"loop_latch{loop}:\n"
        f"{ctx[rng]}.next = add nuw nsw {index_type} {ctx[rng]}, 1\n"
        f"%loop_again{loop} = icmp slt {index_type} {ctx[rng]}.next, {ctx[rng.src[0]]}\n"
        f"br i1 %loop_again{loop}, label %loop_body{loop}, label %loop_exit{loop}\n"
        f"loop_exit{loop}:"
    )


def _if(ctx: LLVMWriter, x: UOp) -> str:
    block = ctx.block_ids[x]
    return f"br i1 {ctx[x.src[0]]}, label %if_then{block}, label %if_end{block}\nif_then{block}:"


def _endif(ctx: LLVMWriter, x: UOp) -> str:
    block = ctx.block_ids[x.src[0]]
    return f"br label %if_end{block}\nif_end{block}:"


def _vectorize(ctx: LLVMWriter, x: UOp) -> str:
    vector_type, previous = llvm_type(x.dtype), "poison"
    lines = []
    for lane, source in enumerate(x.src):
        target = ctx[x] if lane == len(x.src) - 1 else f"{ctx[x]}.{lane}"
        lines.append(f"{target} = insertelement {vector_type} {previous}, {ctx.typed(source)}, i32 {lane}")
        previous = target
    return "\n".join(lines)


def _gep(ctx: LLVMWriter, x: UOp) -> str:
    vector = ctx.typed(x.src[0])
    if len(x.arg) == 1:
        return f"{ctx[x]} = extractelement {vector}, i32 {x.arg[0]}"
    lanes = ", ".join(f"i32 {lane}" for lane in x.arg)
    source_type = llvm_type(x.src[0].dtype)
    return f"{ctx[x]} = shufflevector {vector}, {source_type} poison, <{len(x.arg)} x i32> <{lanes}>"


def _unsupported(what: str) -> Callable[[LLVMWriter, UOp], str]:
    def rule(ctx: LLVMWriter, x: UOp) -> str:
        raise ValueError(f"the LLVM IR renderer (CPU) has no {what}; got {x.op!r}")

    return rule


pm_llvm_ir = PatternMatcher(
    [
        (UPat((Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SPECIAL)), lambda ctx: ""),
        (UPat((Ops.DEFINE_REG, Ops.DEFINE_LOCAL), name="x"), _define_register),
        (UPat(Ops.RANGE, name="x"), _range),
        (UPat(Ops.END, name="x"), _end),
        (UPat(Ops.IF, name="x"), _if),
        (UPat(Ops.ENDIF, name="x"), _endif),
        (UPat(Ops.INDEX, name="x"), _index),
        (UPat(Ops.LOAD, name="x"), _load),
        (UPat(Ops.STORE, name="x"), _store),
        (UPat(GroupOp.ALU, name="x"), lambda ctx, x: _alu(ctx, x)),
        (UPat(Ops.CAST, name="x"), lambda ctx, x: _cast(ctx, x)),
        (UPat(Ops.BITCAST, name="x"), lambda ctx, x: _bitcast(ctx, x)),
        (UPat(Ops.VECTORIZE, name="x"), _vectorize),
        (UPat(Ops.GEP, name="x"), _gep),
        (UPat(Ops.BARRIER, name="x"), _unsupported("barrier (no threads sharing memory)")),
        (UPat(Ops.WMMA, name="x"), _unsupported("tensor cores")),
    ]
)
"""uop -> LLVM IR lines (ctx: the LLVMWriter; the uop's SSA name is already in ctx.names)."""


# ---- ALU ------------------------------------------------------------------------------------------------------

_FLOAT_INSTRUCTIONS = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.FDIV: "fdiv"}
_INT_INSTRUCTIONS = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}
_BOOL_INSTRUCTIONS = {
    Ops.ADD: "or",
    Ops.OR: "or",
    Ops.MAX: "or",
    Ops.MUL: "and",
    Ops.AND: "and",
    Ops.XOR: "xor",
    Ops.CMPNE: "xor",
}
_FLOAT_COMPARISONS = {Ops.CMPLT: "fcmp olt", Ops.CMPNE: "fcmp une", Ops.CMPEQ: "fcmp oeq"}


def _alu(ctx: LLVMWriter, x: UOp) -> str:
    name, op = ctx[x], x.op
    operands = [ctx[s] for s in x.src]
    kind = x.src[-1].dtype
    if kind.count > 1 or x.dtype.count > 1:
        raise ValueError(f"the LLVM IR renderer renders scalar ALU ops only, got {op!r} on {kind!r}")
    type_name = llvm_type(kind)
    if op is Ops.WHERE:
        return f"{name} = select i1 {operands[0]}, {type_name} {operands[1]}, {type_name} {operands[2]}"
    if dtypes.is_float(kind):
        return _float_alu(ctx, name, op, kind, operands)
    if kind == dtypes.bool:
        if op in _BOOL_INSTRUCTIONS:
            return f"{name} = {_BOOL_INSTRUCTIONS[op]} i1 {operands[0]}, {operands[1]}"
        if op is Ops.NEG:
            return f"{name} = xor i1 {operands[0]}, true"
        if op in (Ops.CMPLT, Ops.CMPEQ):
            return f"{name} = icmp {'ult' if op is Ops.CMPLT else 'eq'} i1 {operands[0]}, {operands[1]}"
        raise ValueError(f"{op!r} is not defined on bool")
    return _int_alu(ctx, x, kind, operands)


def _float_alu(ctx: LLVMWriter, name: str, op: Ops, dtype: DType, operands: list[str]) -> str:
    type_name = llvm_type(dtype)
    if op in _FLOAT_INSTRUCTIONS:
        return f"{name} = {_FLOAT_INSTRUCTIONS[op]} {type_name} {operands[0]}, {operands[1]}"
    if op in _FLOAT_COMPARISONS:
        return f"{name} = {_FLOAT_COMPARISONS[op]} {type_name} {operands[0]}, {operands[1]}"
    if op is Ops.NEG:
        return f"{name} = fneg {type_name} {operands[0]}"
    if op is Ops.RECIPROCAL:
        return f"{name} = fdiv {type_name} {llvm_constant(1.0, dtype)}, {operands[0]}"
    if op is Ops.MAX:
        # exec_alu's MAX: a NaN operand is ignored (both NaN: NaN) and -0 < +0. Equal operands have equal bits
        # except +0 / -0, whose bitwise AND is +0, so a tie gives the AND of the bits (llvm.maxnum leaves it open)
        a, b = operands
        bits = f"i{dtype.itemsize * 8}"
        return (
            f"{name}.greater = fcmp ogt {type_name} {a}, {b}\n"
            f"{name}.nan = fcmp uno {type_name} {b}, {b}\n"
            f"{name}.first = or i1 {name}.greater, {name}.nan\n"
            f"{name}.pick = select i1 {name}.first, {type_name} {a}, {type_name} {b}\n"
            f"{name}.tie = fcmp oeq {type_name} {a}, {b}\n"
            f"{name}.abits = bitcast {type_name} {a} to {bits}\n"
            f"{name}.bbits = bitcast {type_name} {b} to {bits}\n"
            f"{name}.andbits = and {bits} {name}.abits, {name}.bbits\n"
            f"{name}.and = bitcast {bits} {name}.andbits to {type_name}\n"
            f"{name} = select i1 {name}.tie, {type_name} {name}.and, {type_name} {name}.pick"
        )
    if op in (Ops.SQRT, Ops.TRUNC):
        function = ctx.intrinsic(op.name.lower(), dtype)
        return f"{name} = call {type_name} {function}({type_name} {operands[0]})"
    if op is Ops.MULACC and dtype.itemsize >= 4:  # narrower formats were rewritten by exact_narrow_multiply_adds
        function = ctx.intrinsic("fma", dtype, arity=3)
        arguments = ", ".join(f"{type_name} {operand}" for operand in operands)
        return f"{name} = call {type_name} {function}({arguments})"
    raise ValueError(f"the LLVM IR renderer has no native {op!r} for {dtype!r}; codegen should decompose it")


def _int_alu(ctx: LLVMWriter, x: UOp, dtype: DType, operands: list[str]) -> str:
    name, op = ctx[x], x.op
    type_name = llvm_type(dtype)
    signed = not dtypes.is_unsigned(dtype)
    bits = dtype.itemsize * 8
    a = operands[0]
    if op in _INT_INSTRUCTIONS:
        return f"{name} = {_INT_INSTRUCTIONS[op]} {type_name} {a}, {operands[1]}"
    if op is Ops.NEG:
        return f"{name} = sub {type_name} 0, {a}"
    if op is Ops.MULACC:
        product = f"{name}.product = mul {type_name} {a}, {operands[1]}"
        return f"{product}\n{name} = add {type_name} {name}.product, {operands[2]}"
    if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.MAX):
        predicate = {Ops.CMPLT: "slt" if signed else "ult", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}.get(op)
        if predicate is not None:
            return f"{name} = icmp {predicate} {type_name} {a}, {operands[1]}"
        return (
            f"{name}.greater = icmp {'sgt' if signed else 'ugt'} {type_name} {a}, {operands[1]}\n"
            f"{name} = select i1 {name}.greater, {type_name} {a}, {type_name} {operands[1]}"
        )
    b = operands[1]
    if op in (Ops.SHL, Ops.SHR):
        instruction = "shl" if op is Ops.SHL else "ashr" if signed else "lshr"
        count = x.src[1]
        if count.op is Ops.CONST and 0 <= count.arg < bits:
            return f"{name} = {instruction} {type_name} {a}, {b}"
        outside = f"{name}.sign" if op is Ops.SHR and signed else "0"
        lines = [
            f"{name}.inside = icmp ult {type_name} {b}, {bits}",
            f"{name}.shifted = {instruction} {type_name} {a}, {b}",
        ]
        if outside != "0":
            lines.append(f"{outside} = ashr {type_name} {a}, {bits - 1}")
        lines.append(f"{name} = select i1 {name}.inside, {type_name} {name}.shifted, {type_name} {outside}")
        return "\n".join(lines)
    if op in (Ops.IDIV, Ops.MOD):
        return _division(name, op, x.src[1], type_name, signed, a, b)
    if op is Ops.THREEFRY:
        ctx.declare("@llvm.fshl.i32", "declare i32 @llvm.fshl.i32(i32, i32, i32)")
        helper = ctx.declare("@kiln_threefry2x32", threefry_helper())
        return f"{name} = call i64 {helper}(i64 {a}, i64 {b})"
    raise ValueError(f"{op!r} is not defined on integer dtype {dtype!r}")


def _division(name: str, op: Ops, divisor: UOp, type_name: str, signed: bool, a: str, b: str) -> str:
    instruction = ("sdiv" if op is Ops.IDIV else "srem") if signed else ("udiv" if op is Ops.IDIV else "urem")
    if divisor.op is Ops.CONST and divisor.arg != 0 and not (signed and divisor.arg == -1):
        return f"{name} = {instruction} {type_name} {a}, {b}"
    # a zero divisor gives 0 and MIN / -1 wraps (both are undefined in LLVM and trap on x86)
    lines = [f"{name}.zero = icmp eq {type_name} {b}, 0"]
    unsafe = f"{name}.zero"
    if signed:
        lines += [f"{name}.minus = icmp eq {type_name} {b}, -1", f"{name}.unsafe = or i1 {name}.zero, {name}.minus"]
        unsafe = f"{name}.unsafe"
    lines += [
        f"{name}.divisor = select i1 {unsafe}, {type_name} 1, {type_name} {b}",
        f"{name}.raw = {instruction} {type_name} {a}, {name}.divisor",
    ]
    result = f"{name}.raw"
    if signed:
        special = f"{name}.negated" if op is Ops.IDIV else "0"
        if op is Ops.IDIV:
            lines.append(f"{name}.negated = sub {type_name} 0, {a}")
        lines.append(f"{name}.signed = select i1 {name}.minus, {type_name} {special}, {type_name} {result}")
        result = f"{name}.signed"
    lines.append(f"{name} = select i1 {name}.zero, {type_name} 0, {type_name} {result}")
    return "\n".join(lines)


# ---- conversions ----------------------------------------------------------------------------------------------


def _cast(ctx: LLVMWriter, x: UOp) -> str:
    source, target = x.src[0].dtype, x.dtype
    if source.count > 1 or target.count > 1:
        raise ValueError(f"the LLVM IR renderer casts scalars only, got {source!r} -> {target!r}")
    name, value = ctx[x], ctx.typed(x.src[0])
    source_type, target_type = llvm_type(source), llvm_type(target)
    if target == dtypes.bool:
        if dtypes.is_float(source):
            return f"{name} = fcmp une {value}, {llvm_constant(0.0, source)}"
        return f"{name} = icmp ne {value}, 0"
    if source == dtypes.bool:
        return f"{name} = {'uitofp' if dtypes.is_float(target) else 'zext'} {value} to {target_type}"
    if dtypes.is_float(source) and dtypes.is_float(target):
        wider = target.itemsize > source.itemsize
        return f"{name} = {'fpext' if wider else 'fptrunc'} {value} to {target_type}"
    if dtypes.is_float(target):
        return f"{name} = {'uitofp' if dtypes.is_unsigned(source) else 'sitofp'} {value} to {target_type}"
    if dtypes.is_float(source):
        ctx.intrinsic("fabs", dtypes.float64)
        ctx.intrinsic("trunc", dtypes.float64)
        helper = ctx.declare(f"@kiln_to_{target.name}", float_to_int_helper(target))
        lines = []
        if source != dtypes.float64:
            lines.append(f"{name}.double = fpext {value} to double")
            value = f"double {name}.double"
        lines.append(f"{name} = call {target_type} {helper}({value})")
        return "\n".join(lines)
    if target.itemsize < source.itemsize:
        return f"{name} = trunc {value} to {target_type}"
    assert source_type != target_type, "casts within one LLVM type are aliases"
    return f"{name} = {'zext' if dtypes.is_unsigned(source) else 'sext'} {value} to {target_type}"


def _bitcast(ctx: LLVMWriter, x: UOp) -> str:
    source, target = x.src[0].dtype, x.dtype
    name, value = ctx[x], ctx.typed(x.src[0])
    if source.scalar() == dtypes.bool:
        return f"{name} = zext {value} to {llvm_type(target)}"
    if target.scalar() == dtypes.bool:
        return f"{name} = icmp ne {value}, zeroinitializer"
    return f"{name} = bitcast {value} to {llvm_type(target)}"


# ---- the renderer and its compiler -----------------------------------------------------------------------------


class LLVMRenderer(Renderer):
    """LLVM IR for the CPU device: the C renderer's capabilities, compiled in process by llvmlite (`LLVMCompiler`,
    created on first use; a missing llvmlite raises ToolchainNotFoundError then, naming the package to install).
    """

    device = "CPU"
    has_threads = True
    thread_max = os.cpu_count() or 1
    vector_widths = (2, 4, 8)
    native_dtypes = frozenset(dtypes.all) - {dtypes.bfloat16}
    native_ops = GroupOp.ALU - {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW}
    emulated: frozenset[DType] = frozenset({dtypes.fp8e4m3, dtypes.fp8e5m2})
    """Float formats LLVM lacks, emulated before rendering (float16 is LLVM's `half`)."""

    def __init__(self) -> None:
        self._compiler: LLVMCompiler | None = None

    @property
    def compiler(self) -> LLVMCompiler:
        """The llvmlite compiler, created on first use."""
        if self._compiler is None:
            self._compiler = LLVMCompiler()
        return self._compiler

    @compiler.setter
    def compiler(self, compiler: LLVMCompiler) -> None:
        self._compiler = compiler

    def render(self, uops: list[UOp]) -> str:
        """One LLVM IR function named ENTRY_NAME computing `uops` (calling convention: host_kernel)."""
        uops = emulate_floats(exact_narrow_multiply_adds(uops), self.emulated)
        writer = LLVMWriter()
        for uop in uops:
            writer.add(uop)
        stored = {_root(u.src[0]) for u in uops if u.op is Ops.STORE}
        parameters = []
        for buffer in sorted((u for u in uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg):
            access = "noalias" if buffer in stored else "noalias readonly"
            parameters.append(f"ptr {access} {writer[buffer]}")
        for variable in sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg.name):
            parameters.append(writer.typed(variable))
        if any(u.op is Ops.SPECIAL and u.arg.name == "core_id" for u in uops):
            parameters.append("i32 %core_id")
        body = [line if line.endswith(":") else "  " + line for line in (*writer.entry, *writer.lines)]
        return "\n".join(
            [
                f"; kiln {type(self).__name__} kernel",
                f"define void @{ENTRY_NAME}({', '.join(parameters)}) nounwind {{",
                "entry:",
                *body,
                "  ret void",
                "}",
                *writer.declarations.values(),
                "",
            ]
        )


def _root(pointer: UOp) -> UOp:
    while pointer.op in (Ops.INDEX, Ops.AFTER):
        pointer = pointer.src[0]
    return pointer
