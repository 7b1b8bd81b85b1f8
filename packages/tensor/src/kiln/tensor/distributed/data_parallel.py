"""Data-parallel training over MPI ranks: every rank holds the whole model, computes gradients on its part of the
batch, and `DataParallel.average_gradients()` replaces each gradient by its mean over the ranks.

Gradients are averaged in buckets of about `bucket_bytes`, last parameters first, each bucket's sum-allreduce
posted as a non-blocking MPI request; the requests are waited for (with the DIST_TIMEOUT timeout) once every bucket
is posted. `backward()` computes every gradient (as PyTorch does), so by the time `average_gradients()` runs the
gradients are data and the buckets only communicate: the overlap of communication with backward kernels (`overlap`)
applies to gradients that are still lazy (ones built with `Tensor.gradient()` and assigned to `.grad`). A bucket's
schedule then also realizes the intermediate gradients that later buckets read (the frontier of the shared part of
their graphs), so the backward work they share runs once, not once per bucket.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln.tensor.distributed.collectives import broadcast, host_array
from kiln.tensor.distributed.communicator import world
from kiln.uops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from kiln.tensor.tensor import Tensor

__all__ = ["DataParallel"]


_NOT_COMPUTED = frozenset({Ops.BUFFER, Ops.CONST, Ops.DEVICE, Ops.DETACH})
"""Nodes a frontier skips: data already in memory, constants, and views."""


class DataParallel:
    """Keeps the replicas of a model's parameters in step across ranks.

    Args:
        parameters: the trainable tensors (`model.parameters()`), in the same order on every rank.
        bucket_bytes: how many bytes of gradients one allreduce carries (at least one parameter's).
        overlap: for gradients still lazy, post each bucket's allreduce before the next bucket's backward
            kernels run (False: realize every gradient first, then communicate). After `backward()` the gradients
            are computed already and this changes nothing.

    Example (each rank, under `mpirun -n 2`):
        >>> parallel = DataParallel(model.parameters())
        >>> parallel.sync_parameters()             # every rank starts from rank 0's values
        >>> loss.backward(); parallel.average_gradients(); optimizer.step()
    """

    def __init__(self, parameters: Iterable[Tensor], bucket_bytes: int = 1 << 20, overlap: bool = True) -> None:
        self.parameters = list(parameters)
        if bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
        self.bucket_bytes = bucket_bytes
        self.overlap = overlap
        self.buckets = self._buckets()
        self.world = world()

    def _buckets(self) -> list[list[int]]:
        buckets: list[list[int]] = []
        size = 0
        for index in reversed(range(len(self.parameters))):
            nbytes = 4 * self.parameters[index].numel()
            if not buckets or size + nbytes > self.bucket_bytes:
                buckets.append([])
                size = 0
            buckets[-1].append(index)
            size += nbytes
        return buckets

    def sync_parameters(self, root: int = 0) -> None:
        """Writes rank `root`'s parameter values into every rank's parameters."""
        for parameter in self.parameters:
            parameter.assign(broadcast(parameter.detach(), root))

    def average_gradients(self) -> None:
        """Replaces every parameter's `.grad` by its mean over the ranks (a parameter without a gradient counts
        as zeros, so all ranks exchange the same buckets)."""
        group = self.world
        if group.size == 1:
            return
        if not self.overlap:
            grads = [parameter.grad for parameter in self.parameters if parameter.grad is not None]
            if grads:
                type(grads[0]).realize_all(*grads)
        posted: list[tuple[list[int], np.ndarray, Any]] = []
        for position, bucket in enumerate(self.buckets):
            if self.overlap:
                self._realize_bucket(bucket, self.buckets[position + 1 :])
            flat = np.concatenate([self._gradient_values(index) for index in bucket]) if bucket else np.zeros(0)
            total = np.empty_like(flat)
            posted.append((bucket, total, group.start("Iallreduce", flat, total, group.MPI.SUM)))
        for bucket, total, request in posted:
            group.wait(request, f"average_gradients (a bucket of {len(bucket)} parameters)")
            total /= group.size
            offset = 0
            for index in bucket:
                parameter = self.parameters[index]
                count = parameter.numel()
                values = total[offset : offset + count].reshape(parameter.shape)
                offset += count
                parameter.grad = type(parameter)(values, device=parameter.device).cast(parameter.dtype)

    def _realize_bucket(self, bucket: list[int], later: list[list[int]]) -> None:
        """Realizes the bucket's gradients together with the computed nodes later buckets' gradients also read."""
        grads = [g for g in (self.parameters[index].grad for index in bucket) if g is not None]
        if not grads:
            return
        later_nodes: set[UOp] = set()
        for other in later:
            for index in other:
                grad = self.parameters[index].grad
                if grad is not None:
                    later_nodes.update(grad.uop.toposort())
        frontier: dict[UOp, None] = {}
        for grad in grads:
            for node in grad.uop.toposort():
                if node in later_nodes:
                    continue
                for source in node.src:
                    while source.op in GroupOp.Movement:
                        source = source.src[0]
                    if source in later_nodes and source.op not in _NOT_COMPUTED:
                        frontier[source] = None
        tensor_type = type(grads[0])
        tensor_type.realize_all(*grads, *(tensor_type._from_uop(node) for node in frontier))

    def _gradient_values(self, index: int) -> np.ndarray:
        parameter = self.parameters[index]
        if parameter.grad is None:
            return np.zeros(parameter.numel(), dtype=np.float32)
        return host_array(parameter.grad).astype(np.float32, copy=False).reshape(-1)
