"""The C family of renderers: one string-rendering pattern table and one set of helper templates for C, CUDA C,
OpenCL C, MSL and C for AMD GPUs, reading their spellings from a `CDialect` (c_dialect.py).

`CStyleRenderer.render` turns a linear program into one C function. Each uop becomes a string by the first rule of
`pm_c_style` (or of a renderer's `extra_rules`) that matches it: an expression for values, a statement for effects.
Values that are cheap and pure (constants, addresses, parameters, vector lanes) are used inline; every other value
gets a typed local variable, so each ALU result is rounded to its dtype exactly once, as the IR says.

A renderer of the family is a `Target` (its device), a `CDialect` (its spellings) and, where its memory accesses
differ, a few string rules of its own (`extra_rules`); it overrides the few methods whose logic differs (vector
types, special float constants, casts).

Semantics the rendering keeps (those of `kiln.uops.exec_alu`, the definition of the IR):
- integer ops wrap around: C compilers must get `-fwrapv` (signed overflow), shifts are written so no count is
  undefined (a count outside [0, bits) gives 0, or the sign for SHR), IDIV/MOD by a non-constant divisor avoid
  the INT_MIN / -1 trap and give 0 for a zero divisor (the interpreter raises; compiled code must not kill the
  process);
- float MAX ignores a NaN operand and orders -0 below +0 (exec_alu), float -> int conversion truncates, wraps around and
  gives the target's minimum for NaN/inf (a helper function: C leaves it undefined);
- floats must not be contracted into fused multiply-adds (`-ffp-contract=off`): the IR rounds every op; MULACC
  is fused (fma for float32/float64, `multiply_add` for the narrower formats).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, ClassVar

from kiln.codegen import Access, KernelSignature, TensorCore
from kiln.renderers.c_dialect import C_DIALECT, CDialect
from kiln.renderers.source_writer import NAME_PREFIXES, STATEMENT_OPS, SourceWriter, nonfinite_bits, root_buffer
from kiln.renderers.target import CompilerT, TargetRenderer, tensor_core_of
from kiln.uops import ConstType, DType, GroupOp, MemoryScope, Ops, PatternMatcher, PtrDType, UOp, UPat, dtypes

__all__ = [
    "ENTRY_NAME",
    "CStyleRenderer",
    "CStyleWriter",
    "local_size",
    "pm_c_style",
    "variable_name",
]

ENTRY_NAME = "kiln_kernel"
"""The name of the function every C-family renderer emits (one kernel per source)."""

_COMMON_TEMPLATES: dict[Ops, str] = {
    Ops.CMPLT: "({0}<{1})",
    Ops.CMPNE: "({0}!={1})",
    Ops.CMPEQ: "({0}=={1})",
    Ops.WHERE: "({0}?{1}:{2})",
    Ops.AND: "({0}&{1})",
    Ops.OR: "({0}|{1})",
    Ops.XOR: "({0}^{1})",
}
_BOOL_TEMPLATES: dict[Ops, str] = {
    **_COMMON_TEMPLATES,
    Ops.ADD: "({0}|{1})",
    Ops.MUL: "({0}&{1})",
    Ops.MAX: "({0}|{1})",
    Ops.NEG: "(!{0})",
    Ops.TRUNC: "{0}",
}
_INT_TEMPLATES: dict[Ops, str] = {
    **_COMMON_TEMPLATES,
    Ops.ADD: "({0}+{1})",
    Ops.SUB: "({0}-{1})",
    Ops.MUL: "({0}*{1})",
    Ops.NEG: "(-{0})",
    Ops.MAX: "(({0}>{1})?{0}:{1})",
    Ops.TRUNC: "{0}",
    Ops.MULACC: "(({0}*{1})+{2})",
}
_FLOAT_TEMPLATES: dict[Ops, str] = {
    Ops.CMPLT: "({0}<{1})",
    Ops.CMPNE: "({0}!={1})",
    Ops.CMPEQ: "({0}=={1})",
    Ops.WHERE: "({0}?{1}:{2})",
    Ops.ADD: "({0}+{1})",
    Ops.SUB: "({0}-{1})",
    Ops.MUL: "({0}*{1})",
    Ops.FDIV: "({0}/{1})",
    Ops.NEG: "(-{0})",
    Ops.RECIPROCAL: "(1/{0})",
    # exec_alu's MAX: a NaN operand is ignored (both NaN: NaN) and -0 < +0. Two zeros compare equal both to each
    # other and to each other's negation; their sum is +0 unless both are -0, the ordered maximum of the pair
    Ops.MAX: "((({0}>{1})||({1}!={1}))?{0}:((({0}=={1})&&({0}==-{1}))?({0}+{1}):{1}))",
}

_INLINE_OPS = frozenset({Ops.CONST, Ops.INDEX, Ops.AFTER, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.GEP})
_NAME_PREFIXES: dict[Ops, str] = {
    **NAME_PREFIXES,
    Ops.VECTORIZE: "vec",
    Ops.GEP: "vec",
    Ops.SPECIAL: "sidx",
    Ops.WMMA: "wmma",
}


class CStyleWriter(SourceWriter):
    """The state of rendering one kernel: names of rendered uops, body lines, typedefs and helpers it needs."""

    def __init__(self, language: CStyleRenderer[Any]) -> None:
        super().__init__()
        self.language = language
        self.typedefs: dict[str, str] = {}

    def type_name(self, dtype: DType) -> str:
        """The C type of a value of `dtype`, declaring its vector typedef if needed."""
        if isinstance(dtype, PtrDType):
            return self.type_name(dtype.base) + "*"
        if dtype.count > 1:
            name, declaration = self.language.vector_type(dtype)
            if declaration:
                self.typedefs.setdefault(name, declaration)
            return name
        return self.language.scalar_type(dtype)

    def memory_type(self, dtype: DType) -> str:
        """The C type of `dtype` in memory: the dialect's `stored_bool` for bool, else its own type."""
        stored = self.language.dialect.stored_bool
        return stored if dtype == dtypes.bool and stored is not None else self.type_name(dtype)

    def vector_literal(self, dtype: DType, lanes: list[str]) -> str:
        """A vector value of `dtype` from lane expressions, spelled by the dialect."""
        return self.language.dialect.vector_literal.format(type=self.type_name(dtype), lanes=",".join(lanes))

    def require_helper(self, name: str, make: Callable[[], str]) -> str:
        """Declare helper function `name` (its definition made once by `make`); returns the name."""
        if name not in self.helpers:
            self.helpers[name] = make()
        return name

    def add(self, uop: UOp) -> None:
        """Render one uop of the linear program, in order."""
        if uop.op is Ops.END or uop.op is Ops.ENDIF:
            self.depth -= 1
        if uop.op in (Ops.RANGE, Ops.DEFINE_REG, Ops.DEFINE_LOCAL):
            self.names[uop] = self.fresh_name(_NAME_PREFIXES[uop.op])
        text = self.language.render_uop(self, uop)
        if uop.op in STATEMENT_OPS:
            if text:
                self.emit(text)
        elif uop.op in _INLINE_OPS or (uop.op is Ops.SPECIAL and self.language.special_is_parameter(uop)):
            self.names[uop] = text
        else:
            name = self.fresh_name(_NAME_PREFIXES.get(uop.op, "alu"))
            self.emit(f"{self.type_name(uop.dtype)} {name} = {text};")
            self.names[uop] = name
        if uop.op is Ops.RANGE or uop.op is Ops.IF:
            self.depth += 1


