"""`CLProgramRunner`: a program's OpenCL binary reloaded on the CL device and launched with `clEnqueueNDRangeKernel`."""

from __future__ import annotations

import contextlib
import ctypes
import threading

from kiln.codegen import Program
from kiln.runtime.buffer import Buffer
from kiln.runtime.kernel_args import ArgKind
from kiln.runtime.opencl.cl_allocator import CLAllocator, CLMemory
from kiln.runtime.opencl.cl_context import CLContext
from kiln.runtime.program_runner import Launch, ProgramRunner

__all__ = ["CLProgramRunner"]


class CLProgramRunner(ProgramRunner):
    """Loads the program's binary (`clCreateProgramWithBinary`, then the build every OpenCL program needs) and
    launches its `kiln_kernel`.

    OpenCL counts work items, kiln counts blocks: the global work size is `global_size * local_size` per dimension.
    Buffers reach the kernel as `cl_mem` handles (views as sub-buffers), variables as int32/int64 values. Wide
    accesses are vloadN/vstoreN, which need only the element's alignment, so no address alignment is checked.
    """

    device: CLContext

    def __init__(self, device: CLContext, program: Program) -> None:
        super().__init__(device, program)
        from kiln.renderers import ENTRY_NAME  # lazily: the runtime imports its renderers only when used
        from kiln.renderers.opencl import build_program

        binary = self._binary("a CL program must come from the device's renderer, whose compiler builds it")
        library, target = device.library, device.target
        self.program_handle: int | None = None
        handle = ctypes.c_void_p(target.device)
        size = ctypes.c_size_t(len(binary))
        data = (ctypes.c_char_p * 1)(binary)
        self.program_handle = library.create(
            "clCreateProgramWithBinary",
            target.context,
            1,
            ctypes.byref(handle),
            ctypes.byref(size),
            data,
            None,
            what=f"loading {program.name!r} on {device.name}",
        )
        build_program(self.program_handle, target, f"building the binary of {program.name!r} on {device.name}")
        self.kernel = library.create("clCreateKernel", self.program_handle, ENTRY_NAME.encode(), what=program.name)
        self._slot_alignments = tuple((slot, 1) for slot in self.slots)
        self._argument_lock = threading.Lock()  # clSetKernelArg + enqueue must not interleave between threads
        self._variable_types = tuple(
            ctypes.c_int64 if kind is ArgKind.INT64 else ctypes.c_int32
            for kind in self.arg_layout.kinds[len(self.slots) :]
        )

    def buffer_address(self, buffer: Buffer) -> int:
        """The `cl_mem` handle the kernel receives for `buffer` (a sub-buffer for a view)."""
        memory = buffer.opaque
        assert isinstance(memory, CLMemory)
        allocator = buffer.allocator_in_use
        assert isinstance(allocator, CLAllocator)
        return allocator.kernel_handle(memory)

    def _launch(self, launch: Launch) -> float | None:
        _, addresses, values, global_size, local_size, wait = launch
        device = self.device
        library = device.library
        work_items = (ctypes.c_size_t * 3)(*(groups * threads for groups, threads in zip(global_size, local_size)))
        group = (ctypes.c_size_t * 3)(*local_size)
        event = ctypes.c_void_p()
        with self._argument_lock:
            for index, handle in enumerate(addresses):
                memory = ctypes.c_void_p(handle)
                library.call(
                    "clSetKernelArg", self.kernel, index, 8, ctypes.byref(memory), what=f"{self.name} arg {index}"
                )
            for offset, (value, value_type) in enumerate(zip(values, self._variable_types)):
                argument = value_type(value)
                index = len(addresses) + offset
                library.call(
                    "clSetKernelArg",
                    self.kernel,
                    index,
                    ctypes.sizeof(argument),
                    ctypes.byref(argument),
                    what=self.name,
                )
            library.call(
                "clEnqueueNDRangeKernel",
                device.queue,
                self.kernel,
                3,
                None,
                work_items,
                group,
                0,
                None,
                ctypes.byref(event),
                what=f"{self.name} on {device.name}, global {global_size}, local {local_size}",
            )
            value = device.timeline.record(event)
        if not wait:
            library.call("clFlush", device.queue)
            return None
        device.timeline.wait(value)
        return device.timeline.seconds(value)

    def __del__(self) -> None:
        # at interpreter exit the platform may already be gone; what leaks then is freed with the process
        with contextlib.suppress(Exception):
            library = self.device.library
            if getattr(self, "kernel", None):
                library.call("clReleaseKernel", self.kernel)
            if getattr(self, "program_handle", None):
                library.call("clReleaseProgram", self.program_handle)
