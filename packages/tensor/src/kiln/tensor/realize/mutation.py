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
(weakly) with the current engine (`Engine.tensors`); a write looks at the tensors of every engine on the calling
thread's `use_engine` stack (`engines_in_context`).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Sequence
from typing import Protocol

from kiln.runtime import Buffer
from kiln.tensor import graph
from kiln.tensor.core import TensorCore
from kiln.tensor.realize.buffers import SLOT as _BUFFER_SLOT
from kiln.tensor.realize.buffers import buffer_of
from kiln.tensor.realize.engine import default_engine, engines_in_context, realize_uops
from kiln.tensor.realize.graph_lock import serialized
from kiln.tensor.realize.graph_reads import (
    check_gradient_operands,
    computes_new_values,
    reads_a_buffer,
    reads_by_storage,
    reads_other_target,
    rebind,
    storage_of,
    storage_reads,
    target_base,
    to_snapshot,
    unrealized,
    unrealized_nodes,
)
from kiln.tensor.realize.views import check_writable, place, region_writable, store_chain, view_root
from kiln.tensor.schedule import (
    alias_base,
    forget_realized_into,
    mark_overwritten,
    realized_view,
    record_realized,
)
from kiln.uops import Ops, UOp

__all__ = [
    "GraphHolder",
    "check_gradient_operands",
    "live_count",
    "materialize",
    "share_root_before_realize",
    "track",
    "viewers",
    "write",
    "write_many",
]


class GraphHolder(Protocol):
    """Anything holding a tensor graph in `uop` (a Tensor)."""

    uop: UOp


@serialized
def track(holder: TensorCore) -> None:
    """Registers a new tensor (weakly) with the current engine, so writes can rebind it."""
    default_engine().tensors.track(holder)


def _alive() -> list[GraphHolder]:
    """The tracked tensors still alive that the calling thread can reach (every engine of its context), each once."""
    engines = engines_in_context()
    if len(engines) == 1:
        return [*engines[0].tensors.alive()]
    found: dict[int, GraphHolder] = {}
    for engine in engines:
        for holder in engine.tensors.alive():
            found.setdefault(id(holder), holder)
    return list(found.values())


@serialized
def live_count() -> int:
    """How many tracked tensors are alive."""
    return len(_alive())


def _written_view(node: UOp) -> bool:
    """Whether `node` views a buffer through targets of realized writes (a write that kept its gradient graph);
    a lazy ASSIGN (a clone not realized yet) is a value."""
    if alias_base(node, through_assign=True) is None:
        return False
    while node.op is not Ops.BUFFER:
        if node.op is Ops.ASSIGN and realized_view(node) is None:
            return False
        node = node.src[0]
    return True


def _lazy(root: UOp) -> bool:
    # a root with no storage yet: a lazy result or a constant
    return root.op is not Ops.BUFFER and realized_view(root) is None


@serialized
def viewers(root: UOp, exclude: GraphHolder | None = None) -> list[GraphHolder]:
    """The live tensors (but `exclude`) that are views of `root` (`view_root`), `root` itself included."""
    found = []
    for holder in _alive():
        if holder is not exclude and view_root(holder.uop) is root:
            found.append(holder)
    return found


def _base_of(holder: GraphHolder) -> GraphHolder | None:
    # the live tensor `holder` was taken as a view of (PyTorch's `_base`; itself for a base), else None
    reference: weakref.ref[GraphHolder] | None = getattr(holder, "_view_base", None)
    return None if reference is None else reference()


def _sharing(holder: GraphHolder, root: UOp) -> list[GraphHolder]:
    """The other live tensors that share `holder`'s lazy `root`: its base tensor and the views taken of that base
    (one token). Told apart by tensor, not by node: two equal lazy results are one hash-consed node, two tensors."""
    token = getattr(holder, "_view_token", None)
    if token is None:
        return []
    found = []
    for other in _alive():
        if other is not holder and getattr(other, "_view_token", None) is token and _root(other) is root:
            found.append(other)
    return found


