"""The LLVM IR renderer for CPUs and its compiler: llvmlite, in process, no subprocess.

`LLVMRenderer.render` writes textual LLVM IR (opaque pointers, vector types for wide loads and stores) with one
rule per op in `pm_llvm_ir`; its compiler is `LLVMCompiler` (llvm_compiler.py: llvmlite, in process, to an object
file, loaded in process too).

Semantics are those of the C renderer (see c_style): integer ops wrap, shifts and divisions have no undefined
cases, float MAX is exec_alu's (NaN ignored, -0 < +0), float -> int truncates and wraps, no fast-math flags (so
LLVM contracts nothing itself; MULACC is `llvm.fma`, rounded once, and codegen's lowering creates it for sums of
products since `fuse_multiply_add` is set).

ALU ops may be vectors (`vector_alu`): LLVM's instructions work lane-wise on `<n x T>`, so most rules are the
scalar ones on vector types; float -> int casts and THREEFRY have scalar helpers only and run lane by lane.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.codegen import CORE_ID, Access, KernelSignature
from kiln.renderers.c_style import ENTRY_NAME, variable_name
from kiln.renderers.llvm_compiler import LLVMCompiler, host_has_vector_ldexp, host_register_tile_lanes
from kiln.renderers.llvm_ir_helpers import (
    INTRINSIC_SUFFIX,
    float_to_int_helper,
    llvm_constant,
    llvm_type,
    memory_type,
    threefry_helper,
)
from kiln.renderers.target import CPU, WITHOUT_MATH_LIBRARY, TargetRenderer
from kiln.uops import (
    AxisKind,
    ConstType,
    DType,
    GroupOp,
    MemoryScope,
    Ops,
    PatternMatcher,
    PtrDType,
    RangeArg,
    UOp,
    UPat,
    dtypes,
)


class LLVMWriter:
    """The state of rendering one kernel: SSA names, body and entry-block lines, declarations, helpers."""

    def __init__(self, vector_ldexp: bool = False) -> None:
        self.vector_ldexp = vector_ldexp
        """Render codegen's two-factor power-of-two scaling as one `llvm.ldexp` (see `_power_of_two_scaling`)."""
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
        """`@llvm.<name>.<suffix>` for float `dtype` (scalar or vector, e.g. `v8f32`), declared."""
        suffix, type_name = INTRINSIC_SUFFIX[dtype.scalar()], llvm_type(dtype)
        if dtype.count > 1:
            suffix = f"v{dtype.count}{suffix}"
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
        if uop.op is Ops.VECTORIZE and all(source.op is Ops.CONST for source in uop.src):
            self.names[uop] = _constant_vector(uop)
            return
        self.names[uop] = _value_name(uop, self)
        if _is_lane_by_lane(uop):
            self.lines += _lane_by_lane(self, uop).splitlines()
            return
        self.lines += self.render_one(uop).splitlines()

    def render_one(self, uop: UOp) -> str:
        """The lines of one named uop, by its rule in `pm_llvm_ir`."""
        text, _ = pm_llvm_ir.rewrite_with_rule(uop, self)
        if not isinstance(text, str):
            raise ValueError(f"the LLVM IR renderer cannot render {uop.op!r} of dtype {uop.dtype!r}")
        return text


def _constant_vector(uop: UOp) -> str:
    scalar = llvm_type(uop.dtype.scalar())
    return "<" + ", ".join(f"{scalar} {llvm_constant(source.arg, source.dtype)}" for source in uop.src) + ">"


def splat(value: ConstType, dtype: DType) -> str:
    """The LLVM literal of `value` in every lane of `dtype` (a scalar literal for a scalar dtype)."""
    literal = llvm_constant(value, dtype)
    if dtype.count == 1:
        return literal
    scalar = llvm_type(dtype.scalar())
    return "<" + ", ".join([f"{scalar} {literal}"] * dtype.count) + ">"


def _is_lane_by_lane(uop: UOp) -> bool:
    # vector ops with no vector form here (float -> int through a scalar helper, threefry) run one lane at a time
    if uop.dtype.count == 1 or isinstance(uop.dtype, PtrDType):
        return False
    if uop.op is Ops.THREEFRY:
        return True
    return (
        uop.op is Ops.CAST
        and dtypes.is_float(uop.src[0].dtype)
        and not dtypes.is_float(uop.dtype)
        and (uop.dtype.scalar() != dtypes.bool)
    )


