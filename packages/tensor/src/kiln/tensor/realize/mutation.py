"""Mutation: a write into a buffer (assign, setitem, in-place operators) happens once, in program order.

Tensors are lazy, but a write is not: `write()` runs it at once (one schedule holding the write and any snapshots it
needs), so it is applied exactly once and every op sees the state at the time it was called, like eager PyTorch:

- the tensors that view the written buffer (movement ops RESHAPE / PERMUTE / EXPAND / SHRINK, DETACH over it:
  "aliases", like PyTorch views) are rebound to the buffer's new node and see the new values;
- a tensor that reads the buffer in a computation not realized yet was built before the write: it must see the old
  values, so the schedule first copies the buffer (a snapshot) and the tensor is rebound to read the copy. The copy
  is made only when such a tensor is alive;
- the written value's own tensor is recorded as realized into the buffer (copy on write: it is snapshotted at the
  next write of that buffer if it is still alive then).

Every BUFFER node of a buffer stands for its contents at one point of the program: after a write, the buffer gets a
fresh node (the engine's `written_inputs`), so graphs hash-consed on the old node and realized earlier never pass for
graphs of the new contents. Finding aliases and readers needs every live tensor: `track()` registers each one
(weakly).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import Protocol

from kiln.runtime import Buffer
from kiln.tensor import graph
from kiln.tensor.realize.buffers import SLOT as _BUFFER_SLOT
from kiln.tensor.realize.buffers import buffer_of, has_buffer
from kiln.tensor.realize.engine import realize_uops
from kiln.tensor.schedule import (
    alias_base,
    forget_realized_into,
    mark_overwritten,
    realized_view,
    record_realized,
)
from kiln.uops import Ops, UOp

__all__ = ["GraphHolder", "live_count", "track", "write", "write_many"]


class GraphHolder(Protocol):
    """Anything holding a tensor graph in `uop` (a Tensor)."""

    uop: UOp


# by id, weakly (Tensor's `==` builds a tensor, so tensors are kept out of sets). Plain weak references without
# callbacks keep `track` cheap (it runs for every new tensor); dead entries are dropped by `_alive` and by a sweep
# whenever the table has doubled since the last one (a new tensor at a reused address replaces its entry).
_live: dict[int, weakref.ref[GraphHolder]] = {}
_sweep_at = [1024]


def track(holder: GraphHolder) -> None:
    """Registers a new tensor (weakly) so writes can rebind it."""
    key = id(holder)
    # a new tensor at the address of a dead one goes to the end: `_alive` lists tensors in creation order whatever
    # the addresses, so the same program asks for the same schedule (a write realizes live lazy tensors with it, in
    # this order) and hits the schedule cache
    _live.pop(key, None)
    _live[key] = weakref.ref(holder)
    if len(_live) >= _sweep_at[0]:
        _alive()
        _sweep_at[0] = max(1024, 2 * len(_live))


def _alive() -> list[GraphHolder]:
    """The tracked tensors still alive (forgetting the dead ones)."""
    found = []
    for key, reference in list(_live.items()):
        holder = reference()
        if holder is None:
            del _live[key]
        else:
            found.append(holder)
    return found


def live_count() -> int:
    """How many tracked tensors are alive."""
    return len(_alive())


def _target_base(node: UOp) -> UOp | None:
    # the buffer under the movement ops of a write's target (the planner rejects PAD and EXPAND there)
    while node.op in graph.MOVEMENT_OPS or node.op in (Ops.DETACH, Ops.ASSIGN):
        node = node.src[0]
    return node if node.op is Ops.BUFFER else None


def _storage(node: UOp) -> Buffer | None:
    return buffer_of(node) if node.op is Ops.BUFFER and has_buffer(node) else None


def _reads(uop: UOp, storage: Buffer) -> list[UOp]:
    """Nodes of `uop`'s not-yet-realized graph through which it reads `storage`: BUFFER nodes of it, and realized
    nodes whose buffer view reads it."""
    found: list[UOp] = []

    def descend(node: UOp) -> bool:
        return node.op is not Ops.BUFFER and realized_view(node) is None

    for node in uop.toposort(gate=descend):
        if node.op is Ops.BUFFER:
            if _storage(node) is storage:
                found.append(node)
            continue
        view = realized_view(node)
        if view is not None and any(_storage(inner) is storage for inner in view.toposort()):
            found.append(node)
    return found


def _rebind(uop: UOp, reads: Iterable[UOp], storage: Buffer, replacement: UOp) -> UOp:
    # each BUFFER node of `storage` becomes `replacement`; a realized node reading it becomes its view rebuilt so
    mapping: dict[UOp, UOp] = {}
    for node in reads:
        if node.op is Ops.BUFFER:
            mapping[node] = replacement
            continue
        view = realized_view(node)
        assert view is not None
        mapping[node] = view.substitute({inner: replacement for inner in view.toposort() if _storage(inner) is storage})
    return uop.substitute(mapping)


def _unrealized(node: UOp) -> bool:
    return node.op is not Ops.BUFFER and realized_view(node) is None


def _reads_a_buffer(uop: UOp, memo: dict[UOp, bool] | None = None) -> bool:
    """Whether `uop`'s graph reads memory: holds a BUFFER node or a realized node. `memo` (node -> answer) shares the
    walk between calls on overlapping graphs (the tensors of one training step all share its graph)."""
    memo = {} if memo is None else memo
    found = memo.get(uop)
    if found is not None:
        return found
    if uop.op is Ops.BUFFER or realized_view(uop) is not None:
        memo[uop] = True
        return True
    # depth-first, stopping at the first node that reads memory: then every node on the path reads it; a node
    # whose sources are all exhausted reads none. Each node is decided once across the calls sharing `memo`.
    path = [(uop, iter(uop.src))]
    while path:
        node, sources = path[-1]
        for source in sources:
            known = memo.get(source)
            if known is False:
                continue
            if known is True or source.op is Ops.BUFFER or realized_view(source) is not None:
                for on_path, _ in path:
                    memo[on_path] = True
                return True
            path.append((source, iter(source.src)))
            break
        else:
            path.pop()
            memo[node] = False
    return False


def _unrealized_nodes(roots: Iterable[UOp]) -> set[UOp]:
    """Every node of the graphs of `roots`, not descending into realized nodes or buffers (one shared walk)."""
    seen: set[UOp] = set()
    stack = list(roots)
    pop, push, visit, buffer_op = stack.pop, stack.append, seen.add, Ops.BUFFER
    while stack:  # plain loops and local names: this walks a whole training step's graph on every optimizer step
        node = pop()
        if node in seen:
            continue
        visit(node)
        if node.op is not buffer_op and realized_view(node) is None:
            for source in node.src:
                if source not in seen:
                    push(source)
    return seen


def write(target: GraphHolder, value: UOp, keep_graph: bool = False, value_holder: GraphHolder | None = None) -> None:
    """Writes `value` into the buffer behind `target.uop` now, and rebinds the live tensors (see the module doc).

    Args:
        target: the tensor written to (its graph: a view of a buffer; one with no buffer just takes the value).
        value: the new values (target's shape, dtype and device).
        keep_graph: leave the target's graph the realized ASSIGN node (gradients flow into the value through it).
        value_holder: the tensor `value` belongs to: it is recorded as realized into the written buffer (copy on
            write) instead of being snapshotted.
    """
    node = graph.fold_movement_chains(target.uop)
    node = realized_view(node) or node
    base = _target_base(node)
    if base is None:  # no buffer to write into (a lazy result or constant): the tensor just takes the value
        target.uop = value
        return
    storage = buffer_of(base)
    shares_value = (
        value_holder is not None
        and value_holder.uop is value
        and alias_base(value) is None
        and realized_view(value) is None
        and _reads_a_buffer(value)
    )
    aliases: list[tuple[GraphHolder, list[UOp]]] = []
    readers: list[tuple[GraphHolder, list[UOp]]] = []
    shared: list[GraphHolder] = []
    value_nodes = set(value.toposort(gate=_unrealized))
    for holder in _alive():
        if holder is target or (shares_value and holder is value_holder):
            continue
        held = holder.uop
        view_of = alias_base(held)
        if view_of is not None:  # most live tensors are views of a buffer: no graph walk needed
            if _BUFFER_SLOT.get(view_of) is storage:
                aliases.append((holder, [view_of]))
            continue
        if held in value_nodes and held is not value and _unrealized(held) and _reads_a_buffer(held):
            # a live tensor the value computes anyway (a batch_norm input, a gradient): realized with the write, so
            # it is not computed again later (and, read before the write, needs no snapshot)
            shared.append(holder)
            continue
        reads = _reads(held, storage)
        if reads:
            (aliases if alias_base(held, through_assign=True) is not None else readers).append((holder, reads))
    assign = graph.assign(node, value)  # normalizing merges the movement chains of the roots
    roots = [assign]
    # a value kept for gradients reads the old contents when its gradient is computed: it needs the snapshot too
    value_reads = _reads(value, storage) if keep_graph else []
    if readers or value_reads:  # a copy of the old contents, made before the write, for the readers built before it
        snapshot_target = graph.buffer_uop(base.arg.device, base.arg.size, base.dtype)
        roots.append(graph.assign(snapshot_target, base))
    snapshot_at = len(roots) - 1
    first_shared = len(roots)
    roots.extend(holder.uop for holder in shared)
    views = realize_uops(roots)
    for holder, view in zip(shared, views[first_shared:]):
        if getattr(holder, "requires_grad", None) is not True:  # like Tensor.realize_all
            holder.uop = view
    new_base = _target_base(views[0])
    assert new_base is not None
    for holder, reads in aliases:
        holder.uop = _rebind(holder.uop, reads, storage, new_base)
    for holder, reads in readers:
        holder.uop = _rebind(holder.uop, reads, storage, views[snapshot_at])
    # values realized into the buffer earlier are gone (the live tensors reading them were rebound above)
    old_nodes = {base}
    for _, reads in aliases + readers:
        for read in reads:
            old_nodes.update(n for n in (realized_view(read) or read).toposort() if _storage(n) is storage)
    for old in old_nodes:
        forget_realized_into(old)
        mark_overwritten(old)
    if shares_value:
        record_realized(value, views[0])
    if not keep_graph:
        target.uop = views[0]
        return
    # gradients flow through the ASSIGN into the value, which reads the snapshot of the old contents
    kept_value = _rebind(value, value_reads, storage, views[snapshot_at]) if value_reads else value
    kept = graph.assign(views[0], kept_value)
    record_realized(kept, views[0])
    target.uop = kept


def _reads_by_storage(uop: UOp, storages: dict[int, Buffer]) -> dict[int, list[UOp]]:
    """Like `_reads`, for several buffers in one walk: id(buffer) -> the nodes through which `uop` reads it."""
    found: dict[int, list[UOp]] = {}

    def descend(node: UOp) -> bool:
        return node.op is not Ops.BUFFER and realized_view(node) is None

    for node in uop.toposort(gate=descend):
        if node.op is Ops.BUFFER:
            storage = _storage(node)
            if storage is not None and id(storage) in storages:
                found.setdefault(id(storage), []).append(node)
            continue
        view = realized_view(node)
        if view is None:
            continue
        for key in {id(s) for s in (_storage(inner) for inner in view.toposort()) if s is not None}:
            if key in storages:
                found.setdefault(key, []).append(node)
    return found


def _computes_new_values(uop: UOp) -> bool:
    """Whether realizing `uop` computes values into new memory (not a view of memory that is already realized)."""
    node = uop
    while node.op in graph.MOVEMENT_OPS or node.op in (Ops.DETACH, Ops.CONTIGUOUS):
        if realized_view(node) is not None:
            return False
        node = node.src[0]
    return realized_view(node) is None and node.op not in (Ops.BUFFER, Ops.CONST)


def write_many(writes: Sequence[tuple[GraphHolder, GraphHolder]]) -> None:
    """Writes each value tensor into its target's buffer, all in one schedule, as one simultaneous update.

    Every value reads the contents from before all of these writes (an optimizer step: each parameter's and each
    state's new value is computed from the old ones), and each value is first computed into a buffer of its own,
    so writes whose values read each other's targets cannot form a cycle of kernels. Live tensors are rebound as
    `write` does (views see the new contents), except that a live lazy tensor reading a written buffer (the loss of
    the step) is computed in the same schedule, before the writes, rather than from a snapshot later; one whose
    value is a view of already realized memory gets a snapshot. For updates that keep no gradient graph.

    Raises:
        ValueError: two writes target the same buffer.
    """
    targets: list[tuple[GraphHolder, UOp, UOp, Buffer, GraphHolder]] = []
    for target, value_holder in writes:
        node = graph.fold_movement_chains(target.uop)
        node = realized_view(node) or node
        base = _target_base(node)
        if base is None:  # no buffer: the tensor just takes the value (as in `write`)
            target.uop = value_holder.uop
            continue
        targets.append((target, node, base, buffer_of(base), value_holder))
    if not targets:
        return
    storages: dict[int, Buffer] = {}
    for _, _, _, storage, _ in targets:
        if id(storage) in storages:
            raise ValueError(f"write_many: two writes target one buffer (of {storage.size} elements); write it once")
        storages[id(storage)] = storage
    skip = {id(holder) for write_ in targets for holder in (write_[0], write_[4])}
    value_nodes = _unrealized_nodes(value_holder.uop for *_, value_holder in targets)
    reads_memo: dict[UOp, bool] = {}
    aliases: list[tuple[GraphHolder, int, list[UOp]]] = []
    readers: list[tuple[GraphHolder, dict[int, list[UOp]]]] = []
    shared: list[GraphHolder] = []
    for holder in _alive():
        if id(holder) in skip:
            continue
        held = holder.uop
        view_of = alias_base(held)
        if view_of is not None:
            viewed = _BUFFER_SLOT.get(view_of)
            if viewed is not None and id(viewed) in storages:
                aliases.append((holder, id(viewed), [view_of]))
            continue
        if held in value_nodes and _unrealized(held) and _reads_a_buffer(held, reads_memo):
            shared.append(holder)  # computed by the values anyway: realized with the writes, no snapshot needed
            continue
        reads_of = _reads_by_storage(held, storages)
        if reads_of:
            if _computes_new_values(held):
                # a lazy result read after the step (the loss): computed in the same schedule, before the writes,
                # instead of snapshotting the buffers it reads and computing it again later
                shared.append(holder)
            else:
                readers.append((holder, reads_of))
    roots: list[UOp] = []
    for _, node, _, _, value_holder in targets:
        # normalizing merges the movement chains of the roots (no fold_movement_chains walk here)
        roots.append(graph.assign(node, graph.contiguous(value_holder.uop)))
    snapshot_of: dict[int, int] = {}  # id(buffer) -> index in roots of the copy of its old contents
    needed = {key for _, reads_of in readers for key in reads_of}
    for _, _, base, storage, _ in targets:
        if id(storage) in needed:
            snapshot_of[id(storage)] = len(roots)
            roots.append(graph.assign(graph.buffer_uop(base.arg.device, base.arg.size, base.dtype), base))
    first_shared = len(roots)
    roots.extend(holder.uop for holder in shared)
    views = realize_uops(roots)
    for holder, view in zip(shared, views[first_shared:]):
        if getattr(holder, "requires_grad", None) is not True:
            holder.uop = view
    new_bases: dict[int, UOp] = {}
    for index, (_, _, _, storage, _) in enumerate(targets):
        new_base = _target_base(views[index])
        assert new_base is not None
        new_bases[id(storage)] = new_base
    for holder, key, alias_reads in aliases:
        holder.uop = _rebind(holder.uop, alias_reads, storages[key], new_bases[key])
    for holder, by_storage in readers:
        for key, reader_reads in by_storage.items():
            holder.uop = _rebind(holder.uop, reader_reads, storages[key], views[snapshot_of[key]])
    for _, _, base, storage, _ in targets:
        old_nodes = {base}
        for _, key, alias_reads in aliases:
            if key == id(storage):
                old_nodes.update(alias_reads)
        for _, by_storage in readers:
            for read in by_storage.get(id(storage), []):
                old_nodes.update(n for n in (realized_view(read) or read).toposort() if _storage(n) is storage)
        for old in old_nodes:
            forget_realized_into(old)
            mark_overwritten(old)
    # one memo for the values (they share most of their graphs): a node's answer cannot change here, only nodes
    # answering True are recorded below
    values_memo: dict[UOp, bool] = {}
    for index, (target, _, _, _, value_holder) in enumerate(targets):
        value = value_holder.uop
        if alias_base(value) is None and realized_view(value) is None and _reads_a_buffer(value, values_memo):
            record_realized(value, views[index])  # the value's tensor reads the written contents (copy on write)
        target.uop = views[index]
