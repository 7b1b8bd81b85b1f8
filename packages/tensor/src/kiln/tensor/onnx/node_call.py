"""What a handler sees of one node while it runs: its inputs (Tensors, some also known on the host), attributes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from kiln.tensor.onnx.attributes import Attributes
from kiln.tensor.onnx.values import TensorSequence, Value, describe_value
from kiln.tensor.tensor import Tensor

__all__ = ["NodeCall", "Subgraph"]


class Subgraph(Protocol):
    """A node's graph attribute, bound to the enclosing scope: inputs in, outputs out."""

    @property
    def input_names(self) -> list[str]: ...

    def __call__(self, feeds: Sequence[Value | np.ndarray[Any, Any]]) -> list[Value]: ...


@dataclass
class NodeCall:
    """One node's inputs and attributes at run time. Missing optional inputs are None."""

    name: str
    op_type: str
    opset: int
    attributes: Attributes
    inputs: list[Value | None]
    host_values: list[np.ndarray[Any, Any] | None]
    num_outputs: int
    subgraphs: Mapping[str, Subgraph]

    def has(self, index: int) -> bool:
        return index < len(self.inputs) and self.inputs[index] is not None

    def value(self, index: int) -> Value | None:
        """Input `index` whatever it holds (a tensor, sequence or optional), None when missing."""
        return self.inputs[index] if index < len(self.inputs) else None

    def tensor(self, index: int) -> Tensor:
        value = self.value(index)
        if value is None:
            raise ValueError(f"node {self.name!r} ({self.op_type}): input {index} is required but missing")
        return self._as_tensor(index, value)

    def optional(self, index: int) -> Tensor | None:
        value = self.value(index)
        return None if value is None else self._as_tensor(index, value)

    def sequence(self, index: int) -> TensorSequence:
        value = self.value(index)
        if not isinstance(value, TensorSequence):
            raise TypeError(
                f"node {self.name!r} ({self.op_type}): input {index} must be a sequence, got {describe_value(value)}"
            )
        return value

    def _as_tensor(self, index: int, value: Value) -> Tensor:
        if not isinstance(value, Tensor):
            raise TypeError(
                f"node {self.name!r} ({self.op_type}): input {index} must be a tensor, got {describe_value(value)}"
            )
        return value

    def host(self, index: int) -> np.ndarray[Any, Any]:
        """Input `index` as a numpy array: its known value, else read back from the device."""
        known = self.host_values[index] if index < len(self.host_values) else None
        if known is not None:
            return known
        array = np.asarray(self.tensor(index).numpy())
        if index < len(self.host_values):
            self.host_values[index] = array
        return array

    def ints(self, index: int) -> list[int]:
        return [int(value) for value in self.host(index).reshape(-1)]

    def optional_ints(self, index: int) -> list[int] | None:
        return self.ints(index) if self.has(index) else None

    def scalar(self, index: int) -> float | int | bool:
        value = self.host(index).reshape(-1)
        if value.size != 1:
            raise ValueError(
                f"node {self.name!r} ({self.op_type}): input {index} must hold one value, got {value.size}"
            )
        item: float | int | bool = value[0].item()
        return item