def _lane_by_lane(ctx: LLVMWriter, uop: UOp) -> str:
    lines: list[str] = []
    previous, vector_type = "poison", llvm_type(uop.dtype)
    # the per-lane uops get names only while they are rendered: hash-consing may make them equal to program uops
    saved = dict(ctx.names)
    for lane in range(uop.dtype.count):
        sources: list[UOp] = []
        for source in uop.src:
            picked = UOp(Ops.GEP, source.dtype.scalar(), (source,), (lane,))
            ctx.names[picked] = f"{ctx[uop]}.in{len(sources)}.{lane}"
            lines.append(_gep(ctx, picked))
            sources.append(picked)
        scalar = UOp(uop.op, uop.dtype.scalar(), tuple(sources), uop.arg)
        ctx.names[scalar] = f"{ctx[uop]}.lane{lane}"
        lines.append(ctx.render_one(scalar))
        target = ctx[uop] if lane == uop.dtype.count - 1 else f"{ctx[uop]}.partial{lane}"
        lines.append(f"{target} = insertelement {vector_type} {previous}, {ctx.typed(scalar)}, i32 {lane}")
        previous = target
    ctx.names = saved
    return "\n".join(lines)


def _value_name(uop: UOp, writer: LLVMWriter) -> str:
    if uop.op is Ops.DEFINE_GLOBAL:
        return f"%data{uop.arg}"
    if uop.op is Ops.DEFINE_VAR:
        return "%" + variable_name(uop.arg.name)
    if uop.op is Ops.SPECIAL:
        if uop.arg.name != CORE_ID:
            raise ValueError(f"the CPU has no hardware index {uop.arg.name!r}; only {CORE_ID} (THREAD axes)")
        if uop.dtype != dtypes.int32:
            raise ValueError(f"{CORE_ID} is the kernel's i32 parameter, got a SPECIAL of {uop.dtype!r}")
        return f"%{CORE_ID}"
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
        boolean = dtypes.bool in (source.scalar(), target.scalar())
        return not boolean and llvm_type(source) == llvm_type(target)
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
        ctx.entry.append(f"{slot} = alloca {stored}, align {x.dtype.scalar().itemsize}")
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
        f"br i1 %loop_again{loop}, label %loop_body{loop}, label %loop_exit{loop}{_loop_metadata(ctx, rng)}\n"
        f"loop_exit{loop}:"
    )


_NO_UNROLL = "!0"  # the metadata node naming LLVM's loop hint `llvm.loop.unroll.disable` (LangRef, "llvm.loop")


def _loop_metadata(ctx: LLVMWriter, rng: UOp) -> str:
    """The latch branch's `!llvm.loop` attachment: LLVM's unroller is kept off every loop but a reduction's.

    kiln's opts decide how far a kernel's output loops are unrolled (UPCAST and friends); LLVM unrolling those loops
    again only copied their bodies, which then went through instruction selection: on the quickstart's step, a
    third of compile time (build median 15.3-16.0 -> 11.3-14.4 ms) for no measurable speed on any tensor_bench row.
    A reduction loop keeps LLVM's unroller: its loop-carried accumulator is where unrolling pays (layer_norm ran 27%
    slower with every loop left rolled). Each loop needs its own distinct, self-referencing loop ID node."""
    kind = rng.arg.kind if isinstance(rng.arg, RangeArg) else AxisKind.LOOP
    if kind in (AxisKind.REDUCE, AxisKind.GROUP_REDUCE):
        return ""
    ctx.declare(_NO_UNROLL, f'{_NO_UNROLL} = !{{!"llvm.loop.unroll.disable"}}')
    node = f"!{ctx.block_ids[rng] + 1}"
    ctx.declare(node, f"{node} = distinct !{{{node}, {_NO_UNROLL}}}")
    return f", !llvm.loop {node}"


def _if(ctx: LLVMWriter, x: UOp) -> str:
    block = ctx.block_ids[x]
    return f"br i1 {ctx[x.src[0]]}, label %if_then{block}, label %if_end{block}\nif_then{block}:"


def _endif(ctx: LLVMWriter, x: UOp) -> str:
    block = ctx.block_ids[x.src[0]]
    return f"br label %if_end{block}\nif_end{block}:"


