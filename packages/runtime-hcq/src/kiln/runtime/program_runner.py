"""`ProgramRunner`: a codegen `Program` loaded on one device, launched with buffers and variable values.

`device.runtime(program)` returns one (loaded once, cached by the device); calling it launches the program:

    runner = Device["CPU"].runtime(program)
    seconds = runner([out, a, b], {"n": 19}, wait=True)

The runner reads the program only through codegen's `Program` view: its `KernelSignature` (buffer slots with their
pointer dtypes and alignments, variables passed sorted by name, launch dimensions) and its source or binary.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from kiln.codegen import Program, VariableParameter
from kiln.runtime.buffer import Buffer
from kiln.runtime.kernel_args import ArgKind, KernelArgLayout
from kiln.uops import DType, PtrDType

__all__ = ["Launch", "LaunchDims", "ProgramRunner", "RunnerDevice", "VariableSpec"]

LaunchDims = tuple[int, int, int]


class Launch(NamedTuple):
    """One launch's checked arguments, as `ProgramRunner.__call__` hands them to a device's `_launch`."""

    buffers: Sequence[Buffer]
    """one Buffer per slot, as the caller passed them (used slots allocated)"""
    addresses: tuple[int, ...]
    """the kernel address of each used slot's buffer (`buffer_address`), in `slots` order"""
    values: tuple[int, ...]
    """the variables' values in kernel order"""
    global_size: LaunchDims
    local_size: LaunchDims
    wait: bool
    """wait for the kernel and return its run time in seconds"""


class VariableSpec:
    """One integer parameter of a program: its name, inclusive bounds and argument kind (int32 or int64)."""

    __slots__ = ("high", "kind", "low", "name")

    def __init__(self, variable: VariableParameter) -> None:
        self.name: str = variable.name
        self.low: int = variable.low
        self.high: int = variable.high
        self.kind = ArgKind.INT64 if variable.dtype.itemsize == 8 else ArgKind.INT32

    def __repr__(self) -> str:
        return f"VariableSpec({self.name!r}, {self.low}..{self.high}, {self.kind.name})"


