"""`TinyJit`: capture the kernels a function launches once, then replay them on new inputs without Python scheduling.

Call 1 runs the function normally (kernels get compiled, state gets allocated), call 2 runs it inside the current
engine's capture (`with engine.capture(recording):`, see `kiln.tensor.realize.capture`), which records every launch
and copy with its buffers, and every later call replays that list: the Tensor arguments' buffers are patched in,
everything else (parameters, optimizer state, temporaries, outputs) is the very memory the capture used. The
contract, checked on every call:

- the Tensor arguments (positional, then keyword by name) must match the captured ones in number, shape, dtype and
  device (ValueError / TypeError naming the first difference); other arguments must equal the captured values
  (ValueError), and Tensors must not hide inside list / tuple / dict arguments (TypeError);
- `Variable` values (`Variable("pos", 0, 127).bind(5)`) passed as arguments reach the function as 0-dim int32
  Tensors, read from memory by the kernels, so a new value replays without re-capture; out-of-bounds values raise
  ValueError. Such a Tensor is also the variable where a size is expected (`x[:v]`, `Tensor.zeros(v, 4)`): the
  kernels over those symbolic sizes replay with the new value, no new compile. An unbound `Variable` argument
  raises ValueError naming it;
- a Tensor argument whose shape holds bound Variables (`x[:v]`, see `kiln.tensor.symbolic`) is checked by structure
  (the same int dims, the same variables in the same places), not by value: its variables' values are replay
  inputs too, and outputs over those sizes come back with the new values in their shapes.
- reading data to the host inside the function (`.numpy()`, `.item()`, `.tolist()`) raises RuntimeError during
  capture: a replay would not repeat it;
- tensors the function reaches through its closure, globals, bound `self`, default arguments or non-Tensor arguments
  (walked like a state dict) must still be the same Tensor objects over the same buffers: rebinding one raises
  RuntimeError;
- random numbers: each random tensor's call number is a replay input, advanced like the non-JIT function would, so
  replays draw new numbers (and the same numbers as without the JIT); changing `Tensor.manual_seed` after capture
  raises RuntimeError (the key is compiled into the kernels);
- the function must return Tensors (alone, or in a tuple / list / dict) or None. Outputs of a replay live in the
  captured output buffers: the next replay overwrites them (copy a result you keep, e.g. `.numpy()` it).
"""

from __future__ import annotations

import functools
import itertools
import math
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import numpy as np

from kiln.codegen import Program
from kiln.runtime import Buffer, ProgramRunner
from kiln.tensor.core import TensorCore
from kiln.tensor.counters import GlobalCounters
from kiln.tensor.graph import BufferArg
from kiln.tensor.jit_replay import CapturedStep, replay_segments
from kiln.tensor.nn.module import walk_state
from kiln.tensor.realize import Recording, attach_buffer, buffer_of, has_buffer
from kiln.tensor.realize.engine import default_engine
from kiln.tensor.schedule import realized_view
from kiln.tensor.symbolic import (
    BoundVariable,
    Size,
    Variable,
    format_shape,
    max_numel,
    rebind,
    shape_structure,
    shape_values,
)
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, Ops, UOp

__all__ = ["BoundVariable", "TinyJit", "Variable"]

Result = TypeVar("Result")
# numbers for the BUFFER nodes of replayed outputs: disjoint from graph.buffer_uop's and the engine's
_output_numbers = itertools.count(1 << 50)


class _Slot:
    """One Tensor argument of the captured call: where it came from and what it must look like."""

    __slots__ = ("device", "dtype", "name", "shape", "structure")

    def __init__(self, name: str, tensor: Tensor) -> None:
        self.name, self.shape, self.dtype, self.device = name, tensor.shape, tensor.dtype, tensor.device
        self.structure = shape_structure(self.shape)

    def check(self, tensor: Tensor) -> None:
        # a symbolic dim matches the same expression over the same variables, whatever their values
        if shape_structure(tensor.shape) != self.structure:
            raise ValueError(
                f"TinyJit: argument {self.name} has shape {format_shape(tensor.shape)}, it was captured with "
                f"{format_shape(self.shape)}"
            )
        if tensor.dtype != self.dtype:
            raise TypeError(
                f"TinyJit: argument {self.name} has dtype {tensor.dtype!r}, it was captured with {self.dtype!r}"
            )
        if tensor.device != self.device:
            raise ValueError(
                f"TinyJit: argument {self.name} is on {tensor.device!r}, it was captured on {self.device!r}"
            )