# ---- the rules --------------------------------------------------------------------------------------------------


def _index(ctx: CStyleWriter, x: UOp) -> str:
    # a vector access casts the element pointer to a vector pointer, in the buffer's address space where the dialect
    # names one (a cast without it would make a generic pointer: flat_* instructions on AMD, an error in MSL)
    pointer, offset = ctx[x.src[0]], ctx[x.src[1]]
    assert isinstance(x.dtype, PtrDType)
    address = pointer if x.src[1].op is Ops.CONST and x.src[1].arg == 0 else f"({pointer}+{offset})"
    if x.dtype.base.count == 1:
        return address
    dialect = ctx.language.dialect
    root = root_buffer(x).dtype
    assert isinstance(root, PtrDType)
    space = dialect.vector_pointer_spaces.get(root.scope, "")
    vector = ctx.type_name(x.dtype.base)
    if dialect.packed_vectors and x.dtype.base.scalar() != dtypes.bool:  # MSL has no packed_bool
        vector = f"packed_{vector}"
    return f"(({space}{vector}*){address})"


def _load(ctx: CStyleWriter, x: UOp) -> str:
    if len(x.src) == 3:
        return f"({ctx[x.src[2]]}?*{ctx[x.src[0]]}:{ctx[x.src[1]]})"
    return f"(*{ctx[x.src[0]]})"


