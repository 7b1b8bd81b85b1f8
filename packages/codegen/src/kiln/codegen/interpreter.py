"""Reference interpreter of linear programs on numpy buffers: the living definition of the linear IR.

All threads of a launch run in lock-step, vectorized with numpy: a value is an array with one row per thread
(shape (threads,) for a scalar, (threads, lanes) for a vector) or a single row (shape (1,) / (1, lanes)) while it is
the same for every thread. Lock-step execution satisfies every BARRIER trivially (all threads of a block reach it
together), so the interpreter *checks* what lock-step would otherwise hide:

- data races: a thread reading a global or local element that another thread wrote since the last barrier of their
  block (or in another block), two threads writing different values to one element, and (local memory) a thread
  overwriting an element another thread of its block read since the last barrier raise `DataRaceError`;
- a BARRIER reached by only part of a block (inside divergent control flow) raises `InterpreterError`;
- out-of-bounds accesses and reads of never-written local or register memory raise `InterpreterError`
  (gated-off lanes and threads that do not run never touch memory).

Control flow runs with a mask of running threads: IF narrows it, ENDIF restores it, a RANGE whose size differs per
thread runs to the largest size with the finished threads masked off. Value semantics (bit-exact floats, wrapping
integers, emulated bfloat16/fp8) are those of `kiln.codegen.numpy_semantics`; the memory, the run state and the checks
of every access are `kiln.codegen.interpreter_memory`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kiln.codegen.interpreter_memory import (
    DataRaceError,
    InterpreterError,
    LaunchGrid,
    Loop,
    Memory,
    Pointer,
    RunState,
    read,
    start_tracking,
    write,
)
from kiln.codegen.kernel_signature import CORE_ID
from kiln.codegen.numpy_semantics import Array, alu_kernel, bitcast, cast, compute_dtype, constant_array, storage_dtype
from kiln.codegen.tensor_core import FragmentLayout, WmmaArg
from kiln.uops import DType, GroupOp, MemoryScope, Ops, PtrDType, UOp, dtypes

Step = Callable[[RunState], None]
"""What a straight-line uop compiles to: it reads its sources' values from the run state and writes its own."""

_SPECIAL_NAMES = ("gidx0", "gidx1", "gidx2", "lidx0", "lidx1", "lidx2", CORE_ID)


def run_program(
    program: Sequence[UOp] | Any,
    buffers: Sequence[np.ndarray],
    var_vals: Mapping[str, int] | None = None,
    global_size: Sequence[int] | None = None,
    local_size: Sequence[int] | None = None,
) -> None:
    """Run a linear program on numpy `buffers` (in place), one buffer per DEFINE_GLOBAL slot.

    Args:
        program: the linear uops in order, or an object with a `uops` attribute (codegen's `Program` view).
        buffers: contiguous numpy arrays; each is viewed as its DEFINE_GLOBAL's element dtype (same item size, or
            raw uint8 bytes; bfloat16/fp8 buffers hold raw bits: uint16 / uint8).
        var_vals: values of the DEFINE_VARs by name (each within its bounds).
        global_size / local_size: the launch dimensions; None takes them from the program's SPECIAL sizes.

    Raises InterpreterError (DataRaceError for races) when the program does something undefined, ValueError or
    TypeError for bad arguments, ZeroDivisionError for an integer division by zero in a running thread.
    """
    uops = list(program.uops if hasattr(program, "uops") else program)
    Interpreter(uops).run(buffers, var_vals, global_size, local_size)