def _plain_buffer(tensor: Tensor) -> Buffer | None:
    """The Buffer holding exactly `tensor`'s elements in row-major order, or None when it is not one."""
    return _view_buffer(realized_view(tensor.uop) or tensor.uop, tensor.shape)


def _view_buffer(node: UOp, shape: tuple[Size, ...]) -> Buffer | None:
    """The Buffer of a realized view that is a whole buffer (possibly reshaped), else None. A symbolic shape's
    buffer is allocated at its largest element count and viewed as its front (a SHRINK from 0)."""
    if node.op is Ops.RESHAPE:
        node = node.src[0]
    if node.op is Ops.SHRINK and len(node.arg) == 1 and isinstance(node.arg[0][0], int) and node.arg[0][0] == 0:
        node = node.src[0]
    if node.op is not Ops.BUFFER or not has_buffer(node):
        return None
    buffer = buffer_of(node)
    return buffer if buffer.size == max_numel(shape) else None


def _as_input(tensor: Tensor) -> tuple[Tensor, Buffer]:
    """`tensor` realized into a buffer of exactly its elements (a copy when it is a strided view)."""
    buffer = _plain_buffer(tensor)
    if buffer is None:
        tensor.realize()
        buffer = _plain_buffer(tensor)
    if buffer is None:
        tensor = tensor.contiguous().realize()
        buffer = _plain_buffer(tensor)
    if buffer is None:
        raise RuntimeError(f"TinyJit: could not give argument of shape {tensor.shape} a buffer of its own")
    return tensor, buffer


@dataclass
class _Arguments:
    """One call's arguments: the Tensors by name, the other values by name (compared on replay), and what to pass
    to the function (bound variables replaced by 0-dim int32 Tensors)."""

    tensors: list[tuple[str, Tensor]]
    others: list[tuple[str, Any]]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    values: dict[str, int]  # each bound variable's value, from the arguments and the Tensor arguments' shapes


def _add_values(values: dict[str, int], new: dict[str, int], name: str) -> None:
    for variable, value in new.items():
        if values.setdefault(variable, value) != value:
            raise ValueError(
                f"TinyJit: argument {name} binds variable {variable!r} to {value}, another argument to "
                f"{values[variable]}"
            )


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Arguments:
    result = _Arguments([], [], (), dict(kwargs), {})
    passed = list(args)
    entries: list[tuple[str, Any, int | str]] = [
        (f"{index} (positional)", value, index) for index, value in enumerate(args)
    ]
    entries += [(repr(key), kwargs[key], key) for key in sorted(kwargs)]
    for name, value, where in entries:
        if isinstance(value, Variable):
            raise ValueError(
                f"TinyJit: argument {name} is variable {value.name!r} (range [{value.low}, {value.high}]) unbound; "
                f"pass it bound to this call's value, e.g. {value!r}.bind(value)"
            )
        if isinstance(value, BoundVariable):
            result.others.append((name, value.variable))
            _add_values(result.values, {value.variable.name: value.value}, name)
            value = Tensor(value)
            if isinstance(where, int):
                passed[where] = value
            else:
                result.kwargs[where] = value
        if isinstance(value, Tensor):
            result.tensors.append((name, value))
            _add_values(result.values, shape_values(value.shape), name)
        elif isinstance(value, (list, tuple, dict)) and any(True for _ in walk_state(value)):
            raise TypeError(
                f"TinyJit: argument {name} holds Tensors inside a {type(value).__name__}; pass each Tensor as an "
                f"argument of its own (only those are replay inputs)"
            )
        elif not isinstance(value, BoundVariable):
            result.others.append((name, value))
    result.args = tuple(passed)
    return result


