"""The state of rendering one kernel as LLVM IR (`LLVMWriter`): SSA names, lines, declarations, and the uops that
need no line of their own (aliases, constants) or run lane by lane.

The rules that turn one uop into lines are the renderer's (`pm_llvm_ir` in llvm_ir.py, with the ALU and conversion
rules of llvm_ir_alu.py); the writer is handed that table, so this module depends on neither.
"""

from __future__ import annotations

from kiln.codegen import CORE_ID
from kiln.renderers.c_style import variable_name
from kiln.renderers.llvm_ir_helpers import INTRINSIC_SUFFIX, llvm_constant, llvm_type
from kiln.uops import ConstType, DType, Ops, PatternMatcher, PtrDType, UOp, dtypes


class LLVMWriter:
    """The state of rendering one kernel: SSA names, body and entry-block lines, declarations, helpers."""

    def __init__(self, rules: PatternMatcher, vector_ldexp: bool = False) -> None:
        self.rules = rules
        """uop -> its LLVM IR lines (ctx: this writer): the renderer's `pm_llvm_ir`."""
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
        if is_lane_by_lane(uop):
            self.lines += _lane_by_lane(self, uop).splitlines()
            return
        self.lines += self.render_one(uop).splitlines()

    def render_one(self, uop: UOp) -> str:
        """The lines of one named uop, by its rule in `rules`."""
        text, _ = self.rules.rewrite_with_rule(uop, self)
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


def is_lane_by_lane(uop: UOp) -> bool:
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
            lines.append(ctx.render_one(picked))
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