def _vectorize(ctx: LLVMWriter, x: UOp) -> str:
    vector_type, previous = llvm_type(x.dtype), "poison"
    first = x.src[0]
    if all(source is first for source in x.src):  # a broadcast: one insert and a splat shuffle
        one = f"<1 x {llvm_type(first.dtype)}>"
        return (
            f"{ctx[x]}.one = insertelement {one} poison, {ctx.typed(first)}, i32 0\n"
            f"{ctx[x]} = shufflevector {one} {ctx[x]}.one, {one} poison, <{x.dtype.count} x i32> zeroinitializer"
        )
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

_FLOAT_INSTRUCTIONS = {
    Ops.ADD: "fadd",
    Ops.SUB: "fsub",
    Ops.MUL: "fmul",
    Ops.FDIV: "fdiv",
    Ops.CMPLT: "fcmp olt",
    Ops.CMPNE: "fcmp une",
    Ops.CMPEQ: "fcmp oeq",
}
"""The float ops that are one LLVM instruction on two operands: arithmetic, and the ordered / unordered comparisons."""
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


def _condition_type(dtype: DType) -> str:
    """The LLVM type of a comparison of values of `dtype`: i1, or one i1 per lane."""
    return llvm_type(dtypes.bool.vec(dtype.count))


def _bits_type(dtype: DType) -> str:
    """The integer LLVM type of `dtype`'s bits, lane by lane."""
    bits = f"i{dtype.scalar().itemsize * 8}"
    return bits if dtype.count == 1 else f"<{dtype.count} x {bits}>"


def _vector_suffix(dtype: DType, scalar: str) -> str:
    return scalar if dtype.count == 1 else f"v{dtype.count}{scalar}"


def _power_of_two_factor(factor: UOp) -> UOp | None:
    """e when `factor` is codegen's float32 2**e built from bits (BITCAST(SHL(ADD(e, 127), 23)), transcendental's
    `power_of_two`), else None."""
    if factor.op is not Ops.BITCAST or factor.dtype.scalar() != dtypes.float32:
        return None
    shifted = factor.src[0]
    if shifted.op is not Ops.SHL or not _is_constant(shifted.src[1], 23) or shifted.src[0].op is not Ops.ADD:
        return None
    a, b = shifted.src[0].src
    return a if _is_constant(b, 127) else b if _is_constant(a, 127) else None


def _is_constant(node: UOp, value: int) -> bool:
    if node.op is Ops.CONST:
        return bool(node.arg == value)
    if node.op is Ops.VCONST:
        return all(lane == value for lane in node.arg)
    if node.op is Ops.VECTORIZE:
        return all(_is_constant(lane, value) for lane in node.src)
    return False


def _power_of_two_scaling(x: UOp) -> tuple[UOp, UOp] | None:
    """(v, w) when float32 `x` is (v * 2**h) * 2**(w - h) with h = w >> 1, both factors built from bits: the scaling
    step of codegen's exp2 (two normal factors, so that only the last product rounds, into the subnormals or to
    inf). ldexp(v, w) is the same single rounding of v * 2**w, in one instruction (VSCALEFPS) instead of eight;
    for any v whose first product stays normal, as the decomposition's v in [0.7, 1.42] with |h| <= 75 does."""
    if x.dtype.scalar() != dtypes.float32:
        return None
    for inner, outer in (x.src, reversed(x.src)):
        second = _power_of_two_factor(outer)
        if second is None or second.op is not Ops.SUB or inner.op is not Ops.MUL:
            continue
        whole, half = second.src
        if half.op is not Ops.SHR or half.src[0] is not whole or not _is_constant(half.src[1], 1):
            continue
        for value, factor in (inner.src, reversed(inner.src)):
            if _power_of_two_factor(factor) is half:
                return value, whole
    return None


