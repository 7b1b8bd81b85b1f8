"""`CLAllocator`: buffers (`cl_mem`) of one OpenCL device, copies in and out through its in-order queue."""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.renderers.opencl_library import (
    CL_BUFFER_CREATE_TYPE_REGION,
    CL_DEVICE_MEM_BASE_ADDR_ALIGN,
    CL_MEM_OBJECT_ALLOCATION_FAILURE,
    CL_MEM_READ_WRITE,
    CL_OUT_OF_HOST_MEMORY,
    CL_OUT_OF_RESOURCES,
    OpenCLError,
)
from kiln.runtime.allocator import Allocator, BufferSpec, LRUAllocator
from kiln.runtime.opencl.cl_context import CLContext

__all__ = ["CLAllocator", "CLMemory"]


@dataclass
class CLMemory:
    """A block of device memory: the `cl_mem` of its base allocation and a byte offset into it (views).

    A kernel takes a `cl_mem`, not an address: a view at a non-zero offset is passed as an OpenCL sub-buffer, made
    on its first launch (`kernel_handle`) and released when this object is collected.
    """

    base: int
    offset: int = 0
    size: int = 0
    sub_buffer: int | None = field(default=None, repr=False)


def _host_address(memory: memoryview) -> int:
    # numpy gives the address of read-only memory too (ctypes' from_buffer needs writable memory)
    address: int = np.frombuffer(memory, dtype=np.uint8).ctypes.data
    return address


class CLAllocator(LRUAllocator[CLMemory]):
    """Allocates `cl_mem` buffers of a CL device; copies are blocking reads/writes on its in-order queue, so they
    are ordered after every kernel already launched and the host memory may be reused as soon as they return."""

    def __init__(self, device: CLContext, name: str) -> None:
        super().__init__(name)
        self.cl_device = device

    def _alloc(self, size: int, options: BufferSpec) -> CLMemory:
        library = self.cl_device.library
        try:
            handle = library.create(
                "clCreateBuffer", self.cl_device.target.context, CL_MEM_READ_WRITE, size, None, what=f"{size} bytes"
            )
        except OpenCLError as error:
            if error.code in (CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY):
                raise MemoryError(str(error)) from error  # the LRU layer empties its cache and retries once
            raise
        return CLMemory(handle, 0, size)

    def _free(self, opaque: CLMemory, options: BufferSpec) -> None:
        self.cl_device.library.call("clReleaseMemObject", opaque.base, what=f"freeing on {self.device}")

    def _copyin(self, dest: CLMemory, src: memoryview) -> None:
        self._enqueue_copy("clEnqueueWriteBuffer", dest, src, f"copy of {src.nbytes} bytes to {self.device}")

    def _copyout(self, dest: memoryview, src: CLMemory) -> None:
        self._enqueue_copy("clEnqueueReadBuffer", src, dest, f"copy of {dest.nbytes} bytes from {self.device}")

    def _enqueue_copy(self, function: str, memory: CLMemory, host: memoryview, what: str) -> None:
        # clEnqueueWriteBuffer / clEnqueueReadBuffer (blocking) between `memory` and the host bytes of `host`,
        # recorded on the device's timeline
        device = self.cl_device
        event = ctypes.c_void_p()
        device.library.call(
            function,
            device.queue,
            memory.base,
            1,
            memory.offset,
            host.nbytes,
            _host_address(host),
            0,
            None,
            ctypes.byref(event),
            what=what,
        )
        device.timeline.record(event)

    def _offset(self, opaque: CLMemory, size: int, offset: int) -> CLMemory:
        return CLMemory(opaque.base, opaque.offset + offset, size)

    def kernel_handle(self, memory: CLMemory) -> int:
        """The `cl_mem` a kernel receives: the base buffer, or for a view a sub-buffer (made once per view)."""
        if memory.offset == 0:
            return memory.base
        if memory.sub_buffer is None:
            alignment = self.cl_device.target.info_int(CL_DEVICE_MEM_BASE_ADDR_ALIGN) // 8
            if memory.offset % alignment:
                raise ValueError(
                    f"{self.device}: a kernel cannot take a view at byte offset {memory.offset}: OpenCL sub-buffers "
                    f"must start at a multiple of {alignment} bytes (CL_DEVICE_MEM_BASE_ADDR_ALIGN); copy the view "
                    "into its own buffer first"
                )
            region = (ctypes.c_size_t * 2)(memory.offset, memory.size)
            library = self.cl_device.library
            memory.sub_buffer = library.create(
                "clCreateSubBuffer", memory.base, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, region
            )
            # released with the view (OpenCL keeps the base buffer alive while a sub-buffer of it exists)
            weakref.finalize(memory, library.call, "clReleaseMemObject", memory.sub_buffer)
        return memory.sub_buffer

    def supports_transfer_from(self, source: Allocator[Any]) -> bool:
        """Copies inside one CL device (`clEnqueueCopyBuffer`); other devices go through host memory."""
        return isinstance(source, CLAllocator) and source.cl_device is self.cl_device

    def _transfer(self, dest: CLMemory, src: object, size: int, source: Allocator[Any]) -> None:
        assert isinstance(src, CLMemory)
        device = self.cl_device
        event = ctypes.c_void_p()
        device.library.call(
            "clEnqueueCopyBuffer",
            device.queue,
            src.base,
            dest.base,
            src.offset,
            dest.offset,
            size,
            0,
            None,
            ctypes.byref(event),
            what=f"copy of {size} bytes on {self.device}",
        )
        device.timeline.record(event)
