"""Collectives between the devices of one process, built from tensor ops: copies (`to`) and elementwise kernels.

Each function takes one tensor per device (all of one shape and dtype, each on its own device) and returns one per
device, lazily: realizing the results schedules the copies and the reduction kernels, so the collectives fuse into
the surrounding graph and have gradients. The reductions are rings: the flat data is cut into one chunk per
device, and at every step each device sends one chunk to the next device while receiving another, so all devices
copy and add at once; `n - 1` steps of reduce-scatter leave device i with the full reduction of chunk i, and `n - 1`
steps of all-gather hand every reduced chunk around the ring.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from kiln.tensor.core import TensorCore
from kiln.tensor.multi.layout import check_devices, one_device
from kiln.uops import dtypes

__all__ = ["REDUCE_OPS", "all_gather", "all_reduce", "allgather", "allreduce", "broadcast", "reduce_scatter"]


def _sum(a: TensorCore, b: TensorCore) -> TensorCore:
    return a | b if a.dtype == dtypes.bool else a + b


def _max(a: TensorCore, b: TensorCore) -> TensorCore:
    return a.maximum(b)


def _min(a: TensorCore, b: TensorCore) -> TensorCore:
    return a.minimum(b)


def _prod(a: TensorCore, b: TensorCore) -> TensorCore:
    return a & b if a.dtype == dtypes.bool else a * b


REDUCE_OPS: dict[str, Callable[[TensorCore, TensorCore], TensorCore]] = {
    "sum": _sum,
    "max": _max,
    "min": _min,
    "prod": _prod,
}
"""The reductions a collective can apply, by name (on bool: sum is logical or, prod logical and)."""


def _check_group(tensors: Sequence[TensorCore], what: str, same_shape: bool = True) -> tuple[str, ...]:
    if len(tensors) == 0:
        raise ValueError(f"{what} needs one tensor per device, got none")
    devices = check_devices([one_device(tensor) for tensor in tensors])
    first = tensors[0]
    for index, tensor in enumerate(tensors):
        if tensor.dtype != first.dtype:
            raise TypeError(f"{what}: tensor {index} has dtype {tensor.dtype!r}, tensor 0 has {first.dtype!r}")
        if same_shape and tensor.shape != first.shape:
            raise ValueError(f"{what}: tensor {index} has shape {tensor.shape}, tensor 0 has {first.shape}")
    return devices


def _reducer(op: str) -> Callable[[TensorCore, TensorCore], TensorCore]:
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction {op!r}; expected one of {', '.join(REDUCE_OPS)}")
    return REDUCE_OPS[op]


def _chunks(flat: TensorCore, count: int) -> list[TensorCore]:
    # balanced chunks of a flat tensor; with fewer elements than devices some chunks are empty, which copies handle
    base, extra = divmod(flat.shape[0], count)
    pieces, start = [], 0
    for index in range(count):
        end = start + base + (1 if index < extra else 0)
        pieces.append(flat[start:end])
        start = end
    return pieces


def _ring_reduce_scatter(
    chunks: list[list[TensorCore]], devices: tuple[str, ...], reduce: Callable[..., TensorCore]
) -> None:
    """In place: after it, chunks[i][i] is the reduction over all devices of chunk i, on device i."""
    count = len(devices)
    for step in range(count - 1):
        sent = [(device, (device - 1 - step) % count) for device in range(count)]
        received = [chunks[device][chunk].to(devices[(device + 1) % count]) for device, chunk in sent]
        for (device, chunk), value in zip(sent, received):
            target = (device + 1) % count
            chunks[target][chunk] = reduce(chunks[target][chunk], value)


def _ring_all_gather(chunks: list[list[TensorCore]], devices: tuple[str, ...]) -> None:
    """In place: device i starts owning chunk i; after it every device holds every chunk."""
    count = len(devices)
    for step in range(count - 1):
        sent = [(device, (device - step) % count) for device in range(count)]
        received = [chunks[device][chunk].to(devices[(device + 1) % count]) for device, chunk in sent]
        for (device, chunk), value in zip(sent, received):
            chunks[(device + 1) % count][chunk] = value


def allreduce(tensors: Sequence[TensorCore], op: str = "sum") -> list[TensorCore]:
    """The elementwise reduction (`op`: sum, max, min or prod) of `tensors`, one copy on each tensor's device.

    A ring: reduce-scatter then all-gather of one chunk per device (see the module docstring); sizes need not be
    divisible by the device count, and zero-size tensors give zero-size results.

    Example:
        >>> a, b = Tensor([1.0, 2.0]), Tensor([10.0, 20.0]).to("CPU:1")
        >>> [t.tolist() for t in allreduce([a, b])]
        [[11.0, 22.0], [11.0, 22.0]]
    """
    devices = _check_group(tensors, "allreduce")
    reduce = _reducer(op)
    shape = tensors[0].shape
    if len(tensors) == 1:
        return [tensors[0]]
    size = math.prod(shape)
    if size == 0:
        return list(tensors)  # nothing to reduce: each device keeps its (empty) tensor
    if size < len(tensors):
        # fewer elements than devices: a ring would send empty chunks; reduce along the chain, then hand it back
        total = tensors[0]
        for tensor in tensors[1:]:
            total = reduce(total.to(tensor.device), tensor)
        return broadcast(total, devices)
    chunks = [_chunks(tensor.reshape(-1), len(devices)) for tensor in tensors]
    _ring_reduce_scatter(chunks, devices, reduce)
    _ring_all_gather(chunks, devices)
    return [type(tensor).cat(*row).reshape(shape) for tensor, row in zip(tensors, chunks)]


def reduce_scatter(tensors: Sequence[TensorCore], axis: int = 0, op: str = "sum") -> list[TensorCore]:
    """Part i (balanced parts along `axis`) of the reduction of `tensors`, on device i.

    With fewer elements along `axis` than devices the last parts are empty.

    Example:
        >>> a, b = Tensor([1.0, 2.0, 3.0]), Tensor([10.0, 20.0, 30.0]).to("CPU:1")
        >>> [t.tolist() for t in reduce_scatter([a, b])]
        [[11.0, 22.0], [33.0]]
    """
    devices = _check_group(tensors, "reduce_scatter")
    reduce = _reducer(op)
    first = tensors[0]
    if first.ndim == 0:
        raise ValueError("reduce_scatter needs tensors of at least one dimension, got 0-d tensors")
    axis = _axis(axis, first.ndim, "reduce_scatter")
    moved = [tensor.movedim(axis, 0) for tensor in tensors]
    rows = moved[0].shape[0]
    base, extra = divmod(rows, len(devices))
    bounds, start = [], 0
    for index in range(len(devices)):
        end = start + base + (1 if index < extra else 0)
        bounds.append((start, end))
        start = end
    chunks = [[tensor[begin:end] for begin, end in bounds] for tensor in moved]
    _ring_reduce_scatter(chunks, devices, reduce)
    return [chunks[index][index].movedim(0, axis) for index in range(len(devices))]


def allgather(tensors: Sequence[TensorCore], axis: int = 0) -> list[TensorCore]:
    """`tensors` joined along `axis` (in device order), one copy on each device; sizes along `axis` may differ.

    Example:
        >>> a, b = Tensor([1.0]), Tensor([2.0, 3.0]).to("CPU:1")
        >>> [t.tolist() for t in allgather([a, b])]
        [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]
    """
    devices = _check_group(tensors, "allgather", same_shape=False)
    first = tensors[0]
    if first.ndim == 0:
        raise ValueError("allgather needs tensors of at least one dimension, got 0-d tensors")
    axis = _axis(axis, first.ndim, "allgather")
    for index, tensor in enumerate(tensors):
        others = tensor.shape[:axis] + tensor.shape[axis + 1 :]
        if tensor.ndim != first.ndim or others != first.shape[:axis] + first.shape[axis + 1 :]:
            raise ValueError(
                f"allgather: tensor {index} has shape {tensor.shape}, which differs from tensor 0's {first.shape} "
                f"outside axis {axis}"
            )
    # device i starts with its own tensor as chunk i; the other entries are placeholders the ring overwrites
    chunks = [list(tensors) for _ in devices]
    _ring_all_gather(chunks, devices)
    return [type(first).cat(*row, dim=axis) for row in chunks]


def broadcast(tensor: TensorCore, devices: Sequence[str]) -> list[TensorCore]:
    """`tensor` copied to each of `devices` (in order), along a chain starting at its own device.

    Example:
        >>> [t.device for t in broadcast(Tensor([1.0]), ["CPU", "CPU:1"])]
        ['CPU', 'CPU:1']
    """
    names = check_devices(devices)
    results: dict[str, TensorCore] = {one_device(tensor): tensor}
    previous = tensor
    for name in names:
        if name not in results:
            previous = results[name] = previous.to(name)
    return [results[name] for name in names]


def _axis(axis: int, ndim: int, what: str) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool) or not -ndim <= axis < ndim:
        raise IndexError(f"{what}: axis {axis!r} is out of range for {ndim}-d tensors")
    return axis % ndim


all_reduce = allreduce
all_gather = allgather
