"""`Program`: the typed, read-only view of a PROGRAM uop that every layer above codegen uses; `retarget`."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping

from kiln.codegen.estimates import Estimates, Size
from kiln.codegen.kernel_info import KernelInfo, Opt
from kiln.codegen.kernel_signature import Access, KernelSignature, LaunchDims
from kiln.uops import Ops, PtrDType, UOp


class Program:
    """A compiled (or rendered) kernel: PROGRAM(SINK, DEVICE, LINEAR, SOURCE[, BINARY]) read through named fields.

    Build one from the PROGRAM uop `get_program` returns: `Program(get_program(sink, renderer))`.
    """

    __slots__ = ("__dict__", "uop")

    def __init__(self, uop: UOp) -> None:
        if not isinstance(uop, UOp) or uop.op is not Ops.PROGRAM:
            raise TypeError(f"Program needs a PROGRAM uop, got {uop!r}")
        if len(uop.src) < 4:
            stages = [s.op.name for s in uop.src]
            raise ValueError(f"Program needs a rendered PROGRAM (SINK, DEVICE, LINEAR, SOURCE), got stages {stages}")
        self.uop = uop

    def __repr__(self) -> str:
        return f"<Program {self.name!r} on {self.device}>"

    @property
    def sink(self) -> UOp:
        """The optimized kernel sink the program was lowered from."""
        return self.uop.src[0]

    @property
    def info(self) -> KernelInfo:
        """The kernel's KernelInfo (name, applied opts)."""
        arg = self.sink.arg
        return arg if isinstance(arg, KernelInfo) else KernelInfo()

    @property
    def name(self) -> str:
        """The kernel's function name."""
        return self.info.name

    @functools.cached_property
    def trace_key(self) -> str:
        """The kernel's identity across layers: its name and a hash of its source (kernels of one loop shape share a
        name); the viz trace and the runtime's profile events both carry it."""
        return f"{self.name}-{hashlib.sha1(self.source.encode()).hexdigest()[:10]}"

    @property
    def device(self) -> str:
        """The device the program is built for, e.g. "CUDA:1"."""
        device: str = self.uop.src[1].arg
        return device

    @property
    def uops(self) -> tuple[UOp, ...]:
        """The linear program (linear program format)."""
        return self.uop.src[2].src

    @property
    def linear(self) -> tuple[UOp, ...]:
        """The LINEAR the program was rendered from (the same uops as `uops`): what an interpreting device runs."""
        return self.uop.src[2].src

    @property
    def signature(self) -> KernelSignature:
        """The kernel's interface (parameters in call order, launch dimensions, compiler), as codegen built it."""
        signature = self.uop.arg
        if not isinstance(signature, KernelSignature):
            raise ValueError(
                f"PROGRAM {self.name!r} has no KernelSignature (its arg is {signature!r}): build it with get_program"
            )
        return signature

    @property
    def buffer_alignments(self) -> dict[int, int]:
        """The byte alignment each buffer slot needs (only slots read or written with wide vector accesses, which
        assume the buffer starts at a multiple of their width); a runtime checks buffer addresses against it."""
        return {buffer.slot: buffer.alignment for buffer in self.signature.buffers if buffer.alignment > 1}

    @property
    def uses_core_id(self) -> bool:
        """Whether the kernel reads the CPU core index (SPECIAL core_id): it then takes that index as a last
        argument and runs once per core."""
        return self.signature.core_id

    @property
    def source(self) -> str:
        """The rendered source."""
        source: str = self.uop.src[3].arg
        return source

    @property
    def binary(self) -> bytes | None:
        """The compiled binary (None when the renderer has no compiler: the source is the program)."""
        return self.uop.src[4].arg if len(self.uop.src) > 4 else None

    @property
    def applied_opts(self) -> tuple[Opt, ...]:
        """The optimizations applied to the kernel."""
        return self.info.applied_opts

    @property
    def global_size(self) -> tuple[Size, Size, Size]:
        """Blocks per dimension (gidx0..2); for CPU THREAD kernels (core_id) the thread count in dimension 0."""
        return self.signature.global_size

    @property
    def local_size(self) -> tuple[Size, Size, Size] | None:
        """Threads per block per dimension (lidx0..2); None for programs without local indices."""
        return self.signature.local_size

    def launch_dims(self, var_vals: Mapping[str, int] | None = None) -> tuple[LaunchDims, LaunchDims]:
        """(global size, local size) as ints for concrete variable values (local is (1, 1, 1) without locals)."""
        return self.signature.launch_dims(var_vals)

    @functools.cached_property
    def variables(self) -> tuple[UOp, ...]:
        """The DEFINE_VAR parameters, sorted by name (the order runtimes pass their values in)."""
        return tuple(variable.uop for variable in self.signature.variables)

    @functools.cached_property
    def globals(self) -> tuple[int, ...]:
        """The buffer parameter slots (DEFINE_GLOBAL args), ascending."""
        return self.signature.slots

    @functools.cached_property
    def buffer_dtypes(self) -> dict[int, PtrDType]:
        """The pointer dtype of each buffer slot."""
        return {buffer.slot: buffer.dtype for buffer in self.signature.buffers}

    @functools.cached_property
    def outs(self) -> tuple[int, ...]:
        """Buffer slots the program stores to."""
        return self.signature.slots_with(Access.WRITE)

    @functools.cached_property
    def ins(self) -> tuple[int, ...]:
        """Buffer slots the program loads from."""
        return self.signature.slots_with(Access.READ)

    @functools.cached_property
    def estimates(self) -> Estimates:
        """Flops and memory traffic of one run (symbolic over `variables` where the shape is)."""
        return Estimates.from_uops(list(self.uops))


def retarget(program: Program, device: str) -> Program:
    """The same program for another device of the same kind (e.g. "CUDA:0" -> "CUDA:1"); the binary is reused."""
    kind, new_kind = program.device.split(":", 1)[0], device.split(":", 1)[0]
    if not device or kind != new_kind:
        raise ValueError(f"can only retarget to a device of kind {kind!r}, got {device!r}")
    return Program(program.uop.replace(src=(program.uop.src[0], UOp(Ops.DEVICE, arg=device), *program.uop.src[2:])))
