"""END normalization for the linearizer: one single-range END per RANGE.

- END(x, r0, r1) becomes END(END(x, r1), r0), outer loops first (kind rank, then axis number);
- an END of a loop its body does not depend on is dropped (the loop would repeat identical work);
- ENDs of one RANGE that sit in different outer loops get a RANGE each (`separate_ranges`): a reduction whose
  value does not depend on an outer loop is lowered outside it (once), while a sibling reduction over the same
  axis runs inside it; one loop variable cannot serve both places, so the outside one gets a fresh axis number;
- several ENDs of one RANGE (two outputs, two reductions sharing a loop) merge into END(GROUP(bodies), r).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from kiln.codegen.loop_structure import open_ranges_map, range_sort_key
from kiln.uops import Ops, UOp, dtypes


def split_ends(sink: UOp) -> UOp:
    """END(x, r0, r1) -> END(END(x, r1), r0), outer loops first; ENDs of loops the body does not use disappear."""
    open_map = open_ranges_map(sink)
    rebuilt: dict[UOp, UOp] = {}
    for node in sink.toposort():
        src = tuple(rebuilt[s] for s in node.src)
        if node.op is not Ops.END:
            rebuilt[node] = node.replace(src=src) if src != node.src else node
            continue
        body = src[0]
        for rng in sorted((r for r in node.src[1:] if r in open_map[node.src[0]]), key=range_sort_key, reverse=True):
            body = UOp(Ops.END, dtypes.void, (body, rng))
        rebuilt[node] = body
    return rebuilt[sink]


def separate_ranges(sink: UOp) -> UOp:
    """`sink` where the ENDs of each RANGE that sit in different outer loops close different RANGEs.

    The ENDs of one RANGE are grouped by the set of loops open around them; the first group (in graph order) keeps
    the RANGE, every other group gets a copy of it with a fresh axis number, substituted inside its bodies only.
    """
    while True:
        ends_of: dict[UOp, list[UOp]] = defaultdict(list)
        for node in sink.toposort():
            if node.op is Ops.END:
                ends_of[node.src[1]].append(node)
        open_map = open_ranges_map(sink)
        split: tuple[UOp, list[UOp]] | None = None
        for rng, ends in ends_of.items():
            contexts = list(dict.fromkeys(open_map[end] for end in ends))
            if len(contexts) > 1:
                split = (rng, [end for end in ends if open_map[end] != contexts[0]])
                break
        if split is None:
            return sink
        rng, moved = split
        next_axis = 1 + max(node.arg.axis for node in sink.toposort() if node.op is Ops.RANGE)
        fresh = rng.replace(arg=replace(rng.arg, axis=next_axis))
        # the moved ENDs of one outer context share the fresh RANGE (merge_ends then merges them)
        context = open_map[moved[0]]
        same_context = [end for end in moved if open_map[end] == context]
        sink = sink.substitute({end: end.substitute({rng: fresh}) for end in same_context})


def merge_ends(sink: UOp) -> UOp:
    """`sink` with the ENDs of each RANGE merged into one (bodies gathered in a GROUP).

    Raises ValueError when two ENDs of one RANGE cannot share a loop: one needs the other's result, or they sit in
    different outer loops.
    """
    while True:
        ends_of: dict[UOp, list[UOp]] = defaultdict(list)
        for node in sink.toposort():
            if node.op is Ops.END:
                ends_of[node.src[1]].append(node)
        shared = [(rng, ends) for rng, ends in ends_of.items() if len(ends) > 1]
        if not shared:
            return sink.replace(src=tuple(dict.fromkeys(sink.src)))  # merged ENDs may now appear twice
        rng, ends = shared[0]
        open_map = open_ranges_map(sink)
        if len({open_map[end] for end in ends}) != 1:
            raise ValueError(f"RANGE {rng.arg} is used in different outer loops; give each loop its own RANGE")
        for end in ends:
            inside = set(end.src[0].toposort())
            if any(other in inside for other in ends if other is not end):
                raise ValueError(f"RANGE {rng.arg} is used by two loops where one needs the other's result")
        merged = UOp(Ops.END, dtypes.void, (UOp(Ops.GROUP, dtypes.void, tuple(end.src[0] for end in ends)), rng))
        sink = sink.substitute({end: merged for end in ends})


def normalize_ends(sink: UOp) -> UOp:
    """Single-range ENDs, one per RANGE (see the module docstring)."""
    return merge_ends(separate_ranges(split_ends(sink)))
