"""Sequences (SequenceConstruct / Empty / At / Insert / Erase / Length, SplitToSequence, ConcatFromSequence,
SequenceMap) and optionals (Optional, OptionalHasElement, OptionalGetElement). A sequence is a tuple of Tensors
known while the graph is traced, so positions and lengths are read on the host."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from kiln.tensor import dtypes
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import operator
from kiln.tensor.onnx.types import dtype_of_element_type
from kiln.tensor.onnx.values import OptionalValue, TensorSequence, Value, describe_value
from kiln.tensor.tensor import Tensor

__all__: list[str] = []


def _where(call: NodeCall) -> str:
    return f"node {call.name!r} ({call.op_type})"


def _one_dtype(call: NodeCall, items: tuple[Tensor, ...]) -> Tensor | None:
    """The first tensor, after checking every item has its dtype (a sequence holds one element type)."""
    for index, item in enumerate(items[1:], start=1):
        if item.dtype != items[0].dtype:
            raise TypeError(f"{_where(call)}: tensor {index} is {item.dtype}, the sequence holds {items[0].dtype}")
    return items[0] if items else None


@operator("SequenceEmpty", attributes=["dtype"], since=11)
def _sequence_empty(call: NodeCall) -> TensorSequence:
    element_type = call.attributes.int("dtype", onnx.TensorProto.FLOAT)
    return TensorSequence((), dtype_of_element_type(element_type, _where(call)))


@operator("SequenceConstruct", since=11)
def _sequence_construct(call: NodeCall) -> TensorSequence:
    items = tuple(call.tensor(index) for index in range(len(call.inputs)))
    first = _one_dtype(call, items)
    return TensorSequence(items, None if first is None else first.dtype)


@operator("SequenceAt", since=11)
def _sequence_at(call: NodeCall) -> Tensor:
    sequence = call.sequence(0)
    return sequence.items[sequence.position(int(call.scalar(1)), _where(call))]


@operator("SequenceInsert", since=11)
def _sequence_insert(call: NodeCall) -> TensorSequence:
    sequence, tensor = call.sequence(0), call.tensor(1)
    if sequence.dtype is not None and tensor.dtype != sequence.dtype:
        raise TypeError(f"{_where(call)}: inserting a {tensor.dtype} tensor into a sequence of {sequence.dtype}")
    position = sequence.position(int(call.scalar(2)), _where(call), insert=True) if call.has(2) else len(sequence)
    items = (*sequence.items[:position], tensor, *sequence.items[position:])
    return TensorSequence(items, tensor.dtype)


@operator("SequenceErase", since=11)
def _sequence_erase(call: NodeCall) -> TensorSequence:
    sequence = call.sequence(0)
    position = sequence.position(int(call.scalar(1)) if call.has(1) else -1, _where(call))
    return TensorSequence(sequence.items[:position] + sequence.items[position + 1 :], sequence.dtype)


@operator("SequenceLength", since=11)
def _sequence_length(call: NodeCall) -> Tensor:
    # a Tensor, not a host value: the length need not follow from the input shapes, so it is never folded
    return Tensor(np.array(len(call.sequence(0)), np.int64))


@operator("SplitToSequence", attributes=["axis", "keepdims"], since=11)
def _split_to_sequence(call: NodeCall) -> TensorSequence:
    x = call.tensor(0)
    axis = call.attributes.int("axis", 0)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{_where(call)}: axis {axis} is outside a tensor of rank {x.ndim}")
    axis %= x.ndim
    length = x.shape[axis]
    if not call.has(1):
        pieces = tuple(x.split(1, dim=axis)) if length else ()
        if not call.attributes.int("keepdims", 1):
            pieces = tuple(piece.squeeze(axis) for piece in pieces)
        return TensorSequence(pieces, x.dtype)
    split = call.host(1)
    if split.ndim == 0:
        size = int(split)
        if size <= 0:
            raise ValueError(f"{_where(call)}: split size {size} must be positive")
        sizes = [size] * (length // size) + ([length % size] if length % size else [])
    else:
        sizes = [int(value) for value in split.reshape(-1)]
        if sum(sizes) != length or any(value < 0 for value in sizes):
            raise ValueError(f"{_where(call)}: split sizes {sizes} do not add up to dim {axis} of size {length}")
    return TensorSequence(tuple(x.split(sizes, dim=axis)), x.dtype)


@operator("ConcatFromSequence", attributes=["axis", "new_axis"], since=11)
def _concat_from_sequence(call: NodeCall) -> Tensor:
    sequence = call.sequence(0)
    if not sequence.items:
        raise ValueError(f"{_where(call)}: cannot concatenate an empty sequence")
    axis = call.attributes.int("axis", 0)
    rank = sequence.items[0].ndim + (1 if call.attributes.int("new_axis", 0) else 0)
    if not -rank <= axis < rank:
        raise ValueError(f"{_where(call)}: axis {axis} is outside rank {rank}")
    if call.attributes.int("new_axis", 0):
        return Tensor.stack(*sequence.items, dim=axis % rank)
    first, *rest = sequence.items
    return first.cat(*rest, dim=axis % rank)


@operator("SequenceMap", graph_attributes=["body"], since=17)
def _sequence_map(call: NodeCall) -> list[TensorSequence]:
    """The body once per position: sequence inputs give their item at the position, tensor inputs pass whole."""
    body = call.subgraphs["body"]
    inputs = [call.value(index) for index in range(len(call.inputs))]
    length = len(call.sequence(0))
    for index, value in enumerate(inputs):
        if isinstance(value, TensorSequence) and len(value) != length:
            raise ValueError(f"{_where(call)}: sequence input {index} holds {len(value)} tensors, input 0 {length}")
    collected: list[list[Tensor]] = [[] for _ in range(call.num_outputs)]
    for position in range(length):
        feeds: list[Value | np.ndarray[Any, Any]] = []
        for value in inputs:
            if value is None:
                raise ValueError(f"{_where(call)}: an input is missing")
            feeds.append(value.items[position] if isinstance(value, TensorSequence) else value)
        for bucket, output in zip(collected, body(feeds)):
            if not isinstance(output, Tensor):
                raise TypeError(f"{_where(call)}: the body must return tensors, got {describe_value(output)}")
            bucket.append(output)
    return [TensorSequence(tuple(bucket), bucket[0].dtype if bucket else None) for bucket in collected]


@operator("Optional", attributes=["type"], since=15)
def _optional(call: NodeCall) -> OptionalValue:
    value = call.value(0)
    if isinstance(value, OptionalValue):
        raise TypeError(f"{_where(call)}: an optional cannot hold an optional")
    return OptionalValue(value)


@operator("OptionalHasElement", since=15)
def _optional_has_element(call: NodeCall) -> Tensor:
    value = call.value(0)
    present = value.value is not None if isinstance(value, OptionalValue) else value is not None
    return Tensor(np.array(present)).cast(dtypes.bool)


@operator("OptionalGetElement", since=15)
def _optional_get_element(call: NodeCall) -> Tensor | TensorSequence:
    value = call.value(0)
    if isinstance(value, OptionalValue):
        if value.value is None:
            raise ValueError(f"{_where(call)}: the optional input holds nothing")
        return value.value
    if value is None:
        raise ValueError(f"{_where(call)}: input 0 is required but missing")
    return value