class Interpreter:
    """A linear program prepared once (sources resolved, jumps matched) and runnable many times."""

    def __init__(self, uops: Sequence[UOp]) -> None:
        self.uops = list(uops)
        self.position = {uop: i for i, uop in enumerate(self.uops)}
        self.sources: list[tuple[int, ...]] = []
        for i, uop in enumerate(self.uops):
            for source in uop.src:
                if self.position.get(source, len(self.uops)) >= i:
                    raise ValueError(f"uop {i} ({uop.op!r}) uses a source that is not defined before it: {source!r}")
            self.sources.append(tuple(self.position[s] for s in uop.src))
        self.jump = self._match_blocks()
        self.var_vals: dict[str, int] = {}
        self.buffers: Sequence[np.ndarray] = ()
        self.specials: dict[str, Array] | None = None
        self.steps: list[Step | None] = [self._compile(i, u) for i, u in enumerate(self.uops)]

    def _match_blocks(self) -> dict[int, int]:
        # RANGE -> position of its END (END -> the RANGEs it closes is read at run time), IF -> its ENDIF
        jump: dict[int, int] = {}
        for i, uop in enumerate(self.uops):
            if uop.op is Ops.END:
                for source in uop.src:
                    if source.op is Ops.RANGE:
                        jump[self.position[source]] = i
            if uop.op is Ops.ENDIF:
                jump[self.sources[i][0]] = i
        for i, uop in enumerate(self.uops):
            if uop.op in (Ops.RANGE, Ops.IF) and i not in jump:
                raise ValueError(
                    f"uop {i} ({uop.op!r}) is never closed by an {'END' if uop.op is Ops.RANGE else 'ENDIF'}"
                )
        return jump

    # ---- launch ------------------------------------------------------------------------------------------------

    def launch_grid(
        self,
        var_vals: Mapping[str, int],
        global_size: Sequence[int] | None = None,
        local_size: Sequence[int] | None = None,
    ) -> LaunchGrid:
        """The launch grid: the given sizes, or the SPECIAL sizes of the program; checked against the SPECIALs."""
        declared: dict[str, int] = {}
        for uop in self.uops:
            if uop.op is Ops.SPECIAL:
                name = uop.arg.name
                if name not in _SPECIAL_NAMES:
                    raise ValueError(f"unknown SPECIAL {name!r}; expected one of {_SPECIAL_NAMES}")
                declared[name] = int(_evaluate_uniform(uop.src[0], var_vals))
        cores = declared.get(CORE_ID, 1)
        if CORE_ID in declared and global_size is not None:
            # CPU programs launch their cores as the global size (codegen's Program.global_size says the same)
            if tuple(int(s) for s in global_size) + (1,) * (3 - len(global_size)) != (cores, 1, 1):
                raise ValueError(
                    f"a program with {cores} {CORE_ID} threads launches as ({cores}, 1, 1), got {global_size!r}"
                )
            global_size = None
        sizes = {}
        for prefix, given in (("gidx", global_size), ("lidx", local_size)):
            if given is None:
                dims = tuple(declared.get(f"{prefix}{d}", 1) for d in range(3))
            else:
                dims = tuple(int(s) for s in given) + (1,) * (3 - len(given))
                for d in range(3):
                    name = f"{prefix}{d}"
                    if name in declared and declared[name] != dims[d]:
                        raise ValueError(
                            f"launch size {dims[d]} for {name} differs from the program's {declared[name]}"
                        )
            if len(dims) != 3 or any(s < 1 for s in dims):
                raise ValueError(f"launch sizes must be 1 to 3 positive ints, got {given!r}")
            sizes[prefix] = dims
        global_dims, local_dims = sizes["gidx"], sizes["lidx"]
        return LaunchGrid(
            (global_dims[0], global_dims[1], global_dims[2]), (local_dims[0], local_dims[1], local_dims[2]), cores
        )

    def run(
        self,
        buffers: Sequence[np.ndarray],
        var_vals: Mapping[str, int] | None = None,
        global_size: Sequence[int] | None = None,
        local_size: Sequence[int] | None = None,
    ) -> None:
        """Run the program once on `buffers` (see `run_program`)."""
        var_vals = dict(var_vals or {})
        grid = self.launch_grid(var_vals, global_size, local_size)
        state = RunState(grid, [None] * len(self.uops))
        self.var_vals = var_vals
        self.buffers = buffers
        self.specials = grid.special_values() if grid.threads > 1 else None
        with np.errstate(all="ignore"):
            self._execute(state)

    def _execute(self, state: RunState) -> None:
        steps, uops, jump = self.steps, self.uops, self.jump
        pc, count = 0, len(uops)
        while pc < count:
            step = steps[pc]
            if step is not None:
                step(state)
                pc += 1
                continue
            op = uops[pc].op
            if op is Ops.RANGE:
                pc = self._enter_range(state, pc)
            elif op is Ops.END:
                pc = self._end_range(state, pc)
            elif op is Ops.IF:
                condition = state.values[self.sources[pc][0]]
                running = _combine(state.mask, np.broadcast_to(condition, (state.grid.threads,)))
                if running is not None and not running.any():
                    pc = jump[pc] + 1  # nobody enters: skip the body
                    continue
                state.mask_stack.append(state.mask)
                state.mask = running
                pc += 1
            elif op is Ops.ENDIF:
                state.mask = state.mask_stack.pop()
                pc += 1
            else:  # BARRIER
                self._barrier(state, pc)
                pc += 1

    def _enter_range(self, state: RunState, pc: int) -> int:
        size = state.values[self.sources[pc][0]]
        running = state.mask
        stop = int(size.max()) if running is None or size.shape[0] == 1 else int(size[running].max(initial=0))
        if stop <= 0:
            return self.jump[pc] + 1
        loop = Loop(pc, 0, stop, size, running)
        state.loops.append(loop)
        self._start_iteration(state, loop)
        return pc + 1

    def _start_iteration(self, state: RunState, loop: Loop) -> None:
        state.values[loop.range_position] = np.array([loop.iteration], dtype=loop.size.dtype)
        if loop.size.shape[0] > 1:  # per-thread trip counts: threads past their count stop running
            state.mask = _combine(loop.outer_mask, loop.iteration < loop.size)
        else:
            state.mask = loop.outer_mask

    def _end_range(self, state: RunState, pc: int) -> int:
        closes = {self.position[s] for s in self.uops[pc].src if s.op is Ops.RANGE}
        while state.loops and state.loops[-1].range_position in closes:
            loop = state.loops[-1]
            loop.iteration += 1
            if loop.iteration < loop.stop:
                self._start_iteration(state, loop)
                return loop.range_position + 1
            state.loops.pop()
            state.mask = loop.outer_mask
        return pc + 1

    def _barrier(self, state: RunState, pc: int) -> None:
        if state.mask is not None:
            per_block = state.mask.reshape(state.grid.blocks, state.grid.threads_per_block)
            if np.any(per_block.any(axis=1) & ~per_block.all(axis=1)):
                raise InterpreterError(f"BARRIER (uop {pc}) reached by only part of a block (divergent control flow)")
        state.epoch += 1

    # ---- compilation of straight-line uops ---------------------------------------------------------------------

    def _compile(self, i: int, uop: UOp) -> Step | None:
        op, sources = uop.op, self.sources[i]
        if op in (Ops.RANGE, Ops.END, Ops.IF, Ops.ENDIF, Ops.BARRIER):
            return None
        if op in GroupOp.ALU:
            operand = uop.src[1].dtype if op is Ops.WHERE else uop.src[0].dtype
            kernel = alu_kernel(op, uop.dtype, operand)

            def run_alu(state: RunState) -> None:
                state.values[i] = kernel(tuple(state.values[s] for s in sources), state.mask)

            return run_alu
        builder = _BUILDERS.get(op)
        if builder is None:
            raise ValueError(f"the interpreter cannot run {op!r} (uop {i}); is the program fully lowered?")
        return builder(self, i, uop, sources)

    def _memory_for(self, i: int, uop: UOp, state: RunState) -> Memory:
        dtype = uop.dtype
        assert isinstance(dtype, PtrDType)
        element = dtype.base.scalar()
        size = dtype.size * dtype.base.count
        grid = state.grid
        if uop.op is Ops.DEFINE_GLOBAL:
            return self._global_memory(uop, element, size, state.track)
        if size < 0:
            raise ValueError(f"{uop.op!r} (uop {i}) needs a known size, got {dtype!r}")
        if uop.op is Ops.DEFINE_LOCAL:
            rows, row_of_thread = grid.blocks, np.arange(grid.threads) // grid.threads_per_block
        else:
            rows, row_of_thread = grid.threads, np.arange(grid.threads)
        memory = Memory(
            f"{uop.op.name}[{uop.arg}]",
            element,
            dtype.scope,
            np.zeros((rows, size), storage_dtype(element)),
            row_of_thread.astype(np.int64),
        )
        memory.initialized = np.zeros((rows, size), dtype=bool)
        if state.track and uop.op is Ops.DEFINE_LOCAL:
            start_tracking(memory, readers=True)
        return memory

    def _global_memory(self, uop: UOp, element: DType, size: int, track: bool) -> Memory:
        slot = uop.arg
        if not isinstance(slot, int) or not 0 <= slot < len(self.buffers):
            raise ValueError(f"DEFINE_GLOBAL slot {slot!r} has no buffer: {len(self.buffers)} buffers were given")
        buffer = self.buffers[slot]
        if not isinstance(buffer, np.ndarray) or not buffer.flags.c_contiguous:
            raise TypeError(f"buffer {slot} must be a C-contiguous numpy array, got {type(buffer).__name__}")
        storage = storage_dtype(element)
        if buffer.dtype.itemsize != storage.itemsize and buffer.dtype != np.uint8:
            raise TypeError(f"buffer {slot} has dtype {buffer.dtype}, expected {element!r} ({storage} items) or uint8")
        flat = buffer.reshape(-1).view(storage)
        if size >= 0 and flat.shape[0] < size:
            raise ValueError(f"buffer {slot} holds {flat.shape[0]} elements, the program declares {size}")
        memory = Memory(f"buffer {slot}", element, MemoryScope.GLOBAL, flat.reshape(1, -1), np.zeros(1, np.int64))
        if track:
            start_tracking(memory, readers=False)
        return memory


