"""The eager lane: a small op of a tensor and a Python number, met again, runs its kernel without a graph node.

`x = (x + 1).realize()` in a loop builds an ADD node over x's BUFFER node and a constant, realizes it (the eager
fast path, `kiln.tensor.realize.fast_path`, finds the remembered kernel by the node's structure), and gives the
result a new BUFFER node. Those nodes, their per-node facts (shape, device, buffer, realized view) and the walk that
keys them cost more than the kernel. The lane keys the op before any node is built, by what decides the node and
its kernel: the Tensor method, the operand's dtype, shape and device, the number's type and value, and the default
dtypes. A key the fast path has served once (`learn`) maps to a `LaneEntry`; the next op of that key makes a tensor
whose state is a `LaneValue` instead of a graph node, and realizing it launches the remembered kernel on a new
output buffer (`run`). Nothing is lost: the tensor's `uop` is built on first use (`node_of`, through
`Tensor.__getattr__`), the node the normal path would have built (the op over the operand's node and the constant;
once realized, a BUFFER node holding the output, reshaped as the plan's view), after which the tensor is an ordinary
one.

A `LaneValue` is pending (it holds the entry and its source: the operand's BUFFER node or realized `LaneValue`) or
realized (it holds its output Buffer). Anything the lane does not cover takes the normal path with the node built:

- a write: every write walks the live tensors' `uop`, which builds each pending lane tensor's node over the
  operand's node, so the write sees it read the buffer and treats it as it treats any lazy reader; a source node a
  write replaced (`OVERWRITTEN`) or freed makes `run` refuse;
- an operand that requires grad (with gradient recording on), that is pending itself (a chain of lazy ops fuses on
  the normal path), a view, or not a BUFFER node (or a RESHAPE of one); a tensor subclass; a zero float (-0.0 and
  0.0 are one key) or a bool;
- an open capture (TinyJit records every launch), `DEBUG` output, or another engine current than the one that
  learned the key: `run` refuses and the node is built;
- the kernel, its output spec and the plan's view come from the fast path's entry for the node the normal path
  built, so every invalidation of that path's entries (clearing the engine's plans or programs) clears the lane's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from math import prod
from typing import TYPE_CHECKING, TypeVar

from kiln.runtime import Buffer
from kiln.runtime.knobs import lru_enabled
from kiln.tensor import graph
from kiln.tensor.counters import GlobalCounters
from kiln.tensor.realize.buffers import SLOT as BUFFER_SLOT
from kiln.tensor.realize.engine import _PROCESS_ENGINE, Engine, _context, default_engine, grad_disabled
from kiln.tensor.realize.fast_path import FIXED, OUTPUT, structure_of
from kiln.tensor.realize.graph_lock import graph_lock
from kiln.tensor.realize.plan_run import buffer_node
from kiln.tensor.schedule.normalize import OVERWRITTEN
from kiln.uops import DType, GroupOp, Ops, UOp, dtypes, knobs

if TYPE_CHECKING:
    from kiln.runtime import ProgramRunner

__all__ = ["LaneEntry", "LaneValue", "lane_key", "learn", "node_of", "pending", "run"]

_DEBUG = knobs.get_knob("DEBUG")
_buffer_slot_get = BUFFER_SLOT.get
_overwritten = OVERWRITTEN.has
_BINARY = frozenset(GroupOp.Binary)

Layout = tuple[DType, tuple[int, ...], str]
"""An operand's or a result's (dtype, shape, device)."""

T = TypeVar("T")

SOURCE = -3  # a program parameter taking the operand's buffer (OUTPUT and FIXED as in the fast path)
SPARE_COUNT = 2  # recycled output buffers kept per lane entry
SPARE_BYTES = 1 << 16  # the largest output buffer recycled (a larger one goes back to the allocator)


class LaneEntry:
    """One key's launch: the engine that learned it, the program's runner, where each program parameter's buffer
    comes from (`pattern`: `OUTPUT`, `SOURCE` or `FIXED`; `fixed`: the lifted constants' buffers), the output's
    (device, size, dtype), the result's layout and the plan's RESHAPE view of it (or None), and the node the normal
    path builds: `op`, `dtype`, `arg`, `tag` over the operand (at `position`) and `constant`."""

    __slots__ = (
        "arg",
        "constant",
        "dtype",
        "engine",
        "fixed",
        "flops",
        "launcher",
        "layout",
        "like_source",
        "mem_bytes",
        "op",
        "output",
        "pattern",
        "position",
        "reshape",
        "runner",
        "spare",
        "tag",
    )

    def __init__(
        self,
        engine: Engine,
        node: UOp,
        position: int,
        runner: ProgramRunner,
        costs: tuple[int, int],
        pattern: tuple[int, ...],
        fixed: tuple[Buffer | None, ...],
        output: tuple[str, int, DType],
        reshape: UOp | None,
    ) -> None:
        self.engine, self.runner, self.pattern, self.fixed = engine, runner, pattern, fixed
        # an HCQ runner's direct launcher of (output, operand) (the kernel called at once, in this thread), or None
        self.launcher: Callable[[Buffer, Buffer], bool] | None = None
        direct_launcher = getattr(runner, "direct_launcher", None)
        slots: list[int | Buffer] = []
        for kind, buffer in zip(pattern, fixed):
            slots.append(0 if kind == OUTPUT else 1 if kind == SOURCE else buffer if buffer is not None else -1)
        if direct_launcher is not None and -1 not in slots:
            self.launcher = direct_launcher(slots)
        self.flops, self.mem_bytes = costs
        self.op, self.dtype, self.arg, self.tag = node.op, node.dtype, node.arg, node.tag
        self.position, self.constant = position, node.src[1 - position]
        self.output, self.reshape = output, reshape
        self.layout: Layout = (node.dtype, graph.shape_of(node), output[0])
        # whether the output has the operand's size and dtype (then it is made like the operand's buffer; an ALU
        # op's operands and result share one device)
        operand = node.src[position]
        self.like_source = output[1:] == (prod(graph.shape_of(operand)), operand.dtype)
        # output buffers of this key's dead values, for its next launches (`LaneValue.__del__`); none kept where
        # the output is large (the allocator's cache may have to hand it back) or the LRU knob is off
        self.spare: list[Buffer] | None = [] if output[1] * output[2].nbytes <= SPARE_BYTES and lru_enabled() else None


class LaneValue:
    """A lane tensor's state: pending (`entry` and `source` set) or realized (`buffer` set). `node` is the graph
    node built for it, once asked for (`node_of`); `layout` is its (dtype, shape, device); `spare` is its entry's
    list of recycled output buffers (kept once realized, when the entry is let go).

    A realized value whose node was never built is the only holder of its output buffer (the lane made it, and
    nothing reads a lane value's buffer but the lane's next launch on it, which holds the value meanwhile), so
    when it dies the buffer goes to `spare` for the next launch of the key, skipping the allocator and a new
    Buffer object. A value whose node was built leaves its buffer to the graph (a view, a write, any other op)."""

    __slots__ = ("buffer", "entry", "layout", "node", "source", "spare")

    def __init__(self, entry: LaneEntry, source: UOp | LaneValue) -> None:
        self.entry: LaneEntry | None = entry
        self.source: UOp | LaneValue | None = source
        self.layout = entry.layout
        self.spare = entry.spare
        self.buffer: Buffer | None = None
        self.node: UOp | None = None

    def __del__(self) -> None:
        buffer, spare = self.buffer, self.spare
        if buffer is not None and spare is not None and self.node is None and len(spare) < SPARE_COUNT:
            spare.append(buffer)


def operand_layout(node: UOp) -> Layout | None:
    """The (dtype, shape, device) of an operand node the lane reads: a BUFFER node or a RESHAPE of one; else None."""
    base = node.src[0] if node.op is Ops.RESHAPE else node
    if base.op is not Ops.BUFFER:
        return None
    return (node.dtype, graph.shape_of(node), base.arg.device)


def lane_key(method: str, layout: Layout, number: int | float) -> tuple[object, ...]:
    """The key of `operand <method> number`: what decides the node the normal path builds and its kernel."""
    return (method, layout, type(number), number, dtypes.default_float, dtypes.default_int)


def pending(tensor: T, method: str, number: object) -> T | None:
    """A new tensor of `tensor`'s class holding the pending lane value of `tensor <method> number` (no graph node)
    when its key was learned and the lane may take it (see the module doc), else None (the normal path builds the
    node). The tensor is registered with the engine that made it, as every new tensor is."""
    kind = type(number)
    if kind is not float and kind is not int:
        return None
    state = vars(tensor)
    if (state.get("_requires_grad") is True and not grad_disabled()) or state.get("_bound_size") is not None:
        return None
    source = state.get("_lane")
    if source is not None:
        if source.entry is not None:  # pending itself: the normal path fuses the chain
            return None
        layout = source.layout
    else:
        source = state.get("uop")
        if source is None or (layout := operand_layout(source)) is None:
            return None
    if kind is float and number == 0.0:
        return None
    engines = _context.engines  # (`default_engine()` written out: every op of a tensor and a number asks)
    engine = engines[-1] if engines else _PROCESS_ENGINE
    entry: LaneEntry | None = engine.fast.lanes.get(
        (method, layout, kind, number, dtypes.default_float, dtypes.default_int)
    )
    if entry is None or engine._capture is not None:
        return None
    cls = type(tensor)
    result = cls.__new__(cls)
    made = vars(result)
    made["_lane"] = LaneValue(entry, source)
    made["_requires_grad"] = None
    made["grad"] = None
    with graph_lock:
        engine.tensors.track(result)  # type: ignore[arg-type]  # (a Tensor: the lane only sees it as an object)
    return result


def learn(tensor: object, method: str, number: int | float, result: object) -> None:
    """Remembers `tensor <method> number` (whose normal-path result is `result`) when the fast path has an entry
    for `result`'s node, that node is a binary op over `tensor`'s node and a constant, and the lane can launch it."""
    if type(number) not in (int, float) or (type(number) is float and number == 0.0):
        return
    node, operand = vars(result).get("uop"), vars(tensor).get("uop")
    if node is None or operand is None or node.op not in _BINARY or vars(result).get("_requires_grad") is True:
        return
    if getattr(result, "_bound_size", None) is not None or (layout := operand_layout(operand)) is None:
        return
    if node.src[0] is operand and node.src[1] is not operand:
        position = 0
    elif node.src[1] is operand and node.src[0] is not operand:
        position = 1
    else:
        return
    engine = default_engine()
    walked = structure_of(node)
    if walked is None or engine.recording is not None:
        return
    fast = engine.fast
    entry = fast.entry(walked[0])
    if entry is None:
        return
    pattern = []
    for source in entry.sources:
        if source not in (OUTPUT, FIXED, position):
            return
        pattern.append(SOURCE if source == position else source)
    method_of = entry.method
    lane = LaneEntry(
        engine,
        node,
        position,
        method_of.runner,
        (method_of.flops, method_of.mem_bytes),
        tuple(pattern),
        entry.fixed,
        entry.output,
        entry.reshape,
    )
    fast.remember_lane(lane_key(method, layout, number), lane)


def node_of(value: LaneValue) -> UOp:
    """The graph node of a lane value, built once: the op over its source's node and the constant while pending;
    a BUFFER node holding its output (reshaped as the plan's view) once realized."""
    with graph_lock:
        node = value.node
        if node is not None:
            return node
        entry = value.entry
        if entry is None:  # realized
            buffer = value.buffer
            assert buffer is not None
            node = buffer_node(buffer)
            dtype, shape, _ = value.layout
            if shape != (buffer.size,):
                node = UOp(Ops.RESHAPE, dtype, (node,), shape)
        else:
            source = value.source
            assert source is not None
            operand = source if type(source) is UOp else node_of(source)  # type: ignore[arg-type]
            operands = (operand, entry.constant) if entry.position == 0 else (entry.constant, operand)
            node = UOp(entry.op, entry.dtype, operands, entry.arg, entry.tag)
            graph.SHAPE.copy_missing(operands[0], node)
            graph.DEVICE.copy_missing(operands[0], node)
        value.node = node
        return node


def run(value: LaneValue) -> bool:
    """Realizes a pending lane value: its kernel launched on its source's buffer and a new output buffer. False,
    having run nothing, when the normal path must realize it instead (see the module doc)."""
    entry = value.entry
    if entry is None:
        return True
    engine = entry.engine
    engines = _context.engines  # (`default_engine()` written out, as in `pending`)
    if (
        engine._capture is not None
        or value.node is not None
        or (engines[-1] if engines else _PROCESS_ENGINE) is not engine
        or _DEBUG.value() >= 1
    ):
        return False
    with graph_lock:
        if value.entry is None:  # another thread realized it meanwhile
            return True
        source = value.source
        if type(source) is LaneValue:
            buffer = source.buffer
            node = source.node
            if buffer is None or (node is not None and _overwritten(node.src[0] if node.op is Ops.RESHAPE else node)):
                return False
        else:
            assert type(source) is UOp
            base = source.src[0] if source.op is Ops.RESHAPE else source
            buffer = _buffer_slot_get(base)
            if buffer is None or _overwritten(base):
                return False
        if not buffer.is_allocated:
            return False
        spare = entry.spare
        if spare:  # a dead value's output (allocated, of this entry's spec; only runs, under the lock, take them)
            output = spare.pop()
        elif entry.like_source and buffer.options is None:  # (the usual op: an output of its operand's spec)
            output = Buffer.allocated_like(buffer)
        else:
            output = Buffer(*entry.output).allocate()
        begin = time.perf_counter_ns()
        launcher = entry.launcher
        if launcher is None or not launcher(output, buffer):
            buffers: list[Buffer] = [
                output if kind == OUTPUT else buffer if kind == SOURCE else fixed  # type: ignore[misc]
                for kind, fixed in zip(entry.pattern, entry.fixed)
            ]
            entry.runner(buffers, None)
        GlobalCounters.time_ns += time.perf_counter_ns() - begin
        GlobalCounters.kernel_count += 1
        GlobalCounters.flops += entry.flops
        GlobalCounters.mem_bytes += entry.mem_bytes
        engine.fast.hits += 1
        engine.schedule.hits += 1
        value.buffer, value.entry, value.source = output, None, None
        return True
