"""Native CPU kernels: compiled code in this process, called once per launch (or once per core) by the CPU queue.

The renderers own the binary format and its loading (kiln.renderers' `HostCompiler.load` returns a `HostKernel`:
a ctypes call taking the buffer pointers in slot order, the variables sorted by name, then `core_id` for a
multi-core kernel). This module turns such a kernel into an exec command of the CPU device's software queue: it
reads the launch's argument block and calls the kernel, in parallel over a `CorePool` when it takes a core id.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kiln.codegen import CORE_ID
from kiln.runtime.core_pool import CorePool
from kiln.runtime.kernel_args import ArgKind, HCQArgsState
from kiln.runtime.program_runner import VariableSpec

__all__ = ["NativeKernel", "check_parameters"]

LaunchSize = tuple[int, int, int]


_KINDS_OF_CTYPES: dict[object, ArgKind] = {
    ctypes.c_void_p: ArgKind.POINTER,
    ctypes.c_int32: ArgKind.INT32,
    ctypes.c_int64: ArgKind.INT64,
}


def check_parameters(
    name: str, parameters: Sequence[object], slots: Sequence[int], variables: Sequence[VariableSpec], core_id: bool
) -> None:
    """Raises RuntimeError unless a loaded kernel's parameters (HostKernel.parameters: kind, name, ctype) are what
    the runtime passes: one pointer per used buffer slot, the variables in order with their widths, then core_id."""
    expected = [("buffer", str(slot), ArgKind.POINTER) for slot in slots]
    expected += [("variable", variable.name, variable.kind) for variable in variables]
    expected += [(CORE_ID, CORE_ID, ArgKind.INT32)] if core_id else []
    found = [
        (getattr(p, "kind", None), getattr(p, "name", None), _KINDS_OF_CTYPES.get(getattr(p, "ctype", None)))
        for p in parameters
    ]
    if found != expected:
        raise RuntimeError(
            f"CPU program {name!r}: the loaded kernel takes {found}, but the runtime passes {expected} "
            "(the renderer's calling convention and the Program disagree)"
        )


@dataclass(eq=False)  # an exec command: compared and hashed by identity
class NativeKernel:
    """A loaded CPU kernel as an exec command: reads the argument block, calls the kernel once or once per core.

    Attributes:
        kernel: the loaded kernel, called with the buffer addresses, the variable values and (if `takes_core_id`)
            the core number.
        takes_core_id: whether the kernel is a multi-core one; a launch then runs `global_size[0]` cores.
        pool: the threads that run the cores of a multi-core launch.
        address: the kernel's address, for the pool's native launcher (0: call `kernel` from Python).
        owner: what keeps the kernel's code mapped (the loaded `HostKernel`, which holds the execution engine or
            library). An exec command holds only this object, and may still be queued, or running on another
            thread, when the runner that loaded the code is dropped (an evicted or duplicate runner of a program
            two threads loaded at once): without the owner here, the next load disposed the engine and reused its
            memory for another kernel's code, so the queued launch ran that code or faulted.
    """

    kernel: Callable[..., None]
    takes_core_id: bool
    pool: CorePool
    address: int = 0
    owner: object = None

    @property
    def direct_entry(self) -> Callable[..., None] | None:
        """What a launch may call at once with the buffer addresses alone (`HCQCompiled.launch_direct`): the loaded
        kernel when it runs on one core, else None (a multi-core launch goes through the pool)."""
        return None if self.takes_core_id else self.kernel

    def __call__(self, args: HCQArgsState, global_size: LaunchSize, local_size: LaunchSize) -> None:
        # the kernel takes the pointers, then the variables: the block's own order when pointers come first
        layout = args.layout
        if layout.pointers_first:
            arguments = layout.packer.unpack_from(args.memory)  # `parameter_values()`, one call less per launch
        else:
            arguments = (*args.buffer_addresses, *args.variable_values)
        kernel = self.kernel
        if not self.takes_core_id:
            kernel(*arguments)
            return
        # A multi-core launch has its core count as global_size[0] (codegen's Program.global_size); with the kernel's
        # address the pool may run the cores natively (CorePool.run_kernel)
        if self.address:
            self.pool.run_kernel(self.address, kernel, arguments, global_size[0])
        else:
            self.pool.run(lambda core: kernel(*arguments, core), global_size[0])
