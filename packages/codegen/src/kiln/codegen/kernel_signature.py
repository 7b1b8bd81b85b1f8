"""`KernelSignature`: a kernel's interface, worked out once by codegen and stored as the PROGRAM uop's arg.

What a kernel takes and how it is launched, as the linear program declares it:

- `buffers`: one `BufferParameter` per DEFINE_GLOBAL, by ascending slot: its pointer dtype, the byte alignment its
  wide vector accesses assume, and whether the kernel reads it, writes it or both;
- `variables`: one `VariableParameter` per DEFINE_VAR, sorted by name (the order every runtime passes values in),
  with its dtype and inclusive range;
- `core_id`: whether the kernel reads SPECIAL `CORE_ID` (THREAD axes of a CPU kernel): it then takes the core index
  as its last parameter and runs once per core, `global_size[0]` cores;
- `global_size` / `local_size`: the launch dimensions (ints, or index expressions over the variables);
- `compiler`: the `CompilerIdentity` of the compiler that built the binary (None before the compile stage and for
  programs whose source is the program).

The lifecycle (`kiln.codegen.lifecycle`) builds it when it linearizes and adds the compiler when it compiles;
`Program.signature` reads it. Renderers print their parameter lists from it, runtimes lay out arguments and pick the
loader of a binary by it, and the tensor engine maps buffers to slots by it: nobody scans the uops for it again.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from kiln.codegen.estimates import Size, size_value
from kiln.uops import DType, Ops, PtrDType, UOp, VarArg, sym_infer

if TYPE_CHECKING:
    from kiln.codegen.compiler import Compiler

__all__ = [
    "CORE_ID",
    "Access",
    "BufferParameter",
    "CompilerIdentity",
    "KernelSignature",
    "LaunchDims",
    "VariableParameter",
]

CORE_ID: Final = "core_id"
"""The SPECIAL name of a CPU kernel's core index (a THREAD axis), and the name of the parameter that carries it."""

LaunchDims = tuple[int, int, int]


class Access(enum.Flag):
    """How a kernel uses a buffer: READ (it loads from it), WRITE (it stores to it), both, or NONE."""

    NONE = 0
    READ = enum.auto()
    WRITE = enum.auto()
    READ_WRITE = READ | WRITE


@dataclass(frozen=True)
class BufferParameter:
    """One buffer parameter: its `slot` (the DEFINE_GLOBAL's arg), pointer `dtype`, the byte `alignment` its
    start needs (1 unless wide vector accesses assume more) and its `access`."""

    slot: int
    dtype: PtrDType
    alignment: int
    access: Access

    @property
    def uop(self) -> UOp:
        """The DEFINE_GLOBAL uop of this buffer (hash-consed: the very node of the linear program)."""
        return UOp(Ops.DEFINE_GLOBAL, self.dtype, arg=self.slot)


@dataclass(frozen=True)
class VariableParameter:
    """One integer parameter (a DEFINE_VAR): `name`, `dtype` (int32 or int64) and inclusive range `low..high`."""

    name: str
    dtype: DType
    low: int
    high: int

    @property
    def uop(self) -> UOp:
        """The DEFINE_VAR uop of this variable (hash-consed: the very node of the linear program)."""
        return UOp(Ops.DEFINE_VAR, self.dtype, arg=VarArg(self.name, self.low, self.high))


@dataclass(frozen=True)
class CompilerIdentity:
    """Which compiler built a binary: its class (what a runtime loads the binary with, e.g. a HostCompiler's `load`)
    and its `version` (`Compiler.identity`: toolchain name and version, the disk cache's key)."""

    compiler: type[Compiler]
    version: str

    @classmethod
    def of(cls, compiler: Compiler) -> CompilerIdentity:
        """The identity of `compiler`."""
        return cls(type(compiler), compiler.identity or type(compiler).__qualname__)


