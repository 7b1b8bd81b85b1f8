"""WGSL compute shaders for the WEBGPU device, validated by wgpu (naga) when compiled.

WGSL is not a C dialect, so this renderer has its own writer and pattern table rather than a `CDialect`:
- values are `let name: T = expr;`, loops `for (var ridx0: i32 = 0; ...)`, the ternary is `select(else, then, c)`;
- there are no pointers: an INDEX is remembered as (buffer, index) and a LOAD/STORE reads/writes `buffer[index]`;
- buffers are `var<storage, read_write>` bindings of group 0 in slot order, then one read-only `array<i32>` of the
  symbolic variables' values when the kernel has any; block-shared arrays are module-scope `var<workgroup>`;
- gidx/lidx are the `workgroup_id` / `local_invocation_id` builtins; the workgroup size is a constant of the shader,
  read from the kernel's lidx SPECIALs; BARRIER is `workgroupBarrier()`.
Types: WGSL has 32-bit scalars only (no 64-bit ints or floats; 8/16-bit only behind extensions), so the renderer
computes in bool, i32, u32 and f32 (int8/int16/uint8/uint16 in i32/u32 registers, narrowed after each op that can
leave their range) and the device table stores bool and the 32-bit scalars. bool is not host-shareable in WGSL: a
bool buffer keeps kiln's one byte per element, packed four to a u32 word; a store clears and sets its own byte with
`atomicAnd` / `atomicOr` (other invocations may write the neighbouring bytes of the same word), a load extracts it.
Numerics kept: i32/u32 arithmetic wraps around in WGSL already; shifts by a count outside [0, 32) give 0 (or the
sign for SHR) instead of WGSL's count modulo 32; division and modulo by 0 give 0; float -> int truncates, wraps and
gives the minimum for NaN/inf (a helper; WGSL saturates); float MAX ignores a NaN operand and orders -0 below +0;
NaN and infinity constants are run-time bit casts (`kiln_f32_bits`: WGSL has no literals for them, and Chromium's
Tint rejects a constant bit cast to them). Shader compilers may assume no NaN/inf (lavapipe folds `x != x`, `x - x`
and `x * 0`), so NaN tests are on the bits and those forms are written out.
EXP2/LOG2/SIN/POW are WGSL's builtins: codegen's exact decompositions need IEEE rounding that such compilers do not
keep (they reassociate `x + c - c`).
"""

from __future__ import annotations

import functools
import math

from kiln.codegen import Access, KernelSignature
from kiln.renderers.c_style import ENTRY_NAME
from kiln.renderers.source_writer import NAME_PREFIXES, STATEMENT_OPS, SourceWriter, nonfinite_bits, root_buffer
from kiln.renderers.target import WEBGPU, TargetRenderer
from kiln.renderers.toolchain import ToolchainCompiler
from kiln.renderers.webgpu_library import WebGPUTarget, webgpu_target
from kiln.renderers.wgsl_helpers import F32_BITS_HELPER, NARROW_BITS, POW_HELPER, float_to_int_helper, narrow
from kiln.uops import ConstType, DType, GroupOp, MemoryScope, Ops, PatternMatcher, PtrDType, UOp, UPat, dtypes

__all__ = ["WGSL_SCALAR_TYPES", "WGSLCompileError", "WGSLCompiler", "WGSLRenderer", "WGSLWriter", "pm_wgsl"]

WGSL_SCALAR_TYPES: dict[DType, str] = {
    dtypes.bool: "bool",
    dtypes.int8: "i32",
    dtypes.int16: "i32",
    dtypes.int32: "i32",
    dtypes.uint8: "u32",
    dtypes.uint16: "u32",
    dtypes.uint32: "u32",
    dtypes.float32: "f32",
}
"""The WGSL type of every dtype the renderer computes in (8/16-bit integers in 32-bit registers, narrowed)."""

VARIABLES_NAME = "kiln_vars"
"""The read-only storage array holding the kernel's variable values (sorted by name), bound after the buffers."""