def _same(first: Any, second: Any) -> bool:
    try:
        return bool(first is second or (type(first) is type(second) and first == second))
    except Exception:  # values without a usable == (numpy arrays) are compared by identity only
        return False


class _Recorder(Recording):
    """TinyJit's recording: launches and copies become replay steps, random streams replay inputs; refuses host
    reads."""

    def __init__(self, inputs: list[Buffer], first_call: int) -> None:
        super().__init__()
        self.input_numbers = {id(buffer): number for number, buffer in enumerate(inputs)}
        self.steps: list[CapturedStep] = []
        self.streams: list[tuple[Buffer, int]] = []
        self.written: set[int] = set()
        self.read_first: dict[int, Buffer] = {}  # buffers read before anything in the capture wrote them
        self.first_call = first_call

    def _step(self, runner: Any, buffers: list[Buffer | None], written: list[Buffer | None]) -> None:
        patches = []
        for position, buffer in enumerate(buffers):
            if buffer is None:
                continue
            number = self.input_numbers.get(id(buffer))
            if number is not None:
                patches.append((position, number))
            elif id(buffer) not in self.written:
                self.read_first.setdefault(id(buffer), buffer)
        for buffer in written:
            if buffer is not None:
                self.written.add(id(buffer))
        self.steps.append(CapturedStep(runner, list(buffers), tuple(patches)))

    def record_kernel(
        self, program: Program, runner: ProgramRunner, buffers: list[Buffer], var_vals: dict[str, int] | None
    ) -> None:
        self._step(runner, list(buffers), [buffers[position] for position in program.outs])
        if var_vals:
            self.steps[-1].var_vals = dict(var_vals)

    def record_copy(self, destination: Buffer, source: Buffer) -> None:
        self._step(None, [destination, source], [destination])

    def record_host_read(self, what: str) -> None:
        raise RuntimeError(
            f"TinyJit: the function reads data to the host while being captured ({what}); a replay cannot repeat "
            f"that. Return the tensor from the function and read it outside"
        )

    def observe_stream(self, stream: TensorCore, call: int) -> None:
        assert isinstance(stream, Tensor)  # random tensors are made by the Tensor class
        _tensor, buffer = _as_input(stream)
        self.streams.append((buffer, call - self.first_call))


_ABSENT = object()
"""A dict lookup's default that no value in the dict can be."""


@dataclass
class _Watched:
    """A tensor the function reaches from outside (closure, globals, self, defaults) with its captured buffer."""

    name: str
    owner: object
    key: str
    tensor: Tensor
    buffer: Buffer

    def check(self) -> None:
        owner = self.owner
        if isinstance(owner, (list, tuple)):
            current = owner[int(self.key)] if int(self.key) < len(owner) else None
        elif isinstance(owner, dict):
            # a str key is looked up (a scan per watched tensor cost 0.43 ms a replay for resnet18.onnx's 39 weights)
            current = owner.get(self.key, _ABSENT)
            if current is _ABSENT:  # another key type, watched by its text
                current = next((value for key, value in owner.items() if str(key) == self.key), None)
        elif isinstance(owner, types.CellType):
            current = owner.cell_contents
        else:
            current = owner.__dict__.get(self.key)
        if current is not self.tensor:
            raise RuntimeError(
                f"TinyJit: {self.name} is no longer the tensor the function was captured with (it was rebound); "
                f"the replay would use the old one. Assign into tensors instead of replacing them, or reset() the jit"
            )
        if _plain_buffer(self.tensor) is not self.buffer:
            raise RuntimeError(
                f"TinyJit: {self.name} no longer lives in the buffer the function was captured with; the replay "
                f"would read the old buffer. Realize updates with assign(), or reset() the jit"
            )


