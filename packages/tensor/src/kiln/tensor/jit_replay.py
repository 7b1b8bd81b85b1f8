"""TinyJit's replay: the captured launches grouped into segments, each run on the new input buffers.

A run of kernels on one queue-driven device (`HCQCompiled`) becomes one `ReplayBatch`: its exec commands are built
once at capture (argument blocks holding the captured buffers' addresses) and submitted as one list per replay
(`HCQCompiled.launch_many`); only the kernels that touch an argument, and the kernels over symbolic sizes (their
variable values and launch sizes are the replay call's), get a new command. Anything else (copies, other devices)
replays step by step (`ReplayStep`). A run of kernels on a CUDA device becomes one CUDA graph
(`kiln.runtime.cuda.CUDAGraphBatch`: a chain of kernel nodes, the nodes touching an argument or variable updated per
replay, one `cuGraphLaunch`). A decode step over a Variable position was split into ~60 lists by its attention
kernels when kernels with variables replayed one by one: 3 ms of a 15 ms step at position 900.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from kiln.runtime import Buffer, ExecCommand, HCQArgsState, HCQCompiled, HCQProgramRunner, copy_between
from kiln.runtime.cuda import CUDAContext, CUDAGraphBatch, graph_device
from kiln.uops import knobs

__all__ = ["CapturedStep", "ReplayBatch", "ReplayStep", "Segment", "replay_segments"]


@dataclass
class CapturedStep:
    """One launch (runner set) or copy (runner None) of the capture: its buffers and which are inputs."""

    runner: Any
    buffers: list[Buffer | None]
    patches: tuple[tuple[int, int], ...]  # (position in buffers, input number)
    var_vals: dict[str, int] | None = None  # a kernel over symbolic sizes: its variables' values at capture


class ReplayStep:
    """A replay segment of one step launched on its own (a copy, or a kernel a batch cannot take)."""

    __slots__ = ("step",)

    def __init__(self, step: CapturedStep) -> None:
        self.step = step

    def __call__(self, inputs: list[Buffer], values: dict[str, int]) -> None:
        """Launches the step on `inputs`; a kernel's variables take their value in `values`, else the captured one."""
        step = self.step
        buffers = step.buffers
        if step.patches:
            buffers = list(buffers)
            for position, number in step.patches:
                buffers[position] = inputs[number]
        if step.runner is not None:
            if step.var_vals:
                step.runner(buffers, {name: values.get(name, value) for name, value in step.var_vals.items()})
            else:
                step.runner(buffers)
        else:
            destination, source = buffers
            assert destination is not None and source is not None
            copy_between(destination, source)


def _batchable(step: CapturedStep) -> HCQCompiled | None:
    """The device whose queue can take `step` in a batch: a kernel of a queue-driven device whose launch sizes are
    fixed or follow its variables (given at capture); None otherwise."""
    runner = step.runner
    if not isinstance(runner, HCQProgramRunner) or not isinstance(runner.device, HCQCompiled):
        return None
    if bool(runner.variables) != bool(step.var_vals):
        return None  # variables the capture did not record a value for: launched on their own, which checks them
    dims = runner.launch_dims(step.var_vals or {})
    if not all(isinstance(size, int) and size >= 1 for sizes in dims for size in sizes):
        return None
    return runner.device


def _command(runner: HCQProgramRunner, buffers: list[Buffer | None], var_vals: dict[str, int] | None) -> ExecCommand:
    """The checked exec command launching `runner` on `buffers` with these variable values (a fresh argument block;
    values out of a variable's range raise ValueError naming it)."""
    layout = runner.arg_layout
    # a slot the program never uses may hold None (see ProgramRunner.__call__); the runner skips it
    present = cast(list[Buffer], buffers)
    values = runner.variable_values(var_vals) if var_vals else ()
    arguments = HCQArgsState(layout, memoryview(bytearray(layout.size)), runner.buffer_addresses(present), values)
    global_size, local_size = runner.launch_dims(var_vals or {})
    profile = runner.profile_args(values) if knobs.PROFILE else None
    return ExecCommand(runner.kernel_for(present), arguments, global_size, local_size, runner.name, profile)


