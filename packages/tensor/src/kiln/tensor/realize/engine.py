"""The realize engine: run a schedule plan on real buffers.

An `Engine` owns every cache of realizing (schedule plans, compiled programs with their loaded runners, the renderer
of each device, per-plan preparations, the buffers of lifted constants): inspectable (`cache_sizes()`), clearable
(`clear()`), and independent of any other Engine. It also owns the state of the tensors made while it is current: the
live tensors writes and gradients must find (`tensors`, a `TensorRegistry`), the random streams (`random`, a
`RandomState`) and the capture of launches (`with engine.capture() as recording:`, what TinyJit builds on).

One default Engine serves the process (`default_engine()` when nothing else is current). `use_engine(engine)` makes
another one current for a block on the calling thread: each thread has its own context (`_ThreadContext`: the stack of
engines it made current, and its gradient-recording flag), so two threads in two engines share no state.

For each kernel step: the program comes from the method cache (keyed by the kernel sink, the device and the
renderer class; a miss runs codegen's `get_program` with the device's renderer) and is launched on the step's
buffers. Copies go through the runtime. `DEBUG=1` prints each schedule's kernel count and time, `DEBUG=2` one line
per kernel (name, launch size, time, GFLOP/s, GB/s). `GlobalCounters` accumulates the totals.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TypeVar, overload

import numpy as np

from kiln.codegen import Program, Renderer, beam_search, get_program, get_programs
from kiln.runtime import Buffer, Device, HCQCompiled, HCQProgramRunner, copy_between
from kiln.tensor.counters import GlobalCounters
from kiln.tensor.device import load, renderer_for
from kiln.tensor.realize.buffers import SLOT as BUFFER_SLOT
from kiln.tensor.realize.buffers import buffer_of
from kiln.tensor.realize.capture import Recording
from kiln.tensor.realize.fast_path import OUTPUT, EagerFastPath
from kiln.tensor.realize.graph_lock import graph_lock, serialized
from kiln.tensor.realize.method import Method
from kiln.tensor.realize.plan_run import (
    LaunchBatch,
    PreparedPlan,
    output_node,
    result_views,
    temporary_buffers,
)
from kiln.tensor.realize.random_state import RandomState
from kiln.tensor.realize.tensor_registry import TensorRegistry
from kiln.tensor.schedule import (
    CopyStep,
    KernelStep,
    SchedulePlan,
    realized_view,
    record_realized,
)
from kiln.tensor.schedule.cache import ScheduleCache
from kiln.tensor.schedule.normalize import capture_scope, const_key
from kiln.tensor.sharding import lower_roots
from kiln.uops import DType, Ops, UOp, knobs, sym_infer

__all__ = [
    "Engine",
    "Method",
    "clear_method_cache",
    "compiled_program",
    "default_engine",
    "engines_in_context",
    "grad_disabled",
    "method_cache_size",
    "realize_uops",
    "run_kernel_step",
    "run_plan",
    "set_grad_disabled",
    "use_engine",
]

RecordingT = TypeVar("RecordingT", bound=Recording)


_DEBUG = knobs.get_knob("DEBUG")  # read on every run: the Knob itself, not through the registry's attribute


def _slots_of(ast: UOp, program: Program) -> tuple[int, ...]:
    """The kernel buffer slots a launch passes: 0..last used one. Codegen may prove some buffers never read (every
    load of one gated off) and drop their parameters; the runner takes any buffer for such a slot and does not pass
    it to the kernel, so the program is built once whatever codegen dropped."""
    signature = program.signature
    if not set(signature.slots) <= {u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}:
        raise RuntimeError(f"codegen invented buffer parameters {signature.slots} for kernel {program.name!r}")
    return tuple(range(signature.slot_count))


def _constant_bytes(node: UOp) -> bytes:
    # normalize lifts only constants of dtypes numpy can hold
    assert node.dtype.fmt is not None
    return np.array([node.arg], dtype=np.dtype(node.dtype.fmt)).tobytes()


def _debug_kernel(step: KernelStep, method: Method, seconds: float) -> None:
    global_size, local_size = method.program.launch_dims({})
    launch_text = f"global={list(global_size)} local={list(local_size)}"
    seconds = max(seconds, 1e-9)
    print(
        f"*** {step.device:<7} {method.program.name:<32} {launch_text:<36} {seconds * 1e3:9.3f} ms"
        f" {method.flops / seconds / 1e9:9.2f} GFLOP/s {method.mem_bytes / seconds / 1e9:9.2f} GB/s"
    )


def _device_timer(device: str) -> Callable[[Program], float]:
    """The timer BEAM search runs candidates with: the program loaded on `device`, launched on scratch buffers of
    its parameters' sizes (variables at their largest value), the fastest of three runs in seconds."""

    def timer(program: Program) -> float:
        runner = load(program, device)
        signature = program.signature
        buffers: list[Buffer | None] = [None] * signature.slot_count
        for parameter in signature.buffers:
            pointer = parameter.dtype
            if pointer.size < 0:
                raise RuntimeError(f"BEAM cannot time {program.name!r}: buffer {parameter.slot} has no static size")
            buffers[parameter.slot] = Buffer(device, max(pointer.size, 1), pointer.base.scalar())
        var_vals = signature.largest_var_vals()
        return min(float(runner(buffers, var_vals, wait=True) or 0.0) for _ in range(3))  # type: ignore[arg-type]

    return timer


