"""Several devices in one process: sharded tensors (`MultiTensor`, made by `Tensor.shard`) and the collectives
between devices (`allreduce`, `allgather`, `reduce_scatter`, `broadcast`), and `DeviceGroup`, the devices as the
ranks of a `CollectiveGroup` (the API `kiln.tensor.distributed.MPIGroup` has for MPI ranks)."""

from kiln.tensor.multi.collectives import (
    REDUCE_OPS,
    all_gather,
    all_reduce,
    allgather,
    allreduce,
    broadcast,
    reduce_scatter,
)
from kiln.tensor.multi.group import CollectiveGroup, DeviceGroup, DeviceRank, RankStopped
from kiln.tensor.multi.layout import split_bounds
from kiln.tensor.multi.sharded import ELEMENTWISE_METHODS, MultiTensor, shard_tensor

__all__ = [
    "ELEMENTWISE_METHODS",
    "CollectiveGroup",
    "DeviceGroup",
    "DeviceRank",
    "REDUCE_OPS",
    "MultiTensor",
    "RankStopped",
    "all_gather",
    "all_reduce",
    "allgather",
    "allreduce",
    "broadcast",
    "reduce_scatter",
    "shard_tensor",
    "split_bounds",
]