def _root(holder: GraphHolder) -> UOp:
    # the root of `holder`'s view chain, stopping at its base tensor's node
    base = _base_of(holder)
    if base is None or base is holder:
        return view_root(holder.uop)
    root = view_root(holder.uop, base.uop)
    if root is base.uop:
        deeper = view_root(root)  # the base is itself a view of storage (given storage since): its storage
        if not _lazy(deeper):
            return deeper
    return root


@serialized
def materialize(root: UOp, holders: Iterable[GraphHolder]) -> None:
    """Gives lazy `root` storage: computes it into a buffer now, so that `holders` (its views) share that buffer
    and see each other's writes. Tensors that keep their graph for gradients read the root's recorded buffer;
    the others hold the buffer view directly."""
    # written into memory of its own: a constant (even one the engine has seen as a constant before) gets a buffer
    shape = graph.shape_of(root)
    memory = graph.buffer_uop(graph.device_of(root), max(1, math.prod(shape)), root.dtype)
    view = realize_uops([graph.assign(graph.reshape(graph.shrink(memory, ((0, math.prod(shape)),)), shape), root)])[0]
    if graph.shape_of(view) != shape:
        view = graph.reshape(view, shape)
    # a graph that reads no memory (constants, random numbers) is never recorded: hash-consing makes it the node of
    # every equal graph of the program, which must not read this tensor's storage
    recorded = reads_a_buffer(root)
    if recorded:
        record_realized(root, view)
    for holder in holders:
        if not recorded or getattr(holder, "requires_grad", None) is not True:
            holder.uop = holder.uop.substitute({root: view})


# a lazy result of more elements than this is not computed whole when one of its views is realized (see
# `share_root_before_realize`): `Tensor.arange(2**33)[-5:]` must not allocate 32 GiB
_MATERIALIZE_ON_REALIZE_LIMIT = 1 << 22


@serialized
def share_root_before_realize(holder: GraphHolder) -> bool:
    """Before `holder` (a lazy result with live views, or a view of one) is realized on its own: gives the result
    storage, so that the views stay views of one tensor (PyTorch computed it whole) instead of each getting a copy
    of its part. A result over `_MATERIALIZE_ON_REALIZE_LIMIT` elements is left lazy: returns True, and the caller
    keeps `holder`'s graph (its value is only recorded), so a later write through any of the views still finds it
    and gives the result storage then."""
    root = _root(holder)
    if not _lazy(root):
        return False
    others = _sharing(holder, root)
    if not others:
        return False
    if math.prod(graph.shape_of(root)) > _MATERIALIZE_ON_REALIZE_LIMIT:
        return True
    materialize(root, [holder, *others])
    return False


@serialized
def write(
    target: GraphHolder,
    value: UOp,
    keep_graph: bool = False,
    value_holder: GraphHolder | None = None,
    operation: str = "assign",
) -> None:
    """Writes `value` into the storage `target` views, now, and rebinds the live tensors (see the module doc).

    Args:
        target: the tensor written to: a view (`kiln.tensor.realize.views`) of a buffer, of a realized result or of
            a lazy result (given storage first when other live tensors view it too; alone, it just takes the value).
        value: the new values (target's shape, dtype and device).
        keep_graph: keep the gradient path through the write (gradients flow into the value and, outside the
            written elements, into the old contents).
        value_holder: the tensor `value` belongs to: it is recorded as realized into the written buffer (copy on
            write) instead of being snapshotted.
        operation: the name of the write, for errors.

    Raises:
        RuntimeError: the target is an expanded view (several of its elements are one element of the storage).
    """
    node = target.uop
    root = _root(target)
    check_writable(node, root, operation)
    if _lazy(root):
        others = _sharing(target, root)
        if not others:  # nothing else shares it: the tensor just takes the value
            target.uop = value
            return
        materialize(root, [target, *others])
        node = target.uop
        root = view_root(node)
    if keep_graph:
        # a write that gradients flow through: the whole root is written (through a view: with the value placed
        # into its old contents, PyTorch's CopySlices), and every view of the root is rebuilt over the written root
        shared = [target, *viewers(root, exclude=target)]
        whole = root is node
        new_value = value if whole else place(node, root, value)
        # (no copy on write for the value here: a later write of the same hash-consed value would read its target)
        kept = _write_into(realized_view(root) or root, new_value, True, None, shared)
        for holder in shared:
            holder.uop = holder.uop.substitute({root: kept})
        return
    stored = realized_view(root)
    views_of: list[GraphHolder] = []
    if stored is not None:  # a realized result: write into its buffer view; its other views see the write
        views_of = viewers(root, exclude=target)
        node = node.substitute({root: stored})
        root = view_root(node)
    if root.op is not Ops.BUFFER:
        target.uop = value
        return
    if region_writable(node, root):
        target.uop = _write_into(store_chain(node, root, root), value, False, value_holder, [target], views_of)
        return
    # a chain the scheduler cannot store through (a strided slice): the whole buffer is written, and the target is
    # rebound like every other view of it
    _write_into(root, place(node, root, value), False, None, [], [target, *views_of])


