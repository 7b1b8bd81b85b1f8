"""Text forms of a node graph that UOp methods use: `nested_repr` (repr), `stable_repr` (the args' text hashed by
`UOp.key`) and `render` (a C-like expression string, `UOp.render`).

They read nodes through the `GraphNode` protocol and never import kiln.uops.uop, so uop.py can import this module
at module level (the package's import graph stays a DAG).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Any, Final

from kiln.uops.node import GraphNode
from kiln.uops.ops import Ops

__all__ = ["nested_repr", "render", "stable_repr"]


_PLAIN_TYPES: Final = frozenset({type(None), bool, int, float, str, bytes})
"""Types whose repr is already stable (most args and tags: a plain check first keeps UOp.key cheap)."""


def stable_repr(value: Any) -> str:
    """repr, except that sets are sorted (their order depends on per-process string hashing); used by UOp.key."""
    if type(value) in _PLAIN_TYPES:
        return repr(value)
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({{{', '.join(sorted(stable_repr(item) for item in value))}}})"
    if isinstance(value, tuple):
        return f"({''.join(stable_repr(item) + ', ' for item in value)})"
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ", ".join(f"{name}={stable_repr(getattr(value, name))}" for name in _field_names(type(value)))
        return f"{type(value).__name__}({fields})"
    return repr(value)


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(kind))


_MAX_INDENT: Final = 64


def nested_repr(root: GraphNode) -> str:
    """Nested, indented repr; a node with sources used twice is named `x<n>:=` once and referenced as `x<n>` after."""
    users: dict[GraphNode, int] = {}
    for node in root.toposort():
        for source in node.src:
            users[source] = users.get(source, 0) + 1
    labels: dict[GraphNode, str] = {}
    printed: set[GraphNode] = set()
    lines: list[str] = []
    stack: list[tuple[GraphNode, int, str]] = [(root, 0, "")]
    while stack:
        node, indent, suffix = stack.pop()
        pad = " " * indent
        if node in printed:
            lines.append(f"{pad}{labels[node]}{suffix}")
            continue
        prefix = ""
        if node.src and users.get(node, 0) > 1:
            labels[node] = f"x{len(labels)}"
            prefix = f"{labels[node]}:="
            printed.add(node)
        tag = "" if node.tag is None else f", tag={node.tag!r}"
        head = f"{pad}{prefix}UOp({node.op!r}, {node.dtype!r}, arg={node.arg!r}{tag}, src=("
        if not node.src:
            lines.append(f"{head})){suffix}")
            continue
        lines.append(head)
        last = len(node.src) - 1
        for position in range(last, -1, -1):
            # indentation stops growing past _MAX_INDENT so deep graphs print in linear size
            child_indent = min(indent + 2, _MAX_INDENT)
            stack.append((node.src[position], child_indent, ",))" + suffix if position == last else ","))
    return "\n".join(lines)


# ---- render: a C-like string of a symbolic expression --------------------------------------------------------

_INFIX: dict[Ops, str] = {
    Ops.ADD: "+",
    Ops.SUB: "-",
    Ops.MUL: "*",
    Ops.IDIV: "/",
    Ops.FDIV: "/",
    Ops.MOD: "%",
    Ops.CMPLT: "<",
    Ops.CMPNE: "!=",
    Ops.CMPEQ: "==",
    Ops.AND: "&",
    Ops.OR: "|",
    Ops.XOR: "^",
    Ops.SHL: "<<",
    Ops.SHR: ">>",
}
_CALLS: dict[Ops, str] = {
    Ops.MAX: "max",
    Ops.EXP2: "exp2",
    Ops.LOG2: "log2",
    Ops.SIN: "sin",
    Ops.SQRT: "sqrt",
    Ops.TRUNC: "trunc",
    Ops.POW: "pow",
    Ops.MULACC: "fma",
}


def _render_const(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "{" + ",".join(_render_const(item) for item in value) + "}"
    return repr(value)


def _render_node(node: GraphNode, parts: list[str]) -> str:
    op = node.op
    if op is Ops.CONST or op is Ops.VCONST:
        return _render_const(node.arg)
    if op is Ops.DEFINE_VAR or op is Ops.SPECIAL:
        return str(node.arg.name)
    if op is Ops.RANGE:
        return f"ridx{node.arg.axis}"
    if op is Ops.BIND:
        return parts[0]
    if op in _INFIX:
        return f"({parts[0]}{_INFIX[op]}{parts[1]})"
    if op is Ops.NEG:
        return f"(-{parts[0]})"
    if op is Ops.RECIPROCAL:
        return f"(1/{parts[0]})"
    if op is Ops.WHERE:
        return f"({parts[0]}?{parts[1]}:{parts[2]})"
    if op is Ops.CAST:
        return f"(({node.dtype.name}){parts[0]})"
    name = _CALLS.get(op, op.name.lower())
    return f"{name}({','.join(parts)})"


def render(uop: GraphNode) -> str:
    """A C-like string of a symbolic expression: `((a*4)+b)`, `(x/4)` (C division), `max(a,b)`, `(c?a:b)`.

    Variables render as their names, RANGE as `ridx<axis>`, a `min` built as where(a<b, a, b) as that where.
    """
    rendered: dict[GraphNode, str] = {}
    for node in uop.toposort():
        rendered[node] = _render_node(node, [rendered[source] for source in node.src])
    return rendered[uop]
