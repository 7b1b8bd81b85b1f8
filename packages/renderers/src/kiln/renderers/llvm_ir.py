"""The LLVM IR renderer for CPUs and its compiler: llvmlite, in process, no subprocess.

`LLVMRenderer.render` writes textual LLVM IR (opaque pointers, vector types for wide loads and stores) with one
rule per op in `pm_llvm_ir`: memory and control flow here, ALU ops and conversions in llvm_ir_alu.py, the writer's
state (SSA names, lines, uops rendered lane by lane) in llvm_ir_writer.py. Its compiler is `LLVMCompiler`
(llvm_compiler.py: llvmlite, in process, to an object file, loaded in process too). A kernel of little work
(`work_per_launch` up to `LLVMRenderer.quick_codegen_work`) is marked for LLVM's quick code generator.

Semantics are those of the C renderer (see c_style): integer ops wrap, shifts and divisions have no undefined
cases, float MAX is exec_alu's (NaN ignored, -0 < +0), float -> int truncates and wraps, no fast-math flags (so
LLVM contracts nothing itself; MULACC is `llvm.fma`, rounded once, and codegen's lowering creates it for sums of
products since `fuse_multiply_add` is set).

ALU ops may be vectors (`vector_alu`): LLVM's instructions work lane-wise on `<n x T>`, so most rules are the
scalar ones on vector types; float -> int casts and THREEFRY have scalar helpers only and run lane by lane.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kiln.codegen import CORE_ID, Access, KernelSignature
from kiln.renderers.c_style import ENTRY_NAME
from kiln.renderers.llvm_compiler import (
    NARROW_TYPES_MARK,
    QUICK_CODEGEN_MARK,
    LLVMCompiler,
    host_has_vector_ldexp,
    host_register_tile_lanes,
)
from kiln.renderers.llvm_ir_alu import alu_lines, bitcast_lines, cast_lines
from kiln.renderers.llvm_ir_helpers import llvm_type, memory_type
from kiln.renderers.llvm_ir_writer import LLVMWriter
from kiln.renderers.target import CPU, WITHOUT_MATH_LIBRARY, TargetRenderer
from kiln.uops import AxisKind, GroupOp, MemoryScope, Ops, PatternMatcher, PtrDType, RangeArg, UOp, UPat, dtypes

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
        (UPat(GroupOp.ALU, name="x"), alu_lines),
        (UPat(Ops.CAST, name="x"), cast_lines),
        (UPat(Ops.BITCAST, name="x"), bitcast_lines),
        (UPat(Ops.VECTORIZE, name="x"), _vectorize),
        (UPat(Ops.GEP, name="x"), _gep),
        (UPat(Ops.BARRIER, name="x"), _unsupported("barrier (no threads sharing memory)")),
        (UPat(Ops.WMMA, name="x"), _unsupported("tensor cores")),
    ]
)
"""uop -> LLVM IR lines (ctx: the LLVMWriter; the uop's SSA name is already in ctx.names)."""


# ---- the renderer and its compiler -----------------------------------------------------------------------------


class LLVMRenderer(TargetRenderer[LLVMCompiler], target=CPU):
    """LLVM IR for the CPU device: the C renderer's capabilities, compiled in process by llvmlite (`LLVMCompiler`,
    created on first use; a missing llvmlite raises ToolchainNotFoundError then, naming the package to install).
    """

    vector_widths = (2, 4, 8, 16)
    vector_alu = True
    fuse_multiply_add = True
    native_ops = WITHOUT_MATH_LIBRARY
    quick_codegen_work = 16384
    """The most work per launch (`work_per_launch`) of a kernel whose source asks for LLVM's quick (-O0) code
    generator (QUICK_CODEGEN_MARK; 0: none). Measured on a loaded 2-core machine: a 1024-element relu chain (work
    ~9600) built in 5.9 against 9.8 ms and ran in 5.5 against 4.7 us a launch; at 65 elements 3.0 against 6.0 ms, the
    same run time. Beyond the bound the gap grows (4096 elements: 33 against 7.5 us)."""

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
        writer = LLVMWriter(pm_llvm_ir, vector_ldexp=self.vector_ldexp)
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
        work = None if signature.core_id else work_per_launch(uops)
        quick = work is not None and work <= self.quick_codegen_work
        return "\n".join(
            [
                f"; kiln {type(self).__name__} kernel {name}",
                *([QUICK_CODEGEN_MARK] if quick else []),
                *([NARROW_TYPES_MARK] if uses_narrow_types(uops) else []),
                f"define void @{ENTRY_NAME}({', '.join(parameters)}) nounwind {{",
                "entry:",
                *body,
                "  ret void",
                "}",
                *writer.declarations.values(),
                "",
            ]
        )


_NARROW_MEMORY_TYPES = frozenset({"i8", "i16"})


def uses_narrow_types(uops: Sequence[UOp]) -> bool:
    """Whether linear program `uops` computes in float16 or loads or stores i8 / i16 outside registers (int8, uint8,
    int16, uint16, bool, and the narrow formats emulated in them): its source then carries NARROW_TYPES_MARK."""
    for uop in uops:
        dtype = uop.dtype
        if uop.op is Ops.LOAD or uop.op is Ops.STORE:
            pointer = uop.src[0].dtype
            if isinstance(pointer, PtrDType) and pointer.scope is not MemoryScope.REG:
                narrow = memory_type(pointer.base.scalar()) in _NARROW_MEMORY_TYPES
                if narrow:
                    return True
        elif not isinstance(dtype, PtrDType) and dtype.scalar() == dtypes.float16:
            return True
    return False


def work_per_launch(uops: Sequence[UOp]) -> int | None:
    """An upper bound of the scalar operations one launch of linear program `uops` performs: the product of its loop
    lengths times the lanes of its ALU, cast, load and store ops (a loop after another counts as if nested); None
    when a loop's length is not a constant."""
    iterations, lanes = 1, 0
    for uop in uops:
        if uop.op is Ops.RANGE:
            end = uop.src[0]
            if end.op is not Ops.CONST:
                return None
            iterations *= max(int(end.arg), 1)
        elif uop.op is Ops.STORE:
            lanes += uop.src[1].dtype.count
        elif uop.op in GroupOp.ALU or uop.op in (Ops.LOAD, Ops.CAST, Ops.BITCAST):
            lanes += uop.dtype.count
    return iterations * lanes
