"""Training across processes and machines over MPI (mpi4py on Open MPI): `init()`, `rank()`, `world_size()`, the
collectives `all_reduce`, `all_gather`, `broadcast` on Tensors, `DataParallel` gradient averaging, and checkpoints
written by rank 0 and read by every rank.

`group()` is this job's ranks as a `CollectiveGroup` (`MPIGroup`: `allreduce`, `allgather`, `reduce_scatter`,
`broadcast`, `barrier`, `run`), the API `kiln.tensor.multi.DeviceGroup` has for the devices of one process: a
program written for one rank runs on either.

Run a script under MPI: `mpirun -n 2 python train.py`. mpi4py is optional (the `mpi` extra): it is imported by
`init()`, and a missing mpi4py raises DistributedError saying what to install. Every collective times out after
DIST_TIMEOUT seconds (DistributedTimeout), and after `init()` an uncaught exception on one rank aborts the whole
job, so a failing rank never leaves the others waiting.
"""

from __future__ import annotations

from kiln.tensor.distributed.checkpoint import load_checkpoint, save_checkpoint
from kiln.tensor.distributed.collectives import all_gather, all_reduce, broadcast
from kiln.tensor.distributed.communicator import (
    DistributedError,
    DistributedTimeout,
    World,
    set_world,
    world,
)
from kiln.tensor.distributed.data_parallel import DataParallel
from kiln.tensor.distributed.group import MPIGroup, group

__all__ = [
    "DataParallel",
    "DistributedError",
    "DistributedTimeout",
    "MPIGroup",
    "World",
    "all_gather",
    "all_reduce",
    "barrier",
    "broadcast",
    "group",
    "init",
    "is_initialized",
    "load_checkpoint",
    "rank",
    "save_checkpoint",
    "world",
    "world_size",
]


def init(timeout: float | None = None, abort_on_error: bool = True) -> World:
    """Joins the MPI job (once; later calls return the same world).

    Args:
        timeout: seconds each collective waits for the other ranks (default: the knob DIST_TIMEOUT).
        abort_on_error: install the hook that aborts every rank when one raises an uncaught exception.

    Raises:
        DistributedError: mpi4py (or its MPI library) is not installed.
    """
    try:
        found = world()
    except DistributedError:
        found = None
    if found is not None:
        if timeout is not None:
            found.timeout = timeout
        return found
    created = World(timeout=timeout)
    if abort_on_error:
        created.install_abort_on_error()
    set_world(created)
    return created


def is_initialized() -> bool:
    """Whether `init()` has been called."""
    try:
        world()
    except DistributedError:
        return False
    return True


def rank() -> int:
    """This process's rank, 0 .. world_size() - 1."""
    return world().rank


def world_size() -> int:
    """The number of ranks in the job."""
    return world().size


def barrier() -> None:
    """Waits until every rank has called barrier() (with the DIST_TIMEOUT timeout)."""
    world().barrier()