def _roots(function: Callable[..., Any]) -> list[tuple[str, object, object, str]]:
    """(name, object, owner, key) of what a function reaches from outside its arguments."""
    roots: list[tuple[str, object, object, str]] = []
    bound = getattr(function, "__self__", None)
    if bound is not None:
        roots.append(("self", bound, None, ""))
    code = getattr(function, "__func__", function)
    closure = getattr(code, "__closure__", None) or ()
    names = getattr(getattr(code, "__code__", None), "co_freevars", ())
    for name, cell in zip(names, closure):
        try:
            roots.append((name, cell.cell_contents, cell, name))
        except ValueError:  # an empty cell
            continue
    module_globals = getattr(code, "__globals__", {})
    for name in getattr(getattr(code, "__code__", None), "co_names", ()):
        if name in module_globals:
            roots.append((name, module_globals[name], module_globals, name))
    for index, default in enumerate(getattr(code, "__defaults__", None) or ()):
        roots.append((f"default {index}", default, None, ""))
    return roots


def _watch(
    function: Callable[..., Any], read_first: dict[int, Buffer], others: list[tuple[str, Any]]
) -> list[_Watched]:
    """The outside tensors whose captured buffers the kernels read: reached from the function (closure, globals,
    self, defaults) or from its non-Tensor arguments (an object whose method is jitted, a model passed in)."""
    watched: list[_Watched] = []
    roots = _roots(function) + [(f"argument {name}", value, None, "") for name, value in others]
    for root_name, root, owner, key in roots:
        if isinstance(root, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)):
            continue
        for name, tensor, tensor_owner, tensor_key in walk_state(root, root_name):
            buffer = _plain_buffer(tensor)
            if buffer is None or id(buffer) not in read_first:
                continue
            if tensor_owner is None:  # the root itself is a tensor: watch the variable holding it
                if owner is None:
                    continue
                tensor_owner, tensor_key = owner, key
            watched.append(_Watched(name, tensor_owner, tensor_key, tensor, buffer))
    return watched


def _pending_writes(function: Callable[..., Any], others: list[tuple[str, Any]]) -> list[Tensor]:
    """The outside tensors (reached as `_watch` reaches them) holding a write not realized yet: state the function
    updated lazily (a BatchNorm's running statistics), which the capture must realize so every replay updates it."""
    pending: dict[int, Tensor] = {}
    roots = _roots(function) + [(f"argument {name}", value, None, "") for name, value in others]
    for root_name, root, _owner, _key in roots:
        if isinstance(root, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)):
            continue
        for _name, tensor, _tensor_owner, _tensor_key in walk_state(root, root_name):
            if tensor.uop.op is Ops.ASSIGN:
                pending.setdefault(id(tensor), tensor)
    return list(pending.values())


def _flatten_outputs(value: Any, path: str = "result") -> list[tuple[str, Tensor]]:
    if value is None:
        return []
    if isinstance(value, Tensor):
        return [(path, value)]
    if isinstance(value, (tuple, list)):
        return [item for index, entry in enumerate(value) for item in _flatten_outputs(entry, f"{path}[{index}]")]
    if isinstance(value, dict):
        return [item for key, entry in value.items() for item in _flatten_outputs(entry, f"{path}[{key!r}]")]
    raise TypeError(
        f"TinyJit: {path} is a {type(value).__name__}; a jitted function may return only Tensors (alone or in "
        f"tuples, lists, dicts) or None, because a replay cannot recompute Python values"
    )


def _rebuild(value: Any, tensors: list[Tensor], position: list[int]) -> Any:
    if value is None:
        return None
    if isinstance(value, Tensor):
        position[0] += 1
        return tensors[position[0] - 1]
    if isinstance(value, tuple):
        return tuple(_rebuild(entry, tensors, position) for entry in value)
    if isinstance(value, list):
        return [_rebuild(entry, tensors, position) for entry in value]
    return {key: _rebuild(entry, tensors, position) for key, entry in value.items()}


@dataclass
class _Output:
    """How to hand one output out on replay: an input, or the captured buffer viewed as shape / dtype."""

    input_number: int | None
    buffer: Buffer | None
    shape: tuple[Size, ...]  # symbolic entries hold the capture's values: a replay rebinds them
    dtype: DType


