"""Nodes computed with numpy while a graph is translated, when every input is a small value known on the host.

A transformer export computes its shapes, position ids and masks from `Shape` through chains of Gather, Concat,
Add, Mul, Div, Range, comparisons and Where. Those values depend only on the input shapes and the initializers, so
the translation folds them once per set of input shapes (graph_program.py). Folded as kiln kernels, each such node
is a realize of its own: scheduled, its program built by the C compiler on first sight, launched, read back
(bert.onnx: 39 launches and 10 programs at load; gpt2.onnx 45 launches). The rules here give the same values from
numpy at no build cost; a node outside their reach (another op, mixed dtypes, an index out of range, an integer
division by zero, a float Range) returns None and runs as a kiln kernel as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln.tensor.onnx.attributes import Attributes

__all__ = ["host_fold"]

_Array = np.ndarray[Any, Any]
_Rule = Callable[[list[_Array], Attributes], _Array | None]


def _same_dtype(arrays: Sequence[_Array]) -> bool:
    return len({array.dtype for array in arrays}) == 1


def _numeric(array: _Array) -> bool:
    return array.dtype.kind in "iuf"


def _gather(inputs: list[_Array], attributes: Attributes) -> _Array | None:
    data, indices = inputs
    if data.ndim == 0 or indices.dtype.kind not in "iu":
        return None
    axis = attributes.int("axis", 0)
    if not -data.ndim <= axis < data.ndim:
        return None
    size = data.shape[axis]
    if indices.size and (indices.min() < -size or indices.max() >= size):
        return None  # the kiln rule names the bad index
    return np.take(data, np.where(indices < 0, indices + size, indices), axis=axis)


def _concat(inputs: list[_Array], attributes: Attributes) -> _Array | None:
    if not _same_dtype(inputs) or len({array.ndim for array in inputs}) != 1 or inputs[0].ndim == 0:
        return None
    axis = attributes.int("axis", 0)
    if not -inputs[0].ndim <= axis < inputs[0].ndim:
        return None
    try:
        return np.concatenate(inputs, axis=axis)
    except ValueError:
        return None  # mismatched sizes: the kiln rule raises its own error


def _arithmetic(function: Callable[[_Array, _Array], _Array]) -> _Rule:
    def rule(inputs: list[_Array], attributes: Attributes) -> _Array | None:
        a, b = inputs
        if not _same_dtype(inputs) or not _numeric(a):
            return None
        with np.errstate(all="ignore"):  # float overflow is inf and 0 / 0 NaN, as in a kernel
            return np.asarray(function(a, b), dtype=a.dtype)

    return rule


def _divide(inputs: list[_Array], attributes: Attributes) -> _Array | None:
    a, b = inputs
    if not _same_dtype(inputs) or not _numeric(a):
        return None
    if a.dtype.kind == "f":
        with np.errstate(all="ignore"):
            return np.asarray(np.true_divide(a, b), dtype=a.dtype)
    if np.any(b == 0):
        return None
    # integer Div truncates toward zero
    magnitude = np.abs(a) // np.abs(b)
    return np.asarray(np.where((a < 0) != (b < 0), -magnitude, magnitude), dtype=a.dtype)


def _comparison(function: Callable[[_Array, _Array], _Array]) -> _Rule:
    def rule(inputs: list[_Array], attributes: Attributes) -> _Array | None:
        if not _same_dtype(inputs) or not (_numeric(inputs[0]) or inputs[0].dtype == np.bool_):
            return None
        return np.asarray(function(inputs[0], inputs[1]))

    return rule


def _where(inputs: list[_Array], attributes: Attributes) -> _Array | None:
    condition, x, y = inputs
    if condition.dtype != np.bool_ or not _same_dtype([x, y]):
        return None
    return np.asarray(np.where(condition, x, y), dtype=x.dtype)


def _range(inputs: list[_Array], attributes: Attributes) -> _Array | None:
    if not _same_dtype(inputs) or inputs[0].dtype.kind not in "iu" or any(array.size != 1 for array in inputs):
        return None  # a float range's length and values depend on rounding: the kiln rule keeps them
    start, limit, delta = (int(array.reshape(-1)[0]) for array in inputs)
    if delta == 0:
        return None
    count = max(-((start - limit) // delta), 0)  # ceil((limit - start) / delta)
    return np.asarray(start + delta * np.arange(count), dtype=inputs[0].dtype)


_RULES: dict[str, tuple[int, _Rule]] = {
    "Gather": (2, _gather),
    "Concat": (-1, _concat),
    "Add": (2, _arithmetic(np.add)),
    "Sub": (2, _arithmetic(np.subtract)),
    "Mul": (2, _arithmetic(np.multiply)),
    "Div": (2, _divide),
    "Equal": (2, _comparison(np.equal)),
    "Less": (2, _comparison(np.less)),
    "LessOrEqual": (2, _comparison(np.less_equal)),
    "Greater": (2, _comparison(np.greater)),
    "GreaterOrEqual": (2, _comparison(np.greater_equal)),
    "Where": (3, _where),
    "Range": (3, _range),
}


def host_fold(op_type: str, inputs: Sequence[_Array | None], attributes: Attributes) -> _Array | None:
    """The output of a default-domain node `op_type` computed with numpy from its host-known `inputs`, or None when
    no rule here covers it (the op, a missing input, the dtypes, the values)."""
    found = _RULES.get(op_type)
    if found is None:
        return None
    arity, rule = found
    if any(value is None for value in inputs) or (arity >= 0 and len(inputs) != arity) or not inputs:
        return None
    return rule([value for value in inputs if value is not None], attributes)
