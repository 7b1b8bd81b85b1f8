"""Host data (numpy arrays, numpy scalars, nested Python sequences) as tensor-graph nodes: a BUFFER holding the
values, reshaped to their shape; and the dtype correspondence between kiln and numpy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.runtime import Buffer
from kiln.tensor import graph
from kiln.tensor.realize.buffers import attach_buffer
from kiln.uops import DType, UOp, dtypes

__all__ = ["dtype_from_numpy", "numpy_from_dtype", "uop_from_host"]

# numpy's dtype for each kiln dtype with a struct format (all but bfloat16 and the fp8s), by numpy's name for it: the
# inverse of numpy_from_dtype
_NUMPY_TO_DTYPE: dict[str, DType] = {np.dtype(dtype.fmt).name: dtype for dtype in dtypes.all if dtype.fmt is not None}


def dtype_from_numpy(dtype: np.dtype[Any]) -> DType:
    """The kiln dtype of a numpy dtype; TypeError for numpy dtypes kiln has no counterpart of."""
    found = _NUMPY_TO_DTYPE.get(dtype.name)
    if found is None:
        raise TypeError(f"numpy dtype {dtype} has no kiln dtype; expected one of {sorted(_NUMPY_TO_DTYPE)}")
    return found


def numpy_from_dtype(dtype: DType) -> np.dtype[Any]:
    """The numpy dtype of a kiln dtype; TypeError for bfloat16 / fp8 (numpy has none)."""
    if dtype.fmt is None:
        raise TypeError(f"numpy has no dtype for {dtype!r}")
    return np.dtype(dtype.fmt)


def uop_from_host(data: Any, dtype: DType | None, device: str) -> UOp:
    """A BUFFER (reshaped to the data's shape) holding host data: a numpy array, numpy scalar or nested sequence."""
    if isinstance(data, np.ndarray | np.generic):
        array = np.asarray(data)
        natural = dtype_from_numpy(array.dtype)
    elif isinstance(data, (list, tuple)):
        if dtype is not None and dtype.fmt is not None:
            natural = dtype  # numpy checks each value against it: OverflowError naming an out-of-range one
        else:
            natural = dtypes.from_py(data) if _has_items(data) else dtypes.default_float
        try:
            array = np.array(data, dtype=numpy_from_dtype(natural))
        except OverflowError as error:
            bad = next((item for item in _flatten(data) if not _fits(item, natural)), None)
            named = f"value {bad!r} is out of range" if bad is not None else str(error)
            raise OverflowError(f"cannot build a {natural!r} tensor: {named} ({error})") from None
        except ValueError as error:
            what = "ragged or mixed data" if "sequence" in str(error) or "inhomogeneous" in str(error) else "this data"
            raise ValueError(f"cannot build a {natural!r} tensor from {what}: {error}") from None
        if array.dtype == object:
            raise ValueError("cannot build a tensor from ragged nested sequences")
    else:
        raise TypeError(
            f"cannot build a Tensor from {type(data).__name__}; expected a numpy array, list, tuple, scalar or Tensor"
        )
    if dtype is not None and dtype != natural and dtype.fmt is not None:
        array, natural = array.astype(numpy_from_dtype(dtype)), dtype
    shape = array.shape
    flat = np.ascontiguousarray(array).reshape(-1)
    node = graph.buffer_uop(device, flat.size, natural)
    buffer = Buffer(device, flat.size, natural)
    buffer.copyin(flat.view(np.uint8) if flat.size else b"")
    attach_buffer(node, buffer)
    uop = graph.reshape(node, shape)
    # a dtype numpy cannot hold (bfloat16, fp8) is reached by a cast on the device
    return graph.cast(uop, dtype) if dtype is not None else uop


def _flatten(data: Any) -> list[Any]:
    if isinstance(data, (list, tuple)):
        return [item for part in data for item in _flatten(part)]
    return [data]


def _fits(value: Any, dtype: DType) -> bool:
    # whether a Python number converts to the integer dtype without overflow (numpy's rule: floats truncate)
    if not dtypes.is_int(dtype) or isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return bool(dtypes.min(dtype) <= math.trunc(value) <= dtypes.max(dtype))


def _has_items(data: Sequence[Any]) -> bool:
    return any(not isinstance(item, (list, tuple)) or _has_items(item) for item in data)