def _write_into(
    node: UOp,
    value: UOp,
    keep_graph: bool,
    value_holder: GraphHolder | None,
    skip: list[GraphHolder],
    views_of: Sequence[GraphHolder] = (),
) -> UOp:
    """Writes `value` into `node` (a view chain over a BUFFER node, realized nodes allowed) in one schedule, rebinds
    the live tensors but those in `skip` (and the value's), and returns the written node for the target.

    `views_of` are views of a realized result whose buffer is written: they see the write. Other tensors realized
    into the buffer (a value assigned earlier, copy on write) keep their values."""
    node = graph.fold_movement_chains(node)
    node = realized_view(node) or node
    base = target_base(node)
    assert base is not None
    storage = buffer_of(base)
    shares_value = (
        value_holder is not None
        and value_holder.uop is value
        and alias_base(value) is None
        and realized_view(value) is None
        and reads_a_buffer(value)
    )
    skipped = {id(holder) for holder in skip}
    viewing = {id(holder) for holder in views_of}
    aliases: list[tuple[GraphHolder, list[UOp]]] = []
    readers: list[tuple[GraphHolder, list[UOp]]] = []
    shared: list[GraphHolder] = []
    value_nodes = set(value.toposort(gate=unrealized))
    for holder in _alive():
        if id(holder) in skipped or (shares_value and holder is value_holder):
            continue
        held = holder.uop
        view_of = alias_base(held)
        if view_of is not None:  # most live tensors are views of a buffer: no graph walk needed
            if _BUFFER_SLOT.get(view_of) is storage:
                aliases.append((holder, [view_of]))
            continue
        if held in value_nodes and held is not value and unrealized(held) and reads_a_buffer(held):
            # a live tensor the value computes anyway (a batch_norm input, a gradient): realized with the write, so
            # it is not computed again later (and, read before the write, needs no snapshot)
            shared.append(holder)
            continue
        reads = storage_reads(held, storage)
        if reads:
            is_view = id(holder) in viewing or _written_view(held)
            (aliases if is_view else readers).append((holder, reads))
    assign = graph.assign(node, value)  # normalizing merges the movement chains of the roots
    while realized_view(assign) is not None:
        # the same write as an earlier one kept for gradients (one hash-consed node, realized already): this write
        # must run and get a node of its own
        value = graph.contiguous(value)
        assign = graph.assign(node, value)
    roots = [assign]
    # a value kept for gradients reads the old contents when its gradient is computed: it needs the snapshot too
    value_reads = storage_reads(value, storage) if keep_graph else []
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
    new_base = target_base(views[0])
    assert new_base is not None
    for holder, reads in aliases:
        holder.uop = rebind(holder.uop, reads, storage, new_base)
    # values realized into the buffer earlier are gone (the live tensors reading them are rebound below)
    old_nodes = {base}
    for _, reads in aliases + readers:
        for read in reads:
            old_nodes.update(n for n in (realized_view(read) or read).toposort() if storage_of(n) is storage)
    for holder, reads in readers:
        holder.uop = to_snapshot(holder.uop, reads, storage, views[snapshot_at])
    # gradients flow through the ASSIGN into the value, which reads the snapshot of the old contents
    kept_value = to_snapshot(value, value_reads, storage, views[snapshot_at]) if value_reads else value
    for old in old_nodes:
        forget_realized_into(old)
        mark_overwritten(old)
    if shares_value:
        record_realized(value, views[0])
    if not keep_graph:
        return views[0]
    kept = graph.assign(views[0], kept_value)
    record_realized(kept, views[0])
    return kept