class RunnerDevice(Protocol):
    """What the base ProgramRunner needs of its device (a DeviceBase satisfies it; devices sit above their runners,
    so this module does not import kiln.runtime.device). Subclasses narrow `device` to their own device class."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...


class ProgramRunner(abc.ABC):
    """A program loaded on a device: call it with the program's buffers (by slot) and its variables' values.

    Calling checks every argument first (count, device, dtype and size of each buffer, alignment for wide accesses,
    every variable present and within its bounds) and raises TypeError / ValueError naming the bad one, so a wrong
    launch never reaches the device.

    Attributes:
        device: the device the program runs on.
        program: the codegen Program.
        name: the kernel name.
        variables: the integer parameters, in the order the kernel takes them (sorted by name).
        arg_layout: the kernel's argument block: every buffer pointer (slot order), then every variable.
    """

    def profile_args(self, values: Sequence[int]) -> dict[str, object]:
        """What a PROFILE event of a launch with variable values `values` carries: the kernel's trace key (which
        links it to the viz trace) and its estimated flops and global memory bytes."""
        var_vals = {variable.name: value for variable, value in zip(self.variables, values, strict=False)}
        flops, global_bytes, _ = self.program.estimates.evaluate(var_vals)
        return {"kernel": self.program.trace_key, "flops": flops, "bytes": global_bytes}

    def __init__(self, device: RunnerDevice, program: Program) -> None:
        if not isinstance(program, Program):
            raise TypeError(f"a ProgramRunner needs a kiln.codegen Program, got {type(program).__name__}")
        program_kind, device_kind = program.device.partition(":")[0], device.kind
        if program_kind != device_kind:
            raise ValueError(
                f"program {program.name!r} was built for {program.device!r}, it cannot run on {device.name!r}; "
                f"build it with the device's renderer (Device[{device.name!r}].renderer)"
            )
        self.device = device
        self.program = program
        self.name = program.name
        signature = program.signature
        self.slots = signature.slots
        self.buffer_count = signature.slot_count
        self.pointer_dtypes: tuple[PtrDType, ...] = tuple(buffer.dtype for buffer in signature.buffers)
        self.variables = tuple(VariableSpec(variable) for variable in signature.variables)
        self.arg_layout = KernelArgLayout(
            (ArgKind.POINTER,) * len(self.slots) + tuple(variable.kind for variable in self.variables)
        )
        self.alignments = {buffer.slot: buffer.alignment for buffer in signature.buffers if buffer.alignment > 1}
        sizes = (*signature.global_size, *(signature.local_size or ()))
        self._static_dims = signature.launch_dims({}) if all(isinstance(size, int) for size in sizes) else None
        # per used slot: (slot, alignment); and the (slot, dtype, size) of plain Buffers that passed every check
        # but the address ones, so a launch on buffers like earlier ones skips re-checking them
        self._slot_alignments = tuple((slot, self.alignments.get(slot, 1)) for slot in self.slots)
        self._accepted: set[tuple[int, DType, int]] = set()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} on {self.device.name}>"

    # -- launching ---------------------------------------------------------------------------------------------------
    def __call__(
        self, buffers: Sequence[Buffer], var_vals: Mapping[str, int] | None = None, wait: bool = False
    ) -> float | None:
        """Launches the program after all earlier work of the device.

        Args:
            buffers: one `Buffer` on this device per buffer slot of the program, in slot order (outputs first by the
                kernel sink convention); unallocated buffers are allocated. A slot the program never uses (its
                DEFINE_GLOBAL was optimized away) takes any buffer or None and is not passed to the kernel.
            var_vals: the value of every variable of the program by name (extra names are ignored).
            wait: wait for the kernel to finish and return its run time.

        Returns:
            the kernel's run time in seconds when `wait` is true, else None (the launch is queued).
        """
        values = self.variable_values(var_vals)
        addresses = self.buffer_addresses(buffers)
        global_size, local_size = self.launch_dims(var_vals)
        return self._launch(Launch(buffers, addresses, values, global_size, local_size, wait))

    def launch_dims(self, var_vals: Mapping[str, int] | None = None) -> tuple[LaunchDims, LaunchDims]:
        """(global size, local size) of a launch with these variable values."""
        if self._static_dims is not None:
            return self._static_dims
        return self.program.launch_dims(var_vals or {})

    @abc.abstractmethod
    def _launch(self, launch: Launch) -> float | None:
        """Queues the launch on the device (arguments already checked); returns seconds if `launch.wait`."""

    @abc.abstractmethod
    def buffer_address(self, buffer: Buffer) -> int:
        """The address the kernel receives for `buffer` (allocated, on this device)."""

    def _binary(self, why: str) -> bytes:
        """The program's binary; RuntimeError saying `why` the device needs one when the program has only source."""
        binary = self.program.binary
        if binary is None:
            raise RuntimeError(f"program {self.name!r} has no binary: {why}")
        return binary

    # -- argument checks ---------------------------------------------------------------------------------------------
    def variable_values(self, var_vals: Mapping[str, int] | None) -> tuple[int, ...]:
        """The variables' values in kernel order; ValueError/TypeError for a missing, bad or out-of-bounds one."""
        if not self.variables:
            return ()
        if var_vals is None:
            var_vals = {}
        elif not isinstance(var_vals, Mapping):
            raise TypeError(f"var_vals must be a mapping of variable name to int, got {type(var_vals).__name__}")
        values = []
        for variable in self.variables:
            if variable.name not in var_vals:
                raise ValueError(
                    f"{self.name}: no value for variable {variable.name!r} (bounds {variable.low}..{variable.high}); "
                    f"var_vals has {sorted(var_vals)}"
                )
            value = var_vals[variable.name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{self.name}: variable {variable.name!r} must be an int, got {value!r}")
            if not variable.low <= value <= variable.high:
                raise ValueError(
                    f"{self.name}: variable {variable.name!r} = {value} is outside its bounds "
                    f"[{variable.low}, {variable.high}]"
                )
            values.append(int(value))
        return tuple(values)

    def buffer_addresses(self, buffers: Sequence[Buffer]) -> tuple[int, ...]:
        """The kernel addresses of the used slots' buffers, each checked against its slot (allocated if needed)."""
        if len(buffers) != self.buffer_count:
            raise ValueError(
                f"{self.name} takes {self.buffer_count} buffers (slots 0..{self.buffer_count - 1}), got {len(buffers)}"
            )
        addresses = []
        device_name = self.device.name
        accepted = self._accepted
        for slot, alignment in self._slot_alignments:
            buffer = buffers[slot]
            if (
                type(buffer) is not Buffer
                or buffer.device != device_name
                or (slot, buffer.dtype, buffer.size) not in accepted
            ):
                self._check_buffer(slot, buffer)
            if buffer._allocator is None:
                buffer.allocate()
            address = self.buffer_address(buffer)
            if alignment > 1 and address % alignment:
                raise ValueError(
                    f"{self.name}: buffer {slot} starts at address {address:#x}, but the kernel reads it "
                    f"{alignment} bytes at a time and needs it aligned to {alignment} bytes (a view at an odd offset?)"
                )
            addresses.append(address)
        return tuple(addresses)

    def _check_buffer(self, slot: int, buffer: Buffer) -> None:
        """Raises unless `buffer` fits slot `slot` (type, device, element size, byte size); remembers one that does."""
        if not isinstance(buffer, Buffer):
            raise TypeError(f"{self.name}: buffer {slot} must be a kiln.runtime Buffer, got {type(buffer).__name__}")
        if buffer.device != self.device.name:
            raise ValueError(
                f"{self.name}: buffer {slot} is on {buffer.device!r}, the program runs on {self.device.name!r}"
            )
        pointer = self.pointer_dtypes[self.slots.index(slot)]
        element = pointer.base
        if buffer.dtype.scalar().itemsize != element.scalar().itemsize:
            raise TypeError(
                f"{self.name}: buffer {slot} holds {buffer.dtype!r}, the kernel reads {element!r} "
                f"({element.scalar().itemsize}-byte elements)"
            )
        needed = pointer.size * element.nbytes
        if pointer.size >= 0 and buffer.nbytes < needed:
            raise ValueError(
                f"{self.name}: buffer {slot} holds {buffer.nbytes} bytes ({buffer.size} x {buffer.dtype!r}), "
                f"the kernel accesses {needed} bytes ({pointer.size} x {element!r})"
            )
        if type(buffer) is Buffer and len(self._accepted) < 4096:
            self._accepted.add((slot, buffer.dtype, buffer.size))
