"""Loads and stores through vectors of pointers -> real accesses of the widths the renderer supports.

Each lane's address is split into a root expression and a constant (`root + c`). Lanes with the same root and the
same gate whose constants are consecutive form a run; a run of a supported width w becomes one wide access when
its alignment is proven: c and the root are multiples of w (buffers are assumed aligned to w elements). Other
lanes become scalar accesses. Register memory (accumulators) is accessed lane by lane, except on renderers with
vector ALU ops, which read and write the accumulator's lanes as one vector. Lanes reading the
same address share one load; of lanes writing the same address the last one wins, as in the loop it came from.

A word assembled from its bytes (`b0 | b1 << 8 | ...` of byte loads at consecutive addresses: how a GGUF F16 / F32
matrix is decoded from its raw bytes) is read as one access of all its bytes, reinterpreted (BITCAST) as the word
(`_merge_byte_words`, vector-ALU renderers): the byte loads of a 16-lane unroll were 32 gathered single bytes.
"""

from __future__ import annotations

import math

from kiln.codegen.lowering.vector_folding import lane_of
from kiln.codegen.renderer import Renderer
from kiln.uops import DType, MemoryScope, Ops, PatternMatcher, PtrDType, UOp, UPat, dtypes

Run = tuple[UOp | None, int, int, UOp | None]
"""(root, first constant, width, gate) of one access."""


def _split_offset(offset: UOp, subtraction: bool = False) -> tuple[UOp | None, int]:
    if offset.op is Ops.CONST:
        return None, offset.arg
    if subtraction and offset.op is Ops.SUB and offset.src[1].op is Ops.CONST:
        return offset.src[0], -offset.src[1].arg
    if offset.op is Ops.ADD:
        left, right = offset.src
        if right.op is Ops.CONST:
            return left, right.arg
        if left.op is Ops.CONST:
            return right, left.arg
    return offset, 0


def known_factor(expression: UOp) -> int:
    """A positive integer that provably divides `expression` (1 when nothing better is known)."""
    if expression.op is Ops.CONST:
        return abs(int(expression.arg)) or 1 << 62
    if expression.op is Ops.MUL:
        return known_factor(expression.src[0]) * known_factor(expression.src[1])
    if expression.op in (Ops.ADD, Ops.SUB):
        return math.gcd(known_factor(expression.src[0]), known_factor(expression.src[1]))
    if expression.op is Ops.SHL and expression.src[1].op is Ops.CONST:
        return known_factor(expression.src[0]) << int(expression.src[1].arg)
    return 1


def _widths(pointer: DType, renderer: Renderer, lanes: int) -> list[int]:
    if not isinstance(pointer, PtrDType) or pointer.base == dtypes.bool:
        return []
    if pointer.scope is MemoryScope.REG:
        # a vector-ALU renderer reads and writes a whole accumulator at once, so it can live in vector registers
        return [lanes] if renderer.vector_alu and lanes > 1 else []
    return sorted((w for w in renderer.vector_widths if w > 1), reverse=True)


def _plan(
    offsets: list[UOp], gates: list[UOp | None], widths: list[int], unaligned: bool = False
) -> tuple[list[Run], list[tuple[int, int]]]:
    """The accesses covering every lane, and for each lane (access number, lane within the access).

    `unaligned` (vector-ALU renderers): a run may start at any constant (LLVM reads and writes unaligned vectors),
    and `root - c` counts as `root + (-c)`."""
    groups: dict[tuple[UOp | None, UOp | None], dict[int, list[int]]] = {}
    for lane, (offset, gate) in enumerate(zip(offsets, gates)):
        root, constant = _split_offset(offset, subtraction=unaligned)
        groups.setdefault((root, gate), {}).setdefault(constant, []).append(lane)
    runs: list[Run] = []
    placement: list[tuple[int, int]] = [(0, 0)] * len(offsets)
    for (root, gate), by_constant in groups.items():
        factor = 1 << 62 if root is None else known_factor(root)
        constants = sorted(by_constant)
        present = set(constants)
        position = 0
        while position < len(constants):
            first = constants[position]
            width = next(
                (
                    w
                    for w in widths
                    if (unaligned or (first % w == 0 and factor % w == 0))
                    and all(first + j in present for j in range(w))
                ),
                1,
            )
            for j in range(width):
                for lane in by_constant[first + j]:
                    placement[lane] = (len(runs), j)
            runs.append((root, first, width, gate))
            position += width
    return runs, placement