@serialized
def write_many(writes: Sequence[tuple[GraphHolder, GraphHolder]]) -> None:
    """Writes each value tensor into its target's buffer, all in one schedule, as one simultaneous update.

    Every value reads the contents from before all of these writes (an optimizer step: each parameter's and each
    state's new value is computed from the old ones); a value that reads another write's target is first computed
    into a buffer of its own, so writes whose values read each other's targets cannot form a cycle of kernels, and
    a value reading only its own target (plain SGD) is computed into it in place, one kernel. Live tensors are
    rebound as `write` does (views see the new contents), except that a live lazy tensor reading a written buffer
    (the loss of the step) is computed in the same schedule, before the writes, rather than from a snapshot later;
    one whose value is a view of already realized memory gets a snapshot. For updates that keep no gradient graph.

    Raises:
        ValueError: two writes target the same buffer.
    """
    targets: list[tuple[GraphHolder, UOp, UOp, Buffer, GraphHolder]] = []
    for target, value_holder in writes:
        node = graph.fold_movement_chains(target.uop)
        node = realized_view(node) or node
        base = target_base(node)
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
    value_nodes = unrealized_nodes(value_holder.uop for *_, value_holder in targets)
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
        if held in value_nodes and unrealized(held) and reads_a_buffer(held, reads_memo):
            shared.append(holder)  # computed by the values anyway: realized with the writes, no snapshot needed
            continue
        reads_of = reads_by_storage(held, storages)
        if reads_of:
            if computes_new_values(held):
                # a lazy result read after the step (the loss): computed in the same schedule, before the writes,
                # instead of snapshotting the buffers it reads and computing it again later
                shared.append(holder)
            else:
                readers.append((holder, reads_of))
    roots: list[UOp] = []
    other_memo: dict[UOp, frozenset[int]] = {}  # one walk of the graph the values share
    for _, node, _, storage, value_holder in targets:
        # normalizing merges the movement chains of the roots (no fold_movement_chains walk here)
        value = value_holder.uop
        if reads_other_target(value, storage, storages, other_memo):
            # first computed into a buffer of its own: the other target's write is then ordered after this read
            value = graph.contiguous(value)
        # else the value is computed into its target in place, one kernel (an SGD update reads only its own
        # parameter and its gradient; the scheduler orders every other read of the target before the write and
        # buffers a value that reads its target at other elements than the ones written)
        roots.append(graph.assign(node, value))
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
        new_base = target_base(views[index])
        assert new_base is not None
        new_bases[id(storage)] = new_base
    for holder, key, alias_reads in aliases:
        holder.uop = rebind(holder.uop, alias_reads, storages[key], new_bases[key])
    for holder, by_storage in readers:
        for key, reader_reads in by_storage.items():
            holder.uop = rebind(holder.uop, reader_reads, storages[key], views[snapshot_of[key]])
    for _, _, base, storage, _ in targets:
        old_nodes = {base}
        for _, key, alias_reads in aliases:
            if key == id(storage):
                old_nodes.update(alias_reads)
        for _, by_storage in readers:
            for read in by_storage.get(id(storage), []):
                old_nodes.update(n for n in (realized_view(read) or read).toposort() if storage_of(n) is storage)
        for old in old_nodes:
            forget_realized_into(old)
            mark_overwritten(old)
    # one memo for the values (they share most of their graphs): a node's answer cannot change here, only nodes
    # answering True are recorded below
    values_memo: dict[UOp, bool] = {}
    for index, (target, _, _, _, value_holder) in enumerate(targets):
        value = value_holder.uop
        if alias_base(value) is None and realized_view(value) is None and reads_a_buffer(value, values_memo):
            record_realized(value, views[index])  # the value's tensor reads the written contents (copy on write)
        target.uop = views[index]
