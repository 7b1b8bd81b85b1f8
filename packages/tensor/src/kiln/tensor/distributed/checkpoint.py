"""Checkpoints in data-parallel training: rank 0 writes, every rank reads (after a barrier, so no rank reads a
file that is still being written)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kiln.tensor.distributed.communicator import world
from kiln.tensor.state import safe_load, safe_save

if TYPE_CHECKING:
    from kiln.tensor.tensor import Tensor

__all__ = ["load_checkpoint", "save_checkpoint"]


def save_checkpoint(state: dict[str, Tensor], path: str | os.PathLike[str]) -> None:
    """Rank 0 writes `state` (e.g. `model.state_dict()`) as safetensors to `path`; every rank returns once it is
    written (every rank must call this)."""
    group = world()
    if group.rank == 0:
        safe_save(state, path)
    group.barrier()


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """The tensors of the checkpoint at `path`, read by every rank (every rank must call this)."""
    group = world()
    group.barrier()
    return safe_load(path)