@dataclass(frozen=True)
class KernelSignature:
    """A kernel's interface: its parameters in call order, its launch dimensions and the compiler of its binary.

    Build one with `KernelSignature.of(linear_uops)`; see the module docstring for each field.
    """

    buffers: tuple[BufferParameter, ...]
    variables: tuple[VariableParameter, ...]
    core_id: bool
    global_size: tuple[Size, Size, Size]
    local_size: tuple[Size, Size, Size] | None
    compiler: CompilerIdentity | None = None

    @classmethod
    def of(cls, uops: Sequence[UOp]) -> KernelSignature:
        """The signature of linear program `uops` (no compiler yet)."""
        dtypes: dict[int, PtrDType] = {}
        variables: dict[str, VariableParameter] = {}
        specials: dict[str, Size] = {}
        alignments: dict[int, int] = {}
        access: dict[int, Access] = {}
        for uop in uops:
            if uop.op is Ops.DEFINE_GLOBAL:
                if not isinstance(uop.dtype, PtrDType):
                    raise TypeError(f"DEFINE_GLOBAL {uop.arg} must have a pointer dtype, got {uop.dtype!r}")
                dtypes[uop.arg] = uop.dtype
            elif uop.op is Ops.DEFINE_VAR:
                variables[uop.arg.name] = VariableParameter(uop.arg.name, uop.dtype, uop.arg.lo, uop.arg.hi)
            elif uop.op is Ops.SPECIAL:
                specials[uop.arg.name] = size_value(uop.src[0])
            elif uop.op is Ops.INDEX and isinstance(uop.dtype, PtrDType) and uop.dtype.base.count > 1:
                # a wide vector access assumes its buffer starts at a multiple of its width
                slot = _slot_of(uop.src[0], through=(Ops.AFTER, Ops.INDEX))
                if slot is not None:
                    alignments[slot] = max(alignments.get(slot, 1), uop.dtype.base.nbytes)
            elif uop.op in (Ops.LOAD, Ops.STORE):
                slot = _slot_of(uop.src[0], through=(Ops.AFTER, Ops.INDEX))
                if slot is not None:
                    access[slot] = access.get(slot, Access.NONE) | (Access.READ if uop.op is Ops.LOAD else Access.WRITE)
        buffers = tuple(
            BufferParameter(slot, dtypes[slot], alignments.get(slot, 1), access.get(slot, Access.NONE))
            for slot in sorted(dtypes)
        )
        if CORE_ID in specials:
            global_size: tuple[Size, Size, Size] = (specials[CORE_ID], 1, 1)
        else:
            global_size = (specials.get("gidx0", 1), specials.get("gidx1", 1), specials.get("gidx2", 1))
        local_size: tuple[Size, Size, Size] | None = None
        if any(name.startswith("lidx") for name in specials):
            local_size = (specials.get("lidx0", 1), specials.get("lidx1", 1), specials.get("lidx2", 1))
        ordered = tuple(variables[name] for name in sorted(variables))
        return cls(buffers, ordered, CORE_ID in specials, global_size, local_size)

    def compiled_by(self, compiler: Compiler) -> KernelSignature:
        """This signature with the identity of the compiler that built the binary."""
        return KernelSignature(
            self.buffers, self.variables, self.core_id, self.global_size, self.local_size, CompilerIdentity.of(compiler)
        )

    @property
    def slots(self) -> tuple[int, ...]:
        """The buffer slots the kernel takes, ascending (a slot codegen proved unused has no parameter)."""
        return tuple(buffer.slot for buffer in self.buffers)

    @property
    def slot_count(self) -> int:
        """How many buffers a launch passes: slots 0..the last parameter's (0 without buffers)."""
        return self.buffers[-1].slot + 1 if self.buffers else 0

    def buffer(self, slot: int) -> BufferParameter:
        """The parameter of buffer `slot`; KeyError naming the slots the kernel has when it has no such one."""
        for buffer in self.buffers:
            if buffer.slot == slot:
                return buffer
        raise KeyError(f"the kernel has no buffer slot {slot}; its slots are {list(self.slots)}")

    def slots_with(self, access: Access) -> tuple[int, ...]:
        """The slots whose access includes `access` (e.g. Access.WRITE: the buffers the kernel stores to)."""
        return tuple(buffer.slot for buffer in self.buffers if access in buffer.access)

    def launch_dims(self, var_vals: Mapping[str, int] | None = None) -> tuple[LaunchDims, LaunchDims]:
        """(global size, local size) as ints for concrete variable values (local is (1, 1, 1) without locals)."""
        values = var_vals or {}
        global_dims = _ints(self.global_size, values)
        local_dims = _ints(self.local_size or (1, 1, 1), values)
        return global_dims, local_dims

    def largest_var_vals(self) -> dict[str, int]:
        """Every variable at the top of its range (what a worst-case launch or estimate uses)."""
        return {variable.name: variable.high for variable in self.variables}


def _slot_of(pointer: UOp, through: tuple[Ops, ...]) -> int | None:
    while pointer.op in through:
        pointer = pointer.src[0]
    return pointer.arg if pointer.op is Ops.DEFINE_GLOBAL else None


def _ints(sizes: Iterable[Size], values: Mapping[str, int]) -> LaunchDims:
    first, second, third = (sym_infer(size, values) for size in sizes)
    return (first, second, third)
