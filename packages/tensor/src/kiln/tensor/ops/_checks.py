"""Argument checks shared by the Tensor methods: axes, shapes, broadcasting, dtypes and devices.

Every check raises at the user's call (when the op is built, not when it runs) with a message that names the bad
value and what was expected.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, cast

from kiln.runtime import Device
from kiln.tensor.core import TensorCore
from kiln.tensor.symbolic import BoundVariable, Variable, as_size, carries_variable
from kiln.uops import DType, UOp, dtypes

__all__ = [
    "AxisError",
    "ShapeError",
    "broadcast_shapes",
    "check_constant_fits",
    "check_device_dtype",
    "check_dtype",
    "check_int",
    "check_size",
    "check_same_device",
    "normalize_axes",
    "normalize_axis",
    "pick_axis",
    "shape_argument",
]


class ShapeError(ValueError, RuntimeError):
    """Operand shapes that do not fit together (broadcasting, matmul): PyTorch raises RuntimeError for these; this is
    also a ValueError, kiln's class for bad argument values."""


class AxisError(ValueError, IndexError):
    """An axis (dim) argument outside the tensor's dims; both a ValueError and an IndexError (like numpy's)."""


def check_int(value: object, what: str) -> int:
    """`value` as an int; TypeError for bools, floats and other non-integers (numpy integers are accepted)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an int, got {value!r} of type {type(value).__name__}")
    return operator.index(value)


def check_size(value: object, what: str) -> int:
    """`value` as a size: an int (as `check_int`), or a bound Variable / bound index expression as its size UOp
    (typed int like the tensor graph's shapes, whose symbolic entries `kiln.tensor.symbolic` describes)."""
    if type(value) is int:
        return value
    if isinstance(value, (BoundVariable, Variable, UOp)) or carries_variable(value):
        return cast(int, as_size(value, what))
    return check_int(value, what)


def normalize_axis(axis: object, shape: Sequence[int], what: str = "axis") -> int:
    """`axis` (negative counts from the end) as an index into `shape`.

    A 0-dim tensor accepts the axes 0 and -1, like PyTorch (callers treat it as one dim of size 1).
    """
    index = check_int(axis, what)
    ndim = max(len(shape), 1)
    if not -ndim <= index < ndim:
        raise AxisError(
            f"{what} {index} is out of range for a tensor of shape {tuple(shape)}; expected {-ndim} <= {what} < {ndim}"
        )
    return index + ndim if index < 0 else index


def normalize_axes(axis: int | Sequence[int] | None, shape: Sequence[int], what: str = "axis") -> tuple[int, ...]:
    """`axis` (an int, a sequence of ints or None for every dim) as sorted unique non-negative dims of `shape`."""
    if axis is None:
        return tuple(range(len(shape)))
    items = [axis] if not isinstance(axis, (tuple, list)) else list(axis)
    result = [normalize_axis(item, shape, what) for item in items]
    if len(set(result)) != len(result):
        raise ValueError(f"{what} {tuple(items)} repeats a dim of shape {tuple(shape)}")
    if not shape:
        return ()  # the axes 0 / -1 of a 0-dim tensor name no real dim
    return tuple(sorted(result))


def pick_axis(axis: Any, dim: Any, default: Any = None) -> Any:
    """The axis argument given either as `axis` (tinygrad's name) or `dim` (PyTorch's); TypeError for both."""
    if axis is not None and dim is not None:
        raise TypeError(f"pass the axis once: got axis={axis!r} and dim={dim!r}")
    if axis is not None:
        return axis
    return dim if dim is not None else default


def shape_argument(shape: tuple[Any, ...], what: str = "shape") -> tuple[int, ...]:
    """A shape given as separate ints (`zeros(2, 3)`) or as one tuple / list (`zeros((2, 3))`), checked; an entry
    may be a bound Variable (or a bound index expression)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    # an entry that is a bound Variable becomes its size UOp: typed as int like the shapes of the tensor graph, whose
    # symbolic entries are the runtime extension `kiln.tensor.symbolic` describes
    result = cast(
        tuple[int, ...], tuple(size if type(size) is int else as_size(size, f"{what} entry") for size in shape)
    )
    if any(isinstance(size, int) and size < 0 for size in result):
        raise ValueError(f"{what} must not have negative sizes, got {result}")
    return result


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape `shapes` broadcast to under numpy's rules (align on the right; size-1 dims stretch)."""
    if shapes and all(shape == shapes[0] for shape in shapes):
        return tuple(shapes[0])  # the common case (operands of one shape) needs no per-dim work
    ndim = max((len(shape) for shape in shapes), default=0)
    padded = [(1,) * (ndim - len(shape)) + tuple(shape) for shape in shapes]
    result = []
    for position, sizes in enumerate(zip(*padded)):
        grown = {size for size in sizes if size != 1}
        if len(grown) > 1:
            names = " and ".join(str(tuple(shape)) for shape in shapes)
            raise ShapeError(
                f"cannot broadcast shapes {names}: sizes {sorted(grown)} differ at dim {position - ndim} "
                "(each dim must match or be 1)"
            )
        result.append(grown.pop() if grown else 1)
    return tuple(result)


def check_dtype(dtype: object, what: str = "dtype") -> DType:
    """`dtype` as a storable scalar DType; TypeError for anything else (strings are accepted by name)."""
    if isinstance(dtype, str):
        try:
            dtype = dtypes.from_name(dtype)
        except ValueError as error:
            raise TypeError(str(error)) from None
    if not isinstance(dtype, DType) or dtype.count != 1 or dtype in (dtypes.void, dtypes.index):
        raise TypeError(f"{what} must be a scalar kiln dtype such as dtypes.float32, got {dtype!r}")
    return dtype


def check_same_device(what: str, *tensors: TensorCore) -> str | tuple[str, ...]:
    """The device all `tensors` are on; ValueError naming the devices when they differ."""
    devices = [tensor.device for tensor in tensors]
    if any(device != devices[0] for device in devices):
        raise ValueError(f"{what}: tensors must be on one device (move them with .to(device)), got {devices}")
    return devices[0]


def check_device_dtype(device: str | tuple[str, ...], dtype: DType) -> None:
    """TypeError naming both when `device` (or one of a tuple of devices) cannot store `dtype` (each device declares
    `supported_dtypes`).

    Called where a user picks a dtype or a device (creation, `cast`, `bitcast`, `to`), so the error comes at that
    call and not when a buffer is allocated at realize.
    """
    if isinstance(device, tuple):
        for each in device:
            check_device_dtype(each, dtype)
        return
    supported = Device[device].supported_dtypes
    if dtype not in supported:
        names = ", ".join(sorted(item.name for item in supported))
        raise TypeError(f"device {device!r} cannot store {dtype!r}; it supports: {names}")


def check_constant_fits(value: object, dtype: DType) -> None:
    """OverflowError naming `value` and `dtype` when the Python int `value` is outside the integer `dtype`'s range.

    numpy's rule for Python ints given an explicit integer dtype (`np.array([300], dtype=np.uint8)` raises); a
    float or bool value, or a float / bool dtype, is converted as numpy does and never raises here.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not dtypes.is_int(dtype):
        return
    low, high = dtypes.min(dtype), dtypes.max(dtype)
    if not low <= value <= high:
        raise OverflowError(f"Python int {value} is out of bounds for {dtype!r} (range {low} .. {high})")