_AXES = "xyz"


class WGSLCompileError(RuntimeError):
    """wgpu rejected a shader; the message has naga's diagnostic and the source."""


class WGSLCompiler(ToolchainCompiler):
    """WGSL -> the same text, once wgpu has built its shader module and compute pipeline on the process's device.

    WebGPU has no portable binary: the "binary" is the validated source, which the WEBGPU device builds again.
    Validation here makes a bad shader fail at compile time with naga's message, like a C compiler's error.
    """

    flags: tuple[str, ...] = ()

    @functools.cached_property
    def target(self) -> WebGPUTarget:
        """The adapter and device validated on (WebGPUNotFoundError naming what to install when there is none)."""
        return webgpu_target()

    def toolchain_identity(self) -> str:
        return self.target.identity

    def compile(self, source: str) -> bytes:
        """`source` encoded, after wgpu accepted it; WGSLCompileError with the diagnostic when it does not."""
        device = self.target.device
        try:
            module = device.create_shader_module(code=source)
            device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": ENTRY_NAME})
        except Exception as error:  # wgpu raises GPUValidationError (or a plain Exception for parse errors)
            raise WGSLCompileError(f"wgpu rejected the shader: {error}\n--- source ---\n{source}") from error
        return source.encode()

    def __repr__(self) -> str:
        return "WGSLCompiler()"


# ---- the writer -------------------------------------------------------------------------------------------------


class WGSLWriter(SourceWriter):
    """The state of rendering one kernel: names, body lines, module-scope declarations and helpers it needs."""

    def __init__(self, language: WGSLRenderer, signature: KernelSignature) -> None:
        super().__init__()
        self.language = language
        self.locations: dict[UOp, tuple[UOp, str]] = {}
        self.module_lines: list[str] = []
        self.stored = {buffer.uop for buffer in signature.buffers if Access.WRITE in buffer.access}
        self.variable_slots = {variable.uop: index for index, variable in enumerate(signature.variables)}

    def type_name(self, dtype: DType) -> str:
        """The WGSL type of a scalar value of `dtype`."""
        return self.language.scalar_type(dtype)

    def require_helper(self, name: str, definition: str) -> str:
        """Declares helper function `name` once; returns its name."""
        self.helpers.setdefault(name, definition)
        return name

    def packed(self, buffer: UOp) -> bool:
        """Whether `buffer` is a global bool buffer, stored as bytes packed in u32 words."""
        assert isinstance(buffer.dtype, PtrDType)
        return buffer.op is Ops.DEFINE_GLOBAL and buffer.dtype.base.scalar() == dtypes.bool

    def read(self, location: UOp) -> str:
        """The expression reading the element an INDEX addresses."""
        buffer, index = self.locations[location]
        if not self.packed(buffer):
            return f"{self[buffer]}[{index}]"
        word = f"{self[buffer]}[u32({index}) >> 2u]"
        if buffer in self.stored:
            word = f"atomicLoad(&{word})"
        return f"((({word} >> ((u32({index}) & 3u) * 8u)) & 0xffu) != 0u)"

    def write(self, location: UOp, value: str) -> str:
        """The statement writing `value` to the element an INDEX addresses."""
        buffer, index = self.locations[location]
        if not self.packed(buffer):
            return f"{self[buffer]}[{index}] = {value};"
        word = f"&{self[buffer]}[kiln_i >> 2u]"
        return (
            f"{{ let kiln_i = u32({index}); let kiln_shift = (kiln_i & 3u) * 8u; "
            f"atomicAnd({word}, ~(0xffu << kiln_shift)); atomicOr({word}, select(0u, 1u, {value}) << kiln_shift); }}"
        )

    def add(self, uop: UOp) -> None:
        """Renders one uop of the linear program, in order."""
        op = uop.op
        if op is Ops.END or op is Ops.ENDIF:
            self.depth -= 1
        if op in (Ops.RANGE, Ops.DEFINE_REG, Ops.DEFINE_LOCAL):
            self.names[uop] = self.fresh_name(NAME_PREFIXES[op])
        if op is Ops.INDEX:
            self.locations[uop] = (root_buffer(uop.src[0]), self[uop.src[1]])
            return
        if op is Ops.LOAD and len(uop.src) == 3:  # gated: the element is read only where the gate holds
            name = self.fresh_name("val")
            self.emit(f"var {name}: {self.type_name(uop.dtype)} = {self[uop.src[1]]};")
            self.emit(f"if ({self[uop.src[2]]}) {{ {name} = {self.read(uop.src[0])}; }}")
            self.names[uop] = name
            return
        text = self.language.render_uop(self, uop)
        if op in STATEMENT_OPS:
            if text:
                self.emit(text)
        elif op in _INLINE_OPS:
            self.names[uop] = text
        else:
            name = self.fresh_name(NAME_PREFIXES.get(op, "alu"))
            self.emit(f"let {name}: {self.type_name(uop.dtype)} = {text};")
            self.names[uop] = name
        if op is Ops.RANGE or op is Ops.IF:
            self.depth += 1