class Engine:
    """The realize engine and its caches; `default_engine()` is the process's, `use_engine` switches for a block.

    Args:
        max_methods: compiled programs kept (least recently used first out).
        max_constant_buffers: one-element buffers of lifted constants kept.
        schedule: the schedule cache to use (default: a new `ScheduleCache`).

    Attributes:
        schedule: the `ScheduleCache` (plans by structure, hit and miss counts).
        programs_built: how many times codegen's `get_program` ran for this engine (once per kernel and device).
        fast: the eager fast path (`EagerFastPath`): the one-kernel plans of small ops by structure.
        tensors: the live tensors made while this engine was current (`TensorRegistry`).
        random: the seed and call counter of the random tensors drawn in this engine (`RandomState`).
    """

    def __init__(
        self, max_methods: int = 2048, max_constant_buffers: int = 256, schedule: ScheduleCache | None = None
    ) -> None:
        for name, value in (("max_methods", max_methods), ("max_constant_buffers", max_constant_buffers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Engine {name} must be a positive int, got {value!r}")
        self.max_methods, self.max_constant_buffers = max_methods, max_constant_buffers
        self.schedule = schedule if schedule is not None else ScheduleCache()
        self.fast = EagerFastPath()
        self.programs_built = 0
        self.tensors = TensorRegistry()
        self.random = RandomState()
        # the open capture: (the thread that opened it, its Recording); see `capture`
        self._capture: tuple[int, Recording] | None = None
        self._methods: OrderedDict[tuple[UOp, str], Method] = OrderedDict()  # least recently used first out
        self._renderers: dict[str, Renderer] = {}
        # by id(plan); each entry keeps its plan alive, so an id is never reused while it is here
        self._prepared: dict[int, PreparedPlan] = {}
        # one-element buffers holding lifted constants, by (dtype, device, value): read-only, so calls share them
        self._constant_buffers: OrderedDict[tuple[DType, str, tuple[type, object]], Buffer] = OrderedDict()

    def __repr__(self) -> str:
        sizes = ", ".join(f"{count} {name}" for name, count in self.cache_sizes().items())
        return f"<Engine {sizes}>"

    # -- inspection ----------------------------------------------------------------------------------------------
    def cache_sizes(self) -> dict[str, int]:
        """How many entries each cache holds: methods, renderers, prepared plans, constant buffers, plans,
        structures."""
        return {
            "methods": len(self._methods),
            "renderers": len(self._renderers),
            "prepared": len(self._prepared),
            "constant_buffers": len(self._constant_buffers),
            "fast_path": len(self.fast),
            **self.schedule.sizes(),
        }

    def clear(self) -> None:
        """Forgets everything cached: plans, programs, renderers, preparations, constant buffers (and the counts)."""
        self.clear_methods()
        self._prepared.clear()
        self._constant_buffers.clear()
        self.schedule.clear()
        self.fast.clear()

    def clear_methods(self) -> None:
        """Forgets every compiled program and the renderer of each device (the next launch builds them again)."""
        self._methods.clear()
        self._renderers.clear()
        self.fast.clear()

    # -- capture -------------------------------------------------------------------------------------------------
    @overload
    def capture(self) -> AbstractContextManager[Recording]: ...

    @overload
    def capture(self, recording: RecordingT) -> AbstractContextManager[RecordingT]: ...

    def capture(self, recording: Recording | None = None) -> AbstractContextManager[Recording]:
        """Reports every kernel launch, copy, host read and random stream of this engine on the calling thread to
        `recording` (a new `Recording` when None) inside the block: `with engine.capture() as recording:`.

        Raises RuntimeError when this engine is capturing already.
        """
        if recording is not None and not isinstance(recording, Recording):
            raise TypeError(f"Engine.capture takes a kiln.tensor Recording, got {type(recording).__name__}")
        return self._capturing(recording if recording is not None else Recording())

    @contextmanager
    def _capturing(self, recording: Recording) -> Iterator[Recording]:
        with graph_lock:  # two threads opening a capture at once: one gets it, the other the error
            if self._capture is not None:
                raise RuntimeError(f"the engine is capturing already (thread {self._capture[0]}); captures do not nest")
            self._capture = (threading.get_ident(), recording)
        try:
            # values realized before the capture are computed again inside it, and those realized inside it are
            # forgotten after it: the replays overwrite their buffers (see `capture_scope`)
            with capture_scope():
                yield recording
        finally:
            self._capture = None

    @property
    def recording(self) -> Recording | None:
        """The open capture's Recording when the calling thread opened it, else None."""
        capture = self._capture
        return capture[1] if capture is not None and capture[0] == threading.get_ident() else None

    # -- programs ------------------------------------------------------------------------------------------------
    @serialized
    def compiled_program(self, ast: UOp, device: str) -> Method:
        """The `Method` of kernel sink `ast` on `device`, built once per sink, device and renderer."""
        key = (ast, device)
        methods = self._methods
        method = methods.get(key)
        if method is not None:
            methods.move_to_end(key)
            return method
        renderer = self._renderer(device)
        opts = None
        if (width := knobs.BEAM) >= 1:
            try:
                opts = beam_search(ast, renderer, _device_timer(device), width)
            except RuntimeError as error:  # said, not silent: the kernel keeps the heuristic's opts
                print(f"kiln: BEAM={width} could not time a kernel on {device} ({error}); using the heuristic")
        return self._install(ast, device, Program(get_program(ast, renderer, opts)))

    @serialized
    def build_programs(self, steps: Sequence[KernelStep]) -> None:
        """Builds the programs of the steps' kernels that have none yet, those of one device together through
        codegen's `get_programs`: each kernel's compile runs on a compile thread while the next one is lowered (a
        model's first run: 1.3-1.4x less wall time). With BEAM on, each kernel is searched and built alone."""
        if knobs.BEAM >= 1:
            return
        missing: dict[str, dict[UOp, None]] = {}
        for step in steps:
            if (step.ast, step.device) not in self._methods:
                missing.setdefault(step.device, {})[step.ast] = None
        for device, asts in missing.items():
            if len(asts) > 1:
                for ast, program in zip(asts, get_programs(list(asts), self._renderer(device)), strict=True):
                    self._install(ast, device, Program(program))

    def _renderer(self, device: str) -> Renderer:
        renderer = self._renderers.get(device)
        if renderer is None:
            renderer = self._renderers[device] = renderer_for(device)
        return renderer

    def _install(self, ast: UOp, device: str, program: Program) -> Method:
        """Loads `program` (kernel sink `ast`'s) on `device` and remembers its Method."""
        methods = self._methods
        self.programs_built += 1
        estimates = program.estimates
        # a program over variables counts its work at their largest values
        largest = {variable.arg.name: variable.arg.hi for variable in program.variables}
        flops, memory = sym_infer(estimates.flops, largest), sym_infer(estimates.global_memory_bytes, largest)
        if len(methods) >= self.max_methods:
            methods.popitem(last=False)
        runner = load(program, device)
        queue = (
            runner.device
            if isinstance(runner, HCQProgramRunner) and runner.batchable and isinstance(runner.device, HCQCompiled)
            else None
        )
        method = Method(program, _slots_of(ast, program), runner, int(flops), int(memory), queue)
        methods[(ast, device)] = method
        return method

    def input_buffer(self, node: UOp) -> Buffer:
        """The Buffer of an input: a BUFFER node's own, or for a lifted CONST a one-element buffer of its value."""
        if node.op is not Ops.CONST:
            return buffer_of(node)
        device = str(node.src[0].arg)
        key = (node.dtype, device, const_key(node.arg))
        found = self._constant_buffers.get(key)
        if found is not None:
            self._constant_buffers.move_to_end(key)
            return found
        if len(self._constant_buffers) >= self.max_constant_buffers:
            self._constant_buffers.popitem(last=False)
        found = self._constant_buffers[key] = Buffer(device, 1, node.dtype)
        found.copyin(_constant_bytes(node))
        return found

    def _prepare(self, plan: SchedulePlan) -> PreparedPlan:
        prepared = self._prepared.get(id(plan))
        if prepared is None or prepared.plan is not plan:
            if len(self._prepared) >= 4096:  # plans the schedule cache let go of: start over
                self._prepared.clear()
            prepared = self._prepared[id(plan)] = PreparedPlan(plan)
        return prepared

    # -- running -------------------------------------------------------------------------------------------------
    @serialized
    def run_kernel_step(self, step: KernelStep, buffers: Sequence[Buffer], debug: int = 0) -> None:
        """Runs one kernel step: its program (from the method cache) on `buffers`, the runtime Buffer of each of the
        step's buffer slots in order; updates `GlobalCounters` (and prints the kernel's line when `debug` >= 2)."""
        method = self.compiled_program(step.ast, step.device)
        arguments = [buffers[slot] for slot in method.slots]
        begin = time.perf_counter_ns()
        seconds = method.runner(arguments, step.var_vals, wait=debug >= 2)
        elapsed = int(seconds * 1e9) if seconds is not None else time.perf_counter_ns() - begin
        GlobalCounters.kernel_count += 1
        GlobalCounters.time_ns += elapsed
        GlobalCounters.flops += method.flops
        GlobalCounters.mem_bytes += method.mem_bytes
        if debug >= 2:
            _debug_kernel(step, method, elapsed / 1e9)
        if (recording := self.recording) is not None:
            recording.record_kernel(method.program, method.runner, arguments, step.var_vals)

    @serialized
    def run_plan(self, plan: SchedulePlan, inputs: Sequence[UOp]) -> list[UOp]:
        """Runs `plan` on the BUFFER nodes `inputs` (by position); returns the realized view of each requested node."""
        prepared = self._prepared.get(id(plan))
        if prepared is None or prepared.plan is not plan:
            prepared = self._prepare(plan)
        debug: int = _DEBUG.value()
        recorder = self.recording
        if prepared.single_kernel is not None and debug < 1 and recorder is None:
            return self._run_single_kernel(plan, prepared, inputs)
        # the run's Buffers in one list: outputs, temporaries, inputs (the positions `prepared.steps` refers to)
        output_nodes, buffers = self._run_buffers(plan, prepared, inputs)
        started = time.perf_counter_ns()
        kernels = 0
        # consecutive kernels of one queue-driven device go to its queue as one list (one submission, one handoff to
        # the queue's thread), as TinyJit replays them; not while DEBUG waits for each kernel or a capture records
        # each launch
        batch = LaunchBatch() if debug < 2 and recorder is None and len(prepared.steps) > 1 else None
        if not prepared.built:
            prepared.built = True
            self.build_programs([step for step, _ in prepared.steps if type(step) is KernelStep])
        for step, positions in prepared.steps:
            if type(step) is KernelStep:
                if batch is not None:
                    method = self.compiled_program(step.ast, step.device)
                    if method.queue is not None and step.var_vals is None:
                        batch.add(method, [buffers[positions[slot]] for slot in method.slots])
                        kernels += 1
                        continue
                    batch.flush()
                self.run_kernel_step(step, [buffers[position] for position in positions], debug)
                kernels += 1
                continue
            assert isinstance(step, CopyStep)
            if batch is not None:
                batch.flush()
            destination, source = buffers[positions[0]], buffers[positions[1]]
            begin = time.perf_counter_ns()
            copy_between(destination, source)
            GlobalCounters.copies += 1
            GlobalCounters.time_ns += time.perf_counter_ns() - begin
            GlobalCounters.mem_bytes += 2 * source.nbytes
            if recorder is not None:
                recorder.record_copy(destination, source)
        if batch is not None:
            batch.flush()
        if debug >= 1 and plan.steps:
            for device in {step.device for step in plan.steps if isinstance(step, KernelStep)}:
                Device[device].synchronize()
            total = (time.perf_counter_ns() - started) / 1e6
            print(f"scheduled {kernels} kernels, {len(plan.steps) - kernels} copies in {total:.3f} ms")
        return result_views(plan, prepared, inputs, output_nodes)

    def _run_buffers(
        self, plan: SchedulePlan, prepared: PreparedPlan, inputs: Sequence[UOp]
    ) -> tuple[list[UOp], list[Buffer]]:
        """The output nodes of a run and its Buffers in one list: outputs, temporaries, inputs. Outputs and
        temporaries are allocated before any kernel is compiled: a size past memory raises OutOfMemoryError at once."""
        output_nodes: list[UOp] = []
        buffers: list[Buffer] = []
        for device, size, dtype in prepared.outputs:
            node, buffer = output_node(device, size, dtype)
            buffer.allocate()  # an empty output gets one byte of memory to be read
            output_nodes.append(node)
            buffers.append(buffer)
        if plan.temporaries:
            buffers.extend(temporary_buffers(plan))
        for node in inputs:
            found = BUFFER_SLOT.get(node) if node.op is Ops.BUFFER else None
            buffers.append(found if found is not None else self.input_buffer(node))
        return output_nodes, buffers

    def _run_single_kernel(self, plan: SchedulePlan, prepared: PreparedPlan, inputs: Sequence[UOp]) -> list[UOp]:
        # `run_plan` of a plan that is one kernel step (no DEBUG output, no capture): the same buffers, launch,
        # counters and views, without the step loop and its batching
        assert prepared.single_kernel is not None
        step, positions = prepared.single_kernel
        output_nodes, buffers = self._run_buffers(plan, prepared, inputs)
        method = self.compiled_program(step.ast, step.device)
        arguments = prepared.arguments
        if arguments is None or arguments[0] is not method:  # the run's positions of the program's slots, kept
            arguments = prepared.arguments = (method, tuple(positions[slot] for slot in method.slots))
        begin = time.perf_counter_ns()
        method.runner([buffers[position] for position in arguments[1]], step.var_vals)
        GlobalCounters.time_ns += time.perf_counter_ns() - begin
        GlobalCounters.kernel_count += 1
        GlobalCounters.flops += method.flops
        GlobalCounters.mem_bytes += method.mem_bytes
        return output_nodes if prepared.views_are_outputs else result_views(plan, prepared, inputs, output_nodes)

    @serialized
    def realize(self, uops: Sequence[UOp]) -> list[UOp]:
        """Realizes tensor-graph nodes: schedules (cached by structure) and runs them; returns their buffer views.

        A structure seen before with other values of some constants gets those constants lifted into one-element input
        buffers (see `kiln.tensor.schedule.cache`), so a value that changes from call to call reuses one kernel.
        """
        lowered = lower_roots(uops)  # a sharded root becomes its per-device graphs (kiln.tensor.sharding)
        plan, inputs = self.schedule.resolve(lowered.nodes)  # by structure (one walk), or planned and remembered
        views = lowered.join(self.run_plan(plan, inputs))
        for uop, view in zip(uops, views):
            record_realized(uop, view)
        if len(uops) == 1 and not lowered.layout:
            # a one-kernel run (`_run_single_kernel`) left its program's positions: the fast path may take them
            prepared = self._prepared.get(id(plan))
            if prepared is not None and prepared.plan is plan and (arguments := prepared.arguments) is not None:
                self.fast.learn(uops[0], plan, inputs, arguments[0], arguments[1], self.input_buffer)
        return views

    def realize_fast(self, root: UOp) -> UOp | None:
        """`realize([root])[0]` by the eager fast path (`kiln.tensor.realize.fast_path`): the kernel remembered for
        `root`'s structure launched on a new output buffer, without scheduling; None when the slow path must run
        (a structure not seen, a source a write replaced, a value realized already, DEBUG output, a capture)."""
        with graph_lock:
            if self._capture is not None or _DEBUG.value() >= 1:
                return None
            found = self.fast.find(root)
            if found is None or realized_view(root) is not None:
                return None
            entry, sources = found
            device, size, dtype = entry.output
            node, output = output_node(device, size, dtype)
            output.allocate()
            arguments: list[Buffer] = []
            for source, fixed in zip(entry.sources, entry.fixed):
                buffer = sources[source] if source >= 0 else output if source == OUTPUT else fixed
                assert buffer is not None  # `find` gave every BUFFER source's buffer; FIXED parameters hold theirs
                arguments.append(buffer)
            method = entry.method
            begin = time.perf_counter_ns()
            runner = method.runner
            # the entry's buffers have the dtypes and sizes the slow path's launch checked: an idle CPU queue calls
            # the kernel's entry point at once (`HCQProgramRunner.launch_direct`)
            if not isinstance(runner, HCQProgramRunner) or not runner.launch_direct(arguments):
                runner(arguments, entry.step.var_vals)
            GlobalCounters.time_ns += time.perf_counter_ns() - begin
            GlobalCounters.kernel_count += 1
            GlobalCounters.flops += method.flops
            GlobalCounters.mem_bytes += method.mem_bytes
            self.schedule.hits += 1
            if (reshape := entry.reshape) is not None:  # the plan's view of a result of another shape
                node = UOp(Ops.RESHAPE, reshape.dtype, (node,), reshape.arg, reshape.tag)
            record_realized(root, node)
            return node


class _ThreadContext(threading.local):
    """What each thread has of its own: the engines `use_engine` made current (innermost last) and whether gradient
    recording is off (`kiln.tensor.no_grad`; PyTorch's is per thread too: an optimizer step under `no_grad` on one
    thread must not make the tensors another thread builds meanwhile stop requiring grad)."""

    def __init__(self) -> None:
        self.engines: list[Engine] = []
        self.grad_disabled = False


_PROCESS_ENGINE = Engine()  # realizes for every thread with no engine of its own (see use_engine)
_context = _ThreadContext()  # module-state: a threading.local: each thread reads and writes only its own context


def default_engine() -> Engine:
    """The Engine that realizes tensors now on the calling thread: the innermost `use_engine`'s, else the
    process's own."""
    engines = _context.engines
    return engines[-1] if engines else _PROCESS_ENGINE


def engines_in_context() -> list[Engine]:
    """The engines whose tensors the calling thread can reach: the process's own, then each one `use_engine` made
    current on this thread (outermost first, each once). A write or a gradient looks at all their tensors."""
    found = [_PROCESS_ENGINE]
    for engine in _context.engines:
        if all(engine is not other for other in found):
            found.append(engine)
    return found


@contextmanager
def use_engine(engine: Engine) -> Iterator[Engine]:
    """Realize with `engine` inside the block on the calling thread (its caches, tensors and random streams, not
    the default engine's); restores the previous one. Other threads are not affected."""
    if not isinstance(engine, Engine):
        raise TypeError(f"use_engine takes a kiln.tensor Engine, got {type(engine).__name__}")
    engines = _context.engines
    engines.append(engine)
    try:
        yield engine
    finally:
        engines.pop()


def grad_disabled() -> bool:
    """Whether gradient recording is off on the calling thread (inside `kiln.tensor.no_grad()`)."""
    return _context.grad_disabled


def set_grad_disabled(disabled: bool) -> None:
    """Turns gradient recording off (True) or on (False) on the calling thread (`kiln.tensor.grad_mode` does)."""
    _context.grad_disabled = disabled


def compiled_program(ast: UOp, device: str) -> Method:
    """The current engine's `Method` of kernel sink `ast` on `device` (`Engine.compiled_program`)."""
    return default_engine().compiled_program(ast, device)


def run_kernel_step(step: KernelStep, buffers: Sequence[Buffer], debug: int = 0) -> None:
    """`Engine.run_kernel_step` of the current engine."""
    default_engine().run_kernel_step(step, buffers, debug)


def run_plan(plan: SchedulePlan, inputs: Sequence[UOp]) -> list[UOp]:
    """`Engine.run_plan` of the current engine."""
    return default_engine().run_plan(plan, inputs)


def realize_uops(uops: Sequence[UOp]) -> list[UOp]:
    """`Engine.realize` of the current engine: schedule (cached by structure) and run; the nodes' buffer views."""
    return default_engine().realize(uops)


def clear_method_cache() -> None:
    """Forgets the current engine's compiled programs and renderers (`Engine.clear_methods`)."""
    default_engine().clear_methods()


def method_cache_size() -> int:
    """How many programs the current engine's method cache holds."""
    return default_engine().cache_sizes()["methods"]
