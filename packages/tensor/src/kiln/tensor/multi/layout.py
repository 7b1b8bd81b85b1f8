"""How a sharded tensor is laid out: the devices, the split axis and each device's slice of it.

A split of `size` over `n` devices is balanced: the first `size % n` devices get one element more than the others
(7 over 3 is 3, 2, 2). A split that would leave a device empty is refused, so every shard has at least one element
along the axis and every per-device kernel has work.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.device import canonical_device

__all__ = ["check_devices", "normalize_axis", "one_device", "slice_along", "split_bounds"]


def normalize_axis(axis: int, ndim: int, what: str) -> int:
    """`axis` in 0..ndim-1 (negative counts from the end); TypeError for a non-int, IndexError out of range."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{what} must be an int or None, got {axis!r}")
    if ndim == 0 or not -ndim <= axis < ndim:
        raise IndexError(f"{what} {axis} is out of range for a tensor of {ndim} dimensions")
    return axis % ndim


def slice_along(tensor: TensorT, axis: int, bound: tuple[int, int]) -> TensorT:
    """The elements of `tensor` from bound[0] to bound[1] along `axis`."""
    return tensor.shrink([bound if index == axis else None for index in range(tensor.ndim)])


def one_device(tensor: TensorCore) -> str:
    """The one device `tensor` lives on; ValueError for a sharded tensor (a collective takes one tensor per device)."""
    device = tensor.device
    if isinstance(device, tuple):
        raise ValueError(f"expected a tensor on one device, got one sharded over {list(device)}: pass its .shards")
    return device


def check_devices(devices: Sequence[str] | str) -> tuple[str, ...]:
    """The canonical names of `devices`; ValueError unless they are at least one and all distinct."""
    if isinstance(devices, str) or not isinstance(devices, Sequence):
        raise TypeError(f"devices must be a sequence of device names, got {devices!r}")
    return canonical_device(tuple(devices))  # a sharded tensor's devices: at least one, all distinct


def split_bounds(size: int, count: int, axis: int) -> tuple[tuple[int, int], ...]:
    """The (start, end) of each of `count` balanced parts of `size` elements along `axis`.

    Raises ValueError when `size` is smaller than `count` (a device would hold nothing).
    """
    if size < count:
        raise ValueError(
            f"cannot split axis {axis} of size {size} over {count} devices: every device needs at least one element "
            f"(use fewer devices or replicate with axis=None)"
        )
    base, extra = divmod(size, count)
    bounds = []
    start = 0
    for index in range(count):
        end = start + base + (1 if index < extra else 0)
        bounds.append((start, end))
        start = end
    return tuple(bounds)
