"""`WebGPUAllocator`: storage buffers of the WebGPU device, copies in and out through its queue.

WebGPU moves data in multiples of 4 bytes at offsets that are multiples of 4 (`writeBuffer`, buffer-to-buffer
copies). Buffers are allocated rounded up to 4 bytes, so an aligned copy is one queue command; a copy to or from a
view at an odd offset or of an odd size reads the 4-byte-aligned window around it, patches its part and writes the
window back (bool buffers hold one byte per element, so such views are ordinary).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.renderers.webgpu_library import load_wgpu
from kiln.runtime.allocator import Allocator, BufferSpec, LRUAllocator
from kiln.runtime.webgpu.webgpu_context import WebGPUContext

__all__ = ["WebGPUAllocator", "WebGPUMemory"]

COPY_ALIGNMENT = 4
"""Bytes WebGPU copies are counted and placed in."""


def align_down(value: int) -> int:
    """`value` rounded down to COPY_ALIGNMENT."""
    return value - value % COPY_ALIGNMENT


def align_up(value: int) -> int:
    """`value` rounded up to COPY_ALIGNMENT."""
    return -(-value // COPY_ALIGNMENT) * COPY_ALIGNMENT


@dataclass
class WebGPUMemory:
    """A block of device memory: the GPUBuffer of its allocation, a byte offset into it (views) and its size."""

    buffer: Any
    offset: int = 0
    size: int = 0


class WebGPUAllocator(LRUAllocator[WebGPUMemory]):
    """Allocates storage buffers (usable as copy source and destination) of the WEBGPU device.

    Copies in go through `queue.write_buffer`, which takes a copy of the host bytes at once, so the host memory may
    be reused when it returns; copies out (`queue.read_buffer`) wait for every earlier submission.
    """

    def __init__(self, device: WebGPUContext, name: str) -> None:
        super().__init__(name)
        self.webgpu_device = device
        # every allocated GPUBuffer, until `_free`: the allocator (reachable from the device registry) keeps it
        # reachable, so the garbage collector never finalizes (releases) a GPUBuffer whose kiln Buffer died in a
        # reference cycle while that Buffer's __del__ hands the block to the LRU cache for reuse
        self._allocated: dict[int, Any] = {}

    def _alloc(self, size: int, options: BufferSpec) -> WebGPUMemory:
        target = self.webgpu_device.target
        padded = max(align_up(size), COPY_ALIGNMENT)
        limit = target.limits.get("max-buffer-size", 1 << 28)
        if padded > limit:
            raise MemoryError(f"{self.device}: {size} bytes exceed the adapter's max-buffer-size of {limit} bytes")
        usage = load_wgpu().BufferUsage
        buffer = target.device.create_buffer(size=padded, usage=usage.STORAGE | usage.COPY_SRC | usage.COPY_DST)
        self._allocated[id(buffer)] = buffer
        return WebGPUMemory(buffer, 0, size)

    def _free(self, opaque: WebGPUMemory, options: BufferSpec) -> None:
        """Drops the allocator's reference: wgpu releases the buffer with its last one, so a submission still in
        flight never sees it destroyed (no explicit destroy())."""
        self._allocated.pop(id(opaque.buffer), None)

    def _window(self, memory: WebGPUMemory, size: int) -> tuple[int, int]:
        start = align_down(memory.offset)
        return start, align_up(memory.offset + size) - start

    def _copyin(self, dest: WebGPUMemory, src: memoryview) -> None:
        data = np.frombuffer(src, dtype=np.uint8)
        if data.size == 0:
            return
        queue = self.webgpu_device.target.device.queue
        start, length = self._window(dest, data.size)
        if start == dest.offset and length == data.size:
            queue.write_buffer(dest.buffer, start, data)
            return
        window = np.frombuffer(self._read(dest.buffer, start, length), dtype=np.uint8).copy()
        window[dest.offset - start : dest.offset - start + data.size] = data
        queue.write_buffer(dest.buffer, start, window)

    def _read(self, buffer: Any, start: int, length: int) -> memoryview:
        timeline = self.webgpu_device.timeline
        covered = timeline.value_enqueued
        result: memoryview = self.webgpu_device.target.device.queue.read_buffer(buffer, start, length)
        timeline.mark_reached(covered)  # a read back waits for every earlier submission
        return result

    def _copyout(self, dest: memoryview, src: WebGPUMemory) -> None:
        out = np.frombuffer(dest, dtype=np.uint8)
        if out.size == 0:
            return
        start, length = self._window(src, out.size)
        window = np.frombuffer(self._read(src.buffer, start, length), dtype=np.uint8)
        out[:] = window[src.offset - start : src.offset - start + out.size]

    def _offset(self, opaque: WebGPUMemory, size: int, offset: int) -> WebGPUMemory:
        return WebGPUMemory(opaque.buffer, opaque.offset + offset, size)

    def supports_transfer_from(self, source: Allocator[Any]) -> bool:
        """Copies inside the device (a buffer-to-buffer copy); other devices go through host memory."""
        return isinstance(source, WebGPUAllocator) and source.webgpu_device is self.webgpu_device

    def _transfer(self, dest: WebGPUMemory, src: object, size: int, source: Allocator[Any]) -> None:
        assert isinstance(src, WebGPUMemory)
        if size == 0:
            return
        if src.offset % COPY_ALIGNMENT or dest.offset % COPY_ALIGNMENT or size % COPY_ALIGNMENT:
            staged = bytearray(size)  # WebGPU copies only whole aligned words: through the host
            self._copyout(memoryview(staged), WebGPUMemory(src.buffer, src.offset, size))
            self._copyin(dest, memoryview(staged))
            return
        device = self.webgpu_device.target.device
        encoder = device.create_command_encoder()
        encoder.copy_buffer_to_buffer(src.buffer, src.offset, dest.buffer, dest.offset, size)
        self.webgpu_device.timeline.submit([encoder.finish()])
