"""Helpers over the loops of a kernel graph: which RANGEs exist, how they nest, which are open at a node."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping

from kiln.uops import AxisKind, NodeSlot, Ops, UOp

# Nesting order of loop kinds (outermost first). Kinds that become hardware indices or vector lanes never nest as
# loops, but they still need a place in axis listings. A BLOCK loop (reduce blocking) encloses the output loops but
# sits inside the threads: each thread walks the K blocks over its own outputs.
AXIS_KIND_RANK: dict[AxisKind, int] = {
    AxisKind.THREAD: 0,
    AxisKind.GLOBAL: 0,
    AxisKind.BLOCK: 1,
    AxisKind.LOOP: 2,
    AxisKind.LOCAL: 3,
    AxisKind.GROUP_REDUCE: 4,
    AxisKind.REDUCE: 5,
    AxisKind.UPCAST: 6,
    AxisKind.UNROLL: 7,
}

REDUCE_KINDS = frozenset({AxisKind.REDUCE, AxisKind.GROUP_REDUCE, AxisKind.UNROLL})
"""Kinds of the axes a REDUCE runs over."""


def range_sort_key(rng: UOp) -> tuple[int, int]:
    """Nesting key of a RANGE: its kind's rank, then its axis number."""
    return AXIS_KIND_RANK[rng.arg.kind], rng.arg.axis


_ranges_of: weakref.WeakKeyDictionary[UOp, tuple[UOp, ...]] = weakref.WeakKeyDictionary()


def kernel_ranges(root: UOp) -> list[UOp]:
    """Every RANGE of the graph, in nesting order (kind rank, then axis number)."""
    found = _ranges_of.get(root)
    if found is None:
        # uops are immutable, so the answer for one root never changes: remember it while the root lives
        found = _ranges_of[root] = tuple(sorted((n for n in root.toposort() if n.op is Ops.RANGE), key=range_sort_key))
    return list(found)


def range_by_axis(root: UOp) -> dict[int, UOp]:
    """The RANGE of each axis number; raises ValueError if two different RANGEs share an axis number."""
    found: dict[int, UOp] = {}
    for rng in kernel_ranges(root):
        other = found.setdefault(rng.arg.axis, rng)
        if other is not rng:
            raise ValueError(f"axis {rng.arg.axis} is used by two different RANGEs: {other.arg} and {rng.arg}")
    return found


# open_ranges_map of a SINK, kept on the sink: the END normalization and the linearizer ask again for the same
# kernel sink. Kept without the sink's own entry (a map holding its sink would be a reference cycle: the sink would
# then be freed by the garbage collector only, not when its last user drops it).
_OPEN_RANGES: NodeSlot[tuple[dict[UOp, frozenset[UOp]], frozenset[UOp]]] = NodeSlot(
    "open_ranges_below", __name__, "a SINK's open_ranges_map without its own entry, and that entry"
)


def open_ranges_map(root: UOp) -> dict[UOp, frozenset[UOp]]:
    """For every node, the RANGEs it depends on that no END on the way has closed (the loops it must run in)."""
    if root.op is not Ops.SINK:
        return _open_ranges_map(root)
    kept = _OPEN_RANGES.get(root)
    if kept is None:
        result = _open_ranges_map(root)
        own = result.pop(root)
        kept = (result, own)
        _OPEN_RANGES.set(root, kept)
    below, own = kept
    result = dict(below)  # the caller's own map
    result[root] = own
    return result


_NO_RANGES: frozenset[UOp] = frozenset()


def _open_ranges_map(root: UOp) -> dict[UOp, frozenset[UOp]]:
    result: dict[UOp, frozenset[UOp]] = {}
    for node in root.toposort():
        sources = node.src
        if not sources:
            result[node] = frozenset({node}) if node.op is Ops.RANGE else _NO_RANGES
            continue
        # the union of the sources' sets; most sources share one set (or a subset of it): reuse it, build none
        combined = result[sources[0]]
        for source in sources[1:]:
            other = result[source]
            if other is not combined and not other <= combined:
                combined = combined | other
        if node.op is Ops.RANGE:
            combined = combined | {node}
        elif node.op is Ops.END:
            combined = combined - {s for s in sources[1:] if s.op is Ops.RANGE}
        result[node] = combined
    return result


def open_ranges(node: UOp) -> frozenset[UOp]:
    """The RANGEs `node` depends on that are not closed on the way."""
    return open_ranges_map(node)[node]


def replace_ranges(root: UOp, values: Mapping[UOp, UOp], range_lists: Mapping[UOp, Iterable[UOp]] | None = None) -> UOp:
    """Rebuild `root` with RANGEs replaced.

    A RANGE used as a value becomes `values[rng]`; in the range list of an END or REDUCE it becomes the RANGEs of
    `range_lists[rng]` (default: `values[rng]` if that is a RANGE, else nothing, i.e. the loop is gone).
    """
    lists = {rng: tuple(new) for rng, new in (range_lists or {}).items()}
    rebuilt: dict[UOp, UOp] = {}
    for node in root.toposort():
        if node in values:
            rebuilt[node] = values[node]
            continue
        if node.op in (Ops.END, Ops.REDUCE):
            new_src = [rebuilt[node.src[0]]]
            for rng in node.src[1:]:
                if rng in lists:
                    new_src.extend(lists[rng])
                elif rng in values:
                    replacement = values[rng]
                    if replacement.op is Ops.RANGE:
                        new_src.append(replacement)
                else:
                    new_src.append(rebuilt[rng])
            src = tuple(new_src)
        else:
            src = tuple(rebuilt[s] for s in node.src)
        if node.op is Ops.END and len(src) == 1:
            rebuilt[node] = src[0]  # every loop it closed is gone
        elif node.op is Ops.REDUCE and len(src) == 1:
            rebuilt[node] = src[0]  # a reduce over no loop is its value
        else:
            rebuilt[node] = node.replace(src=src) if src != node.src else node
    return rebuilt[root]
