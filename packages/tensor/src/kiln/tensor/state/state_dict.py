"""State dicts: the named tensors an object holds, found by walking it, and loading values back into them in place.

The walk is generic (no Module base class is needed): a Tensor is a leaf, list / tuple items are named by index,
dict items by key, and any other object by its public `__dict__` attributes. Names are joined with ".", as in
PyTorch's `Module.state_dict()`.
"""

from __future__ import annotations

import types
from typing import Any, NamedTuple

import numpy as np

from kiln.tensor.tensor import Tensor

__all__ = ["IncompatibleKeys", "get_parameters", "get_state_dict", "load_state_dict"]

# values that hold no tensors and whose attributes must not be walked (functions, classes, modules, numbers...)
_OPAQUE = (
    str,
    bytes,
    bytearray,
    int,
    float,
    complex,
    bool,
    type(None),
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    np.ndarray,
    np.generic,
)


class IncompatibleKeys(NamedTuple):
    """What `load_state_dict(strict=False)` returns, like PyTorch's `_IncompatibleKeys`."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """The tensors reachable from `obj`, named by their path ("layers.0.weight").

    Args:
        obj: a Tensor, a list / tuple / dict, or any object (its attributes not starting with "_" are walked).
        prefix: prepended to every name (e.g. "model.").

    Returns:
        an insertion-ordered dict name -> Tensor. A tensor reached along two paths appears under both names; a
        reference cycle is not followed twice.
    """
    found: dict[str, Tensor] = {}
    _walk(obj, prefix.removesuffix("."), found, set())
    return found


def _walk(obj: Any, name: str, found: dict[str, Tensor], ancestors: set[int]) -> None:
    if isinstance(obj, Tensor):
        found[name] = obj
        return
    if isinstance(obj, _OPAQUE) or id(obj) in ancestors:
        return
    if isinstance(obj, (list, tuple)):
        children: list[tuple[str, Any]] = [(str(index), item) for index, item in enumerate(obj)]
    elif isinstance(obj, dict):
        children = [(str(key), value) for key, value in obj.items()]
    elif hasattr(obj, "__dict__"):
        children = [(key, value) for key, value in vars(obj).items() if not key.startswith("_")]
    else:
        return
    ancestors.add(id(obj))
    for key, value in children:
        _walk(value, f"{name}.{key}" if name else key, found, ancestors)
    ancestors.discard(id(obj))


def get_parameters(obj: Any) -> list[Tensor]:
    """The tensors of `get_state_dict(obj)`, each once (deduplicated by identity), in walk order."""
    seen: set[int] = set()
    unique: list[Tensor] = []
    for tensor in get_state_dict(obj).values():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            unique.append(tensor)
    return unique


def load_state_dict(
    obj: Any, state_dict: dict[str, Any], strict: bool = True, consume: bool = False
) -> IncompatibleKeys:
    """Writes the values of `state_dict` into the tensors of `obj` in place (each realized), like torch's.

    Args:
        obj: the object whose `get_state_dict(obj)` names the target tensors.
        state_dict: name -> Tensor (or numpy array) with the new values; the dtype is cast to the target's.
        strict: report missing and unexpected keys as errors (shape mismatches are errors either way).
        consume: remove each loaded entry from `state_dict` (frees host copies while loading a large model).

    Returns:
        (missing_keys, unexpected_keys).

    Raises:
        RuntimeError: "Error(s) in loading state_dict for <type>:" followed by every problem found, one a line.
    """
    targets = get_state_dict(obj)
    missing = [key for key in targets if key not in state_dict]
    unexpected = [key for key in state_dict if key not in targets]
    errors: list[str] = []
    if strict:
        if missing:
            errors.append("Missing key(s) in state_dict: " + ", ".join(f'"{key}"' for key in missing) + ". ")
        if unexpected:
            errors.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{key}"' for key in unexpected) + ". ")
    loads: list[tuple[str, Tensor, Tensor]] = []
    for key, target in targets.items():
        if key not in state_dict:
            continue
        value = state_dict[key]
        if isinstance(value, np.ndarray):
            value = Tensor(value, device=target.device)
        if not isinstance(value, Tensor):
            errors.append(
                f'While copying the parameter named "{key}", expected a Tensor or numpy array from checkpoint but '
                f"received {type(value).__name__}"
            )
        elif value.shape != target.shape:
            errors.append(
                f"size mismatch for {key}: copying a param with shape {list(value.shape)} from checkpoint, the "
                f"shape in current model is {list(target.shape)}."
            )
        else:
            loads.append((key, target, value))
    if errors:
        raise RuntimeError(f"Error(s) in loading state_dict for {type(obj).__name__}:\n\t" + "\n\t".join(errors))
    for key, target, value in loads:
        target.assign(value.to(target.device).cast(target.dtype).detach()).realize()
        if consume:
            del state_dict[key]
    return IncompatibleKeys(missing, unexpected)
