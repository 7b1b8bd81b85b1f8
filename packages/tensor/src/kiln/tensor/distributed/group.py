"""`MPIGroup`: the MPI ranks of this job as a `CollectiveGroup` (kiln.tensor.multi.group), so a program written
for one rank runs unchanged here and on the devices of one process (`kiln.tensor.multi.DeviceGroup`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from kiln.tensor.device import canonical_device
from kiln.tensor.distributed.collectives import all_gather, all_reduce, broadcast
from kiln.tensor.distributed.communicator import World, world
from kiln.tensor.multi.group import per_rank
from kiln.tensor.multi.layout import normalize_axis

if TYPE_CHECKING:
    from kiln.tensor.tensor import Tensor

__all__ = ["MPIGroup", "group"]

Result = TypeVar("Result")


class MPIGroup:
    """This process's rank of the MPI job (made by `group()` after `init()`), with the collectives of
    `CollectiveGroup` under the same names as `DeviceGroup`'s.

    Example (each rank, under `mpirun -n 2`):
        >>> dist.init()
        >>> dist.group().run(lambda g, x: g.allreduce(x).numpy(), [Tensor([1.0]), Tensor([2.0])])
        [array([3.], dtype=float32)]
    """

    def __init__(self, communicator: World) -> None:
        self.world = communicator

    @property
    def rank(self) -> int:
        """This process's rank, 0 .. size - 1."""
        return self.world.rank

    @property
    def size(self) -> int:
        """The number of ranks in the job."""
        return self.world.size

    @property
    def device(self) -> str:
        """The device this rank computes on: the default device."""
        return canonical_device(None)

    def run(self, program: Callable[..., Result], *arguments: Sequence[Any]) -> list[Result]:
        """`program(self, *rank_arguments)` for this rank: each of `arguments` holds one value per rank and this
        rank takes its own; the result in a list of one (the other ranks' results are theirs)."""
        return [program(self, *per_rank(self.size, self.rank, arguments))]

    def allreduce(self, tensor: Tensor, op: str = "sum") -> Tensor:
        """The elementwise reduction (`op`: sum, max, min or prod) of every rank's `tensor`."""
        return all_reduce(tensor, op)

    def allgather(self, tensor: Tensor, axis: int = 0) -> Tensor:
        """Every rank's `tensor` joined along `axis` in rank order (sizes along `axis` may differ)."""
        if tensor.ndim == 0:
            raise ValueError("allgather needs tensors of at least one dimension, got a 0-d tensor")
        axis = normalize_axis(axis, tensor.ndim, "allgather axis")
        return all_gather(tensor.movedim(axis, 0)).movedim(0, axis)

    def reduce_scatter(self, tensor: Tensor, axis: int = 0, op: str = "sum") -> Tensor:
        """This rank's part (balanced parts along `axis` in rank order; the first ranks get one row more when the
        size does not divide) of the reduction of every rank's `tensor`."""
        if tensor.ndim == 0:
            raise ValueError("reduce_scatter needs tensors of at least one dimension, got a 0-d tensor")
        axis = normalize_axis(axis, tensor.ndim, "reduce_scatter axis")
        base, extra = divmod(tensor.shape[axis], self.size)
        start = self.rank * base + min(self.rank, extra)
        end = start + base + (1 if self.rank < extra else 0)
        reduced = all_reduce(tensor, op)
        return reduced.shrink([(start, end) if dim == axis else None for dim in range(tensor.ndim)]).contiguous()

    def broadcast(self, tensor: Tensor, root: int = 0) -> Tensor:
        """Rank `root`'s `tensor` (each rank passes one of the same shape and dtype)."""
        return broadcast(tensor, root)

    def barrier(self) -> None:
        """Waits until every rank has called barrier()."""
        self.world.barrier()


def group() -> MPIGroup:
    """The ranks of this MPI job as a `CollectiveGroup` (DistributedError before `init()`)."""
    return MPIGroup(world())
