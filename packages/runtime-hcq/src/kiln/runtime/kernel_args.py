"""Kernel arguments: the byte layout of a program's parameters and the argument block a launch reads.

A kernel receives its parameters as one block of memory: buffer addresses (8-byte pointers) and variable values
(4- or 8-byte signed ints), each at its natural alignment, in the program's parameter order, little-endian. That is
how a C compiler lays out a struct of those fields, so a kernel can take the block as a struct pointer (and it is
the parameter buffer CUDA's `cuLaunchKernel` accepts).
"""

from __future__ import annotations

import enum
import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["ArgKind", "HCQArgsState", "KernelArgLayout"]


class ArgKind(enum.Enum):
    """The kind of one kernel parameter: a buffer pointer, or a variable value of 32 or 64 bits."""

    POINTER = "pointer"
    INT32 = "int32"
    INT64 = "int64"

    @property
    def size(self) -> int:
        """Bytes of the parameter, which is also its alignment."""
        return 4 if self is ArgKind.INT32 else 8


_FORMATS = {ArgKind.POINTER: "<Q", ArgKind.INT32: "<i", ArgKind.INT64: "<q"}
_CODES = {ArgKind.POINTER: "Q", ArgKind.INT32: "i", ArgKind.INT64: "q"}
_RANGES = {
    ArgKind.POINTER: (0, 2**64 - 1),
    ArgKind.INT32: (-(2**31), 2**31 - 1),
    ArgKind.INT64: (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True)
class KernelArgLayout:
    """Where each parameter of a kernel sits in its argument block.

    Attributes:
        kinds: the parameters in order.
        offsets: the byte offset of each parameter (natural alignment).
        size: the block's size, rounded up to the largest alignment (as a struct is).
        packer: packs / unpacks every parameter of the block at once, in order (padding bytes included).
        pointers_first: whether every pointer comes before every variable (the runtime's own layouts).
    """

    kinds: tuple[ArgKind, ...]
    offsets: tuple[int, ...] = field(init=False)
    size: int = field(init=False)
    packer: struct.Struct = field(init=False, repr=False, compare=False)
    pointers_first: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        offsets = []
        position = 0
        for kind in self.kinds:
            if not isinstance(kind, ArgKind):
                raise TypeError(f"kernel parameter kinds must be ArgKind values, got {kind!r}")
            position = _align(position, kind.size)
            offsets.append(position)
            position += kind.size
        largest = max((kind.size for kind in self.kinds), default=1)
        size = _align(position, largest)
        # one struct for the whole block: a launch packs it in one call instead of one call per parameter
        codes, end = ["<"], 0
        for kind, offset in zip(self.kinds, offsets):
            codes.append(f"{offset - end}x{_CODES[kind]}" if offset > end else _CODES[kind])
            end = offset + kind.size
        codes.append(f"{size - end}x" if size > end else "")
        object.__setattr__(self, "offsets", tuple(offsets))
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "packer", struct.Struct("".join(codes)))
        pointers = self.kinds.count(ArgKind.POINTER)
        object.__setattr__(self, "pointers_first", self.kinds[:pointers] == (ArgKind.POINTER,) * pointers)

    @classmethod
    def buffers_then_variables(
        cls, buffer_count: int, variable_count: int, variable_kind: ArgKind = ArgKind.INT32
    ) -> KernelArgLayout:
        """The usual layout: every buffer pointer, then every variable value (all of `variable_kind`)."""
        return cls((ArgKind.POINTER,) * buffer_count + (variable_kind,) * variable_count)

    def positions(self, kind: ArgKind) -> tuple[int, ...]:
        """Parameter indices of the given kind, in order."""
        return tuple(index for index, each in enumerate(self.kinds) if each is kind)

    @functools.cached_property
    def pointer_positions(self) -> tuple[int, ...]:
        """Parameter indices of the buffer pointers, in order."""
        return self.positions(ArgKind.POINTER)

    @functools.cached_property
    def variable_positions(self) -> tuple[int, ...]:
        """Parameter indices of the variable values (every parameter that is not a pointer), in order."""
        return tuple(index for index, each in enumerate(self.kinds) if each is not ArgKind.POINTER)


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