def _alu(ctx: LLVMWriter, x: UOp) -> str:
    # vector operands use the same instructions as scalars (LLVM's instructions are lane-wise on vector types)
    name, op = ctx[x], x.op
    operands = [ctx[s] for s in x.src]
    kind = x.src[-1].dtype
    type_name = llvm_type(kind)
    if op is Ops.WHERE:
        condition = llvm_type(x.src[0].dtype)
        return f"{name} = select {condition} {operands[0]}, {type_name} {operands[1]}, {type_name} {operands[2]}"
    if op is Ops.MUL and ctx.vector_ldexp and (scaling := _power_of_two_scaling(x)) is not None:
        value, exponent = scaling
        function = ctx.declare(
            f"@llvm.ldexp.{_vector_suffix(x.dtype, 'f32')}.{_vector_suffix(x.dtype, 'i32')}",
            f"declare {type_name} @llvm.ldexp.{_vector_suffix(x.dtype, 'f32')}.{_vector_suffix(x.dtype, 'i32')}"
            f"({type_name}, {llvm_type(exponent.dtype)})",
        )
        return f"{name} = call {type_name} {function}({ctx.typed(value)}, {ctx.typed(exponent)})"
    if dtypes.is_float(kind):
        return _float_alu(ctx, name, op, kind, operands)
    if kind.scalar() == dtypes.bool:
        if op in _BOOL_INSTRUCTIONS:
            return f"{name} = {_BOOL_INSTRUCTIONS[op]} {type_name} {operands[0]}, {operands[1]}"
        if op is Ops.NEG:
            return f"{name} = xor {type_name} {operands[0]}, {splat(True, kind)}"
        if op in (Ops.CMPLT, Ops.CMPEQ):
            return f"{name} = icmp {'ult' if op is Ops.CMPLT else 'eq'} {type_name} {operands[0]}, {operands[1]}"
        raise ValueError(f"{op!r} is not defined on bool")
    return _int_alu(ctx, x, kind, operands)


def _float_alu(ctx: LLVMWriter, name: str, op: Ops, dtype: DType, operands: list[str]) -> str:
    type_name = llvm_type(dtype)
    if op in _FLOAT_INSTRUCTIONS:
        return f"{name} = {_FLOAT_INSTRUCTIONS[op]} {type_name} {operands[0]}, {operands[1]}"
    if op is Ops.NEG:
        return f"{name} = fneg {type_name} {operands[0]}"
    if op is Ops.RECIPROCAL:
        return f"{name} = fdiv {type_name} {splat(1.0, dtype)}, {operands[0]}"
    if op is Ops.MAX:
        # exec_alu's MAX: a NaN operand is ignored (both NaN: NaN) and -0 < +0. Equal operands have equal bits
        # except +0 / -0, whose bitwise AND is +0, so a tie gives the AND of the bits (llvm.maxnum leaves it open)
        a, b = operands
        bits, condition = _bits_type(dtype), _condition_type(dtype)
        return (
            f"{name}.greater = fcmp ogt {type_name} {a}, {b}\n"
            f"{name}.nan = fcmp uno {type_name} {b}, {b}\n"
            f"{name}.first = or {condition} {name}.greater, {name}.nan\n"
            f"{name}.pick = select {condition} {name}.first, {type_name} {a}, {type_name} {b}\n"
            f"{name}.tie = fcmp oeq {type_name} {a}, {b}\n"
            f"{name}.abits = bitcast {type_name} {a} to {bits}\n"
            f"{name}.bbits = bitcast {type_name} {b} to {bits}\n"
            f"{name}.andbits = and {bits} {name}.abits, {name}.bbits\n"
            f"{name}.and = bitcast {bits} {name}.andbits to {type_name}\n"
            f"{name} = select {condition} {name}.tie, {type_name} {name}.and, {type_name} {name}.pick"
        )
    if op in (Ops.SQRT, Ops.TRUNC):
        function = ctx.intrinsic(op.name.lower(), dtype)
        return f"{name} = call {type_name} {function}({type_name} {operands[0]})"
    if op is Ops.MULACC and dtype.itemsize >= 4:  # narrower formats were rewritten by codegen's multiply-add pass
        function = ctx.intrinsic("fma", dtype, arity=3)
        arguments = ", ".join(f"{type_name} {operand}" for operand in operands)
        return f"{name} = call {type_name} {function}({arguments})"
    raise ValueError(f"the LLVM IR renderer has no native {op!r} for {dtype!r}; codegen should decompose it")


def _constant_lanes(value: UOp) -> list[int] | None:
    """The integer lanes of a constant (scalar or vector), else None."""
    if value.op is Ops.CONST:
        return [int(value.arg)]
    if value.op is Ops.VECTORIZE and all(source.op is Ops.CONST for source in value.src):
        return [int(source.arg) for source in value.src]
    return None