def _range(ctx: CStyleWriter, x: UOp) -> str:
    name = ctx[x]
    return f"for ({ctx.type_name(x.dtype)} {name} = 0; {name} < {ctx[x.src[0]]}; {name}++) {{"


def _memory(ctx: CStyleWriter, x: UOp) -> str:
    assert isinstance(x.dtype, PtrDType)
    prefix = ctx.language.dialect.shared_prefix if x.dtype.scope is MemoryScope.LOCAL else ""
    return f"{prefix}{ctx.memory_type(x.dtype.base)} {ctx[x]}[{x.dtype.size}];"


def _gep(ctx: CStyleWriter, x: UOp) -> str:
    lanes = [ctx.language.dialect.lane.format(vector=ctx[x.src[0]], lane=lane) for lane in x.arg]
    return lanes[0] if len(lanes) == 1 else ctx.vector_literal(x.dtype, lanes)


def _barrier(ctx: CStyleWriter, x: UOp) -> str:
    statement = ctx.language.dialect.barrier_statement
    if statement is None:
        raise ValueError(f"{ctx.language!r} has no BARRIER (no threads sharing memory)")
    return statement


def _wmma(ctx: CStyleWriter, x: UOp) -> str:
    language = ctx.language
    core = tensor_core_of(language, x)
    helper = ctx.require_helper(f"kiln_{core}", lambda: language.wmma_helper(ctx, core, x))
    return f"{helper}({', '.join(ctx[s] for s in x.src)})"


pm_c_style = PatternMatcher(
    [
        (UPat(Ops.CONST, name="x"), lambda ctx, x: ctx.language.constant(x.arg, x.dtype)),
        (UPat(Ops.DEFINE_GLOBAL, name="x"), lambda ctx, x: f"data{x.arg}"),
        (UPat(Ops.DEFINE_VAR, name="x"), lambda ctx, x: variable_name(x.arg.name)),
        (UPat(Ops.SPECIAL, name="x"), lambda ctx, x: ctx.language.special(ctx, x)),
        (UPat((Ops.DEFINE_REG, Ops.DEFINE_LOCAL), name="x"), _memory),
        (UPat(Ops.RANGE, name="x"), _range),
        (UPat(Ops.END), lambda ctx: "}"),
        (UPat(Ops.IF, name="x"), lambda ctx, x: f"if ({ctx[x.src[0]]}) {{"),
        (UPat(Ops.ENDIF), lambda ctx: "}"),
        (UPat(Ops.BARRIER, name="x"), _barrier),
        (UPat(Ops.AFTER, name="x"), lambda ctx, x: ctx[x.src[0]]),
        (UPat(Ops.INDEX, name="x"), _index),
        (UPat(Ops.LOAD, name="x"), _load),
        (UPat(Ops.STORE, name="x"), lambda ctx, x: f"*{ctx[x.src[0]]} = {ctx[x.src[1]]};"),
        (UPat(GroupOp.ALU, name="x"), lambda ctx, x: ctx.language.alu(ctx, x)),
        (UPat(Ops.CAST, name="x"), lambda ctx, x: ctx.language.cast(ctx, ctx[x.src[0]], x.src[0].dtype, x.dtype)),
        (
            UPat(Ops.BITCAST, name="x"),
            lambda ctx, x: ctx.language.bitcast(ctx, ctx[x.src[0]], x.src[0].dtype, x.dtype),
        ),
        (UPat(Ops.VECTORIZE, name="x"), lambda ctx, x: ctx.vector_literal(x.dtype, [ctx[s] for s in x.src])),
        (UPat(Ops.GEP, name="x"), _gep),
        (UPat(Ops.WMMA, name="x"), _wmma),
    ]
)
"""uop -> C text (ctx: the CStyleWriter): an expression for values, a statement for effects."""


