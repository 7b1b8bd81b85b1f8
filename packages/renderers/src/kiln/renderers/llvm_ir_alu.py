"""The LLVM IR renderer's ALU and conversion rules: uop -> LLVM IR lines, on scalars and `<n x T>` vectors alike.

Semantics are those of the C renderer (see c_style): integer ops wrap, shifts and divisions have no undefined
cases, float MAX is exec_alu's (NaN ignored, -0 < +0), float -> int truncates and wraps, no fast-math flags.
`pm_llvm_ir` (llvm_ir.py) routes ALU, CAST and BITCAST uops here.
"""

from __future__ import annotations

from kiln.renderers.llvm_ir_helpers import float_to_int_helper, llvm_type, threefry_helper
from kiln.renderers.llvm_ir_writer import LLVMWriter, splat
from kiln.uops import DType, Ops, UOp, dtypes

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


def alu_lines(ctx: LLVMWriter, x: UOp) -> str:
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


def cast_lines(ctx: LLVMWriter, x: UOp) -> str:
    # vectors convert lane by lane with the same instructions; float -> int vectors never get here (they run lane
    # by lane: is_lane_by_lane)
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


def bitcast_lines(ctx: LLVMWriter, x: UOp) -> str:
    source, target = x.src[0].dtype, x.dtype
    name, value = ctx[x], ctx.typed(x.src[0])
    if source.scalar() == dtypes.bool:
        return f"{name} = zext {value} to {llvm_type(target)}"
    if target.scalar() == dtypes.bool:
        return f"{name} = icmp ne {value}, zeroinitializer"
    return f"{name} = bitcast {value} to {llvm_type(target)}"
