"""The eager fast path: a small op met again on same-shaped buffers runs its remembered kernel without scheduling.

`x = (x + 1).realize()` in a loop realizes a new ADD node each time, over a new BUFFER node (the last result) and
the same constant. The slow path normalizes it (placeholders for the buffers, a hash-consed node for the result),
looks its plan up in the schedule cache, prepares the run and launches the kernel. The plan depends only on the
node's structure: its op, dtype and payload, each buffer source's dtype, size and device (a source may be a RESHAPE
of a buffer, the view of a realized result of several dims: its shape too; and which sources are one buffer), and
each other source's graph. An `EagerFastPath` remembers, by exactly that key, what the slow path found
(the plan's one kernel and where each program parameter's buffer comes from), and the next node of that structure
is launched at once on a new output buffer.

The key holds what the result depends on, so anything else takes the slow path:

- a source that is not a BUFFER must be a pure graph (constants only, `SELF_EPOCH`): it is in the key by identity
  (hash-consed: a new constant value, dtype, device or broadcast shape is another node, another key);
- a buffer source's dtype, size and device are in the key, and its contents are read when the kernel runs, so a
  write lands before the launch as it would on the slow path; a BUFFER node a write replaced (`OVERWRITTEN`), or
  one without memory, goes to the slow path (which raises or allocates as it does);
- a node realized already (its view is reused, not recomputed), `DEBUG` output, and an open capture (TinyJit
  records every launch) go to the slow path; the gradient requirement is the caller's (`Tensor.realize_all` keeps
  the graph of a tensor that requires grad), not the plan's;
- the program is the one the engine's method cache holds for the kernel (built once per kernel sink and device, as
  on the slow path, whatever compile knobs change later); clearing the engine's plans or programs clears the entries.

Only plans of one kernel and one output, whose inputs are the node's buffer sources (or constants the schedule
cache lifted into buffers, fixed for the key's constant), are remembered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.runtime import Buffer
from kiln.tensor.realize.buffers import SLOT as BUFFER_SLOT
from kiln.tensor.realize.method import Method
from kiln.tensor.schedule.items import KernelStep, OutputSlot, SchedulePlan
from kiln.tensor.schedule.normalize import OVERWRITTEN, SELF_EPOCH
from kiln.uops import DType, GroupOp, Ops, UOp

__all__ = ["FIXED", "OUTPUT", "EagerFastPath", "FastEntry", "structure_of"]

_buffer_slot_get = BUFFER_SLOT.get

_ALU_OPS = frozenset(GroupOp.ALU)
OUTPUT = -1  # a program parameter taking the run's output buffer
FIXED = -2  # a program parameter taking a buffer fixed for the key (a lifted constant)

FastKey = tuple[object, ...]


def structure_of(root: UOp) -> tuple[FastKey, list[UOp | None]] | None:
    """The fast path's key of `root` and the BUFFER node under each source (None for a source over no buffer).

    The key is `root`'s op, dtype, payload and tag, then per source: for a BUFFER, or a RESHAPE of one (the view of
    a realized result of several dims), the buffer's (dtype, size, device, its position among the distinct buffers,
    the RESHAPE's shape or None); for any other source the node itself. None when `root` is not an ALU op over at
    least one buffer."""
    if root.op not in _ALU_OPS:
        return None
    parts: list[object] = [root.op, root.dtype, root.arg, root.tag]
    bases: list[UOp | None] = []
    distinct: list[UOp] = []
    for source in root.src:
        base = source.src[0] if source.op is Ops.RESHAPE else source
        if base.op is not Ops.BUFFER:
            parts.append(source)
            bases.append(None)
            continue
        if base not in distinct:
            distinct.append(base)
        arg = base.arg
        parts.append(
            (base.dtype, arg.size, arg.device, distinct.index(base), source.arg if base is not source else None)
        )
        bases.append(base)
    return (tuple(parts), bases) if distinct else None


class FastEntry:
    """What one structure's launch needs: the kernel step, its launcher, the output's (device, size, dtype), for
    each program parameter where its buffer comes from (`sources`: a source index of the node, `OUTPUT` or
    `FIXED`; `fixed`: the buffer of a `FIXED` parameter), and the plan's RESHAPE view of the output when the result
    has another shape than (size,) (else None)."""

    __slots__ = ("fixed", "method", "output", "plan", "reshape", "sources", "step")

    def __init__(
        self,
        plan: SchedulePlan,
        step: KernelStep,
        method: Method,
        output: tuple[str, int, DType],
        sources: tuple[int, ...],
        fixed: tuple[Buffer | None, ...],
        reshape: UOp | None,
    ) -> None:
        self.plan, self.step, self.method, self.output = plan, step, method, output
        self.sources, self.fixed, self.reshape = sources, fixed, reshape


class EagerFastPath:
    """The fast path's entries by `structure_of` key, the oldest first out past `limit` (one per `Engine`).

    Attributes:
        hits: launches that took the fast path.
        limit: how many structures are remembered.
    """

    def __init__(self, limit: int = 1024) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"EagerFastPath limit must be a positive int, got {limit!r}")
        self.limit = limit
        self.hits = 0
        self._entries: dict[FastKey, FastEntry] = {}  # first in, first out
        # the eager lane's entries (`kiln.tensor.realize.eager_lane`), by its key, built from these: read directly
        # on every op of a tensor and a number; first in, first out; cleared with them
        self.lanes: dict[FastKey, Any] = {}  # (`eager_lane.LaneEntry`: that module builds on this one)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forgets every entry and every eager lane entry (the engine's plans or programs were cleared)."""
        self._entries.clear()
        self.lanes.clear()

    def entry(self, key: FastKey) -> FastEntry | None:
        """The entry of a `structure_of` key, or None."""
        return self._entries.get(key)

    def remember_lane(self, key: FastKey, lane: Any) -> None:
        """Keeps an eager lane entry under `key` (the oldest first out past `limit`)."""
        lanes = self.lanes
        if key not in lanes and len(lanes) >= self.limit:
            del lanes[next(iter(lanes))]
        lanes[key] = lane

    def find(self, root: UOp) -> tuple[FastEntry, list[Buffer | None]] | None:
        """The entry of `root`'s structure and the Buffer under each of its sources (None for a source over no
        buffer), when every such buffer holds memory that no write replaced; else None (the slow path)."""
        walked = structure_of(root)
        if walked is None:
            return None
        entry = self._entries.get(walked[0])
        if entry is None:
            return None
        found: list[Buffer | None] = []
        for base in walked[1]:
            if base is None:
                found.append(None)
                continue
            buffer = _buffer_slot_get(base)
            if buffer is None or OVERWRITTEN.has(base) or not buffer.is_allocated:
                return None
            found.append(buffer)
        self.hits += 1
        return entry, found

    def learn(
        self,
        root: UOp,
        plan: SchedulePlan,
        inputs: tuple[UOp, ...],
        method: Method,
        slot_positions: tuple[int, ...],
        input_buffer: Callable[[UOp], Buffer],
    ) -> None:
        """Remembers the plan the slow path ran for `root` when it is one kernel with one output, its node's sources
        outside the buffers are pure graphs and each input is a buffer source of the node or a lifted constant.

        `slot_positions`: the run-list position (outputs, then inputs) of each program parameter; `input_buffer`:
        the engine's function from an input node to its Buffer (for lifted constants)."""
        if len(plan.outputs) != 1 or plan.temporaries or len(plan.steps) != 1:
            return
        step = plan.steps[0]
        if not isinstance(step, KernelStep) or step.var_vals or (walked := structure_of(root)) is None:
            return
        key, bases = walked
        # a source over no buffer must be a pure graph (normalizing marks them in one epoch only: a mark says so)
        if any(base is None and not SELF_EPOCH.has(source) for source, base in zip(root.src, bases)):
            return
        view = plan.views[0] if len(plan.views) == 1 else None
        reshape = view if view is not None and view.op is Ops.RESHAPE else None  # the view of a result of 2+ dims
        base = reshape.src[0] if reshape is not None else view
        if base is None or base.op is not Ops.BUFFER or not isinstance(base.arg, OutputSlot):
            return
        per_input: list[int] = []
        fixed_of_input: list[Buffer | None] = []
        for node in inputs:
            if node.op is Ops.BUFFER:
                if node not in bases:  # (a buffer read elsewhere in the graph: not this op's)
                    return
                per_input.append(bases.index(node))
                fixed_of_input.append(None)
            elif node.op is Ops.CONST:
                per_input.append(FIXED)
                fixed_of_input.append(input_buffer(node))
            else:
                return
        parameter_sources: list[int] = []
        fixed: list[Buffer | None] = []
        for position in slot_positions:
            if position == 0:
                parameter_sources.append(OUTPUT)
                fixed.append(None)
            else:
                parameter_sources.append(per_input[position - 1])
                fixed.append(fixed_of_input[position - 1])
        spec = plan.outputs[0]
        entry = FastEntry(
            plan, step, method, (spec.device, spec.size, spec.dtype), tuple(parameter_sources), tuple(fixed), reshape
        )
        entries = self._entries
        if len(entries) >= self.limit:
            del entries[next(iter(entries))]
        entries[key] = entry