class ReplayBatch:
    """A replay segment of consecutive kernels of one queue-driven device, submitted as one list. Kernels that do
    not read or write an argument and have no variables reuse the command built at capture; the others get a fresh
    one per replay (the call's buffers, variable values and launch sizes)."""

    __slots__ = ("commands", "device", "direct", "direct_patched", "inline", "kept", "patched")

    def __init__(self, device: HCQCompiled, steps: list[CapturedStep]) -> None:
        self.device = device
        self.commands: list[ExecCommand | None] = []
        self.patched: list[
            tuple[int, HCQProgramRunner, list[Buffer | None], tuple[tuple[int, int], ...], dict[str, int] | None]
        ] = []
        for index, step in enumerate(steps):
            runner = step.runner
            assert isinstance(runner, HCQProgramRunner)
            if step.patches or step.var_vals:
                self.commands.append(None)
                self.patched.append((index, runner, step.buffers, step.patches, step.var_vals))
            else:
                self.commands.append(_command(runner, step.buffers, None))
        # tiny kernels only: run the list in the calling thread when the device is idle (no thread handoff)
        self.inline = all(step.runner.inline for step in steps)
        self.direct: list[tuple[Callable[..., None], tuple[int, ...]]] | None = None
        self.direct_patched: list[tuple[int, HCQProgramRunner, list[Buffer | None], tuple[tuple[int, int], ...]]] = []
        self.kept = [step.buffers for step in steps]  # the captured buffers the prebuilt addresses point into
        if self.inline:
            self._prebind(steps)

    def _prebind(self, steps: list[CapturedStep]) -> None:
        # every kernel a one-core native one without variables: the replay is a flat loop of entry-point calls on
        # addresses worked out here (`HCQCompiled.launch_direct_many`); a kernel touching an argument gets its
        # addresses per call
        calls: list[tuple[Callable[..., None], tuple[int, ...]]] = []
        for index, step in enumerate(steps):
            runner = step.runner
            entry = runner.direct_call() if isinstance(runner, HCQProgramRunner) and not step.var_vals else None
            if entry is None:
                return
            present = cast(list[Buffer], step.buffers)
            calls.append((entry, runner.buffer_addresses(present)))
            if step.patches:
                self.direct_patched.append((index, runner, step.buffers, step.patches))
        self.direct = calls

    def __call__(self, inputs: list[Buffer], values: dict[str, int]) -> None:
        direct = self.direct
        if direct is not None and not knobs.PROFILE and self._call_direct(direct, inputs):
            return
        commands = self.commands
        if self.patched:
            commands = list(commands)
            for index, runner, template, patches, captured in self.patched:
                buffers = list(template)
                for position, number in patches:
                    buffers[position] = inputs[number]
                var_vals = {name: values.get(name, value) for name, value in captured.items()} if captured else None
                commands[index] = _command(runner, buffers, var_vals)
        # every None (a kernel touching an argument) was replaced above
        self.device.launch_many(cast(list[ExecCommand], commands), inline=self.inline)

    def _call_direct(self, direct: list[tuple[Callable[..., None], tuple[int, ...]]], inputs: list[Buffer]) -> bool:
        # the flat loop of entry-point calls, when the arguments are aligned and the device is idle
        calls = _direct_calls(self, direct, inputs)
        return calls is not None and self.device.launch_direct_many(calls)


def _aligned(addresses: tuple[int, ...], mask: int) -> bool:
    return all(not address & mask for address in addresses)


def _direct_calls(
    batch: ReplayBatch, direct: list[tuple[Callable[..., None], tuple[int, ...]]], inputs: list[Buffer]
) -> list[tuple[Callable[..., None], tuple[int, ...]]] | None:
    """The batch's calls with the arguments' addresses in (checked like a launch's), or None when one is not
    aligned as its kernel reads it (then the exec commands run)."""
    if not batch.direct_patched:
        return direct
    calls = list(direct)
    for index, runner, template, patches in batch.direct_patched:
        buffers = list(template)
        for position, number in patches:
            buffers[position] = inputs[number]
        addresses = runner.buffer_addresses(cast(list[Buffer], buffers))
        if not _aligned(addresses, runner.alignment_mask):
            return None
        calls[index] = (calls[index][0], addresses)
    return calls


Segment = ReplayStep | ReplayBatch | CUDAGraphBatch


def _batch(device: HCQCompiled | CUDAContext, run: list[CapturedStep]) -> list[Segment]:
    """The segments replaying `run` (two or more kernels of `device`): one ReplayBatch on a queue-driven device, one
    CUDA graph on a CUDA device; a driver without the graph API (older than CUDA 12) replays them one by one, and
    says so once per capture."""
    if isinstance(device, HCQCompiled):
        return [ReplayBatch(device, run)]
    try:
        return [CUDAGraphBatch(device, run)]
    except OSError as error:
        warnings.warn(f"TinyJit replays {len(run)} CUDA kernels one by one: {error}", RuntimeWarning, stacklevel=3)
        return [ReplayStep(step) for step in run]


def replay_segments(steps: list[CapturedStep]) -> list[Segment]:
    """The captured steps grouped for replay: runs of batchable kernels on one device become one `ReplayBatch` (a
    queue-driven device) or one CUDA graph (`CUDAGraphBatch`, a CUDA device)."""
    segments: list[Segment] = []
    run: list[CapturedStep] = []
    run_device: HCQCompiled | CUDAContext | None = None
    for step in steps:
        device: HCQCompiled | CUDAContext | None = _batchable(step) or graph_device(step)
        if run and device is not run_device:
            segments.extend(
                _batch(run_device, run) if len(run) > 1 and run_device is not None else [ReplayStep(run[0])]
            )
            run = []
        if device is None:
            segments.append(ReplayStep(step))
            continue
        run.append(step)
        run_device = device
    if run and run_device is not None:
        segments.extend(_batch(run_device, run) if len(run) > 1 else [ReplayStep(run[0])])
    return segments
