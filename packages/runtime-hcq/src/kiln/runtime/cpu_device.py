"""The CPU device: compiled kernels on the host's cores, driven through a software hardware-command queue.

Memory is host memory (`HostAllocator`); the compute queue is a `ThreadQueueEngine` (one worker thread services the
submitted command lists in order, as a GPU's queue would), and a multi-core kernel (a THREAD axis, read as the
SPECIAL `core_id`) runs one call per core on a `CorePool`. Programs come from kiln.renderers' CPU renderers, each
owning its compiler; `CPU_RENDERER=<name>` picks another than the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from kiln.codegen import Program, Renderer
from kiln.runtime.core_pool import CorePool, core_share
from kiln.runtime.device import find_renderers
from kiln.runtime.hcq import HCQCompiled
from kiln.runtime.hcq_runner import HCQProgramRunner
from kiln.runtime.host_allocator import HostAllocator
from kiln.runtime.knobs import cpu_shares
from kiln.runtime.native_kernel import ELF_RELOCATABLE, ELF_SHARED_OBJECT, NativeKernel, check_parameters, elf_type
from kiln.runtime.program_runner import ProgramRunner
from kiln.runtime.thread_engine import ThreadQueueEngine
from kiln.uops import Ops, UOp

__all__ = [
    "CPU_RENDERER_NAMES",
    "LOADER_BY_ELF_TYPE",
    "CPUDevice",
    "CPUProgramRunner",
    "HostKernelLoader",
    "cpu_renderer_classes",
]

CPU_RENDERER_NAMES = ("LLVMRenderer", "CRenderer")
"""The CPU renderers of kiln.renderers by class name, used when it has no `cpu_renderers()` to ask."""

LOADER_BY_ELF_TYPE = {ELF_SHARED_OBJECT: "CRenderer", ELF_RELOCATABLE: "LLVMRenderer"}
"""Whose compiler loads a binary, by its ELF type: the C compilers link shared objects, llvmlite emits objects."""


@runtime_checkable
class HostKernelLoader(Protocol):
    """What a CPU renderer's compiler provides to run its binaries in this process (kiln.renderers' HostCompiler)."""

    def load(self, binary: bytes, uops: Sequence[UOp]) -> Any:
        """The kernel of `binary`: a callable taking the kernel's arguments, with a `parameters` description."""
        ...


def cpu_renderer_classes() -> tuple[type[Renderer], ...]:
    """The CPU renderers, best first, as kiln.renderers orders them (`cpu_renderers()`: its compile benchmark put
    LLVM IR first where llvmlite is installed, then C), else by CPU_RENDERER_NAMES."""
    import kiln.renderers as renderers_module  # lazily: the runtime imports its renderers only when a device opens

    order = getattr(renderers_module, "cpu_renderers", None)
    if callable(order):
        return tuple(order())
    return find_renderers(CPU_RENDERER_NAMES)


class CPUProgramRunner(HCQProgramRunner):
    """A CPU program's binary loaded into the process by its renderer's compiler, launched on the CPU's queue."""

    device: CPUDevice
    inline_work_limit = 1 << 16  # ~10 us of work or less: cheaper to run than to hand to the queue's thread

    def __init__(self, device: CPUDevice, program: Program) -> None:
        super().__init__(device, program, None)
        binary = program.binary
        if binary is None:
            raise RuntimeError(
                f"program {program.name!r} has no binary: CPU programs must come from a renderer with a compiler"
            )
        host_kernel = device.loader_for(binary, program.name).load(binary, program.uops)
        self.takes_core_id = any(uop.op is Ops.SPECIAL and uop.arg.name == "core_id" for uop in program.uops)
        check_parameters(program.name, host_kernel.parameters, self.slots, self.variables, self.takes_core_id)
        self.host_kernel = host_kernel
        self.kernel = NativeKernel(host_kernel, self.takes_core_id, device.core_pool)


class CPUDevice(HCQCompiled):
    """The host CPU ("CPU"): host memory, a software queue, compiled kernels called through ctypes on every core."""

    def __init__(self, name: str) -> None:
        self.engine = ThreadQueueEngine(name)
        super().__init__(name, HostAllocator(name, synchronize=self.synchronize), self.engine)
        shares = cpu_shares()
        suffix = name.partition(":")[2]
        self.index = int(suffix) if suffix.isdigit() else 0
        # CPU_SHARES=n splits the host's cores into n parts, CPU:i working on part i (mod n), so several CPU devices
        # run side by side like several GPUs would; unset, every CPU device uses every core
        self.cores = core_share(self.index, shares) if shares > 1 else None
        self.core_pool = CorePool(name, cores=self.cores)
        self.renderers = cpu_renderer_classes()
        self._loaders: dict[str, HostKernelLoader] = {}

    @property
    def renderer_class(self) -> type[Renderer]:
        """The renderer in use (see DeviceBase); a clear error when kiln.renderers has no CPU renderer."""
        if not self.renderers:
            raise RuntimeError(
                f"device {self.name!r} has no renderer: kiln.renderers provides none of {', '.join(CPU_RENDERER_NAMES)}"
            )
        return super().renderer_class

    def loader_for(self, binary: bytes, name: str) -> HostKernelLoader:
        """The compiler that loads `binary` (chosen by its ELF type, see LOADER_BY_ELF_TYPE)."""
        kind = elf_type(binary)
        wanted = LOADER_BY_ELF_TYPE.get(kind) if kind is not None else None
        if wanted is None:
            raise RuntimeError(
                f"CPU program {name!r}: its binary ({len(binary)} bytes starting {binary[:8]!r}) is neither an ELF "
                "shared object nor an ELF object file, which are what the CPU renderers produce"
            )
        loader = self._loaders.get(wanted)
        if loader is None:
            renderer_class = next((r for r in self.renderers if r.__name__ == wanted), None)
            if renderer_class is None:
                raise RuntimeError(f"CPU program {name!r}: its binary is loaded by {wanted}, which is not installed")
            compiler = self.create_renderer(renderer_class).compiler
            if not isinstance(compiler, HostKernelLoader):
                raise RuntimeError(
                    f"{wanted}'s compiler {type(compiler).__name__} cannot load kernels into the process"
                )
            self._loaders[wanted] = loader = compiler
        return loader

    def load_program(self, program: Program) -> ProgramRunner:
        """Loads the program's binary with its renderer's compiler."""
        return CPUProgramRunner(self, program)