def _combine(mask: Array | None, condition: Array) -> Array | None:
    condition = np.asarray(condition, dtype=bool)
    if mask is None:
        return None if condition.shape[0] == 1 and bool(condition[0]) else condition
    return mask & condition


def _evaluate_uniform(uop: UOp, var_vals: Mapping[str, int]) -> int:
    """The value of a launch-size expression (CONSTs, DEFINE_VARs and ALU ops over them)."""
    values: dict[UOp, Array] = {}
    for node in uop.toposort():
        if node.op is Ops.CONST:
            values[node] = constant_array(node.dtype, node.arg)
        elif node.op is Ops.DEFINE_VAR:
            values[node] = _variable_value(node, var_vals)
        elif node.op in GroupOp.ALU or node.op is Ops.CAST:
            operands = tuple(values[s] for s in node.src)
            if node.op is Ops.CAST:
                values[node] = cast(operands[0], node.src[0].dtype, node.dtype)
            else:
                operand = node.src[1].dtype if node.op is Ops.WHERE else node.src[0].dtype
                values[node] = alu_kernel(node.op, node.dtype, operand)(operands, None)
        else:
            raise ValueError(f"a launch size must be built from constants and variables, found {node.op!r}")
    return int(values[uop][0])


def _variable_value(uop: UOp, var_vals: Mapping[str, int]) -> Array:
    name, lo, hi = uop.arg.name, uop.arg.lo, uop.arg.hi
    if name not in var_vals:
        raise ValueError(f"no value for variable {name!r}: var_vals has {sorted(var_vals)}")
    value = var_vals[name]
    if not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"variable {name!r} = {value!r} is outside its bounds [{lo}, {hi}]")
    return np.array([value], dtype=compute_dtype(uop.dtype))