class _Capture:
    """Everything a replay needs."""

    def __init__(
        self,
        slots: list[_Slot],
        steps: list[CapturedStep],
        streams: list[tuple[Buffer, int]],
        random_calls: int,
        seed: int,
        watched: list[_Watched],
        structure: Any,
        outputs: list[_Output],
    ) -> None:
        self.slots, self.steps, self.streams, self.watched = slots, steps, streams, watched
        self.random_calls, self.seed, self.structure, self.outputs = random_calls, seed, structure, outputs
        self.others: list[tuple[str, Any]] = []
        self.internal: set[int] = set()  # ids of the buffers the captured kernels write (outputs, temporaries)
        self.kernels = sum(1 for step in steps if step.runner is not None)
        self.segments = replay_segments(steps)


def _output_tensor(buffer: Buffer, shape: tuple[Size, ...], dtype: DType, values: dict[str, int]) -> Tensor:
    node = UOp(Ops.BUFFER, dtype, (), BufferArg(next(_output_numbers), buffer.size, buffer.device))
    attach_buffer(node, buffer)
    tensor = Tensor._from_uop(node)
    if shape == (buffer.size,):
        return tensor
    if any(not isinstance(size, int) for size in shape):  # the front of a buffer allocated at the largest size
        shape = tuple(rebind(size, values) for size in shape)
        tensor = tensor[: math.prod(shape)]
    return tensor.reshape(cast(tuple[int, ...], shape))  # shape entries may be symbolic sizes


