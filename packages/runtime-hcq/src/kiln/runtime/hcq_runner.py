"""`HCQProgramRunner`: launching a program on a queue-driven device (`HCQCompiled`) through its argument block."""

from __future__ import annotations

from collections.abc import Sequence

from kiln.codegen import Program
from kiln.runtime.buffer import Buffer
from kiln.runtime.hcq import HCQCompiled
from kiln.runtime.kernel_args import HCQArgsState
from kiln.runtime.program_runner import LaunchDims, ProgramRunner

__all__ = ["HCQProgramRunner"]


class HCQProgramRunner(ProgramRunner):
    """Launches by filling an argument block (`arg_layout`) and submitting one exec command on the device's timeline.

    `kernel_for(buffers)` is what the exec command runs: for software engines a callable
    `(args, global_size, local_size) -> None` (see `SoftwareKernel`). Buffer addresses are the `address` of each
    buffer's allocator handle (host memory: the host pointer).
    """

    device: HCQCompiled

    def __init__(self, device: HCQCompiled, program: Program, kernel: object) -> None:
        super().__init__(device, program)
        self.kernel = kernel

    def kernel_for(self, buffers: Sequence[Buffer]) -> object:
        """The object the exec command runs for this launch (the loaded kernel; subclasses may bind the buffers)."""
        return self.kernel

    def buffer_address(self, buffer: Buffer) -> int:
        """The address of the buffer's memory, from its allocator handle."""
        address: int = buffer.opaque.address
        return address

    def _launch(
        self,
        buffers: Sequence[Buffer],
        addresses: tuple[int, ...],
        values: tuple[int, ...],
        global_size: LaunchDims,
        local_size: LaunchDims,
        wait: bool,
    ) -> float | None:
        # A fresh block per launch: queued launches keep their own arguments until they run.
        args = HCQArgsState(self.arg_layout, memoryview(bytearray(self.arg_layout.size)), addresses, values)
        return self.device.execute(self.kernel_for(buffers), args, global_size, local_size, name=self.name, wait=wait)