def _address(pointer: UOp, run: Run) -> UOp:
    root, constant, width, gate = run
    offset = UOp.const(dtypes.index, constant) if root is None else (root + constant if constant else root)
    dtype = pointer.dtype
    assert isinstance(dtype, PtrDType)
    wide = dtype if width == 1 else dtype.base.vec(width).ptr(dtype.size, dtype.scope)
    return UOp(Ops.INDEX, wide, (pointer, offset) if gate is None else (pointer, offset, gate))


def _lanes(index: UOp) -> tuple[list[UOp], list[UOp | None]]:
    count = index.dtype.count
    offsets = [lane_of(index.src[1], lane) for lane in range(count)]
    if len(index.src) == 3:
        return offsets, [lane_of(index.src[2], lane) for lane in range(count)]
    return offsets, [None] * count


def _legalize_load(ctx: Renderer, load: UOp, index: UOp) -> UOp | None:
    if index.dtype.count == 1:
        return None
    pointer = index.src[0]
    offsets, gates = _lanes(index)
    runs, placement = _plan(offsets, gates, _widths(pointer.dtype, ctx, len(offsets)), unaligned=ctx.vector_alu)
    scalar = load.dtype.scalar()
    loads = [UOp(Ops.LOAD, scalar.vec(run[2]), (_address(pointer, run),)) for run in runs]
    if _one_access_in_order(runs, placement):
        return loads[0]  # what the VECTORIZE of its lanes below folds back to, without building the lanes
    return UOp.vectorize(*(loads[access].gep(lane) for access, lane in placement))


def _one_access_in_order(runs: list[Run], placement: list[tuple[int, int]]) -> bool:
    # one access holds every lane, lane i at position i: the wide access is the whole vector
    return len(runs) == 1 and all(position == (0, lane) for lane, position in enumerate(placement))


def _legalize_store(ctx: Renderer, store: UOp, index: UOp, value: UOp) -> UOp | None:
    if index.dtype.count == 1:
        return None
    pointer = index.src[0]
    offsets, gates = _lanes(index)
    # a later lane storing to the same address wins: keep only the last lane of each address
    last: dict[tuple[UOp, UOp | None], int] = {}
    for lane, key in enumerate(zip(offsets, gates)):
        last[key] = lane
    kept = sorted(last.values())
    runs, placement = _plan(
        [offsets[k] for k in kept], [gates[k] for k in kept], _widths(pointer.dtype, ctx, len(kept)), ctx.vector_alu
    )
    if len(kept) == value.dtype.count and _one_access_in_order(runs, placement):
        # every lane kept, in order, in one access: its value is `value` itself (what the VECTORIZE of its lanes
        # below folds back to, without building the lanes)
        return UOp(Ops.STORE, dtypes.void, (_address(pointer, runs[0]), value))
    values: list[list[UOp]] = [[] for _ in runs]
    for (access, _), lane in sorted(zip(placement, kept), key=lambda item: item[0]):
        values[access].append(lane_of(value, lane))
    stores = [
        UOp(Ops.STORE, dtypes.void, (_address(pointer, run), UOp.vectorize(*lanes))) for run, lanes in zip(runs, values)
    ]
    return stores[0] if len(stores) == 1 else UOp(Ops.GROUP, dtypes.void, tuple(stores))


ByteLane = tuple[UOp, UOp | None, int]
"""(pointer, root, constant) of one byte lane: it reads pointer[root + constant]."""


def _byte_lanes(value: UOp) -> list[ByteLane] | None:
    """The address of every lane of `value`, a byte vector made of ungated loads (wide or scalar, picked lane by lane
    through GEP / VECTORIZE: what `_legalize_load` left), else None."""
    if value.op is Ops.VECTORIZE:
        lanes: list[ByteLane] = []
        for source in value.src:
            found = _byte_lanes(source)
            if found is None:
                return None
            lanes.extend(found)
        return lanes
    if value.op is Ops.GEP:
        found = _byte_lanes(value.src[0])
        return None if found is None else [found[lane] for lane in value.arg]
    if value.op is not Ops.LOAD or len(value.src) != 1 or value.src[0].op is not Ops.INDEX:
        return None
    index = value.src[0]
    if len(index.src) != 2 or index.dtype.count != 1:
        return None
    root, constant = _split_offset(index.src[1], subtraction=True)
    return [(index.src[0], root, constant + lane) for lane in range(value.dtype.count)]


