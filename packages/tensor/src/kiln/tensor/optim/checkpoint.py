"""Training checkpoints: a model's state, its optimizer's (groups and per-parameter state) and its LR scheduler's in
one .safetensors file, so training resumes exactly where it stopped (torch's
`torch.save({"model": ..., "optimizer": opt.state_dict(), "scheduler": sched.state_dict()})` recipe).

The tensors (the model's, each optimizer state tensor under "optimizer.<index>.<name>") are stored as safetensors
entries; the optimizer's parameter groups and the scheduler's state (numbers, lists, flags) as JSON in the file's
metadata. Loading writes everything back into already built objects of the same structure (as torch's
`load_state_dict` calls do), so a resumed run continues bit for bit.
"""

from __future__ import annotations

import json
import os
from typing import Any

from kiln.tensor.optim.lr_scheduler import LRScheduler
from kiln.tensor.optim.optimizer import Optimizer
from kiln.tensor.state import get_state_dict, load_state_dict, safe_load, safe_load_metadata, safe_save
from kiln.tensor.tensor import Tensor

__all__ = ["load_training_checkpoint", "save_training_checkpoint"]

_MODEL, _OPTIMIZER = "model.", "optimizer."


def _model_state(model: Any) -> dict[str, Tensor]:
    method = getattr(model, "state_dict", None)
    found: dict[str, Tensor] = method() if callable(method) else get_state_dict(model)
    return found


def save_training_checkpoint(
    path: str | os.PathLike[str], model: Any, optimizer: Optimizer, scheduler: LRScheduler | None = None
) -> None:
    """Writes `model`'s state dict, `optimizer.state_dict()` and `scheduler.state_dict()` to one .safetensors file.

    Args:
        path: the file (replaced atomically).
        model: an nn.Module (its `state_dict()`) or any object `kiln.tensor.state.get_state_dict` walks.
        optimizer: a kiln optimizer.
        scheduler: its LR scheduler, if any.
    """
    saved = optimizer.state_dict()
    tensors = {f"{_MODEL}{name}": tensor for name, tensor in _model_state(model).items()}
    for index, entries in saved["state"].items():
        tensors.update({f"{_OPTIMIZER}{index}.{name}": value for name, value in entries.items()})
    metadata = {"optimizer.param_groups": json.dumps(saved["param_groups"])}
    if scheduler is not None:
        metadata["scheduler"] = json.dumps(scheduler.state_dict())
    safe_save(tensors, path, metadata)


def load_training_checkpoint(
    path: str | os.PathLike[str], model: Any, optimizer: Optimizer, scheduler: LRScheduler | None = None
) -> None:
    """Loads a `save_training_checkpoint` file into `model`, `optimizer` and `scheduler` (built as when saved).

    Raises:
        ValueError: the file holds no optimizer groups, or no scheduler state while a scheduler is given (and the
            optimizer's and scheduler's own mismatch errors).
        RuntimeError: the model's state does not match (`load_state_dict`'s error).
    """
    tensors, metadata = safe_load(path), safe_load_metadata(path)
    if "optimizer.param_groups" not in metadata:
        raise ValueError(f"{os.fspath(path)!r} is no training checkpoint: its metadata has no optimizer.param_groups")
    if scheduler is not None and "scheduler" not in metadata:
        raise ValueError(f"{os.fspath(path)!r} holds no scheduler state, but a scheduler was given to load it into")
    model_state = {key.removeprefix(_MODEL): value for key, value in tensors.items() if key.startswith(_MODEL)}
    method = getattr(model, "load_state_dict", None)
    if callable(method):
        method(model_state)
    else:
        load_state_dict(model, model_state)
    state: dict[int, dict[str, Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith(_OPTIMIZER):
            index, name = key.removeprefix(_OPTIMIZER).split(".", 1)
            state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": json.loads(metadata["optimizer.param_groups"])})
    if scheduler is not None:
        scheduler.load_state_dict(json.loads(metadata["scheduler"]))
