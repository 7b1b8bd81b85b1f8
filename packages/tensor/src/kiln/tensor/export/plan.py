"""The plan of an export: a function captured once by TinyJit, read back as buffers with roles and a launch list.

A capture (`kiln.tensor.jit`) holds every kernel launch and copy with the Buffers it touched and which of them were
the Tensor arguments. An exported artifact needs the same facts without Python: each distinct memory block becomes a
`PlannedBuffer` (an input, a weight read before anything wrote it, or scratch the steps write first), each launch a
`PlannedLaunch` naming its kernel's AST (re-lowered by each target for its own renderer) and the block and byte
offset of every argument, each copy a `PlannedCopy`. Weights keep their bytes at export time and the names of the
module attributes they came from where the function reaches them (`model.0.weight`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kiln.codegen import Program
from kiln.runtime import Buffer
from kiln.tensor.jit import TinyJit
from kiln.tensor.realize.engine import default_engine
from kiln.tensor.symbolic import BoundVariable, Size, Variable
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, UOp

__all__ = [
    "Endpoint",
    "ExportPlan",
    "PlannedArgument",
    "PlannedBuffer",
    "PlannedCopy",
    "PlannedLaunch",
    "PlannedVariable",
    "Role",
    "plan_export",
]


class Role(enum.Enum):
    """What a memory block of the exported program holds."""

    INPUT = "input"  # a Tensor argument: the caller's data is copied in before the first step
    WEIGHT = "weight"  # read before any step writes it: its bytes at export time ship with the artifact
    SCRATCH = "scratch"  # written before it is read: outputs and temporaries


@dataclass(frozen=True)
class PlannedBuffer:
    """One memory block: `index` in the plan, a C-identifier-safe `name`, its `role`, element `dtype`, size in bytes
    and, for a weight, its bytes."""

    index: int
    name: str
    role: Role
    dtype: DType
    nbytes: int
    data: bytes | None


@dataclass(frozen=True)
class PlannedArgument:
    """A kernel or copy argument: block `buffer` from byte `offset` on."""

    buffer: int
    offset: int


@dataclass(frozen=True)
class PlannedLaunch:
    """One kernel launch: the kernel's AST, the program kiln ran (and whether its renderer fused multiply-adds),
    and its arguments by buffer slot."""

    ast: UOp
    program: Program
    arguments: dict[int, PlannedArgument]
    fuse_multiply_add: bool


@dataclass(frozen=True)
class PlannedCopy:
    """One copy of `nbytes` bytes between two blocks."""

    destination: PlannedArgument
    source: PlannedArgument
    nbytes: int


@dataclass(frozen=True)
class Endpoint:
    """An input or output of the exported function: its name, where it lives, its shape and dtype; an input that is a
    Variable argument (a 0-dim int32 Tensor inside the function) names the variable whose value it is fed from."""

    name: str
    location: PlannedArgument
    shape: tuple[Size, ...]
    dtype: DType
    variable: str | None = None


@dataclass(frozen=True)
class PlannedVariable:
    """A symbolic size or Variable argument: an int argument of the exported run, in [low, high]."""

    name: str
    low: int
    high: int


@dataclass(frozen=True)
class ExportPlan:
    """Everything a target writes: the blocks, the steps in launch order, the inputs, outputs and variables."""

    name: str
    buffers: tuple[PlannedBuffer, ...]
    steps: tuple[PlannedLaunch | PlannedCopy, ...]
    inputs: tuple[Endpoint, ...]
    outputs: tuple[Endpoint, ...]
    variables: tuple[PlannedVariable, ...]

    def weights(self) -> list[PlannedBuffer]:
        """The weight blocks, in plan order."""
        return [buffer for buffer in self.buffers if buffer.role is Role.WEIGHT]


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_identifier(name: str, what: str) -> str:
    """`name` when it is a C and JavaScript identifier; ValueError naming it otherwise."""
    if not _IDENTIFIER.match(name):
        raise ValueError(f"export: {what} {name!r} must be an identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return name


def _sanitized(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.]", "_", name)
    return cleaned or "weight"


def _capture(function: Callable[..., Any], inputs: Sequence[Any], name: str) -> TinyJit[Any]:
    """`function` captured by TinyJit on `inputs` (one plain call, then the capture); RuntimeError naming the
    reason when it cannot be."""
    if not callable(function):
        raise TypeError(f"export: {name}: expected a function (a model's forward), got {type(function).__name__}")
    jit: TinyJit[Any] = TinyJit(function)
    for _call in range(2):
        try:
            jit(*inputs)
        except (RuntimeError, TypeError, ValueError) as error:
            raise RuntimeError(
                f"export: {name}: the function cannot be captured by TinyJit, so it cannot be exported: {error}"
            ) from error
    if jit.captured is None:
        raise RuntimeError(f"export: {name}: TinyJit did not capture the function")
    return jit


def plan_export(function: Callable[..., Any], inputs: Sequence[Any], name: str) -> ExportPlan:
    """Captures `function` on `inputs` and reads the capture as an `ExportPlan` (see the module docstring).

    Raises RuntimeError when the function cannot be captured or draws random numbers (an artifact has no random
    state), TypeError when an input is neither a Tensor nor a bound Variable.
    """
    for position, value in enumerate(inputs):
        if not isinstance(value, (Tensor, BoundVariable)):
            raise TypeError(
                f"export: {name}: example input {position} is a {type(value).__name__}; pass Tensors (and bound "
                f"Variables for symbolic sizes): other values would be compiled into the artifact"
            )
    # each Tensor input in memory of its own: a graph over an input kiln already computed on (the caller's own run
    # of the model on it) is realized already, and a capture of it would record no kernels
    inputs = [
        value.clone().realize() if isinstance(value, Tensor) and all(isinstance(s, int) for s in value.shape) else value
        for value in inputs
    ]
    jit = _capture(function, inputs, name)
    captured = jit.captured
    assert captured is not None
    if captured.streams:
        raise RuntimeError(
            f"export: {name}: the function draws random numbers ({len(captured.streams)} random tensor(s)); an "
            f"exported artifact has no random state. Put the model in eval mode (model.eval()) or remove the draws"
        )
    asts = {id(method.runner): ast for (ast, _device), method in default_engine()._methods.items()}
    weight_names = {id(watched.buffer.base): watched.name for watched in captured.watched}
    blocks: dict[int, int] = {}  # id of a base Buffer -> index in `planned`
    planned: list[PlannedBuffer] = []
    block_buffers: list[Buffer] = []
    input_blocks: dict[int, int] = {}
    names: set[str] = set()

    def unique(wanted: str) -> str:
        candidate, number = wanted, 1
        while candidate in names:
            number += 1
            candidate = f"{wanted}_{number}"
        names.add(candidate)
        return candidate

    def add_block(base: Buffer, role: Role, wanted: str) -> int:
        index = len(planned)
        blocks[id(base)] = index
        data = bytes(base.copyout(bytearray(base.nbytes))) if role is Role.WEIGHT else None
        planned.append(PlannedBuffer(index, unique(wanted), role, base.dtype, base.nbytes, data))
        block_buffers.append(base)
        return index

    # inputs first, in argument order: each capture step patches them in by input number
    input_buffers: dict[int, Buffer] = {}
    for step in captured.steps:
        for position, number in step.patches:
            buffer = step.buffers[position]
            assert buffer is not None
            input_buffers.setdefault(number, buffer)
    variable_arguments = {key: value.name for key, value in captured.others if isinstance(value, Variable)}
    endpoints_in: list[Endpoint] = []
    for number, slot in enumerate(captured.slots):
        buffer = input_buffers.get(number)
        argument_name = f"input{number}"
        if buffer is None:  # an argument no kernel reads: it still takes a block, so the API keeps its position
            if isinstance(slot.device, tuple):
                raise ValueError(f"export: argument {slot.name} is sharded over {list(slot.device)}; export one device")
            buffer = Buffer(slot.device, 1, slot.dtype)
        index = add_block(buffer.base, Role.INPUT, argument_name)
        input_blocks[number] = index
        location = PlannedArgument(index, buffer.offset)
        fed_from = variable_arguments.get(slot.name)
        endpoints_in.append(Endpoint(argument_name, location, slot.shape, slot.dtype, fed_from))

    constant_count = 0

    def argument_of(buffer: Buffer, is_written: bool) -> PlannedArgument:
        nonlocal constant_count
        base = buffer.base
        index = blocks.get(id(base))
        if index is None:
            if is_written:
                index = add_block(base, Role.SCRATCH, f"scratch{len(planned)}")
            else:
                wanted = weight_names.get(id(base))
                if wanted is None:
                    constant_count += 1
                    wanted = f"constant{constant_count}"
                index = add_block(base, Role.WEIGHT, _sanitized(wanted))
        return PlannedArgument(index, buffer.offset)

    steps: list[PlannedLaunch | PlannedCopy] = []
    for step in captured.steps:
        if step.runner is None:
            destination, source = step.buffers
            assert destination is not None and source is not None
            copy_source = argument_of(source, False)
            steps.append(PlannedCopy(argument_of(destination, True), copy_source, destination.nbytes))
            continue
        program: Program = step.runner.program
        ast = asts.get(id(step.runner))
        if ast is None:
            raise RuntimeError(f"export: {name}: the kernel {program.name} is no longer in the engine's program cache")
        outs = set(program.outs)
        arguments: dict[int, PlannedArgument] = {}
        # reads before writes: a kernel that reads and writes one block (an in-place update) reads the old contents
        for position, buffer in enumerate(step.buffers):
            if buffer is not None and position not in outs:
                arguments[position] = argument_of(buffer, False)
        for position, buffer in enumerate(step.buffers):
            if buffer is not None and position in outs:
                arguments[position] = argument_of(buffer, True)
        renderer = getattr(step.runner.device, "renderer", None)
        fused = bool(getattr(renderer, "fuse_multiply_add", False))
        steps.append(PlannedLaunch(ast, program, dict(sorted(arguments.items())), fused))

    endpoints_out: list[Endpoint] = []
    for number, output in enumerate(captured.outputs):
        if output.input_number is not None:
            location = endpoints_in[output.input_number].location
        else:
            assert output.buffer is not None
            location = argument_of(output.buffer, False)
        endpoints_out.append(Endpoint(f"output{number}", location, output.shape, output.dtype))

    variables: dict[str, PlannedVariable] = {}
    for _name, value in captured.others:
        if isinstance(value, Variable):
            variables[value.name] = PlannedVariable(value.name, value.low, value.high)
        else:
            raise TypeError(f"export: {name}: non-Tensor argument {value!r} cannot be an input of the artifact")
    for launch in steps:
        if isinstance(launch, PlannedLaunch):
            for parameter in launch.program.signature.variables:
                variables.setdefault(parameter.name, PlannedVariable(parameter.name, parameter.low, parameter.high))
    for variable in variables:
        check_identifier(variable, "variable")
    return ExportPlan(
        name,
        tuple(planned),
        tuple(steps),
        tuple(endpoints_in),
        tuple(endpoints_out),
        tuple(variables[key] for key in sorted(variables)),
    )