def _int_alu(ctx: LLVMWriter, x: UOp, dtype: DType, operands: list[str]) -> str:
    name, op = ctx[x], x.op
    type_name, condition = llvm_type(dtype), _condition_type(dtype)
    signed = not dtypes.is_unsigned(dtype)
    bits = dtype.scalar().itemsize * 8
    a = operands[0]
    if op in _INT_INSTRUCTIONS:
        return f"{name} = {_INT_INSTRUCTIONS[op]} {type_name} {a}, {operands[1]}"
    if op is Ops.NEG:
        return f"{name} = sub {type_name} {splat(0, dtype)}, {a}"
    if op is Ops.MULACC:
        product = f"{name}.product = mul {type_name} {a}, {operands[1]}"
        return f"{product}\n{name} = add {type_name} {name}.product, {operands[2]}"
    if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.MAX):
        predicate = {Ops.CMPLT: "slt" if signed else "ult", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}.get(op)
        if predicate is not None:
            return f"{name} = icmp {predicate} {type_name} {a}, {operands[1]}"
        return (
            f"{name}.greater = icmp {'sgt' if signed else 'ugt'} {type_name} {a}, {operands[1]}\n"
            f"{name} = select {condition} {name}.greater, {type_name} {a}, {type_name} {operands[1]}"
        )
    b = operands[1]
    if op in (Ops.SHL, Ops.SHR):
        instruction = "shl" if op is Ops.SHL else "ashr" if signed else "lshr"
        counts = _constant_lanes(x.src[1])
        if counts is not None and all(0 <= count < bits for count in counts):
            return f"{name} = {instruction} {type_name} {a}, {b}"
        outside = f"{name}.sign" if op is Ops.SHR and signed else splat(0, dtype)
        lines = [
            f"{name}.inside = icmp ult {type_name} {b}, {splat(bits, dtype)}",
            f"{name}.shifted = {instruction} {type_name} {a}, {b}",
        ]
        if op is Ops.SHR and signed:
            lines.append(f"{outside} = ashr {type_name} {a}, {splat(bits - 1, dtype)}")
        lines.append(f"{name} = select {condition} {name}.inside, {type_name} {name}.shifted, {type_name} {outside}")
        return "\n".join(lines)
    if op in (Ops.IDIV, Ops.MOD):
        return _division(name, op, x.src[1], dtype, a, b)
    if op is Ops.THREEFRY:
        ctx.declare("@llvm.fshl.i32", "declare i32 @llvm.fshl.i32(i32, i32, i32)")
        helper = ctx.declare("@kiln_threefry2x32", threefry_helper())
        return f"{name} = call i64 {helper}(i64 {a}, i64 {b})"
    raise ValueError(f"{op!r} is not defined on integer dtype {dtype!r}")


def _division(name: str, op: Ops, divisor: UOp, dtype: DType, a: str, b: str) -> str:
    type_name, condition = llvm_type(dtype), _condition_type(dtype)
    signed = not dtypes.is_unsigned(dtype)
    instruction = ("sdiv" if op is Ops.IDIV else "srem") if signed else ("udiv" if op is Ops.IDIV else "urem")
    divisors = _constant_lanes(divisor)
    if divisors is not None and all(d != 0 and not (signed and d == -1) for d in divisors):
        return f"{name} = {instruction} {type_name} {a}, {b}"
    # a zero divisor gives 0 and MIN / -1 wraps (both are undefined in LLVM and trap on x86)
    zero = splat(0, dtype)
    lines = [f"{name}.zero = icmp eq {type_name} {b}, {zero}"]
    unsafe = f"{name}.zero"
    if signed:
        lines += [
            f"{name}.minus = icmp eq {type_name} {b}, {splat(-1, dtype)}",
            f"{name}.unsafe = or {condition} {name}.zero, {name}.minus",
        ]
        unsafe = f"{name}.unsafe"
    lines += [
        f"{name}.divisor = select {condition} {unsafe}, {type_name} {splat(1, dtype)}, {type_name} {b}",
        f"{name}.raw = {instruction} {type_name} {a}, {name}.divisor",
    ]
    result = f"{name}.raw"
    if signed:
        special = f"{name}.negated" if op is Ops.IDIV else zero
        if op is Ops.IDIV:
            lines.append(f"{name}.negated = sub {type_name} {zero}, {a}")
        lines.append(f"{name}.signed = select {condition} {name}.minus, {type_name} {special}, {type_name} {result}")
        result = f"{name}.signed"
    lines.append(f"{name} = select {condition} {name}.zero, {type_name} {zero}, {type_name} {result}")
    return "\n".join(lines)


