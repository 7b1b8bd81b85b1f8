"""`Program`: the typed, read-only view of a PROGRAM uop that every layer above codegen uses; `retarget`."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping

from kiln.codegen.estimates import Estimates, Size, size_value
from kiln.codegen.kernel_info import KernelInfo, Opt
from kiln.uops import Ops, PtrDType, UOp, sym_infer

LaunchDims = tuple[int, int, int]


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

    @functools.cached_property
    def buffer_alignments(self) -> dict[int, int]:
        """The byte alignment each buffer slot needs (only slots read or written with wide vector accesses, which
        assume the buffer starts at a multiple of their width); a runtime checks buffer addresses against it."""
        needed: dict[int, int] = {}
        for uop in self.uops:
            if uop.op is not Ops.INDEX or not isinstance(uop.dtype, PtrDType) or uop.dtype.base.count == 1:
                continue
            root = uop.src[0]
            while root.op in (Ops.AFTER, Ops.INDEX):
                root = root.src[0]
            if root.op is Ops.DEFINE_GLOBAL:
                needed[root.arg] = max(needed.get(root.arg, 1), uop.dtype.base.nbytes)
        return needed

    @functools.cached_property
    def uses_core_id(self) -> bool:
        """Whether the kernel reads the CPU core index (SPECIAL core_id): it then takes that index as a last
        argument and runs once per core."""
        return "core_id" in self._specials

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

    @functools.cached_property
    def _specials(self) -> dict[str, Size]:
        return {u.arg.name: size_value(u.src[0]) for u in self.uops if u.op is Ops.SPECIAL}

    @property
    def global_size(self) -> tuple[Size, Size, Size]:
        """Blocks per dimension (gidx0..2); for CPU THREAD kernels (core_id) the thread count in dimension 0."""
        specials = self._specials
        if "core_id" in specials:
            return (specials["core_id"], 1, 1)
        dims = [specials.get(f"gidx{d}", 1) for d in range(3)]
        return (dims[0], dims[1], dims[2])

    @property
    def local_size(self) -> tuple[Size, Size, Size] | None:
        """Threads per block per dimension (lidx0..2); None for programs without local indices."""
        specials = self._specials
        if not any(name.startswith("lidx") for name in specials):
            return None
        dims = [specials.get(f"lidx{d}", 1) for d in range(3)]
        return (dims[0], dims[1], dims[2])

    def launch_dims(self, var_vals: Mapping[str, int] | None = None) -> tuple[LaunchDims, LaunchDims]:
        """(global size, local size) as ints for concrete variable values (local is (1, 1, 1) without locals)."""
        values = var_vals or {}
        global_dims = tuple(sym_infer(size, values) for size in self.global_size)
        local_dims = tuple(sym_infer(size, values) for size in self.local_size or (1, 1, 1))
        return (global_dims[0], global_dims[1], global_dims[2]), (local_dims[0], local_dims[1], local_dims[2])

    @functools.cached_property
    def variables(self) -> tuple[UOp, ...]:
        """The DEFINE_VAR parameters, sorted by name (the order runtimes pass their values in)."""
        return tuple(sorted((u for u in self.uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg.name))

    @functools.cached_property
    def globals(self) -> tuple[int, ...]:
        """The buffer parameter slots (DEFINE_GLOBAL args), ascending."""
        return tuple(sorted(u.arg for u in self.uops if u.op is Ops.DEFINE_GLOBAL))

    @functools.cached_property
    def buffer_dtypes(self) -> dict[int, PtrDType]:
        """The pointer dtype of each buffer slot."""
        found: dict[int, PtrDType] = {}
        for uop in self.uops:
            if uop.op is Ops.DEFINE_GLOBAL and isinstance(uop.dtype, PtrDType):
                found[uop.arg] = uop.dtype
        return found

    def _accessed(self, op: Ops) -> tuple[int, ...]:
        slots = set()
        for uop in self.uops:
            if uop.op is op:
                pointer = uop.src[0].src[0]
                while pointer.op is Ops.AFTER:
                    pointer = pointer.src[0]
                if pointer.op is Ops.DEFINE_GLOBAL:
                    slots.add(pointer.arg)
        return tuple(sorted(slots))

    @functools.cached_property
    def outs(self) -> tuple[int, ...]:
        """Buffer slots the program stores to."""
        return self._accessed(Ops.STORE)

    @functools.cached_property
    def ins(self) -> tuple[int, ...]:
        """Buffer slots the program loads from."""
        return self._accessed(Ops.LOAD)

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
