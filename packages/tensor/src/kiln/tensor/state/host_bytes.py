"""Tensors made straight from raw little-endian bytes (a slice of a memory-mapped file) and back.

On a device whose memory is host memory (CPU, PYTHON: `HostAllocator`), `tensor_from_mapping` makes the buffer
alias the file mapping itself (no copy; the mapping is copy-on-write, so writes never reach the file). Elsewhere,
or when the data is not 64-byte aligned, the mapped pages are copied once into the device buffer
(`Buffer.copyin`). No numpy array is built in between, so bfloat16 / fp8 data loads bit-exactly.
"""

from __future__ import annotations

import math
import mmap
import sys
from collections.abc import Sequence

import numpy as np

from kiln.runtime import Buffer, Device, HostAllocator
from kiln.tensor import graph
from kiln.tensor.device import canonical_device
from kiln.tensor.realize.buffers import attach_buffer
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes

__all__ = ["tensor_bytes", "tensor_from_bytes", "tensor_from_mapping"]

if sys.byteorder != "little":  # every format read here stores little-endian data
    raise ImportError("kiln.tensor.state reads little-endian checkpoint data and needs a little-endian host")

# a buffer aliasing file data must be aligned for the widest vector access a kernel may make (the program runner
# refuses a buffer not aligned to its kernel's access width)
ALIAS_ALIGNMENT = 64

# an unsigned int of each item size, to move bits of dtypes numpy lacks (bfloat16, fp8) through numpy unchanged
_BITS_OF_SIZE: dict[int, DType] = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def tensor_from_bytes(data: memoryview, dtype: DType, shape: Sequence[int], device: str | None = None) -> Tensor:
    """A realized Tensor of `shape` and `dtype` whose row-major elements are the bytes `data` (exactly numel * size)."""
    count = math.prod(shape)
    if data.nbytes != count * dtype.itemsize:
        raise ValueError(f"{data.nbytes} bytes cannot hold {count} elements of {dtype!r} (shape {tuple(shape)})")
    node = graph.buffer_uop(canonical_device(device), count, dtype)
    buffer = Buffer(node.arg.device, count, dtype)
    buffer.copyin(data if count else b"")
    attach_buffer(node, buffer)
    return Tensor._from_uop(graph.reshape(node, tuple(shape)))


def tensor_from_mapping(
    mapping: mmap.mmap, offset: int, dtype: DType, shape: Sequence[int], device: str | None = None
) -> Tensor:
    """A realized Tensor over bytes `offset`.. of a writable (ACCESS_COPY) file mapping: aliased where the device
    memory is host memory and the data starts ALIAS_ALIGNMENT-aligned, else copied once."""
    count, target = math.prod(shape), canonical_device(device)
    nbytes = count * dtype.itemsize
    allocator = Device[target].allocator
    if count and isinstance(allocator, HostAllocator):
        memory = allocator.adopt(mapping, offset, nbytes)
        if memory.address % ALIAS_ALIGNMENT == 0:
            node = graph.buffer_uop(target, count, dtype)
            attach_buffer(node, Buffer(target, count, dtype).attach(memory))
            return Tensor._from_uop(graph.reshape(node, tuple(shape)))
    with memoryview(mapping)[offset : offset + nbytes] as data:
        return tensor_from_bytes(data, dtype, shape, target)


def tensor_bytes(tensor: Tensor) -> bytes:
    """The row-major little-endian bytes of `tensor`'s values (bit-exact for every dtype, bfloat16 / fp8 included)."""
    if tensor.dtype.fmt is None:
        tensor = tensor.bitcast(_BITS_OF_SIZE[tensor.dtype.itemsize])
    array: np.ndarray = np.ascontiguousarray(tensor.numpy())
    return array.tobytes()
