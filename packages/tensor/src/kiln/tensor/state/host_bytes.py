"""Tensors read from little-endian bytes of a checkpoint file, their bytes back, and atomic file writes.

Loading policy: a loaded tensor owns private memory. `tensor_from_file` reads the tensor's bytes (`readinto`, one
copy from the page cache) straight into a freshly allocated buffer on a device whose memory is host memory (CPU,
PYTHON: `HostAllocator`), or into one staging block copied into the device buffer elsewhere. Nothing maps the file,
so nothing done to the file afterwards (rewritten in place, truncated, replaced) can change a loaded value or fault
the process (a truncated mapping raises SIGBUS on the next read); a file that shrinks while it is read raises
ValueError. No numpy array is built in between, so bfloat16 / fp8 data loads bit-exactly.

Saving policy: every save goes through `kiln.uops.files.write_atomically` (a temporary file in the target's folder,
fsynced, renamed over the target): a save that fails part-way (disk full, an exception while producing the bytes)
leaves the previous file as it was and removes the temporary file.
"""

from __future__ import annotations

import io
import math
import sys
from collections.abc import Sequence

import numpy as np

from kiln.runtime import Buffer, Device, HostAllocator
from kiln.tensor import graph
from kiln.tensor.device import canonical_device
from kiln.tensor.realize.buffers import attach_buffer
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes

__all__ = ["read_exactly", "tensor_bytes", "tensor_from_bytes", "tensor_from_file"]

if sys.byteorder != "little":  # every format read here stores little-endian data
    raise ImportError("kiln.tensor.state reads little-endian checkpoint data and needs a little-endian host")

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


def read_exactly(file: io.BufferedIOBase, offset: int, into: memoryview, where: str) -> None:
    """Fills `into` with the file's bytes from `offset`; ValueError naming the offset if the file ends first."""
    file.seek(offset)
    done, total = 0, into.nbytes
    while done < total:
        count = file.readinto(into[done:])
        if not count:
            raise ValueError(
                f"{where}: truncated file: {total} bytes needed at offset {offset}, the file ended after {done} "
                f"(at offset {offset + done})"
            )
        done += count


def tensor_from_file(
    file: io.BufferedIOBase, offset: int, dtype: DType, shape: Sequence[int], device: str | None = None, where: str = ""
) -> Tensor:
    """A realized Tensor of the bytes at `offset` of `file`, copied into memory the tensor owns (see the module
    docstring): read straight into the buffer on a host-memory device, through one staging block elsewhere."""
    count, target = math.prod(shape), canonical_device(device)
    node = graph.buffer_uop(target, count, dtype)
    buffer = Buffer(node.arg.device, count, dtype)
    if not count:
        buffer.copyin(b"")
    elif isinstance(Device[target].allocator, HostAllocator):
        read_exactly(file, offset, buffer.host_view(), where)  # host_view allocates and waits for queued work
    else:
        staging = bytearray(count * dtype.itemsize)
        read_exactly(file, offset, memoryview(staging), where)
        buffer.copyin(staging)
    attach_buffer(node, buffer)
    return Tensor._from_uop(graph.reshape(node, tuple(shape)))


def tensor_bytes(tensor: Tensor) -> bytes:
    """The row-major little-endian bytes of `tensor`'s values (bit-exact for every dtype, bfloat16 / fp8 included)."""
    if tensor.dtype.fmt is None:
        tensor = tensor.bitcast(_BITS_OF_SIZE[tensor.dtype.itemsize])
    array: np.ndarray = np.ascontiguousarray(tensor.numpy())
    return array.tobytes()
