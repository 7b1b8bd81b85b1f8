"""Collectives between MPI ranks on Tensors: each rank passes its tensor and gets a new Tensor back.

Data goes through host memory (the tensor is realized and read with `numpy()`, the result is a new Tensor on the
input's device). Every collective first checks that all ranks passed the same kind of tensor (a descriptor of
dtype and shape, exchanged with a small allgather), so a mismatch raises ValueError on every rank instead of
mixing bytes. Half-precision values are reduced in float32 and rounded back once; bools reduce logically.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

import numpy as np

from kiln.tensor.distributed.communicator import World, world

if TYPE_CHECKING:
    from kiln.tensor.tensor import Tensor

__all__ = ["all_gather", "all_reduce", "broadcast", "host_array"]

_DESCRIPTOR_LENGTH = 18  # dtype code, number of dims, up to 16 sizes


def host_array(tensor: Tensor) -> np.ndarray:
    """The tensor's values as a contiguous numpy array (realizing it)."""
    return np.ascontiguousarray(tensor.numpy())


def _descriptor(tensor: Tensor, with_first_axis: bool) -> np.ndarray:
    shape = tensor.shape if with_first_axis else tensor.shape[1:]
    if len(shape) > _DESCRIPTOR_LENGTH - 2:
        raise ValueError(f"distributed collectives take tensors of at most 16 dims, got shape {tensor.shape}")
    values = [zlib.crc32(tensor.dtype.name.encode()), len(shape), *shape]
    return np.array(values + [-1] * (_DESCRIPTOR_LENGTH - len(values)), dtype=np.int64)


def _check_same(group: World, tensor: Tensor, what: str, with_first_axis: bool = True) -> np.ndarray:
    """Every rank's descriptor (one row per rank); ValueError on every rank when they differ."""
    mine = _descriptor(tensor, with_first_axis)
    everyone = np.empty((group.size, _DESCRIPTOR_LENGTH), dtype=np.int64)
    group.run("Iallgather", f"{what} (exchanging shapes)", mine, everyone)
    for other in range(group.size):
        if not np.array_equal(everyone[other], mine):
            other_shape = tuple(int(size) for size in everyone[other][2 : 2 + max(0, int(everyone[other][1]))])
            part = "shape" if with_first_axis else "shape after the first axis"
            raise ValueError(
                f"rank {group.rank}: {what} needs the same dtype and {part} on every rank; this rank has "
                f"{tensor.dtype!r} {tensor.shape}, rank {other} has a different one ({part} {other_shape})"
            )
    return everyone


_MPI_OPS = {"sum": "SUM", "max": "MAX", "min": "MIN", "prod": "PROD"}
_MPI_BOOL_OPS = {"sum": "LOR", "max": "LOR", "min": "LAND", "prod": "LAND"}


def all_reduce(tensor: Tensor, op: str = "sum") -> Tensor:
    """The elementwise reduction (`op`: sum, max, min or prod) of every rank's `tensor` (same shape and dtype on
    every rank), as a new Tensor on `tensor`'s device. On bool, sum and max are logical or, min and prod and."""
    group = world()
    if op not in _MPI_OPS:
        raise ValueError(f"unknown reduction {op!r}; expected one of {', '.join(_MPI_OPS)}")
    _check_same(group, tensor, "all_reduce")
    array = host_array(tensor)
    is_bool = array.dtype == np.bool_
    work = array.astype(np.float32) if array.dtype.kind == "f" and array.dtype.itemsize < 4 else array
    result = np.empty_like(work)
    mpi_op = getattr(group.MPI, (_MPI_BOOL_OPS if is_bool else _MPI_OPS)[op])
    group.run("Iallreduce", f"all_reduce of {tensor.dtype!r} {tensor.shape}", work, result, mpi_op)
    return type(tensor)(result.astype(array.dtype, copy=False), dtype=tensor.dtype, device=tensor.device)


def all_gather(tensor: Tensor) -> Tensor:
    """Every rank's `tensor` joined along the first axis in rank order (sizes along it may differ between ranks;
    the other dims and the dtype must not), as a new Tensor on `tensor`'s device."""
    group = world()
    if tensor.ndim == 0:
        raise ValueError("all_gather needs tensors of at least one dimension, got a 0-d tensor")
    _check_same(group, tensor, "all_gather", with_first_axis=False)
    array = host_array(tensor)
    rows = np.array([array.shape[0]], dtype=np.int64)
    every_rows = np.empty(group.size, dtype=np.int64)
    group.run("Iallgather", "all_gather (exchanging sizes)", rows, every_rows)
    row_bytes = array.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
    counts = [int(count) * row_bytes for count in every_rows]
    received = np.empty(sum(counts), dtype=np.uint8)
    group.run(
        "Iallgatherv",
        f"all_gather of {tensor.dtype!r} {tensor.shape}",
        array.reshape(-1).view(np.uint8),
        [received, counts],
    )
    gathered = received.view(array.dtype).reshape((int(every_rows.sum()), *array.shape[1:]))
    return type(tensor)(gathered, dtype=tensor.dtype, device=tensor.device)


def broadcast(tensor: Tensor, root: int = 0) -> Tensor:
    """Rank `root`'s `tensor` on every rank (each rank passes a tensor of the same shape and dtype, whose values
    are ignored except on `root`), as a new Tensor on `tensor`'s device."""
    group = world()
    if not isinstance(root, int) or not 0 <= root < group.size:
        raise ValueError(f"broadcast root must be a rank in 0..{group.size - 1}, got {root!r}")
    _check_same(group, tensor, "broadcast")
    array = host_array(tensor).copy()
    group.run(
        "Ibcast",
        f"broadcast of {tensor.dtype!r} {tensor.shape} from rank {root}",
        array.reshape(-1).view(np.uint8),
        root,
    )
    return type(tensor)(array, dtype=tensor.dtype, device=tensor.device)
