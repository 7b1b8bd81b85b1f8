"""The CPU device: compiled kernels on the host's cores, driven through a software hardware-command queue.

Memory is host memory (`HostAllocator`); the compute queue is a `ThreadQueueEngine` (one worker thread services the
submitted command lists in order, as a GPU's queue would), and a multi-core kernel (a THREAD axis, read as the
SPECIAL `core_id`) runs one call per core on a `CorePool`. Programs come from kiln.renderers' CPU renderers, each
owning its compiler; `CPU_RENDERER=<name>` picks another than the first.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from kiln.codegen import KernelSignature, Program, Renderer
from kiln.renderers import CoreLauncher, HostCompiler, core_launcher_for
from kiln.runtime.core_pool import CorePool, core_share
from kiln.runtime.device import find_renderers
from kiln.runtime.hcq import HCQCompiled
from kiln.runtime.hcq_runner import HCQProgramRunner
from kiln.runtime.host_allocator import HostAllocator
from kiln.runtime.knobs import cpu_native_launch, cpu_shares
from kiln.runtime.native_kernel import NativeKernel, check_parameters
from kiln.runtime.program_runner import ProgramRunner
from kiln.runtime.thread_engine import ThreadQueueEngine

__all__ = [
    "CPUDevice",
    "CPUProgramRunner",
    "HostKernelLoader",
    "cpu_renderer_classes",
]


@runtime_checkable
class HostKernelLoader(Protocol):
    """What a CPU renderer's compiler provides to run its binaries in this process (kiln.renderers' HostCompiler):
    loading one, for the program's signature."""

    def load(self, binary: bytes, signature: KernelSignature) -> Any:
        """The kernel of `binary`: a callable taking the kernel's arguments, with a `parameters` description."""
        ...


def cpu_renderer_classes() -> tuple[type[Renderer], ...]:
    """The CPU renderers, best first, as kiln.renderers orders them (its compile benchmark put LLVM IR first where
    llvmlite is installed, then C)."""
    return find_renderers("CPU")


class CPUProgramRunner(HCQProgramRunner):
    """A CPU program's binary loaded into the process by its renderer's compiler, launched on the CPU's queue."""

    device: CPUDevice

    def __init__(self, device: CPUDevice, program: Program) -> None:
        self.inline_work_limit = device.inline_multicore_limit if program.uses_core_id else device.inline_work_limit
        super().__init__(device, program, None)
        binary = self._binary("CPU programs must come from a renderer with a compiler")
        host_kernel = device.loader_for(program).load(binary, program.signature)
        self.takes_core_id = program.uses_core_id
        check_parameters(program.name, host_kernel.parameters, self.slots, self.variables, self.takes_core_id)
        self.host_kernel = host_kernel
        # the parameters were checked just above: launches call the loaded function itself when the loader offers
        # it (`HostKernel.function`), without the per-call argument count check
        self.kernel = NativeKernel(
            getattr(host_kernel, "function", host_kernel),
            self.takes_core_id,
            device.core_pool,
            getattr(host_kernel, "address", 0),  # the pool's native launcher calls the kernel at its address
            owner=host_kernel,  # the code lives as long as any launch command that can call it
        )


class CPUDevice(HCQCompiled):
    """The host CPU ("CPU"): host memory, a software queue, compiled kernels called through ctypes on every core."""

    renderer_family = "CPU"

    def __init__(self, name: str) -> None:
        shares = cpu_shares()
        suffix = name.partition(":")[2]
        self.index = int(suffix) if suffix.isdigit() else 0
        # CPU_SHARES=n splits the host's cores into n parts, CPU:i working on part i (mod n), so several CPU devices
        # run side by side like several GPUs would; unset, every CPU device uses every core
        self.cores = core_share(self.index, shares) if shares > 1 else None
        self.core_pool = CorePool(name, cores=self.cores, launcher=self._core_launcher)
        # Launches of at most this much estimated work (flops + bytes) run in the calling thread when the queue is
        # idle (HCQProgramRunner.inline_work_limit). Handing a launch to the queue's thread and waking the caller
        # again costs ~50 us on a 2-core VM: 64 Mi units (~0.3 ms of kernel, e.g. (1024, 1024) @ (1024, 16)) keep
        # that off mid-size ops a caller waits for, while longer kernels still run behind the caller's Python. With
        # CPU_SHARES the devices run side by side on their own cores, so only tiny launches (~10 us) run inline:
        # one caller thread running several devices' kernels would serialize them.
        self.inline_work_limit = 1 << 26 if shares == 1 else 1 << 16
        # A multi-core kernel keeps every core busy, the launching thread's too: run from the queue's thread, it
        # only adds the two handoffs, and the caller's Python then competes with it for the cores. So with one
        # device on all the cores, a multi-core launch on an idle queue always runs in the caller's thread (A/B on
        # the 2-core VM: sum of 16M 1.72-1.88 -> 1.64-1.70 ms, softmax (4096, 1024) 1.06-1.16 -> 1.00-1.04 ms).
        self.inline_multicore_limit = 1 << 62 if shares == 1 else self.inline_work_limit
        self.engine = ThreadQueueEngine(name)
        super().__init__(name, HostAllocator(name, synchronize=self.synchronize), self.engine)
        self.renderers = cpu_renderer_classes()
        self._loaders: dict[type, HostKernelLoader] = {}  # by the compiler class that built the binaries

    def _core_launcher(self) -> CoreLauncher | None:
        """The native core launcher the core pool uses (CPU_NATIVE_LAUNCH), built by the compiler of this device's
        renderer; None when the knob is off or that compiler has none."""
        if not cpu_native_launch():
            return None
        compiler = self.create_renderer(self.renderer_class).compiler
        return core_launcher_for(compiler) if isinstance(compiler, HostCompiler) else None

    def loader_for(self, program: Program) -> HostKernelLoader:
        """The compiler that loads `program`'s binary: the one its signature names (`CompilerIdentity`), made once
        per device and compiler class; the binary itself is not read."""
        identity = program.signature.compiler
        if identity is None:
            raise RuntimeError(f"CPU program {program.name!r} names no compiler: it was not compiled")
        compiler_class = identity.compiler
        loader = self._loaders.get(compiler_class)
        if loader is None:
            if not issubclass(compiler_class, HostKernelLoader):
                raise RuntimeError(
                    f"CPU program {program.name!r} was compiled by {compiler_class.__qualname__} ({identity.version}), "
                    "which cannot load kernels into this process (a HostCompiler of kiln.renderers can)"
                )
            self._loaders[compiler_class] = loader = compiler_class()
        return loader

    def load_program(self, program: Program) -> ProgramRunner:
        """Loads the program's binary with its renderer's compiler."""
        return CPUProgramRunner(self, program)