# ---- builders of straight-line steps -------------------------------------------------------------------------------

Builder = Callable[[Interpreter, int, UOp, tuple[int, ...]], Step]


def _build_define(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    def define(state: RunState) -> None:
        if state.values[i] is None:  # allocated once even inside a loop
            state.values[i] = interpreter._memory_for(i, uop, state)

    return define


def _build_constant(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    value = constant_array(uop.dtype, uop.arg)

    def constant(state: RunState) -> None:
        state.values[i] = value

    return constant


def _build_variable(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    def variable(state: RunState) -> None:
        state.values[i] = _variable_value(uop, interpreter.var_vals)

    return variable


def _build_special(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    dtype = compute_dtype(uop.dtype)

    def special(state: RunState) -> None:
        specials = interpreter.specials
        values = specials[uop.arg.name] if specials is not None else np.zeros(1, np.int64)
        state.values[i] = values.astype(dtype)

    return special


def _build_index(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    if len(sources) not in (2, 3):
        raise ValueError(f"INDEX (uop {i}) needs (pointer, offset[, gate]) after lowering, got {len(sources)} sources")

    def index(state: RunState) -> None:
        base = state.values[sources[0]]
        gate = state.values[sources[2]] if len(sources) == 3 else None
        if isinstance(base, Pointer):  # an INDEX of an INDEX adds offsets
            offset = base.offset + state.values[sources[1]]
            gate = base.gate if gate is None else gate if base.gate is None else base.gate & gate
            base = base.memory
        else:
            offset = state.values[sources[1]]
        state.values[i] = Pointer(base, np.asarray(offset), gate)

    return index


def _build_load(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    # void sources (a STORE, an END, a BARRIER) only order the load after them
    sources = tuple(s for s, source in zip(sources, uop.src) if source.dtype != dtypes.void)
    if len(sources) not in (1, 3):
        raise ValueError(f"LOAD (uop {i}) takes (index) or (index, alternative, gate), got {len(sources)} sources")

    def load(state: RunState) -> None:
        pointer = state.values[sources[0]]
        alternative = state.values[sources[1]] if len(sources) == 3 else None
        gate = state.values[sources[2]] if len(sources) == 3 else None
        state.values[i] = read(state, pointer, uop.dtype, alternative, gate)

    return load


def _build_store(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    if len(sources) not in (2, 3):
        raise ValueError(f"STORE (uop {i}) takes (index, value[, gate]), got {len(sources)} sources")
    dtype = uop.src[1].dtype

    def store(state: RunState) -> None:
        gate = state.values[sources[2]] if len(sources) == 3 else None
        write(state, state.values[sources[0]], state.values[sources[1]], dtype, gate)

    return store


def _build_cast(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    source_dtype, convert = uop.src[0].dtype, cast if uop.op is Ops.CAST else bitcast

    def run(state: RunState) -> None:
        state.values[i] = convert(state.values[sources[0]], source_dtype, uop.dtype)

    return run


def _build_vectorize(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    def vectorize(state: RunState) -> None:
        lanes = [state.values[s] for s in sources]
        if uop.op is Ops.CAT:
            lanes = [lane if lane.ndim == 2 else lane[:, None] for lane in lanes]
            rows = max(lane.shape[0] for lane in lanes)
            state.values[i] = np.concatenate([np.broadcast_to(lane, (rows, lane.shape[1])) for lane in lanes], axis=1)
        else:
            state.values[i] = np.stack(np.broadcast_arrays(*lanes), axis=-1)

    return vectorize


def _build_gep(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    lanes = tuple(uop.arg) if isinstance(uop.arg, tuple) else (uop.arg,)
    select: int | list[int] = lanes[0] if len(lanes) == 1 else list(lanes)
    scalar_source = uop.src[0].dtype.count == 1

    def gep(state: RunState) -> None:
        value = state.values[sources[0]]
        if scalar_source:  # lane 0 of a scalar, repeated
            state.values[i] = value if isinstance(select, int) else np.stack([value] * len(lanes), axis=-1)
        else:
            state.values[i] = value[:, select]

    return gep


def _build_after(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    # AFTER(value, *effects) is its first source, placed after the effects (the linearizer already ordered them)
    def after(state: RunState) -> None:
        state.values[i] = state.values[sources[0]]

    return after


def _build_vconst(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    return _build_constant(interpreter, i, uop, sources)


def _fragment_positions(layout: FragmentLayout) -> tuple[Array, Array]:
    """(rows, columns), each (threads, elements): where each register of each lane sits in the tile."""
    coordinates = [[layout.coordinate(lane, e) for e in range(layout.elements)] for lane in range(layout.threads)]
    positions = np.array(coordinates, dtype=np.int64)
    return positions[..., 0], positions[..., 1]


def _build_wmma(interpreter: Interpreter, i: int, uop: UOp, sources: tuple[int, ...]) -> Step:
    # the warp-level product: gather each warp's tiles from its lanes' fragments, multiply, scatter D back
    arg = uop.arg
    if not isinstance(arg, WmmaArg) or len(sources) != 3:
        raise ValueError(f"WMMA (uop {i}) needs (a, b, c) and a WmmaArg, got {len(sources)} sources and {arg!r}")
    m, n, k = arg.dims
    shapes = ((m, k), (k, n), (m, n))
    positions = [_fragment_positions(layout) for layout in arg.layouts]
    accumulate = compute_dtype(arg.dtype_out)

    def tile(values: Array, which: int, warps: int) -> Array:
        rows, columns = positions[which]
        lanes = values.reshape(warps, arg.threads, -1).astype(accumulate)
        matrix = np.zeros((warps, *shapes[which]), dtype=accumulate)
        matrix[:, rows, columns] = lanes
        return matrix

    def wmma(state: RunState) -> None:
        grid = state.grid
        if grid.threads_per_block % arg.threads:
            raise InterpreterError(
                f"WMMA (uop {i}) needs blocks of a multiple of {arg.threads} threads, got {grid.threads_per_block}"
            )
        threads, warps = grid.threads, grid.threads // arg.threads
        a, b, c = (
            np.broadcast_to(_as_lanes(state.values[s]), (threads, layout.elements))
            for s, layout in zip(sources, arg.layouts)
        )
        product = np.matmul(tile(a, 0, warps), tile(b, 1, warps)) + tile(c, 2, warps)  # in dtype_out
        rows, columns = positions[2]
        state.values[i] = product[:, rows, columns].reshape(threads, -1).astype(compute_dtype(uop.dtype))

    return wmma


def _as_lanes(value: Array) -> Array:
    return value if value.ndim == 2 else value[:, None]


_BUILDERS: dict[Ops, Builder] = {
    Ops.DEFINE_GLOBAL: _build_define,
    Ops.DEFINE_LOCAL: _build_define,
    Ops.DEFINE_REG: _build_define,
    Ops.CONST: _build_constant,
    Ops.VCONST: _build_vconst,
    Ops.DEFINE_VAR: _build_variable,
    Ops.SPECIAL: _build_special,
    Ops.INDEX: _build_index,
    Ops.LOAD: _build_load,
    Ops.STORE: _build_store,
    Ops.CAST: _build_cast,
    Ops.BITCAST: _build_cast,
    Ops.VECTORIZE: _build_vectorize,
    Ops.CAT: _build_vectorize,
    Ops.GEP: _build_gep,
    Ops.AFTER: _build_after,
    Ops.WMMA: _build_wmma,
}

__all__ = ["DataRaceError", "Interpreter", "InterpreterError", "LaunchGrid", "run_program"]