_INLINE_OPS = frozenset({Ops.CONST, Ops.AFTER, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SPECIAL})


# ---- the rules --------------------------------------------------------------------------------------------------


def _memory(ctx: WGSLWriter, x: UOp) -> str:
    assert isinstance(x.dtype, PtrDType)
    declaration = f"{ctx[x]}: array<{ctx.type_name(x.dtype.base)}, {x.dtype.size}>;"
    if x.dtype.scope is MemoryScope.LOCAL:
        ctx.module_lines.append(f"var<workgroup> {declaration}")
        return ""
    return f"var {declaration}"


def _special(ctx: WGSLWriter, x: UOp) -> str:
    name = x.arg.name
    if name[:4] not in ("gidx", "lidx") or name[4:] not in ("0", "1", "2"):
        raise ValueError(f"WGSLRenderer has no hardware index {name!r}; expected gidx0..2 or lidx0..2")
    builtin = "kiln_group" if name.startswith("gidx") else "kiln_local"
    return f"{ctx.type_name(x.dtype)}({builtin}.{_AXES[int(name[4])]})"


def _range(ctx: WGSLWriter, x: UOp) -> str:
    name, kind = ctx[x], ctx.type_name(x.dtype)
    return f"for (var {name}: {kind} = {ctx.language.constant(0, x.dtype)}; {name} < {ctx[x.src[0]]}; {name}++) {{"


def _variable(ctx: WGSLWriter, x: UOp) -> str:
    value = f"{VARIABLES_NAME}[{ctx.variable_slots[x]}]"
    return value if x.dtype == dtypes.int32 else f"{ctx.type_name(x.dtype)}({value})"


pm_wgsl = PatternMatcher(
    [
        (UPat(Ops.CONST, name="x"), lambda ctx, x: ctx.language.constant(x.arg, x.dtype, ctx)),
        (UPat(Ops.DEFINE_GLOBAL, name="x"), lambda ctx, x: f"data{x.arg}"),
        (UPat(Ops.DEFINE_VAR, name="x"), _variable),
        (UPat(Ops.SPECIAL, name="x"), _special),
        (UPat((Ops.DEFINE_REG, Ops.DEFINE_LOCAL), name="x"), _memory),
        (UPat(Ops.RANGE, name="x"), _range),
        (UPat(Ops.END), lambda ctx: "}"),
        (UPat(Ops.IF, name="x"), lambda ctx, x: f"if ({ctx[x.src[0]]}) {{"),
        (UPat(Ops.ENDIF), lambda ctx: "}"),
        (UPat(Ops.BARRIER), lambda ctx: "workgroupBarrier();"),
        (UPat(Ops.AFTER, name="x"), lambda ctx, x: ctx[x.src[0]]),
        (UPat(Ops.LOAD, name="x"), lambda ctx, x: ctx.read(x.src[0])),
        (UPat(Ops.STORE, name="x"), lambda ctx, x: ctx.write(x.src[0], ctx[x.src[1]])),
        (UPat(GroupOp.ALU, name="x"), lambda ctx, x: ctx.language.alu(ctx, x)),
        (UPat(Ops.CAST, name="x"), lambda ctx, x: ctx.language.cast(ctx, ctx[x.src[0]], x.src[0].dtype, x.dtype)),
        (
            UPat(Ops.BITCAST, name="x"),
            lambda ctx, x: ctx.language.bitcast(ctx, ctx[x.src[0]], x.src[0].dtype, x.dtype),
        ),
    ]
)
"""uop -> WGSL text (ctx: the WGSLWriter): an expression for values, a statement for effects."""


