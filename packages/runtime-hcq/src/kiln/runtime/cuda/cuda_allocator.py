"""`CUDAAllocator`: device memory of one CUDA GPU (`cuMemAlloc`), with copies to, from and between GPUs."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from kiln.runtime.allocator import Allocator, BufferSpec, LRUAllocator
from kiln.runtime.cuda.context import CUDAContext
from kiln.runtime.cuda.driver_api import CUDA_ERROR_OUT_OF_MEMORY, CUDAError

__all__ = ["CUDAAllocator"]


def _host_address(memory: memoryview) -> int:
    # numpy gives the address of read-only memory too (ctypes' from_buffer needs writable memory).
    address: int = np.frombuffer(memory, dtype=np.uint8).ctypes.data
    return address


class CUDAAllocator(LRUAllocator[int]):
    """Allocates device memory of a CUDA GPU; a handle is the `CUdeviceptr` (an int), sub-buffers are offsets of it.

    Copies to and from the host are synchronous `cuMemcpy` calls, which the driver orders after every kernel already
    launched on the device (kernels run on the legacy default stream), so no explicit synchronize is needed.
    """

    def __init__(self, device: CUDAContext, name: str) -> None:
        super().__init__(name)
        self.cuda_device = device

    def _alloc(self, size: int, options: BufferSpec) -> int:
        api = self.cuda_device.api
        self.cuda_device.make_current()
        pointer = ctypes.c_uint64()
        try:
            api.call("cuMemAlloc_v2", ctypes.byref(pointer), size, context=f"{size} bytes on {self.device}")
        except CUDAError as error:
            if error.code == CUDA_ERROR_OUT_OF_MEMORY:
                raise MemoryError(str(error)) from error  # the LRU layer empties its cache and retries once
            raise
        return pointer.value

    def _free(self, opaque: int, options: BufferSpec) -> None:
        self.cuda_device.make_current()
        self.cuda_device.api.call("cuMemFree_v2", opaque, context=f"{opaque:#x} on {self.device}")

    def _copyin(self, dest: int, src: memoryview) -> None:
        self.cuda_device.make_current()
        self.cuda_device.api.call("cuMemcpyHtoD_v2", dest, _host_address(src), src.nbytes, context=self.device)

    def _copyout(self, dest: memoryview, src: int) -> None:
        self.cuda_device.make_current()
        self.cuda_device.api.call("cuMemcpyDtoH_v2", _host_address(dest), src, dest.nbytes, context=self.device)

    def _offset(self, opaque: int, size: int, offset: int) -> int:
        return opaque + offset

    def supports_transfer_from(self, source: Allocator[Any]) -> bool:
        """Device-to-device copies between CUDA GPUs of this process (same GPU, or peer copies)."""
        return isinstance(source, CUDAAllocator)

    def _transfer(self, dest: int, src: object, size: int, source: Allocator[Any]) -> None:
        assert isinstance(source, CUDAAllocator) and isinstance(src, int)
        api = self.cuda_device.api
        self.cuda_device.make_current()
        if source.cuda_device is self.cuda_device:
            api.call("cuMemcpyDtoD_v2", dest, src, size, context=self.device)
        else:
            # cuMemcpyPeer is ordered after all pending work of both contexts (cuda.h), like a synchronous copy.
            api.call(
                "cuMemcpyPeer",
                dest,
                self.cuda_device.context,
                src,
                source.cuda_device.context,
                size,
                context=f"{source.device} -> {self.device}",
            )
