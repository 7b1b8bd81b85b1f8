"""Tensors made straight from raw little-endian bytes (a slice of a memory-mapped file) and back.

One copy: the mapped file pages are copied once into the device buffer (`Buffer.copyin`); no intermediate numpy
array is built, so bfloat16 / fp8 data (which numpy cannot hold) loads bit-exactly.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import numpy as np

from kiln.runtime import Buffer
from kiln.tensor import graph
from kiln.tensor.device import canonical_device
from kiln.tensor.realize.buffers import attach_buffer
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes

__all__ = ["tensor_bytes", "tensor_from_bytes"]

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


def tensor_bytes(tensor: Tensor) -> bytes:
    """The row-major little-endian bytes of `tensor`'s values (bit-exact for every dtype, bfloat16 / fp8 included)."""
    if tensor.dtype.fmt is None:
        tensor = tensor.bitcast(_BITS_OF_SIZE[tensor.dtype.itemsize])
    array: np.ndarray = np.ascontiguousarray(tensor.numpy())
    return array.tobytes()