_BOOL_TEMPLATES: dict[Ops, str] = {
    Ops.ADD: "({0} | {1})",
    Ops.OR: "({0} | {1})",
    Ops.MAX: "({0} | {1})",
    Ops.MUL: "({0} & {1})",
    Ops.AND: "({0} & {1})",
    Ops.XOR: "({0} != {1})",
    Ops.CMPNE: "({0} != {1})",
    Ops.CMPEQ: "({0} == {1})",
    Ops.CMPLT: "(!{0} & {1})",
    Ops.NEG: "(!{0})",
    Ops.TRUNC: "{0}",
}
_COMPARISONS: dict[Ops, str] = {Ops.CMPLT: "({0} < {1})", Ops.CMPNE: "({0} != {1})", Ops.CMPEQ: "({0} == {1})"}
_INT_TEMPLATES: dict[Ops, str] = {
    **_COMPARISONS,
    Ops.ADD: "({0} + {1})",
    Ops.SUB: "({0} - {1})",
    Ops.MUL: "({0} * {1})",
    Ops.AND: "({0} & {1})",
    Ops.OR: "({0} | {1})",
    Ops.XOR: "({0} ^ {1})",
    Ops.MAX: "max({0}, {1})",
    Ops.TRUNC: "{0}",
    Ops.MULACC: "(({0} * {1}) + {2})",
}
_WIDENING_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.MULACC})
"""Integer template ops whose 32-bit result may leave an 8/16-bit dtype's range."""
_FLOAT_TEMPLATES: dict[Ops, str] = {
    **_COMPARISONS,
    Ops.CMPNE: "(!({0} == {1}))",  # NaN != anything: lavapipe compiles WGSL's `!=` to an ordered compare
    Ops.ADD: "({0} + {1})",
    Ops.SUB: "({0} - {1})",
    Ops.MUL: "({0} * {1})",
    Ops.FDIV: "({0} / {1})",
    Ops.NEG: "(-{0})",
    Ops.RECIPROCAL: "(1.0f / {0})",
    Ops.SQRT: "sqrt({0})",
    Ops.TRUNC: "trunc({0})",
    Ops.MOD: "({0} % {1})",
    Ops.MULACC: "fma({0}, {1}, {2})",
    Ops.EXP2: "exp2({0})",
    Ops.LOG2: "log2({0})",
    Ops.SIN: "sin({0})",
    # exec_alu's MAX: a NaN operand is ignored (both NaN: NaN); of two equal zeros of opposite signs, +0 (their sum).
    # NaN is tested on the bits: shader compilers may fold `x != x` to false (WGSL does not promise IEEE NaN rules)
    Ops.MAX: (
        "select(select({1}, {0} + {1}, ({0} == {1}) && ({0} == -{1})), {0}, "
        "({0} > {1}) || ((bitcast<u32>({1}) & 0x7fffffffu) > 0x7f800000u))"
    ),
}


# ---- the renderer -----------------------------------------------------------------------------------------------


