"""`CDialect`: how one language of the C family (C, CUDA C, OpenCL C, MSL, C for amdgcn ...) spells a kernel, as data.

`CStyleRenderer` (c_style.py) prints every kernel through one set of rules and helper templates (float -> int,
shifts, threefry, the tensor-core helper's signature) that read their spellings from the renderer's dialect: type
names, builtins, qualifiers, how a hardware index or a vector lane is written. A new C-like language is a new
`CDialect` (plus, where its memory accesses differ, a few string rules of its own), not a copy of the helpers.

Templates are `str.format` strings; each field says which names it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kiln.uops import DType, MemoryScope, Ops, dtypes

__all__ = [
    "C_DIALECT",
    "C_FLOAT_FUNCTIONS",
    "C_SCALAR_TYPES",
    "SHORT_NAMES_DIALECT",
    "SHORT_SCALAR_TYPES",
    "CDialect",
]

C_SCALAR_TYPES: dict[DType, str] = {
    dtypes.bool: "_Bool",
    dtypes.int8: "signed char",
    dtypes.uint8: "unsigned char",
    dtypes.int16: "short",
    dtypes.uint16: "unsigned short",
    dtypes.int32: "int",
    dtypes.uint32: "unsigned int",
    dtypes.int64: "long long",
    dtypes.uint64: "unsigned long long",
    dtypes.float16: "_Float16",
    dtypes.float32: "float",
    dtypes.float64: "double",
}
"""C type of each scalar dtype (fp8 and bfloat16 are emulated before rendering)."""

SHORT_SCALAR_TYPES: dict[DType, str] = {
    dtypes.bool: "bool",
    dtypes.int8: "char",
    dtypes.uint8: "uchar",
    dtypes.int16: "short",
    dtypes.uint16: "ushort",
    dtypes.int32: "int",
    dtypes.uint32: "uint",
    dtypes.int64: "long",
    dtypes.uint64: "ulong",
    dtypes.float32: "float",
}
"""The short type names OpenCL C and MSL share (their `long` is 64-bit); each adds its own float types."""

C_FLOAT_FUNCTIONS: dict[tuple[Ops, DType], str] = {
    (Ops.SQRT, dtypes.float32): "__builtin_sqrtf",
    (Ops.SQRT, dtypes.float64): "__builtin_sqrt",
    (Ops.TRUNC, dtypes.float32): "__builtin_truncf",
    (Ops.TRUNC, dtypes.float64): "__builtin_trunc",
    (Ops.MULACC, dtypes.float32): "__builtin_fmaf",
    (Ops.MULACC, dtypes.float64): "__builtin_fma",
}
"""Correctly rounded C builtins (no fast-math: each is exact or IEEE-exact)."""


@dataclass(frozen=True)
class CDialect:
    """The spellings of one C-family language.

    Attributes:
        name: the language, for messages.
        scalar_types: the type name of each scalar dtype it computes in.
        float_functions: (op, float dtype) -> the function computing it exactly (narrower floats call the float32
            one and convert back).
        cplusplus: C++ (`bool` is spelled `bool`; BITCAST through memcpy, as C++ has no compound literals of unions
            and reading a union member other than the last one written is undefined there).
        preamble: lines before everything else (includes, pragmas, macros).
        kernel_prefix: written before `void <entry>(...)`.
        launch_bounds: written between `void` and the entry name, given `threads` (the block size); None: nothing.
        helper_prefix: written before each helper function.
        restrict_keyword: the no-alias qualifier of buffer parameters ("" for none).
        buffer_parameter: a buffer parameter, given `const` ("const " for a buffer only read, else ""), `element`,
            `restrict`, `name` and `slot`.
        variable_parameter: a variable's parameter, given `type`, `name` and `slot` (counted after the buffers).
        extra_parameters: parameters after the variables (hardware indices passed as arguments).
        stored_bool: the type bool values have in memory (buffers and arrays); None: the bool type itself.
        shared_prefix: the qualifier of block-shared arrays.
        barrier_statement: the statement of a BARRIER; None: the target has none.
        group_index: the block index along one axis, given `axis` ("x", "y", "z") and `dimension` (0, 1, 2); None:
            no blocks of threads.
        thread_index: the thread index within a block along one axis (same names); None: no blocks of threads.
        vector_pointer_spaces: the address-space qualifier of a vector pointer cast from an element pointer into a
            buffer of each scope (with its trailing space).
        packed_vectors: vector accesses go through the `packed_` vector types (only the element's alignment).
        builtin_vectors: the lane counts of the language's own vector types, named `<element><lanes>` (`float4`);
            (): none, the renderer declares a vector type of its own for each one a kernel uses.
        bool_vector_element: the element type of a vector of bools; None: the bool type itself.
        vector_literal: a vector value, given `type` and `lanes` (the lane expressions joined by commas).
        lane: one lane of a vector expression, given `vector` and `lane` (an int).
        bitcast: a bit cast, given `type` and `value`; None: through a union (C) or memcpy (C++).
        long_suffix: the suffix of a 64-bit integer literal (before it, `u` for unsigned ones).
        uint32: the helpers' spelling of uint32 (`int64` and `uint64` are the scalar types' own names).
        unsigned_signed_arithmetic: signed 32/64-bit ADD, SUB, MUL and NEG are computed in the unsigned type of the
            same width, for languages where signed overflow is undefined and no flag makes it wrap.
        helper_float: the float type the float -> int helper computes in, and `helper_float_suffix` its literals'.
        not_finite: the test that `x` is NaN or infinite, given `x`.
        float_modulo: `x` truncated and reduced modulo `m` (2**64, exactly), given `x` and `m`.
        nonfinite_float: a float32 NaN or infinity made from its bits, given `bits` (an int); None: the `bitcast`
            of the bits as an unsigned literal where the dialect has one, else by builtins.
        nonfinite_double: the same for float64, given `bits` and `unsigned` ("u" when the sign bit is set, else "").
    """

    name: str
    scalar_types: Mapping[DType, str] = field(default_factory=lambda: C_SCALAR_TYPES)
    float_functions: Mapping[tuple[Ops, DType], str] = field(default_factory=lambda: C_FLOAT_FUNCTIONS)
    cplusplus: bool = False
    preamble: tuple[str, ...] = ()
    kernel_prefix: str = ""
    launch_bounds: str | None = None
    helper_prefix: str = "static inline "
    restrict_keyword: str = "restrict"
    buffer_parameter: str = "{const}{element}* {restrict} {name}"
    variable_parameter: str = "{type} {name}"
    extra_parameters: tuple[str, ...] = ()
    stored_bool: str | None = None
    shared_prefix: str = ""
    barrier_statement: str | None = None
    group_index: str | None = None
    thread_index: str | None = None
    vector_pointer_spaces: Mapping[MemoryScope, str] = field(default_factory=dict)
    packed_vectors: bool = False
    builtin_vectors: tuple[int, ...] = ()
    bool_vector_element: str | None = "unsigned char"
    vector_literal: str = "(({type}){{{lanes}}})"
    lane: str = "{vector}[{lane}]"
    bitcast: str | None = None
    long_suffix: str = "ll"
    uint32: str = "unsigned int"
    unsigned_signed_arithmetic: bool = False
    helper_float: str = "double"
    helper_float_suffix: str = ""
    not_finite: str = "!__builtin_isfinite({x})"
    float_modulo: str = "__builtin_fmod(__builtin_trunc({x}), {m})"
    nonfinite_float: str | None = None
    nonfinite_double: str | None = None

    def __post_init__(self) -> None:
        # a dialect with a bit-cast template spells a NaN or an infinity as the bit cast of its unsigned bits
        if self.bitcast is not None:
            for name, dtype, suffix in (
                ("nonfinite_float", dtypes.float32, "u"),
                ("nonfinite_double", dtypes.float64, "u" + self.long_suffix),
            ):
                type_name = self.scalar_types.get(dtype)
                if getattr(self, name) is None and type_name is not None:
                    object.__setattr__(self, name, self.bitcast.format(type=type_name, value="{bits:#x}" + suffix))

    @property
    def int64(self) -> str:
        """The helpers' spelling of int64."""
        return self.scalar_types[dtypes.int64]

    @property
    def uint64(self) -> str:
        """The helpers' spelling of uint64."""
        return self.scalar_types[dtypes.uint64]


C_DIALECT = CDialect("C")
"""GNU C for the host compilers (gcc, clang): vector extensions, builtins, `restrict` buffers."""

SHORT_NAMES_DIALECT = CDialect(
    "OpenCL C / MSL",
    scalar_types=SHORT_SCALAR_TYPES,
    long_suffix="l",  # OpenCL C reserves `long long`; MSL has only `long` / `ulong` (64-bit)
    unsigned_signed_arithmetic=True,
    not_finite="!isfinite({x})",
)
"""What OpenCL C and MSL spell alike, the base both replace fields of: short type names with a 64-bit `long`, `l`
literals, signed ADD/SUB/MUL/NEG through the unsigned type (signed overflow is undefined in both), `isfinite`."""