# ---- conversions ----------------------------------------------------------------------------------------------


def _cast(ctx: LLVMWriter, x: UOp) -> str:
    # vectors convert lane by lane with the same instructions; float -> int vectors never get here (_lane_by_lane)
    source, target = x.src[0].dtype, x.dtype
    source_scalar, target_scalar = source.scalar(), target.scalar()
    name, value = ctx[x], ctx.typed(x.src[0])
    source_type, target_type = llvm_type(source), llvm_type(target)
    if target_scalar == dtypes.bool:
        if dtypes.is_float(source):
            return f"{name} = fcmp une {value}, {splat(0.0, source)}"
        return f"{name} = icmp ne {value}, {splat(0, source)}"
    if source_scalar == dtypes.bool:
        return f"{name} = {'uitofp' if dtypes.is_float(target) else 'zext'} {value} to {target_type}"
    if dtypes.is_float(source) and dtypes.is_float(target):
        wider = target_scalar.itemsize > source_scalar.itemsize
        return f"{name} = {'fpext' if wider else 'fptrunc'} {value} to {target_type}"
    if dtypes.is_float(target):
        return f"{name} = {'uitofp' if dtypes.is_unsigned(source) else 'sitofp'} {value} to {target_type}"
    if dtypes.is_float(source):
        assert target.count == 1, "vector float -> int casts are rendered lane by lane"
        ctx.intrinsic("fabs", dtypes.float64)
        ctx.intrinsic("trunc", dtypes.float64)
        helper = ctx.declare(f"@kiln_to_{target.name}", float_to_int_helper(target))
        lines = []
        if source != dtypes.float64:
            lines.append(f"{name}.double = fpext {value} to double")
            value = f"double {name}.double"
        lines.append(f"{name} = call {target_type} {helper}({value})")
        return "\n".join(lines)
    if target_scalar.itemsize < source_scalar.itemsize:
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


class LLVMRenderer(TargetRenderer[LLVMCompiler], target=CPU):
    """LLVM IR for the CPU device: the C renderer's capabilities, compiled in process by llvmlite (`LLVMCompiler`,
    created on first use; a missing llvmlite raises ToolchainNotFoundError then, naming the package to install).
    """

    vector_widths = (2, 4, 8, 16)
    vector_alu = True
    fuse_multiply_add = True
    native_ops = WITHOUT_MATH_LIBRARY

    def __init__(self) -> None:
        self.register_tile_lanes = host_register_tile_lanes()
        self.vector_ldexp = host_has_vector_ldexp()
        """exp2's power-of-two scaling is one `llvm.ldexp` (AVX-512 hosts: VSCALEFPS; same results, 6 fewer vector
        instructions per exp2: softmax's two exp loops ~20% fewer cycles, llvm-mca znver4)."""

    def make_compiler(self) -> LLVMCompiler:
        """The llvmlite compiler (in process)."""
        return LLVMCompiler()

    def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
        """One LLVM IR function named ENTRY_NAME computing `uops` of kernel `name`, its parameters those of
        `signature` (calling convention: host_kernel); the kernel's name is in the first comment line."""
        signature = signature or KernelSignature.of(uops)
        writer = LLVMWriter(vector_ldexp=self.vector_ldexp)
        for uop in uops:
            writer.add(uop)
        parameters = []
        for buffer in signature.buffers:
            access = "noalias" if Access.WRITE in buffer.access else "noalias readonly"
            parameters.append(f"ptr {access} {writer[buffer.uop]}")
        for variable in signature.variables:
            parameters.append(writer.typed(variable.uop))
        if signature.core_id:
            parameters.append(f"i32 %{CORE_ID}")
        body = [line if line.endswith(":") else "  " + line for line in (*writer.entry, *writer.lines)]
        return "\n".join(
            [
                f"; kiln {type(self).__name__} kernel {name}",
                f"define void @{ENTRY_NAME}({', '.join(parameters)}) nounwind {{",
                "entry:",
                *body,
                "  ret void",
                "}",
                *writer.declarations.values(),
                "",
            ]
        )
