"""A symbolic size (an int, or an index expression over Variables) printed as a C or JavaScript integer expression.

Exported code computes the sizes that depend on the run's variables (a symbolic input's element count, a launch's
core or workgroup count) from those variables' values, which are plain `int` / `number` arguments there. The index
expressions kiln builds use few ops; division and modulo are floor operations on non-negative values, which both
languages' truncating division and remainder agree with (JavaScript's `/` is wrapped in `Math.trunc`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from kiln.tensor.symbolic import Size
from kiln.uops import Ops, UOp

__all__ = ["numel_expression", "size_expression"]

_BINARY = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!="}


def size_expression(size: Size, language: str) -> str:
    """`size` as an expression of `language` ("c" or "js") over the variables' names; ValueError for an op the
    printer does not know (naming it)."""
    if isinstance(size, int):
        return str(size)
    return _render(size, language)


def numel_expression(shape: Iterable[Size], language: str) -> str:
    """The element count of `shape` as an expression (an int literal when every entry is an int)."""
    entries = list(shape)
    if all(isinstance(entry, int) for entry in entries):
        return str(math.prod(entry for entry in entries if isinstance(entry, int)))
    return "*".join(f"({size_expression(entry, language)})" for entry in entries) or "1"


def _render(node: UOp, language: str) -> str:
    if node.op is Ops.CONST:
        return str(int(node.arg))
    if node.op is Ops.DEFINE_VAR:
        return str(node.arg.name)
    if node.op is Ops.BIND:
        return _render(node.src[0], language)
    if node.op is Ops.CAST:
        return _render(node.src[0], language)
    operands = [_render(source, language) for source in node.src]
    if node.op in _BINARY:
        return f"({operands[0]}{_BINARY[node.op]}{operands[1]})"
    if node.op is Ops.IDIV:
        return f"({operands[0]}/{operands[1]})" if language == "c" else f"Math.trunc({operands[0]}/{operands[1]})"
    if node.op is Ops.NEG:
        return f"(-{operands[0]})"
    if node.op is Ops.MAX:
        return f"(({operands[0]}>{operands[1]})?{operands[0]}:{operands[1]})"
    if node.op is Ops.WHERE:
        return f"({operands[0]}?{operands[1]}:{operands[2]})"
    raise ValueError(f"export: cannot print size expression op {node.op!r} (in {node!r}) as {language}")
