"""A node's attributes as typed Python values, read once at load."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

__all__ = ["Attributes"]


def _attribute_value(attribute: AttributeProto) -> Any:
    kind = attribute.type
    if kind == AttributeProto.FLOAT:
        return float(attribute.f)
    if kind == AttributeProto.INT:
        return int(attribute.i)
    if kind == AttributeProto.STRING:
        return attribute.s.decode("utf-8", errors="replace")
    if kind == AttributeProto.TENSOR:
        return numpy_helper.to_array(attribute.t)
    if kind == AttributeProto.GRAPH:
        return attribute.g
    if kind == AttributeProto.FLOATS:
        return [float(value) for value in attribute.floats]
    if kind == AttributeProto.INTS:
        return [int(value) for value in attribute.ints]
    if kind == AttributeProto.STRINGS:
        return [value.decode("utf-8", errors="replace") for value in attribute.strings]
    if kind == AttributeProto.TENSORS:
        return [numpy_helper.to_array(tensor) for tensor in attribute.tensors]
    if kind == AttributeProto.GRAPHS:
        return list(attribute.graphs)
    if kind == AttributeProto.TYPE_PROTO:
        return attribute.tp
    raise NotImplementedError(f"attribute {attribute.name!r}: attribute type {AttributeProto.AttributeType.Name(kind)}")


@dataclass(frozen=True)
class Attributes:
    """The attributes of one node by name; typed getters with the ONNX defaults given at the call."""

    values: dict[str, Any]

    @classmethod
    def of_node(cls, node: onnx.NodeProto) -> Attributes:
        return cls({attribute.name: _attribute_value(attribute) for attribute in node.attribute})

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def int(self, name: str, default: builtins.int) -> builtins.int:
        return int(self.values.get(name, default))

    def float(self, name: str, default: builtins.float) -> builtins.float:
        return float(self.values.get(name, default))

    def string(self, name: str, default: str) -> str:
        return str(self.values.get(name, default))

    def ints(self, name: str, default: list[builtins.int] | None = None) -> list[builtins.int] | None:
        value = self.values.get(name)
        return default if value is None else [int(item) for item in value]

    def floats(self, name: str, default: list[builtins.float] | None = None) -> list[builtins.float] | None:
        value = self.values.get(name)
        return default if value is None else [float(item) for item in value]

    def array(self, name: str) -> np.ndarray[Any, Any] | None:
        value = self.values.get(name)
        return None if value is None else np.asarray(value)

    def graph(self, name: str) -> onnx.GraphProto:
        value = self.values[name]
        assert isinstance(value, onnx.GraphProto), f"{name} is not a graph attribute"
        return value