class WGSLRenderer(TargetRenderer[WGSLCompiler], target=WEBGPU):
    """WGSL compute shaders for the WEBGPU device; owns a `WGSLCompiler` (wgpu's validation).

    Args:
        device: the device name programs are built for.
        max_storage_buffers: storage bindings a kernel may use (its buffers, plus one for its variables); the WEBGPU
            device passes its adapter's limit, the default is WebGPU's guaranteed minimum.
    """

    native_ops = GroupOp.ALU

    def __init__(self, device: str = "WEBGPU", max_storage_buffers: int = 8) -> None:
        self.device = device
        self.max_storage_buffers = max_storage_buffers

    def make_compiler(self) -> WGSLCompiler:
        """wgpu's validation on the process's WebGPU device."""
        return WGSLCompiler()

    def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
        """One `@compute fn kiln_kernel` with its bindings, those of `signature` (see the module docstring)."""
        signature = signature or KernelSignature.of(uops)
        writer = WGSLWriter(self, signature)
        for uop in uops:
            writer.add(uop)
        buffers = [buffer.uop for buffer in signature.buffers]
        bindings = len(buffers) + (1 if writer.variable_slots else 0)
        if bindings > self.max_storage_buffers:
            raise ValueError(
                f"kernel {name} needs {bindings} storage buffers ({len(buffers)} buffers"
                f"{' + its variables' if writer.variable_slots else ''}); the WebGPU adapter allows "
                f"{self.max_storage_buffers} per shader stage"
            )
        parts = [f"// kiln {type(self).__name__} kernel {name}"]
        for binding, buffer in enumerate(buffers):
            declaration = f"{writer[buffer]}: {self._array(writer, buffer)}"
            parts.append(f"@group(0) @binding({binding}) var<storage, read_write> {declaration};")
        if writer.variable_slots:
            parts.append(f"@group(0) @binding({len(buffers)}) var<storage, read> {VARIABLES_NAME}: array<i32>;")
        parts += writer.module_lines
        parts += writer.helpers.values()
        sizes = self.workgroup_size(signature)
        parts.append(f"@compute @workgroup_size({sizes[0]}, {sizes[1]}, {sizes[2]})")
        parts.append(
            f"fn {ENTRY_NAME}(@builtin(workgroup_id) kiln_group: vec3<u32>, "
            "@builtin(local_invocation_id) kiln_local: vec3<u32>) {"
        )
        parts += writer.lines
        parts.append("}")
        return "\n".join(parts) + "\n"

    def _array(self, writer: WGSLWriter, buffer: UOp) -> str:
        assert isinstance(buffer.dtype, PtrDType)
        if buffer.dtype.base.scalar() in NARROW_BITS:
            raise ValueError(
                f"{self.device} stores no {buffer.dtype.base.scalar()!r} buffers: WGSL has no 8/16-bit storage "
                "(the WEBGPU device stores bool, int32, uint32 and float32)"
            )
        if writer.packed(buffer):
            return "array<atomic<u32>>" if buffer in writer.stored else "array<u32>"
        return f"array<{self.scalar_type(buffer.dtype.base)}>"

    def workgroup_size(self, signature: KernelSignature) -> tuple[int, int, int]:
        """Threads per workgroup per dimension, the signature's local size (a WGSL shader fixes them)."""
        sizes = signature.local_size or (1, 1, 1)
        constant = [size for size in sizes if isinstance(size, int)]
        if len(constant) != len(sizes):
            raise ValueError(f"WGSL needs a constant workgroup size, got {sizes}")
        return constant[0], constant[1], constant[2]

    def render_uop(self, writer: WGSLWriter, uop: UOp) -> str:
        """The WGSL text of `uop` from the first matching rule of `pm_wgsl`."""
        text, _ = pm_wgsl.rewrite_with_rule(uop, writer)
        if not isinstance(text, str):
            raise ValueError(f"WGSLRenderer cannot render {uop.op!r} of dtype {uop.dtype!r}")
        return text

    def scalar_type(self, dtype: DType) -> str:
        """The WGSL type of scalar `dtype` (ValueError for vectors and for 8/16/64-bit dtypes)."""
        name = WGSL_SCALAR_TYPES.get(dtype)
        if name is None:
            raise ValueError(f"WGSL has no type for {dtype!r}; the WGSL renderer computes in bool, i32, u32 and f32")
        return name

    # ---- constants ----

    def constant(self, value: ConstType, dtype: DType, writer: WGSLWriter | None = None) -> str:
        """A WGSL literal of `value` (the most negative i32 as a bit cast). NaN and the infinities have no literal:
        they are the run-time value `kiln_f32_bits(bits)`, declared in `writer`'s kernel (a bit cast of a literal
        is a constant expression, which Chromium's Tint evaluates and rejects: "value nan cannot be represented as
        'f32'"; a user function's result is no constant expression)."""
        if dtype == dtypes.bool:
            return "true" if value else "false"
        if dtype == dtypes.float32:
            number = float(value)
            if math.isnan(number) or math.isinf(number):
                bits = nonfinite_bits(number, dtypes.float32)
                if writer is None:
                    raise ValueError(f"WGSL writes {number} as a run-time value: constant() needs the kernel's writer")
                return f"{writer.require_helper('kiln_f32_bits', F32_BITS_HELPER)}({bits:#010x}u)"
            text = f"{number!r}f"  # the shortest decimal of an f32 value converts back to it exactly
        elif dtype in WGSL_SCALAR_TYPES and dtypes.is_int(dtype):
            if int(value) == -(2**31):
                return "bitcast<i32>(0x80000000u)"  # 2147483648i is not a literal WGSL accepts
            text = f"{int(value)}{'u' if dtypes.is_unsigned(dtype) else 'i'}"
        else:
            raise ValueError(f"WGSL has no literal of {dtype!r}")
        return f"({text})" if text.startswith("-") else text

    # ---- ALU ops ----

    def alu(self, writer: WGSLWriter, uop: UOp) -> str:
        """The WGSL expression of ALU `uop`."""
        operands = [writer[s] for s in uop.src]
        if uop.op is Ops.WHERE:
            return f"select({operands[2]}, {operands[1]}, {operands[0]})"
        kind = uop.src[-1].dtype
        if kind.count > 1 or uop.dtype.count > 1:
            raise ValueError(f"WGSLRenderer renders scalar ALU ops only, got {uop.op!r} on {kind!r}")
        template = None
        if dtypes.is_float(kind):
            template = _FLOAT_TEMPLATES.get(uop.op)
        elif dtypes.is_bool(kind):
            template = _BOOL_TEMPLATES.get(uop.op)
        else:
            return self.int_alu(uop, kind, operands)
        if dtypes.is_float(kind) and uop.op in (Ops.CMPNE, Ops.CMPEQ) and uop.src[0] is uop.src[1]:
            symbol = ">" if uop.op is Ops.CMPNE else "<="  # the NaN test x != x, on the bits (see the MAX template)
            return f"((bitcast<u32>({operands[0]}) & 0x7fffffffu) {symbol} 0x7f800000u)"
        if dtypes.is_float(kind) and (folded := self._foldable_float(writer, uop, operands)) is not None:
            return folded
        if uop.op is Ops.POW and dtypes.is_float(kind):
            writer.require_helper("kiln_f32_bits", F32_BITS_HELPER)  # kiln_pow's NaN and infinity
            return f"{writer.require_helper('kiln_pow', POW_HELPER)}({operands[0]}, {operands[1]})"
        if template is None:
            raise ValueError(f"WGSLRenderer has no {uop.op!r} for {kind!r}; codegen should decompose it")
        return template.format(*operands)

    def _foldable_float(self, writer: WGSLWriter, uop: UOp, operands: list[str]) -> str | None:
        """`x - x` and `x * 0` written so a shader compiler that assumes no NaN/inf cannot fold them to 0 (lavapipe
        does): 0 of the IEEE sign for finite x, NaN for NaN and infinities, as the IR computes them."""
        x = operands[0]
        not_finite = f"((bitcast<u32>({x}) & 0x7f800000u) == 0x7f800000u)"
        nan = self.constant(math.nan, dtypes.float32, writer)
        if uop.op is Ops.SUB and uop.src[0] is uop.src[1]:
            return f"select(0.0f, {nan}, {not_finite})"
        if uop.op is Ops.MUL and uop.src[1].op is Ops.CONST and uop.src[1].arg == 0:
            signed_zero = f"bitcast<f32>((bitcast<u32>({x}) ^ bitcast<u32>({operands[1]})) & 0x80000000u)"
            return f"select({signed_zero}, {nan}, {not_finite})"
        return None

    def int_alu(self, uop: UOp, dtype: DType, operands: list[str]) -> str:
        """An integer op with the IR's semantics: WGSL's i32/u32 arithmetic wraps around; 8/16-bit results of ops
        that can leave their range are narrowed again."""
        op = uop.op
        template = _INT_TEMPLATES.get(op)
        if template is not None:
            text = template.format(*operands)
            return narrow(text, dtype) if op in _WIDENING_OPS else text
        if op is Ops.NEG:
            return narrow(f"(0u - {operands[0]})" if dtypes.is_unsigned(dtype) else f"(-{operands[0]})", dtype)
        if op in (Ops.SHL, Ops.SHR):
            return narrow(self._shift(uop, dtype, operands[0], operands[1]), dtype)
        if op in (Ops.IDIV, Ops.MOD):
            kind, symbol = self.scalar_type(dtype), "/" if op is Ops.IDIV else "%"
            a, b, divisor = operands[0], operands[1], uop.src[1]
            if divisor.op is Ops.CONST and divisor.arg != 0:
                return narrow(f"({a} {symbol} {b})", dtype)
            # WGSL's x / 0 is x; the IR's is 0. INT8_MIN / -1 = 128 narrows back to INT8_MIN, as the IR wraps
            return narrow(f"select(({a} {symbol} {b}), {kind}(0), {b} == {kind}(0))", dtype)
        raise ValueError(f"WGSLRenderer has no {op!r} for integer dtype {dtype!r}")

    def _shift(self, uop: UOp, dtype: DType, a: str, b: str) -> str:
        """SHL/SHR; a count outside [0, bits) gives 0 (SHR of a signed value: its sign), not WGSL's count mod 32."""
        symbol, bits = "<<" if uop.op is Ops.SHL else ">>", dtype.itemsize * 8
        count = uop.src[1]
        if count.op is Ops.CONST and 0 <= count.arg < bits:
            return f"({a} {symbol} {int(count.arg)}u)"
        signed = not dtypes.is_unsigned(dtype)
        outside = f"({a} >> 31u)" if uop.op is Ops.SHR and signed else f"{self.scalar_type(dtype)}(0)"
        return f"select({outside}, ({a} {symbol} u32({b})), u32({b}) < {bits}u)"

    # ---- conversions ----

    def cast(self, writer: WGSLWriter, value: str, source: DType, target: DType) -> str:
        """A value conversion (CAST) with the IR's semantics."""
        if source.count > 1 or target.count > 1:
            raise ValueError(f"WGSLRenderer casts scalars only, got {source!r} -> {target!r}")
        if target == dtypes.bool:
            if source == dtypes.bool:
                return value
            return f"(!({value} == {self.constant(0, source)}))"  # NaN is true; `!=` is ordered on lavapipe
        if dtypes.is_float(source) and dtypes.is_int(target):
            name = f"kiln_to_{target.name}"
            minimum = self.constant(int(dtypes.min(target)), target)
            helper = float_to_int_helper(name, target, self.scalar_type(target), minimum)
            return f"{writer.require_helper(name, helper)}({value})"
        converted = f"{self.scalar_type(target)}({value})"
        return narrow(converted, target) if dtypes.is_int(target) and source != dtypes.bool else converted

    def bitcast(self, writer: WGSLWriter, value: str, source: DType, target: DType) -> str:
        """A reinterpretation of the bits (BITCAST); bool <-> bool is the value itself."""
        if source == dtypes.bool or target == dtypes.bool:
            return self.cast(writer, value, source, target)
        return narrow(f"bitcast<{self.scalar_type(target)}>({value})", target)