class HCQArgsState:
    """A kernel's argument block in host-visible memory, filled with buffer addresses and variable values.

    Args:
        layout: the kernel's parameter layout.
        memory: writable memory of at least `layout.size` bytes (a slice of the device's argument area).
        buffer_addresses: one address per POINTER parameter, in order.
        variable_values: one value per INT32 / INT64 parameter, in order.
        address: the device address of `memory` (what the kernel launch passes), if the device needs one.
    """

    __slots__ = ("_pointers", "_variables", "address", "layout", "memory")  # one is made per launch

    def __init__(
        self,
        layout: KernelArgLayout,
        memory: memoryview,
        buffer_addresses: Sequence[int],
        variable_values: Sequence[int] = (),
        address: int = 0,
    ) -> None:
        if memory.readonly or memory.nbytes < layout.size:
            raise ValueError(f"argument memory must be writable and hold {layout.size} bytes, got {memory.nbytes}")
        self.layout = layout
        self.memory = memory.cast("B") if memory.format != "B" else memory
        self.address = address
        self._pointers = layout.pointer_positions
        self._variables = layout.variable_positions
        if len(buffer_addresses) != len(self._pointers) or len(variable_values) != len(self._variables):
            raise ValueError(
                f"the layout takes {len(self._pointers)} buffer(s) and {len(self._variables)} variable(s), got "
                f"{len(buffer_addresses)} and {len(variable_values)}"
            )
        if layout.pointers_first:
            # the usual layout (pointers first): pack every parameter in one call when each is a plain in-range int
            parameters = (*buffer_addresses, *variable_values)
            if all(type(value) is int for value in parameters):
                try:
                    layout.packer.pack_into(self.memory, 0, *parameters)
                    return
                except struct.error:
                    pass  # out of range: the per-parameter writes below name the bad one
        for index, address_value in enumerate(buffer_addresses):
            self.update_buffer(index, address_value)
        for index, value in enumerate(variable_values):
            self.update_variable(index, value)

    @classmethod
    def for_launch(
        cls, layout: KernelArgLayout, buffer_addresses: tuple[int, ...], variable_values: tuple[int, ...]
    ) -> HCQArgsState:
        """A fresh block of host memory holding these parameters: what the constructor makes from
        `memoryview(bytearray(layout.size))`, packed in one call when the layout puts pointers first and the counts
        match it (every launch of a runner makes one); otherwise, or for a value out of range, the constructor's
        checks name the problem."""
        if (
            layout.pointers_first
            and len(buffer_addresses) == len(layout.pointer_positions)
            and len(variable_values) == len(layout.variable_positions)
        ):
            memory = bytearray(layout.size)
            try:
                layout.packer.pack_into(memory, 0, *buffer_addresses, *variable_values)
            except struct.error:
                pass
            else:
                state = cls.__new__(cls)
                state.layout = layout
                state.memory = memoryview(memory)
                state.address = 0
                state._pointers = layout.pointer_positions
                state._variables = layout.variable_positions
                return state
        return cls(layout, memoryview(bytearray(layout.size)), buffer_addresses, variable_values)

    def _write(self, parameter: int, value: int, what: str) -> None:
        kind = self.layout.kinds[parameter]
        low, high = _RANGES[kind]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{what} must be an int in [{low}, {high}] ({kind.name}), got {value!r}")
        struct.pack_into(_FORMATS[kind], self.memory, self.layout.offsets[parameter], value)

    def _read(self, parameter: int) -> int:
        kind = self.layout.kinds[parameter]
        value: int = struct.unpack_from(_FORMATS[kind], self.memory, self.layout.offsets[parameter])[0]
        return value

    def update_buffer(self, index: int, address: int) -> None:
        """Writes the address of buffer parameter `index` (e.g. to relaunch on other buffers)."""
        self._write(self._pointers[index], address, f"buffer address {index}")

    def update_variable(self, index: int, value: int) -> None:
        """Writes the value of variable parameter `index`."""
        self._write(self._variables[index], value, f"variable value {index}")

    def parameter_values(self) -> tuple[int, ...]:
        """Every parameter as stored in the block, in parameter order (one unpack; what a kernel call takes)."""
        values: tuple[int, ...] = self.layout.packer.unpack_from(self.memory)
        return values

    @property
    def buffer_addresses(self) -> tuple[int, ...]:
        """The buffer addresses as stored in the block."""
        return tuple(self._read(parameter) for parameter in self._pointers)

    @property
    def variable_values(self) -> tuple[int, ...]:
        """The variable values as stored in the block."""
        return tuple(self._read(parameter) for parameter in self._variables)
