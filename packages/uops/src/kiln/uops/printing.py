"""Text forms of a UOp graph: `print_graph` (stable, for golden tests) and `pyrender` (Python that rebuilds it)."""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

from kiln.uops.dtype import DType, PtrDType
from kiln.uops.ops import Ops
from kiln.uops.uop import UOp


def format_dtype(dtype: DType) -> str:
    """A dtype without the `dtypes.` prefix: 'float32', 'float32.vec(4)', 'float32.ptr(16, LOCAL)'."""
    if isinstance(dtype, PtrDType):
        args = [] if dtype.size == -1 and dtype.scope.name == "GLOBAL" else [str(dtype.size)]
        if dtype.scope.name != "GLOBAL":
            args.append(dtype.scope.name)
        text = f"{format_dtype(dtype.base)}.ptr({', '.join(args)})"
    else:
        text = dtype.name
    return text if dtype.count == 1 else f"{text}.vec({dtype.count})"


def format_node(node: UOp, numbers: dict[UOp, int]) -> str:
    """One node as `%n = OP dtype %a %b arg=... tag=...` given the numbers of its sources."""
    parts = [f"%{numbers[node]} = {node.op.name} {format_dtype(node.dtype)}"]
    parts.extend(f"%{numbers[source]}" if source in numbers else "%?" for source in node.src)
    if node.arg is not None:
        parts.append(f"arg={_format_arg(node.arg)}")
    if node.tag is not None:
        parts.append(f"tag={node.tag!r}")
    return " ".join(parts)


def print_graph(root: UOp) -> str:
    """The graph of `root`, one node per line in topological order, numbered from 0:

    %0 = DEFINE_VAR index arg=VarArg(name='a', lo=0, hi=9)
    %1 = CONST index arg=4
    %2 = MUL index %0 %1
    """
    numbers: dict[UOp, int] = {}
    lines = []
    for node in root.toposort():
        numbers[node] = len(numbers)
        lines.append(format_node(node, numbers))
    return "\n".join(lines)


def _format_arg(arg: Any) -> str:
    return arg.name if isinstance(arg, Ops) else _python_literal(arg)


def _python_literal(value: Any) -> str:
    # repr, except for the values whose repr is not valid Python
    if isinstance(value, float):
        if math.isnan(value):
            return "math.nan"
        if math.isinf(value):
            return "math.inf" if value > 0 else "-math.inf"
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, tuple):
        items = [_python_literal(item) for item in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ", ".join(f"{f.name}={_python_literal(getattr(value, f.name))}" for f in dataclasses.fields(value))
        return f"{type(value).__name__}({fields})"
    return repr(value)


def _names_used(value: Any, names: set[str]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        names.add("math")
    elif isinstance(value, enum.Enum) or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        names.add(type(value).__name__)
        if not isinstance(value, enum.Enum):
            for f in dataclasses.fields(value):
                _names_used(getattr(value, f.name), names)
    elif isinstance(value, tuple):
        for item in value:
            _names_used(item, names)


def _dtype_names(dtype: DType, names: set[str]) -> None:
    names.add("dtypes")
    if isinstance(dtype, PtrDType):
        _dtype_names(dtype.base, names)
        if dtype.scope.name != "GLOBAL":
            names.add("MemoryScope")


def pyrender(root: UOp, variable: str = "root") -> str:
    """Python source that rebuilds `root`'s graph into `variable`; exec'ing it gives back the same object."""
    numbers: dict[UOp, int] = {}
    body = []
    names = {"UOp", "Ops"}
    for node in root.toposort():
        numbers[node] = len(numbers)
        _names_used(node.arg, names)
        _names_used(node.tag, names)
        _dtype_names(node.dtype, names)
        sources = [f"n{numbers[source]}" for source in node.src]
        source_tuple = f"({sources[0]},)" if len(sources) == 1 else f"({', '.join(sources)})"
        call = f"UOp(Ops.{node.op.name}, {node.dtype!r}, {source_tuple}, {_python_literal(node.arg)}"
        if node.tag is not None:
            call += f", tag={_python_literal(node.tag)}"
        body.append(f"n{numbers[node]} = {call})")
    body.append(f"{variable} = n{numbers[root]}")
    imports = []
    if "math" in names:
        imports.append("import math")
        names.discard("math")
    imports.append(f"from kiln.uops import {', '.join(sorted(names))}")
    return "\n".join(imports + body) + "\n"
