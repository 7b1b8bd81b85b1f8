"""Rewriting a linear program uop by uop, keeping it in the linear program format.

A renderer that needs to change ops before rendering (emulated float formats, exact multiply-adds) maps every uop,
in program order, to a replacement graph built from the replacements of its sources. The new uops of a replacement
are placed right before the place of the uop they replace and tagged with that place, so a helper value is never
shared between two places of the program: hash-consing would otherwise hand the second place a uop placed inside a
loop or IF the second place is outside of.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kiln.uops import UOp

Rewrite = Callable[[UOp, tuple[UOp, ...]], "UOp | None"]
"""(uop, its sources' replacements) -> the replacement, or None to keep the uop (with the new sources)."""


def rewrite_linear(uops: Sequence[UOp], rewrite: Rewrite) -> list[UOp]:
    """The linear program `uops` with every uop replaced by `rewrite` (see the module notes)."""
    result: list[UOp] = []
    mapped: dict[UOp, UOp] = {}
    for site, uop in enumerate(uops):
        src = tuple(mapped[s] for s in uop.src)
        replacement = rewrite(uop, src)
        if replacement is None:
            if src == uop.src:
                mapped[uop] = uop
                result.append(uop)
                continue
            replacement = uop.replace(src=src)
        mapped[uop] = _place(replacement, frozenset(src), site, result)
    return result


def _place(root: UOp, available: frozenset[UOp], site: int, result: list[UOp]) -> UOp:
    """Append the new uops of `root` to `result` (sources first), tagged with `site`; returns the placed root."""
    placed: dict[UOp, UOp] = {}
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if node in placed:
            continue
        if node in available:
            placed[node] = node
            continue
        if not expanded:
            stack.append((node, True))
            stack.extend((s, False) for s in reversed(node.src) if s not in placed)
            continue
        tag = ("rewritten", site) if node.tag is None else node.tag
        rebuilt = UOp(node.op, node.dtype, tuple(placed[s] for s in node.src), node.arg, tag)
        placed[node] = rebuilt
        result.append(rebuilt)
    return placed[root]
