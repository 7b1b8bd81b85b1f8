"""Several devices in one process: sharded tensors (`MultiTensor`, made by `Tensor.shard`) and the collectives
between devices (`allreduce`, `allgather`, `reduce_scatter`, `broadcast`)."""

from kiln.tensor.multi.collectives import (
    REDUCE_OPS,
    all_gather,
    all_reduce,
    allgather,
    allreduce,
    broadcast,
    reduce_scatter,
)
from kiln.tensor.multi.layout import split_bounds
from kiln.tensor.multi.sharded import ELEMENTWISE_METHODS, MultiTensor, shard_tensor

__all__ = [
    "ELEMENTWISE_METHODS",
    "REDUCE_OPS",
    "MultiTensor",
    "all_gather",
    "all_reduce",
    "allgather",
    "allreduce",
    "broadcast",
    "reduce_scatter",
    "shard_tensor",
    "split_bounds",
]
