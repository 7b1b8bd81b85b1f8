"""Lowering one kernel: tensor-graph values -> a codegen kernel sink (STOREs of index expressions over RANGEs).

Each output gets LOOP ranges over its shape; its value is built by walking the tensor graph with the indices the
value is needed at: movement ops rewrite the indices (rangeify), elementwise ops apply to their sources at the
same indices, REDUCE_AXIS opens REDUCE ranges for the reduced dims, and buffers (inputs and values other kernels
computed) are LOADs at the row-major offset of the indices. PAD makes a gate: loads under it are gated and the
padded value is selected with WHERE. The walk is memoized on (node, indices, gate), so shared work is built once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kiln.codegen import KernelInfo
from kiln.tensor.graph import MOVEMENT_OPS, shape_of
from kiln.tensor.schedule.indexing import Indices, and_gates, linear_index, movement_indices
from kiln.tensor.schedule.items import BufferRef
from kiln.uops import AxisKind, DType, GroupOp, Ops, UOp, dtypes

Key = tuple[UOp, Indices, UOp | None]
Combine = Callable[[Sequence[UOp]], UOp]


@dataclass(frozen=True)
class LeafBuffer:
    """A value read from memory: buffer `ref`, holding a row-major array of `shape` and element `dtype`."""

    ref: BufferRef
    shape: tuple[int, ...]
    size: int
    dtype: DType


@dataclass(frozen=True)
class KernelOutput:
    """One STORE of a kernel: for point `node`, the value of `value` (a tensor-graph node) over `shape`, into `ref`.

    `target` (ASSIGN only) is the view (movement ops over the target BUFFER) the value is written through;
    otherwise the value is written row-major into a buffer of `size` elements.
    """

    node: UOp
    value: UOp
    ref: BufferRef
    shape: tuple[int, ...]
    size: int
    target: UOp | None = None


@dataclass
class KernelStats:
    """What building a kernel touched: the leaf nodes it reads, how many index contexts each node needed, the
    reduces it computes, the (offset, gate) pairs each leaf is loaded at, and the ASSIGN outputs whose value reads
    their own target at other elements than the one written (those would race)."""

    leaves: set[UOp] = field(default_factory=set)
    contexts: dict[UOp, int] = field(default_factory=dict)
    reduces: set[UOp] = field(default_factory=set)
    loads: dict[UOp, set[tuple[UOp, UOp | None]]] = field(default_factory=dict)
    racing_assigns: set[UOp] = field(default_factory=set)
    size: int = 0
    built_reduces: dict[UOp, UOp] = field(default_factory=dict)
    """Each REDUCE of the kernel and the REDUCE_AXIS node it computes."""


class KernelTooLarge(Exception):
    """Raised while building a kernel whose value graph blows up (a node needed at too many index sets)."""

    def __init__(self, stats: KernelStats) -> None:
        super().__init__("kernel value graph too large")
        self.stats = stats


MAX_CONTEXTS = 32
"""A node needed at more index sets than this in one kernel stops the build: it should get a buffer."""
MAX_KERNEL_NODES = 20000
"""A kernel value graph larger than this stops the build."""


def _first(values: Sequence[UOp]) -> UOp:
    return values[0]


def _reduce_identity(op: Ops, dtype: DType) -> UOp:
    value = 0 if op is Ops.ADD else 1 if op is Ops.MUL else dtypes.min(dtype)
    return UOp.const(dtype, value)


class KernelBuilder:
    """Builds the kernel sink of one group of outputs that share their loop shape.

    Args:
        leaves: the nodes read from memory (inputs and other kernels' values) and where they live.
        assigns: ASSIGN nodes computed by other kernels: reading one reads its target view.
    """

    def __init__(self, leaves: Mapping[UOp, LeafBuffer], assigns: frozenset[UOp]) -> None:
        self.leaves = leaves
        self.assigns = assigns
        self.memo: dict[Key, UOp] = {}
        self.globals: dict[BufferRef, UOp] = {}
        self.slots: list[BufferRef] = []
        self.reduce_ranges: dict[tuple[tuple[int, ...], tuple[int, ...], int], tuple[UOp, ...]] = {}
        self.reduce_depths: dict[UOp, int] = {}  # tensor-graph node -> reduces on the deepest path into it
        self.next_axis = 0
        self.stats = KernelStats()

    # -- buffers ------------------------------------------------------------------------------------------------------
    def _global(self, ref: BufferRef, size: int, dtype: DType) -> UOp:
        found = self.globals.get(ref)
        if found is None:
            found = UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), len(self.slots))
            self.globals[ref] = found
            self.slots.append(ref)
        return found

    def _load(self, node: UOp, indices: Indices, gate: UOp | None) -> UOp:
        leaf = self.leaves[node]
        self.stats.leaves.add(node)
        pointer = self._global(leaf.ref, leaf.size, leaf.dtype)
        offset = linear_index(indices, leaf.shape)
        self.stats.loads.setdefault(node, set()).add((offset, gate))
        return pointer.index(offset, gate=gate).load()

    # -- the walk -----------------------------------------------------------------------------------------------------
    def value(self, node: UOp, indices: Indices, gate: UOp | None = None) -> UOp:
        """The kernel expression of tensor-graph `node` at `indices` (valid where `gate`)."""
        root: Key = (node, indices, gate)
        if root in self.memo:
            return self.memo[root]
        # explicit DFS frames (key, children, combine, next child): deep graphs never hit the recursion limit
        frames: list[tuple[Key, list[Key], Combine, list[int]]] = []
        children, combine = self._expand(root)
        frames.append((root, children, combine, [0]))
        while frames:
            key, children, combine, position = frames[-1]
            if position[0] < len(children):
                child = children[position[0]]
                position[0] += 1
                if child not in self.memo:
                    grand, child_combine = self._expand(child)
                    frames.append((child, grand, child_combine, [0]))
                continue
            frames.pop()
            self.memo[key] = combine([self.memo[child] for child in children])
            self.stats.size += 1
            if self.stats.size > MAX_KERNEL_NODES:
                raise KernelTooLarge(self.stats)
        return self.memo[root]

    def _expand(self, key: Key) -> tuple[list[Key], Combine]:
        node, indices, gate = key
        if node in self.leaves:
            return [], lambda _: self._load(node, indices, gate)
        contexts = self.stats.contexts
        count = contexts[node] = contexts.get(node, 0) + 1
        if count > MAX_CONTEXTS and node.op in GroupOp.Elementwise:
            raise KernelTooLarge(self.stats)
        op = node.op
        if op is Ops.CONST:
            constant = UOp.const(node.dtype, node.arg)
            return [], lambda _: constant
        if op in GroupOp.Elementwise:
            return [(source, indices, gate) for source in node.src], lambda values: UOp(op, node.dtype, tuple(values))
        if op in MOVEMENT_OPS:
            return self._expand_movement(node, indices, gate)
        if op is Ops.REDUCE_AXIS:
            return self._expand_reduce(node, indices, gate)
        if op is Ops.ASSIGN and node in self.assigns:
            # an ASSIGN another kernel performs is read through its target view (after that kernel ran)
            self.stats.leaves.add(node)
            return [(node.src[0], indices, gate)], _first
        if op in (Ops.DETACH, Ops.CONTIGUOUS):
            return [(node.src[0], indices, gate)], _first
        raise ValueError(f"cannot build {op!r} into a kernel (the scheduler should have made it a buffer)")

    def _expand_movement(self, node: UOp, indices: Indices, gate: UOp | None) -> tuple[list[Key], Combine]:
        source = node.src[0]
        source_indices, valid = movement_indices(node, indices, shape_of(source))
        child: Key = (source, source_indices, and_gates(gate, valid))
        if valid is None or source in self.leaves:
            # a gated load reads 0 by itself
            return [child], _first
        return [child], lambda values: valid.where(values[0], values[0].const_like(0))

    def _expand_reduce(self, node: UOp, indices: Indices, gate: UOp | None) -> tuple[list[Key], Combine]:
        source = node.src[0]
        source_shape = shape_of(source)
        op, axes = node.arg.op, node.arg.axes
        self.stats.reduces.add(node)
        if math.prod(source_shape) == 0:
            identity = _reduce_identity(op, node.dtype)
            return [], lambda _: identity
        # reduces of the same shape share their loop, unless one needs the other's result (softmax's sum needs the
        # max): a reduce gets the loop of its nesting depth, so a chain of row reduces runs one loop after the other
        range_key = (source_shape, axes, self._reduce_depth(node))
        ranges = self.reduce_ranges.get(range_key)
        if ranges is None:
            ranges = tuple(self._new_range(source_shape[axis], AxisKind.REDUCE) for axis in axes)
            self.reduce_ranges[range_key] = ranges
        by_axis = dict(zip(axes, ranges))
        source_indices = tuple(by_axis.get(axis, index) for axis, index in enumerate(indices))
        live = tuple(r for r in ranges if r.op is Ops.RANGE)
        if not live:
            return [(source, source_indices, gate)], _first

        def combine(values: Sequence[UOp]) -> UOp:
            reduced = values[0].reduce(*live, op=op)
            self.stats.built_reduces[reduced] = node
            return reduced

        return [(source, source_indices, gate)], combine

    def _reduce_depth(self, node: UOp) -> int:
        # how many reduces this kernel computes on the deepest path into REDUCE_AXIS `node`, itself included (leaves
        # are loads: not computed here); one walk shared by every reduce of the kernel
        depths = self.reduce_depths
        for inner in node.src[0].toposort(gate=lambda n: n not in self.leaves and n not in depths):
            if inner in depths:
                continue
            below = 0 if inner in self.leaves else max((depths[s] for s in inner.src), default=0)
            depths[inner] = below + 1 if inner.op is Ops.REDUCE_AXIS and inner not in self.leaves else below
        return depths[node.src[0]] + 1

    def _new_range(self, size: int, kind: AxisKind) -> UOp:
        if size == 1:
            return UOp.const(dtypes.index, 0)
        self.next_axis += 1
        return UOp.range(size, self.next_axis - 1, kind)

    # -- the kernel ---------------------------------------------------------------------------------------------------
    def build(self, outputs: Sequence[KernelOutput]) -> UOp:
        """The kernel sink storing every output (all outputs share one loop shape)."""
        shape = outputs[0].shape
        loops = tuple(self._new_range(size, AxisKind.LOOP) for size in shape)
        pointers = [self._global(out.ref, out.size, out.value.dtype) for out in outputs]
        stores = []
        for out, pointer in zip(outputs, pointers):
            value = self.value(out.value, loops)
            if out.target is None:
                offset = linear_index(loops, shape)
            else:
                offset, base = self._target_offset(out.target, loops)
                # safe only if every read of the target's buffer reads the very element this thread writes
                if any(read != (offset, None) for read in self.stats.loads.get(base, ())):
                    self.stats.racing_assigns.add(out.node)
            store = pointer.index(offset).store(value)
            live = tuple(r for r in loops if r.op is Ops.RANGE)
            stores.append(store.end(*live) if live else store)
        return UOp(Ops.SINK, dtypes.void, tuple(stores), KernelInfo())

    def _target_offset(self, target: UOp, indices: Indices) -> tuple[UOp, UOp]:
        # walk the target's view down to its BUFFER: the element each output position is written to
        node = target
        while node.op is not Ops.BUFFER:
            if node.op in (Ops.DETACH, Ops.ASSIGN):  # an earlier ASSIGN to the same buffer is the same memory
                node = node.src[0]
                continue
            indices, valid = movement_indices(node, indices, shape_of(node.src[0]))
            assert valid is None, "the planner rejects assigning through PAD"
            node = node.src[0]
        return indices[0], node
