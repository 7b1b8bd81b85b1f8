"""Normalizing the graphs to realize: realized nodes become their buffer views, buffers become numbered inputs.

Two requests with the same structure (the same ops and constants over buffers of the same sizes and dtypes, in the
same positions) normalize to the very same SINK node (UOps are hash-consed), which keys the schedule cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kiln.tensor.schedule.items import InputSlot
from kiln.uops import DType, Ops, UOp

_REALIZED = "tensor_realized"


def realized_view(uop: UOp) -> UOp | None:
    """The buffer view `uop`'s value was realized into, or None."""
    view: UOp | None = uop.__dict__.get(_REALIZED)
    return view


def record_realized(uop: UOp, view: UOp) -> None:
    """Remembers that `uop`'s value lives in `view` (movement ops over BUFFER nodes) for later schedules."""
    if uop is not view:
        uop.__dict__[_REALIZED] = view


@dataclass(frozen=True)
class NormalizedGraph:
    """The SINK of the normalized requested nodes and the real BUFFER node of each input position."""

    sink: UOp
    inputs: tuple[UOp, ...]


_placeholders: dict[tuple[int, int, DType, str], UOp] = {}


def _placeholder(position: int, node: UOp) -> UOp:
    key = (position, node.arg.size, node.dtype, node.arg.device)
    found = _placeholders.get(key)
    if found is None:
        if len(_placeholders) > 65536:  # sizes seen long ago: let them go
            _placeholders.clear()
        found = _placeholders[key] = UOp(Ops.BUFFER, node.dtype, (), InputSlot(position, *key[1:2], key[3]))
    return found


def normalize(uops: Sequence[UOp]) -> NormalizedGraph:
    """The normalized form of the graphs of `uops` (see the module docstring)."""
    inputs: list[UOp] = []
    resolved: dict[UOp, UOp] = {}
    # iterative post-order walk; a realized node stands for its view (movement ops over BUFFER nodes)
    stack: list[UOp] = [UOp(Ops.SINK, src=tuple(uops))]
    root = stack[0]
    while stack:
        node = stack[-1]
        if node in resolved:
            stack.pop()
            continue
        if node.op is Ops.BUFFER:
            resolved[node] = _placeholder(len(inputs), node)
            inputs.append(node)
            stack.pop()
            continue
        view = node.__dict__.get(_REALIZED)
        if view is not None:
            if view in resolved:
                resolved[node] = resolved[view]
                stack.pop()
            else:
                stack.append(view)
            continue
        pending = [source for source in node.src if source not in resolved]
        if pending:
            stack.extend(reversed(pending))
            continue
        stack.pop()
        sources = tuple([resolved[source] for source in node.src])
        resolved[node] = node if sources == node.src else node.replace(src=sources)
    return NormalizedGraph(resolved[root], tuple(inputs))