class TinyJit(Generic[Result]):
    """A decorator: the wrapped function's kernels are captured on its second call and replayed on later calls.

    See the module docstring for the contract.

    Example:
        >>> @TinyJit
        ... def step(x: Tensor) -> Tensor:
        ...     return (x * 2 + 1).relu()
        >>> [step(Tensor([float(i), -5.0])).tolist() for i in range(3)][-1]
        [5.0, 0.0]
    """

    def __init__(self, function: Callable[..., Result]) -> None:
        if not callable(function):
            raise TypeError(f"TinyJit wraps a function, got {type(function).__name__}")
        self.function = function
        self.calls = 0
        self.captured: _Capture | None = None
        functools.update_wrapper(self, function)

    def reset(self) -> None:
        """Forgets the capture: the next call runs normally and the one after captures again."""
        self.calls = 0
        self.captured = None

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self.__call__, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Result:
        arguments = _arguments(args, kwargs)
        if default_engine().recording is not None:
            # called inside another TinyJit's capture: run plainly so the outer capture records these kernels too
            return self.function(*arguments.args, **arguments.kwargs)
        if self.captured is not None:
            return self._replay(arguments)
        self.calls += 1
        if self.calls == 1:
            return self.function(*arguments.args, **arguments.kwargs)
        return self._capture(arguments)

    def _capture(self, arguments: _Arguments) -> Result:
        named, args, kwargs = arguments.tensors, arguments.args, arguments.kwargs
        inputs = [_as_input(tensor)[1] for _name, tensor in named]
        if len({id(buffer) for buffer in inputs}) != len(inputs):
            raise ValueError("TinyJit: two Tensor arguments share one buffer; pass distinct tensors")
        slots = [_Slot(name, tensor) for name, tensor in named]
        engine = default_engine()
        random = engine.random
        recorder = _Recorder(inputs, random.calls)
        seed = random.seed
        # writes left pending by the first call belong to it, not to the step a replay repeats
        if earlier := _pending_writes(self.function, arguments.others):
            Tensor.realize_all(*earlier)
        with engine.capture(recorder):
            result = self.function(*args, **kwargs)
            flat = _flatten_outputs(result)
            pending = _pending_writes(self.function, arguments.others)
            outputs_and_writes = [tensor for _path, tensor in flat] + pending
            views = Tensor.realize_all(*outputs_and_writes)[: len(flat)] if outputs_and_writes else []
        outputs = []
        for (path, tensor), view in zip(flat, views):
            buffer = _view_buffer(view, tensor.shape)
            if buffer is None:
                raise RuntimeError(
                    f"TinyJit: output {path} is not held in a buffer of its own after realize (a broadcast "
                    f"constant or a view?); return .contiguous() of it"
                )
            number = next((i for i, b in enumerate(inputs) if b is buffer), None)
            outputs.append(_Output(number, None if number is not None else buffer, tensor.shape, tensor.dtype))
        watched = _watch(self.function, recorder.read_first, arguments.others)
        random_calls = random.calls - recorder.first_call
        self.captured = _Capture(slots, recorder.steps, recorder.streams, random_calls, seed, watched, result, outputs)
        self.captured.others = arguments.others
        self.captured.internal = {number for number in recorder.written if number not in recorder.input_numbers}
        return result

    def _replay(self, arguments: _Arguments) -> Result:
        captured = self.captured
        assert captured is not None
        named = arguments.tensors
        slots = captured.slots
        # a bound Variable left out is named as one, not as a missing 0-dim Tensor
        for _name, old in captured.others if len(arguments.others) < len(captured.others) else []:
            if isinstance(old, Variable) and not any(_same(value, old) for _, value in arguments.others):
                raise ValueError(
                    f"TinyJit: the call passes no value for variable {old.name!r} (range [{old.low}, {old.high}]); "
                    f"it was captured with it bound: pass {old!r}.bind(value)"
                )
        if len(named) != len(slots):
            raise ValueError(
                f"TinyJit: called with {len(named)} Tensor arguments ({[name for name, _ in named]}), it was captured "
                f"with {len(slots)} ({[slot.name for slot in slots]})"
            )
        if len(arguments.others) != len(captured.others) or any(
            not _same(value, old) for (_, value), (_, old) in zip(arguments.others, captured.others)
        ):
            differences = [
                f"{name} = {value!r} (captured with {old!r})"
                for (name, value), (_, old) in zip(arguments.others, captured.others)
                if not _same(value, old)
            ]
            given = [f"{name} = {value!r}" for name, value in arguments.others]
            expected = [f"{name} = {value!r}" for name, value in captured.others]
            raise ValueError(
                "TinyJit: the non-Tensor arguments differ from the capture's: "
                + ("; ".join(differences) if differences else f"{given} vs {expected}")
                + ". Their values are compiled into the captured kernels: pass changing values as Tensors"
            )
        inputs: list[Buffer] = []
        for slot, (_name, tensor) in zip(slots, named):
            slot.check(tensor)
            buffer = _as_input(tensor)[1]
            if id(buffer) in captured.internal:
                # an output of an earlier replay fed back (a recurrent state): the replay overwrites that buffer
                # while reading it, so it gets a copy of its own first
                buffer = _as_input(
                    Tensor.empty(*tensor.shape, dtype=tensor.dtype, device=tensor.device).assign(tensor)
                )[1]
            inputs.append(buffer)
        for watched in captured.watched:
            watched.check()
        if captured.streams:
            random = default_engine().random
            if random.seed != captured.seed:
                raise RuntimeError(
                    f"TinyJit: the random seed changed since capture ({captured.seed} -> {random.seed}); the "
                    f"generator key is compiled into the captured kernels. Call reset() after manual_seed()"
                )
            first = random.advance(captured.random_calls)
            for buffer, offset in captured.streams:
                buffer.copyin(np.array([(first + offset) & 0xFFFFFFFF], dtype=np.uint32).view(np.uint8))
        for segment in captured.segments:
            segment(inputs, arguments.values)
        GlobalCounters.kernel_count += captured.kernels
        tensors = []
        for output in captured.outputs:
            held = inputs[output.input_number] if output.input_number is not None else output.buffer
            assert held is not None
            tensors.append(_output_tensor(held, output.shape, output.dtype, arguments.values))
        result: Result = _rebuild(captured.structure, tensors, [0])
        return result
