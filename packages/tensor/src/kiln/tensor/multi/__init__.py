"""Several devices in one process: the collectives between devices (`allreduce`, `allgather`, `reduce_scatter`,
`broadcast`) over one tensor per device, and `DeviceGroup`, the devices as the ranks of a `CollectiveGroup` (the API
`kiln.tensor.distributed.MPIGroup` has for MPI ranks).

A sharded tensor is a plain `Tensor` (`Tensor.shard(devices, axis)`): its graph holds its placement (a MULTI node),
and `kiln.tensor.sharding` lowers it to one graph per device when it is realized."""

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

__all__ = [
    "CollectiveGroup",
    "DeviceGroup",
    "DeviceRank",
    "REDUCE_OPS",
    "RankStopped",
    "all_gather",
    "all_reduce",
    "allgather",
    "allreduce",
    "broadcast",
    "reduce_scatter",
    "split_bounds",
]
