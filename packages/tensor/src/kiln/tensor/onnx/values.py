"""The values an ONNX graph passes between nodes besides tensors: sequences of tensors and optionals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kiln.tensor.tensor import Tensor
from kiln.uops.dtype import DType

__all__ = ["OptionalValue", "TensorSequence", "Value", "describe_value", "user_value"]


@dataclass(frozen=True)
class TensorSequence:
    """An ONNX sequence: tensors of one element type (`dtype` names it when the sequence is empty)."""

    items: tuple[Tensor, ...]
    dtype: DType | None = None

    def __len__(self) -> int:
        return len(self.items)

    def position(self, index: int, where: str, insert: bool = False) -> int:
        """`index` (negative counts from the end) checked against the length; one past the end when inserting."""
        length = len(self.items) + (1 if insert else 0)
        if not -length <= index < length:
            raise IndexError(f"{where}: position {index} is outside a sequence of {len(self.items)} tensors")
        return index % length


@dataclass(frozen=True)
class OptionalValue:
    """An ONNX optional: a tensor, a sequence, or nothing."""

    value: Tensor | TensorSequence | None


Value = Tensor | TensorSequence | OptionalValue


def describe_value(value: Value | None) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, Tensor):
        return f"a tensor of shape {list(value.shape)}"
    if isinstance(value, TensorSequence):
        return f"a sequence of {len(value)} tensors"
    return f"an optional holding {describe_value(value.value)}"


def user_value(value: Value) -> Any:
    """A graph output as a caller sees it: a Tensor, a list of Tensors (sequence), None (empty optional)."""
    if isinstance(value, TensorSequence):
        return list(value.items)
    if isinstance(value, OptionalValue):
        return None if value.value is None else user_value(value.value)
    return value