def _shift_amount(node: UOp) -> int | None:
    """The shift of every lane of a constant shift amount (CONST, VCONST or VECTORIZE of one CONST), else None."""
    if node.op is Ops.CONST:
        return int(node.arg)
    if node.op is Ops.VCONST and len(set(node.arg)) == 1:
        return int(node.arg[0])
    if node.op is Ops.VECTORIZE and all(s is node.src[0] for s in node.src) and node.src[0].op is Ops.CONST:
        return int(node.src[0].arg)
    return None


def _word_terms(word: UOp) -> dict[int, UOp] | None:
    """The byte vectors of an OR tree of `CAST(bytes) << 8 k` terms, by k, else None."""
    terms: dict[int, UOp] = {}
    pending = [word]
    while pending:
        node = pending.pop()
        if node.op is Ops.OR:
            pending.extend(node.src)
            continue
        shift = 0
        if node.op is Ops.SHL:
            amount = _shift_amount(node.src[1])
            if amount is None or amount % 8:
                return None
            shift, node = amount // 8, node.src[0]
        if node.op is not Ops.CAST or node.src[0].dtype.scalar() != dtypes.uint8 or shift in terms:
            return None
        terms[shift] = node.src[0]
    return terms


def _merge_byte_words(ctx: Renderer, word: UOp) -> UOp | None:
    """`b0 | b1 << 8 | ... | b(s-1) << 8 (s - 1)` (unsigned, s bytes) of byte loads at consecutive addresses -> the s
    bytes of each lane loaded together and reinterpreted as the word (see the module docstring)."""
    scalar = word.dtype.scalar()
    if not ctx.vector_alu or scalar not in (dtypes.uint16, dtypes.uint32, dtypes.uint64):
        return None
    size = scalar.itemsize
    terms = _word_terms(word)
    if terms is None or sorted(terms) != list(range(size)):
        return None
    lanes = [_byte_lanes(terms[byte]) for byte in range(size)]
    first = lanes[0]
    if first is None or any(found is None or len(found) != word.dtype.count for found in lanes):
        return None
    pointer = first[0][0]
    for byte, found in enumerate(lanes):
        assert found is not None
        for (lane_pointer, root, constant), (_, first_root, first_constant) in zip(found, first):
            if lane_pointer is not pointer or root is not first_root or constant != first_constant + byte:
                return None
    offsets = [
        UOp.const(dtypes.index, constant + byte) if root is None else root + (constant + byte)
        for _, root, constant in first
        for byte in range(size)
    ]
    # each run of consecutive bytes as one access, whatever its width (LLVM splits what no register holds): split into
    # the renderer's widths, the words' conversions were packed back by shuffles across the pieces
    widths = [width for width in range(len(offsets), 1, -1) if width % size == 0]
    runs, placement = _plan(offsets, [None] * len(offsets), widths, unaligned=True)
    loads = [UOp(Ops.LOAD, dtypes.uint8.vec(run[2]), (_address(pointer, run),)) for run in runs]
    words: list[UOp] = []
    for lane in range(word.dtype.count):
        access, position = placement[lane * size]
        whole = runs[access][2] % size == 0 and position % size == 0
        if whole and all(placement[lane * size + byte] == (access, position + byte) for byte in range(size)):
            words.append(loads[access].bitcast(scalar.vec(runs[access][2] // size)).gep(position // size))
        else:  # its bytes straddle two accesses: gathered into one word
            gathered = [loads[a].gep(p) for a, p in placement[lane * size : (lane + 1) * size]]
            words.append(UOp.vectorize(*gathered).bitcast(scalar))
    return UOp.vectorize(*words)


pm_memory_access = PatternMatcher(
    [
        (UPat(Ops.OR, name="word"), _merge_byte_words),
        (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, name="index"),), name="load"), _legalize_load),
        (UPat(Ops.STORE, src=(UPat(Ops.INDEX, name="index"), UPat.var("value")), name="store"), _legalize_store),
    ]
)
"""LOAD/STORE through a vector of pointers -> scalar and wide accesses (ctx: the Renderer)."""
