"""The Python renderer: linear programs as text for the PYTHON device, which runs codegen's interpreter on them.

The source is a pickle-free, line-based text form of the linear program that `parse_linear` reads back into the
very same uops (hash-consing makes them identical objects). Line 1 is a header; then one JSON array per uop, in
program order: `[op, dtype, [source line numbers], arg]` (tags, when present, as a fifth element). Dtypes and
args are small JSON values (see `encode_dtype`, `encode_arg`); floats are written in hexadecimal, so they come back
bit for bit (inf, NaN and -0.0 included).

`PythonCompiler` is an identity compiler: it checks that the source parses into a valid linear program and returns
its UTF-8 bytes; the PYTHON device turns a binary back into uops with `PythonCompiler.load`.
"""

from __future__ import annotations

import json
from typing import Any

from kiln.codegen import Compiler, KernelSignature, verify_linear
from kiln.renderers.target import PYTHON, TargetRenderer
from kiln.uops import (
    AxisKind,
    DType,
    GroupOp,
    MemoryScope,
    Ops,
    PtrDType,
    RangeArg,
    SpecialArg,
    UOp,
    VarArg,
    dtypes,
)

HEADER = "# kiln linear program v1"
"""The first line of every Python-renderer source."""

Json = Any


def encode_dtype(dtype: DType) -> Json:
    """A scalar as its name, a vector as [name, lanes], a pointer as {"ptr": base, "size", "scope", "count"}."""
    if isinstance(dtype, PtrDType):
        return {"ptr": encode_dtype(dtype.base), "size": dtype.size, "scope": dtype.scope.name, "count": dtype.count}
    return dtype.name if dtype.count == 1 else [dtype.name, dtype.count]


def decode_dtype(data: Json) -> DType:
    """The dtype written by `encode_dtype`."""
    if isinstance(data, str):
        return dtypes.void if data == "void" else dtypes.index if data == "index" else dtypes.from_name(data)
    if isinstance(data, list) and len(data) == 2:
        return decode_dtype(data[0]).vec(int(data[1]))
    if isinstance(data, dict) and "ptr" in data:
        pointer = decode_dtype(data["ptr"]).ptr(int(data["size"]), MemoryScope[data["scope"]])
        return pointer.vec(int(data["count"])) if data["count"] > 1 else pointer
    raise ValueError(f"not an encoded dtype: {data!r}")


def encode_arg(arg: Any) -> Json:
    """An arg (or tag) as JSON: None, bools and ints as themselves, floats as {"float": hex}, payloads tagged."""
    if arg is None or isinstance(arg, (bool, int, str)):
        return arg
    if isinstance(arg, float):
        return {"float": arg.hex()}  # exact; "inf", "-inf", "nan" for the specials
    if isinstance(arg, tuple):
        return {"tuple": [encode_arg(item) for item in arg]}
    if isinstance(arg, RangeArg):
        return {"range": [arg.axis, arg.kind.name]}
    if isinstance(arg, VarArg):
        return {"var": [arg.name, arg.lo, arg.hi]}
    if isinstance(arg, SpecialArg):
        return {"special": arg.name}
    if isinstance(arg, Ops):
        return {"op": arg.name}
    raise ValueError(f"the Python renderer cannot write the arg {arg!r} of type {type(arg).__name__}")


def decode_arg(data: Json) -> Any:
    """The arg written by `encode_arg`."""
    if not isinstance(data, dict):
        return data
    if len(data) != 1:
        raise ValueError(f"not an encoded arg: {data!r}")
    kind, value = next(iter(data.items()))
    if kind == "float":
        return float.fromhex(value)
    if kind == "tuple":
        return tuple(decode_arg(item) for item in value)
    if kind == "range":
        return RangeArg(int(value[0]), AxisKind[value[1]])
    if kind == "var":
        return VarArg(str(value[0]), int(value[1]), int(value[2]))
    if kind == "special":
        return SpecialArg(str(value))
    if kind == "op":
        return Ops[value]
    raise ValueError(f"unknown arg kind {kind!r} in {data!r}")


def render_linear(uops: list[UOp]) -> str:
    """The text form of linear program `uops`."""
    numbers: dict[UOp, int] = {}
    lines = [HEADER]
    for uop in uops:
        missing = [s for s in uop.src if s not in numbers]
        if missing:
            raise ValueError(f"{uop.op!r} uses a {missing[0].op!r} that is not earlier in the program")
        entry = [uop.op.name, encode_dtype(uop.dtype), [numbers[s] for s in uop.src], encode_arg(uop.arg)]
        if uop.tag is not None:
            entry.append(encode_arg(uop.tag))
        numbers[uop] = len(numbers)
        lines.append(json.dumps(entry, separators=(",", ":"), allow_nan=False))
    return "\n".join(lines) + "\n"


def parse_linear(source: str) -> list[UOp]:
    """The uops of a text form written by `render_linear`; ValueError naming the bad line otherwise."""
    lines = source.splitlines()
    if not lines or lines[0] != HEADER:
        raise ValueError(f"a Python-renderer program starts with {HEADER!r}, got {lines[0] if lines else ''!r}")
    uops: list[UOp] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            entry = json.loads(line)
            op, dtype, sources, arg = Ops[entry[0]], decode_dtype(entry[1]), entry[2], decode_arg(entry[3])
            tag = decode_arg(entry[4]) if len(entry) > 4 else None
            if any(not isinstance(s, int) or not 0 <= s < len(uops) for s in sources):
                raise ValueError(f"sources {sources} must be earlier lines")
            uops.append(UOp(op, dtype, tuple(uops[s] for s in sources), arg, tag))
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise ValueError(f"line {number} of the program is not a uop: {error} ({line[:200]!r})") from error
    return uops


class PythonCompiler(Compiler):
    """The identity compiler of the Python renderer: source -> its UTF-8 bytes, once it parses and verifies."""

    identity = "kiln-python-linear v1"

    def compile(self, source: str) -> bytes:
        """The bytes of `source` after checking it is a valid linear program (RuntimeError otherwise)."""
        try:
            verify_linear(parse_linear(source))
        except ValueError as error:
            raise RuntimeError(f"the Python renderer's program is invalid: {error}") from error
        return source.encode()

    def load(self, binary: bytes) -> list[UOp]:
        """The linear program of a binary from `compile` (what the PYTHON device runs with `run_program`)."""
        return parse_linear(binary.decode())


class PythonRenderer(TargetRenderer[PythonCompiler], target=PYTHON):
    """Linear programs as text for the PYTHON device (the reference interpreter). It renders every op and dtype
    the interpreter knows: blocks of threads with shared memory and barriers, vectors, all ALU ops natively.
    """

    vector_widths = (2, 4)
    native_ops = GroupOp.ALU

    def make_compiler(self) -> PythonCompiler:
        """The identity compiler (it checks the program parses)."""
        return PythonCompiler()

    def render(self, uops: list[UOp], name: str, signature: KernelSignature | None = None) -> str:
        """The text form of `uops` (see `render_linear`; the name is not part of it, and the parameters are the
        text's own DEFINE_GLOBAL and DEFINE_VAR lines, so `signature` adds nothing)."""
        return render_linear(uops)
