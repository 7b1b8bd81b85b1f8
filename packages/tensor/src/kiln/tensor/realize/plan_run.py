"""One run of a schedule plan, laid out: what the engine works out once per plan (`PreparedPlan`), the Buffers and
BUFFER nodes of a run (`output_node`, `buffer_node`, `temporary_buffers`), the run's results as views over them
(`result_views`), and the kernel launches of a run batched per queue (`LaunchBatch`). The `Engine`
(`kiln.tensor.realize.engine`) owns the caches and runs the steps; this module is the data a run is made of."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

from kiln.runtime import Buffer, Device, ExecCommand, HCQCompiled, HCQProgramRunner
from kiln.tensor.counters import GlobalCounters
from kiln.tensor.graph import DEVICE, SHAPE, BufferArg, mark_folded
from kiln.tensor.realize.buffers import SLOT as BUFFER_SLOT
from kiln.tensor.realize.buffers import attach_buffer, buffer_of
from kiln.tensor.realize.method import Method
from kiln.tensor.schedule import BufferSource, CopyStep, InputSlot, KernelStep, OutputSlot, SchedulePlan
from kiln.uops import DType, Ops, UOp, dtypes, knobs

__all__ = [
    "LaunchBatch",
    "PreparedPlan",
    "buffer_node",
    "output_node",
    "result_views",
    "temporary_buffers",
]

# numbers for the BUFFER nodes the engine makes (outputs, re-issued inputs), disjoint from graph.buffer_uop's; shared
# by every Engine, so node numbers stay unique in the process
_fresh_numbers = itertools.count(1 << 40)


class PreparedPlan:
    """What every run of one plan needs beyond the plan, worked out on its first run.

    A run keeps its runtime Buffers in one list: the outputs, then the temporaries, then the inputs. `steps` holds
    each step with the positions in that list of the buffers it takes (a kernel's slots, or a copy's destination and
    source), so a run never resolves a `BufferRef` again. `outputs` is each output's (device, size, dtype);
    `bare_views` each view that is a bare buffer, or a reshape of one (the usual view of a result that is not
    1-D), as (is output, number, reshape or None), so it needs no graph substitution; `views_are_outputs` when every
    view is its output itself. `single_kernel`: the step and its positions when the plan is one kernel step and has no
    temporaries, else None.
    """

    __slots__ = ("arguments", "bare_views", "built", "outputs", "plan", "single_kernel", "steps", "views_are_outputs")

    def __init__(self, plan: SchedulePlan) -> None:
        self.plan = plan
        self.outputs = tuple((spec.device, spec.size, spec.dtype) for spec in plan.outputs)
        first = {
            BufferSource.OUTPUT: 0,
            BufferSource.TEMPORARY: len(plan.outputs),
            BufferSource.INPUT: len(plan.outputs) + len(plan.temporaries),
        }
        steps: list[tuple[KernelStep | CopyStep, tuple[int, ...]]] = []
        for step in plan.steps:
            refs = step.buffers if isinstance(step, KernelStep) else (step.destination, step.source)
            steps.append((step, tuple(first[ref.source] + ref.number for ref in refs)))
        self.steps = tuple(steps)
        # whether the first run built the programs of the kernels together (Engine.build_programs)
        self.built = False
        # a plan of one kernel and nothing else (the usual plan of one small op): run without the step loop
        self.single_kernel: tuple[KernelStep, tuple[int, ...]] | None = None
        # for a single kernel: its Method and the positions of the buffers its program takes (set by the first run)
        self.arguments: tuple[Method, tuple[int, ...]] | None = None
        if len(steps) == 1 and not plan.temporaries and isinstance(steps[0][0], KernelStep):
            self.single_kernel = (steps[0][0], steps[0][1])
        bare: list[tuple[bool, int, UOp | None] | None] = []
        for view in plan.views:
            reshape = view if view.op is Ops.RESHAPE else None
            base = view.src[0] if reshape is not None else view
            slot = base.arg if base.op is Ops.BUFFER else None
            if isinstance(slot, InputSlot):
                bare.append((False, slot.position, reshape))
            elif isinstance(slot, OutputSlot):
                bare.append((True, slot.number, reshape))
            else:
                bare.append(None)
        self.bare_views = tuple(bare)
        # the views are the outputs themselves, in order (a result that is one buffer): a run returns its output nodes
        self.views_are_outputs = len(bare) == len(plan.outputs) and all(
            view == (True, number, None) for number, view in enumerate(bare)
        )


def buffer_node(buffer: Buffer) -> UOp:
    """A new BUFFER node holding `buffer` (a base buffer of a valid spec: an output of a run)."""
    # built directly (the spec is valid: no re-checks). The next op on a result asks for its shape and device at
    # once: a BUFFER node's are (size,) and its device (graph._infer_shape / _infer_device), so they go into graph's
    # per-node caches now instead of by a graph walk; and a BUFFER node has no movement chain to fold.
    size, device = buffer.size, buffer.device
    node = UOp(Ops.BUFFER, buffer.dtype, (), BufferArg(next(_fresh_numbers), size, device))
    SHAPE.set(node, (size,))
    DEVICE.set(node, device)
    mark_folded(node)
    BUFFER_SLOT.set(node, buffer)
    return node


def output_node(device: str, size: int, dtype: DType) -> tuple[UOp, Buffer]:
    """A new BUFFER node for an output of a run, with its (unallocated) runtime Buffer attached."""
    buffer = Buffer(device, size, dtype)
    return buffer_node(buffer), buffer


def _slot_buffer(device: str, nbytes: int) -> Buffer:
    """A base of at least `nbytes` raw bytes for temporaries: uint8, or uint32 words on a device that stores no
    uint8 (WEBGPU)."""
    if dtypes.uint8 in Device[device].supported_dtypes:
        return Buffer(device, max(1, nbytes), dtypes.uint8)
    return Buffer(device, max(1, -(-nbytes // 4)), dtypes.uint32)


def temporary_buffers(plan: SchedulePlan) -> list[Buffer]:
    """The temporaries of one run: views into one raw base per memory slot of the plan (`memory_planner`)."""
    slots = [
        _slot_buffer(plan.temporaries[plan.temporary_slots.index(slot)].device, size).allocate()
        for slot, size in enumerate(plan.slot_bytes)
    ]
    return [slots[slot].view(spec.size, spec.dtype) for spec, slot in zip(plan.temporaries, plan.temporary_slots)]


def result_views(
    plan: SchedulePlan, prepared: PreparedPlan, inputs: Sequence[UOp], output_nodes: list[UOp]
) -> list[UOp]:
    # placeholders -> real BUFFER nodes; an overwritten input gets a fresh node, so graphs built on the old node
    # (and values realized from them) are never mistaken for graphs of the new contents
    replaced = inputs
    if plan.written_inputs:
        replaced = list(inputs)
        for position in plan.written_inputs:
            old = inputs[position]
            arg: BufferArg = old.arg
            fresh = UOp(Ops.BUFFER, old.dtype, (), BufferArg(next(_fresh_numbers), arg.size, arg.device))
            attach_buffer(fresh, buffer_of(old))
            replaced[position] = fresh
    results = []
    for view, bare in zip(plan.views, prepared.bare_views):
        if bare is not None:  # the view is one buffer or a reshape of one: no graph to walk
            is_output, number, reshape = bare
            node = output_nodes[number] if is_output else replaced[number]
            if reshape is not None:
                node = UOp(Ops.RESHAPE, reshape.dtype, (node,), reshape.arg, reshape.tag)
            results.append(node)
            continue
        mapping: dict[UOp, UOp] = {}
        for node in view.toposort():
            if node.op is Ops.BUFFER:
                slot = node.arg
                if isinstance(slot, InputSlot):
                    mapping[node] = replaced[slot.position]
                elif isinstance(slot, OutputSlot):
                    mapping[node] = output_nodes[slot.number]
        results.append(view.substitute(mapping))
    return results


class LaunchBatch:
    """Kernel launches of one run of a plan, collected as exec commands and submitted as one list per run of
    consecutive launches on one queue-driven device (`HCQCompiled.launch_many`, which keeps their order after
    everything submitted before). The counters are updated as `Engine.run_kernel_step` does (the time is the
    host-side time of building and submitting the list)."""

    __slots__ = ("commands", "device", "inline", "profiling", "started")

    def __init__(self) -> None:
        self.commands: list[ExecCommand] = []
        self.device: HCQCompiled | None = None
        self.inline = True
        self.profiling = knobs.PROFILE
        self.started = 0

    def add(self, method: Method, buffers: list[Buffer]) -> None:
        queue = method.queue
        assert queue is not None and isinstance(method.runner, HCQProgramRunner)
        if queue is not self.device:
            self.flush()
            self.device = queue
        if not self.commands:
            self.started = time.perf_counter_ns()
        try:
            command = method.runner.exec_command(buffers, self.profiling)
        except Exception:
            self.flush()  # the launches before the bad one still run, as they would one by one
            raise
        self.commands.append(command)
        self.inline = self.inline and method.runner.inline
        GlobalCounters.kernel_count += 1
        GlobalCounters.flops += method.flops
        GlobalCounters.mem_bytes += method.mem_bytes

    def flush(self) -> None:
        """Submits the collected commands (if any)."""
        if not self.commands:
            return
        assert self.device is not None
        commands, self.commands = self.commands, []
        self.device.launch_many(commands, inline=self.inline)
        self.inline = True
        GlobalCounters.time_ns += time.perf_counter_ns() - self.started