def variable_name(name: str) -> str:
    """The C parameter name of the symbolic variable `name` (any characters; prefixed so it never clashes)."""
    return "var_" + re.sub(r"\W", "_", name)


def local_size(signature: KernelSignature) -> int:
    """Threads per block of a kernel: the product of its local sizes (1 without local threads)."""
    sizes = signature.local_size or (1, 1, 1)
    constant = [size for size in sizes if isinstance(size, int)]
    if len(constant) != len(sizes):
        raise ValueError(f"local sizes must be constants, got {sizes}")
    return math.prod(constant)


# ---- the renderer -----------------------------------------------------------------------------------------------


class CStyleRenderer(TargetRenderer[CompilerT]):
    """Base of the C-family renderers: a subclass names its Target in its class statement and sets `dialect` (its
    spellings) and, where its memory accesses differ, `extra_rules`."""

    dialect: ClassVar[CDialect] = C_DIALECT
    """The language's spellings, read by the rules and helper templates here."""
    extra_rules: ClassVar[PatternMatcher | None] = None
    """The renderer's own string rules, tried before `pm_c_style`."""

    _rules_by_class: ClassVar[dict[type, PatternMatcher]] = {}

    # ---- the entry point ----

    def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
        """One C function named ENTRY_NAME computing the linear program `uops` of kernel `name` (see the package
        README's ABI), its parameters those of `signature`; the kernel's name is in the first comment line."""
        signature = signature or KernelSignature.of(uops)
        writer = CStyleWriter(self)
        for uop in uops:
            writer.add(uop)
        parameters = self.parameters(writer, signature)
        parts = [f"/* kiln {type(self).__name__} kernel {name} */", *self.dialect.preamble, *writer.typedefs.values()]
        parts += writer.helpers.values()
        parts.append(f"{self.kernel_declaration(signature, parameters)} {{")
        parts += writer.lines
        parts.append("}")
        return "\n".join(parts) + "\n"

    def render_uop(self, writer: CStyleWriter, uop: UOp) -> str:
        """The C text of `uop` from the first matching string rule."""
        rules = CStyleRenderer._rules_by_class.get(type(self))
        if rules is None:
            rules = pm_c_style if self.extra_rules is None else self.extra_rules + pm_c_style
            CStyleRenderer._rules_by_class[type(self)] = rules
        text, _ = rules.rewrite_with_rule(uop, writer)
        if not isinstance(text, str):
            raise ValueError(f"{type(self).__name__} cannot render {uop.op!r} of dtype {uop.dtype!r}")
        return text

    # ---- the kernel's declaration ----

    def kernel_declaration(self, signature: KernelSignature, parameters: list[str]) -> str:
        """The kernel function's declaration (without its body): `<kernel_prefix>void <ENTRY_NAME>(parameters)`, with
        the dialect's launch bounds of the block size after `void`."""
        bounds = self.dialect.launch_bounds
        entry = ENTRY_NAME if bounds is None else f"{bounds.format(threads=local_size(signature))} {ENTRY_NAME}"
        return f"{self.dialect.kernel_prefix}void {entry}({', '.join(parameters)})"

    def parameters(self, writer: CStyleWriter, signature: KernelSignature) -> list[str]:
        """The kernel's parameter declarations, in the signature's order: buffers by slot (const unless the kernel
        writes them), then variables by name, then the dialect's extra parameters."""
        dialect = self.dialect
        declarations = []
        for position, buffer in enumerate(signature.buffers):
            constant = "" if Access.WRITE in buffer.access else "const "
            element = writer.memory_type(buffer.dtype.base.scalar())
            declaration = dialect.buffer_parameter.format(
                const=constant,
                element=element,
                restrict=dialect.restrict_keyword,
                name=writer[buffer.uop],
                slot=position,
            )
            declarations.append(declaration.replace("  ", " "))
        for position, variable in enumerate(signature.variables, start=len(signature.buffers)):
            type_name = writer.type_name(variable.dtype)
            declarations.append(
                dialect.variable_parameter.format(type=type_name, name=writer[variable.uop], slot=position)
            )
        return declarations + list(dialect.extra_parameters)

    # ---- types ----

    def scalar_type(self, dtype: DType) -> str:
        """The C type of scalar `dtype`."""
        if dtype == dtypes.bool and self.dialect.cplusplus:
            return "bool"
        name = self.dialect.scalar_types.get(dtype)
        if name is None:
            raise ValueError(f"{type(self).__name__} has no C type for {dtype!r}")
        return name

    def vector_type(self, dtype: DType) -> tuple[str, str | None]:
        """(name, typedef line or None) of vector `dtype`: the language's own vector type where its dialect has
        `builtin_vectors` (ValueError for another lane count), else a GCC/Clang vector extension type.

        The extension type's alignment is one element's (`aligned(itemsize)`): a wide access is then correct for any
        buffer, not only for one aligned to the whole vector (codegen's contract), and costs the same on current CPUs.
        """
        scalar, element = dtype.scalar(), self.vector_element(dtype)
        builtin = self.dialect.builtin_vectors
        if builtin:
            if dtype.count not in builtin:
                raise ValueError(
                    f"{self.dialect.name} has no vector of {dtype.count} lanes ({dtype!r}); expected {builtin}"
                )
            return f"{element}{dtype.count}", None
        name = f"{scalar.name}x{dtype.count}"
        size = scalar.itemsize * dtype.count
        attributes = f"vector_size({size}), aligned({scalar.itemsize}), may_alias"
        return name, f"typedef {element} {name} __attribute__(({attributes}));"

    def vector_element(self, dtype: DType) -> str:
        """The element type of vector `dtype` (vectors of bool hold the dialect's `bool_vector_element`)."""
        scalar = dtype.scalar()
        if scalar == dtypes.bool and self.dialect.bool_vector_element is not None:
            return self.dialect.bool_vector_element
        return self.scalar_type(scalar)

    # ---- hardware indices ----

    def special_is_parameter(self, uop: UOp) -> bool:
        """Whether SPECIAL `uop` is a kernel parameter (used inline) rather than a computed local variable."""
        return False

    def special(self, writer: CStyleWriter, uop: UOp) -> str:
        """The expression of a hardware index (SPECIAL): gidx0..2 and lidx0..2 from the dialect's block and thread
        indices."""
        name = uop.arg.name
        template = {"gidx": self.dialect.group_index, "lidx": self.dialect.thread_index}.get(name[:4])
        if template is None or name[4:] not in ("0", "1", "2"):
            raise ValueError(f"{type(self).__name__} has no hardware index {name!r}; expected gidx0..2 or lidx0..2")
        dimension = int(name[4])
        return f"(({writer.type_name(uop.dtype)}){template.format(axis='xyz'[dimension], dimension=dimension)})"

    # ---- constants ----

    def constant(self, value: ConstType, dtype: DType) -> str:
        """A C literal of `value` (already truncated to `dtype`)."""
        scalar = dtype.scalar()
        if dtype.count > 1:
            raise ValueError(f"vector constants reach renderers as VECTORIZE, got a CONST of {dtype!r}")
        if scalar == dtypes.bool:
            return "1" if value else "0"
        if dtypes.is_float(scalar):
            text = self.float_constant(float(value), scalar)
        else:
            text = self.int_constant(int(value), scalar)
        # a negative literal is an expression (unary minus): in `x-{c}` or `-{c}` a bare `-1.5f` would read as the
        # decrement `x--1.5f`, so it is always parenthesized
        return f"({text})" if text.startswith("-") else text

    def float_constant(self, value: float, dtype: DType) -> str:
        """An exact float literal (the shortest decimal), infinities and NaN by the dialect's bit casts or builtins."""
        suffix = "" if dtype == dtypes.float64 else "f"
        template = self.dialect.nonfinite_double if dtype == dtypes.float64 else self.dialect.nonfinite_float
        if template is not None and not math.isfinite(value):
            bits = nonfinite_bits(value, dtypes.float64 if dtype == dtypes.float64 else dtypes.float32)
            text = template.format(bits=bits, unsigned="u" if bits >> 63 else "")
        elif math.isnan(value):
            text = f'__builtin_nan{suffix}("")'
        elif math.isinf(value):
            text = f"{'-' if value < 0 else ''}__builtin_inf{suffix}()"
        else:
            text = repr(value) + suffix  # the shortest decimal of the exact value converts back to it exactly
        return text if dtype in (dtypes.float32, dtypes.float64) else f"(({self.scalar_type(dtype)}){text})"

    def int_constant(self, value: int, dtype: DType) -> str:
        """An integer literal of `dtype` (the most negative values written as an expression)."""
        bits = dtype.itemsize * 8
        suffix = ("u" if dtypes.is_unsigned(dtype) else "") + (self.dialect.long_suffix if bits == 64 else "")
        if value == -(1 << (bits - 1)) and bits >= 32:
            return f"({value + 1}{suffix}-1)"
        return f"{value}{suffix}"

    # ---- ALU ops ----

    def alu(self, writer: CStyleWriter, uop: UOp) -> str:
        """The C expression of ALU `uop`."""
        operands = [writer[s] for s in uop.src]
        kind = uop.src[-1].dtype if uop.op is not Ops.WHERE else uop.dtype
        if kind.count > 1 or uop.dtype.count > 1:
            raise ValueError(f"{type(self).__name__} renders scalar ALU ops only, got {uop.op!r} on {kind!r}")
        if dtypes.is_float(kind):
            return self.float_alu(writer, uop.op, kind, operands)
        if dtypes.is_bool(kind):
            template = _BOOL_TEMPLATES.get(uop.op)
            if template is None:
                raise ValueError(f"{uop.op!r} is not defined on bool")
            return template.format(*operands)
        return self.int_alu(writer, uop, kind, operands)

    def float_alu(self, writer: CStyleWriter, op: Ops, dtype: DType, operands: list[str]) -> str:
        """A float op: a template, or a builtin (narrow floats call the float32 one and convert back, exactly)."""
        template = _FLOAT_TEMPLATES.get(op)
        if template is not None:
            return template.format(*operands)
        function = self.dialect.float_functions.get((op, dtype))
        if function is not None:
            return f"{function}({','.join(operands)})"
        wide = self.dialect.float_functions.get((op, dtypes.float32))
        if wide is not None and dtype.itemsize < 4 and op is not Ops.MULACC:  # fma would round twice
            return f"(({self.scalar_type(dtype)}){wide}({','.join(operands)}))"
        raise ValueError(f"{type(self).__name__} has no native {op!r} for {dtype!r}; codegen should decompose it")

    def int_alu(self, writer: CStyleWriter, uop: UOp, dtype: DType, operands: list[str]) -> str:
        """An integer op with the IR's wrap-around semantics and no undefined C behaviour."""
        op, dialect = uop.op, self.dialect
        wraps = op in _WRAPPING_OPS and dialect.unsigned_signed_arithmetic and not dtypes.is_unsigned(dtype)
        if wraps and dtype.itemsize >= 4:
            # signed overflow is undefined (and no flag makes it wrap): computed in the unsigned type, converted back
            signed, unsigned = self.scalar_type(dtype), self.scalar_type(_UNSIGNED[dtype])
            if op is Ops.NEG:
                return f"(({signed})(0u-({unsigned})({operands[0]})))"
            symbol = _WRAPPING_OPS[op]
            return f"(({signed})(({unsigned})({operands[0]}){symbol}({unsigned})({operands[1]})))"
        template = _INT_TEMPLATES.get(op)
        if template is not None:
            return template.format(*operands)
        a, b = operands[0], operands[1]
        bits = dtype.itemsize * 8
        c_type = self.scalar_type(dtype)
        wide_unsigned = dialect.uint64 if bits == 64 else dialect.uint32
        count = uop.src[1]
        constant_count = count.op is Ops.CONST and 0 <= count.arg < bits
        in_range = f"(({dialect.uint64})({b})<{bits}u)"
        if op is Ops.SHL:
            shifted = f"({c_type})(({wide_unsigned})({a})<<({b}))"  # unsigned: no overflow of a signed shift
            return shifted if constant_count else f"({in_range}?{shifted}:({c_type})0)"
        if op is Ops.SHR:
            if constant_count:
                return f"({a}>>{b})"
            outside = f"({a}>>{bits - 1})" if not dtypes.is_unsigned(dtype) else f"({c_type})0"
            return f"({in_range}?({a}>>({b})):{outside})"
        if op in (Ops.IDIV, Ops.MOD):
            return self._division(uop, dtype, a, b)
        if op is Ops.THREEFRY:
            return f"(({c_type}){writer.require_helper('kiln_threefry2x32', self.threefry_helper)}({a},{b}))"
        raise ValueError(f"{op!r} is not defined on integer dtype {dtype!r}")

    def _division(self, uop: UOp, dtype: DType, a: str, b: str) -> str:
        symbol = "/" if uop.op is Ops.IDIV else "%"
        divisor = uop.src[1]
        signed = not dtypes.is_unsigned(dtype)
        if divisor.op is Ops.CONST and divisor.arg != 0 and not (signed and divisor.arg == -1):
            return f"({a}{symbol}{b})"
        c_type = self.scalar_type(dtype)
        wide_unsigned = self.dialect.uint64 if dtype.itemsize == 8 else self.dialect.uint32
        if signed and dtype.itemsize >= 4:
            # INT_MIN / -1 overflows (and traps on x86): the quotient wraps to INT_MIN, the remainder is 0
            minus_one = f"(({c_type})(0u-({wide_unsigned})({a})))" if uop.op is Ops.IDIV else f"({c_type})0"
            return f"(({b})==0?({c_type})0:({b})==-1?{minus_one}:({a}{symbol}{b}))"
        return f"(({b})==0?({c_type})0:({a}{symbol}{b}))"

    # ---- conversions ----

    def cast(self, writer: CStyleWriter, value: str, source: DType, target: DType) -> str:
        """A value conversion (CAST) with the IR's semantics."""
        if source.count > 1 or target.count > 1:
            raise ValueError(f"{type(self).__name__} casts scalars only, got {source!r} -> {target!r}")
        if target == dtypes.bool:
            return f"({value}!=0)"
        if dtypes.is_float(source) and dtypes.is_int(target):
            helper = writer.require_helper(f"kiln_to_{target.name}", lambda: self.float_to_int_helper(target))
            return f"{helper}({value})"
        return f"(({self.scalar_type(target)}){value})"

    def bitcast(self, writer: CStyleWriter, value: str, source: DType, target: DType) -> str:
        """A reinterpretation of the bits of `value` (BITCAST): by the dialect's template, else through a union in C
        (defined there), through a memcpy helper in C++ (where memcpy between trivially copyable objects is the
        defined way)."""
        if self.dialect.bitcast is not None:
            return self.dialect.bitcast.format(type=writer.type_name(target), value=value)
        source_type, target_type = writer.type_name(source), writer.type_name(target)
        if not self.dialect.cplusplus:
            return f"((union {{{source_type} from; {target_type} to;}}){{.from={value}}}).to"
        name = f"kiln_bitcast_{source.name}{source.count}_{target.name}{target.count}"

        def make() -> str:
            return (
                f"{self.dialect.helper_prefix}{target_type} {name}({source_type} x) {{\n"
                f"  {target_type} y; memcpy(&y, &x, sizeof(y)); return y;\n}}"
            )

        return f"{writer.require_helper(name, make)}({value})"

    # ---- helper functions ----

    def float_to_int_helper(self, target: DType) -> str:
        """The conversion of a float (in the dialect's `helper_float`) to integer `target` with the IR's semantics:
        truncate, wrap around modulo 2**bits, NaN/inf -> the target's minimum (C leaves all three undefined, CUDA's
        and OpenCL's own conversions saturate or are undefined out of range)."""
        dialect = self.dialect
        c_type, real, int64 = self.scalar_type(target), dialect.helper_float, dialect.int64
        minimum = self.int_constant(int(dtypes.min(target)), target)
        two63, two64 = (
            f"9223372036854775808.0{dialect.helper_float_suffix}",
            f"18446744073709551616.0{dialect.helper_float_suffix}",
        )
        return (
            f"{dialect.helper_prefix}{c_type} kiln_to_{target.name}({real} x) {{\n"
            f"  if ({dialect.not_finite.format(x='x')}) return {minimum};\n"
            f"  if (x >= -{two63} && x < {two63}) return ({c_type})({int64})x;\n"
            f"  {real} wrapped = {dialect.float_modulo.format(x='x', m=two64)};\n"
            f"  if (wrapped >= {two63}) wrapped -= {two64};\n"
            f"  if (wrapped < -{two63}) wrapped += {two64};\n"
            f"  return ({c_type})({int64})wrapped;\n"
            "}"
        )

    def threefry_helper(self) -> str:
        """Threefry-2x32 with 20 rounds (Salmon et al., SC'11; constants from Random123's threefry.h)."""
        u32, u64 = self.dialect.uint32, self.dialect.uint64
        rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
        lines = [
            f"{self.dialect.helper_prefix}{u64} kiln_threefry2x32({u64} counter, {u64} key) {{",
            f"  {u32} k0 = ({u32})key, k1 = ({u32})(key >> 32), k2 = k0 ^ k1 ^ 0x1BD11BDAu;",
            f"  {u32} ks[3] = {{k0, k1, k2}};",
            f"  {u32} x0 = ({u32})counter + k0, x1 = ({u32})(counter >> 32) + k1;",
        ]
        for group in range(5):
            for rotation in rotations[group % 2]:
                lines.append(f"  x0 += x1; x1 = ((x1 << {rotation}) | (x1 >> {32 - rotation})) ^ x0;")
            lines.append(f"  x0 += ks[{(group + 1) % 3}]; x1 += ks[{(group + 2) % 3}] + {group + 1}u;")
        lines += [f"  return (({u64})x1 << 32) | x0;", "}"]
        return "\n".join(lines)

    def wmma_helper(self, writer: CStyleWriter, core: TensorCore, wmma: UOp) -> str:
        """The function running tensor core `core` on one thread's fragments, with the operand and result types of
        the WMMA uop `wmma`: the signature here, the body the target's (`wmma_body`)."""
        a_type, b_type, c_type = (writer.type_name(operand.dtype) for operand in wmma.src)
        signature = f"{self.dialect.helper_prefix}{c_type} kiln_{core}({a_type} a, {b_type} b, {c_type} c) {{"
        return "\n".join([signature, *self.wmma_body(writer, core, (a_type, b_type, c_type)), "}"])

    def wmma_body(self, writer: CStyleWriter, core: TensorCore, types: tuple[str, str, str]) -> list[str]:
        """The lines of the tensor-core helper's body: operands `a`, `b`, `c` of the C `types`; returns the new
        accumulators (of the third type)."""
        raise ValueError(f"{self!r} has no tensor cores; got {core}")


_WRAPPING_OPS: dict[Ops, str] = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.NEG: "-"}
_UNSIGNED: dict[DType, DType] = {dtypes.int32: dtypes.uint32, dtypes.int64: dtypes.uint64}
