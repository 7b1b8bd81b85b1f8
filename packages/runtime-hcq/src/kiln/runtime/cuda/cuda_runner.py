"""`CUDAProgramRunner`: a program's cubin or PTX loaded as a CUDA module and launched with `cuLaunchKernel`."""

from __future__ import annotations

import contextlib
import ctypes

from kiln.codegen import Program
from kiln.runtime.buffer import Buffer
from kiln.runtime.cuda.context import CUDAContext
from kiln.runtime.cuda.driver_api import CUDA_ERROR_NOT_FOUND, CUDAError, kernel_parameters
from kiln.runtime.kernel_args import HCQArgsState
from kiln.runtime.program_runner import Launch, ProgramRunner

__all__ = ["CUDAProgramRunner"]


class CUDAProgramRunner(ProgramRunner):
    """Loads the program's binary (`cuModuleLoadDataEx`: a cubin, or PTX the driver compiles) and launches it.

    Parameters are packed into one `arg_layout` block (pointers then ints, natural alignment) and passed as
    cuLaunchKernel's `kernelParams`, one pointer per parameter into that block (see `kernel_parameters`).
    Launches go to the legacy default stream, so they run in order with each other and with `cuMemcpy` copies.
    """

    device: CUDAContext

    def __init__(self, device: CUDAContext, program: Program) -> None:
        super().__init__(device, program)
        binary = self._binary(
            "a CUDA program must come from a renderer with a compiler (CUDA C through NVRTC, or PTX), not only source"
        )
        self.module: int | None = None
        device.make_current()
        self.module = device.api.load_module(binary, context=f"loading {program.name!r} on {device.name}")
        self.function = self._find_function(program)

    def _find_function(self, program: Program) -> int:
        """The kernel function: kiln.renderers' entry name (every C-family kernel has it), else the program's name."""
        from kiln.renderers import ENTRY_NAME  # lazily: the runtime imports its renderers only when used

        api, names = self.device.api, dict.fromkeys((ENTRY_NAME, program.name))
        for name in names:
            try:
                return api.get_handle("cuModuleGetFunction", self.module, name.encode(), context=f"kernel {name!r}")
            except CUDAError as error:
                if error.code != CUDA_ERROR_NOT_FOUND:
                    raise
        raise RuntimeError(f"program {program.name!r}: its CUDA module has no kernel named any of {list(names)}")

    def buffer_address(self, buffer: Buffer) -> int:
        """The buffer's CUdeviceptr."""
        return int(buffer.opaque)

    def pack_arguments(self, addresses: tuple[int, ...], values: tuple[int, ...]) -> bytearray:
        """The parameter block of one launch: the buffer addresses then the variable values, as `arg_layout` says."""
        block = bytearray(max(self.arg_layout.size, 8))
        HCQArgsState(self.arg_layout, memoryview(block), addresses, values)
        return block

    def _launch(self, launch: Launch) -> float | None:
        block = self.pack_arguments(launch.addresses, launch.values)
        parameters = (ctypes.c_char * len(block)).from_buffer(block)
        pointers = kernel_parameters(parameters, self.arg_layout.offsets)
        device, global_size, local_size = self.device, launch.global_size, launch.local_size
        device.make_current()
        timer = device.launch_timer() if launch.wait else None
        if timer is not None:
            timer.start()
        device.api.call(
            "cuLaunchKernel",
            self.function,
            *global_size,
            *local_size,
            0,
            None,
            pointers,
            None,
            context=f"{self.name} on {device.name}, grid {global_size}, block {local_size}",
        )
        return timer.stop() if timer is not None else None

    def __del__(self) -> None:
        module = getattr(self, "module", None)
        if module is not None:
            # At interpreter exit the driver may already be gone; a module leaked then is freed with the process.
            with contextlib.suppress(Exception):
                self.device.make_current()
                self.device.api.call("cuModuleUnload", module)
