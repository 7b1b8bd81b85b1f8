"""Control flow: If, Loop and Scan, unrolled into the traced graph (a condition or trip count is read on the host)."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.tensor import dtypes
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import operator
from kiln.tensor.onnx.values import Value, describe_value
from kiln.tensor.tensor import Tensor

__all__: list[str] = []


def _tensor(value: Value, where: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{where} must be a tensor, got {describe_value(value)}")
    return value


@operator("If", graph_attributes=["then_branch", "else_branch"])
def _if(call: NodeCall) -> list[Value]:
    branch = "then_branch" if bool(call.scalar(0)) else "else_branch"
    return call.subgraphs[branch]([])


def _stack(pieces: list[Tensor], axis: int) -> Tensor:
    return Tensor.stack(*pieces, dim=axis) if pieces else Tensor.zeros(0)


@operator("Loop", graph_attributes=["body"])
def _loop(call: NodeCall) -> list[Value]:
    body = call.subgraphs["body"]
    trip_count = int(call.scalar(0)) if call.has(0) else None
    condition = bool(call.scalar(1)) if call.has(1) else True
    carried: list[Value] = []
    for index in range(2, len(call.inputs)):
        value = call.value(index)
        if value is None:
            raise ValueError(f"node {call.name!r} (Loop): loop-carried input {index} is missing")
        carried.append(value)
    scanned: list[list[Tensor]] = []
    iteration = 0
    while condition and (trip_count is None or iteration < trip_count):
        feeds: list[Value | np.ndarray[Any, Any]] = [np.array(iteration, np.int64), np.array(condition)]
        outputs = body([*feeds, *carried])
        condition_tensor, carried = _tensor(outputs[0], "the Loop body's condition"), outputs[1 : 1 + len(carried)]
        scan_outputs = outputs[1 + len(carried) :]
        if not scanned:
            scanned = [[] for _ in scan_outputs]
        for collected, value in zip(scanned, scan_outputs):
            collected.append(_tensor(value, "a Loop scan output"))
        condition = bool(condition_tensor.cast(dtypes.bool).item())
        iteration += 1
    scan_count = call.num_outputs - len(carried)
    stacked: list[Value] = (
        [_stack(collected, 0) for collected in scanned] if scanned else [Tensor.zeros(0)] * scan_count
    )
    return [*carried, *stacked]


@operator(
    "Scan",
    attributes=[
        "num_scan_inputs",
        "scan_input_axes",
        "scan_input_directions",
        "scan_output_axes",
        "scan_output_directions",
    ],
    graph_attributes=["body"],
    since=9,
)
def _scan(call: NodeCall) -> list[Tensor]:
    body = call.subgraphs["body"]
    scan_count = call.attributes.int("num_scan_inputs", 0)
    inputs = [call.tensor(index) for index in range(len(call.inputs))]
    states, sequences = inputs[: len(inputs) - scan_count], inputs[len(inputs) - scan_count :]
    input_axes = call.attributes.ints("scan_input_axes") or [0] * scan_count
    input_directions = call.attributes.ints("scan_input_directions") or [0] * scan_count
    axes = [axis % sequence.ndim for axis, sequence in zip(input_axes, sequences)]
    length = sequences[0].shape[axes[0]]
    collected: list[list[Tensor]] = []
    for step in range(length):
        slices = []
        for sequence, axis, direction in zip(sequences, axes, input_directions):
            position = length - 1 - step if direction else step
            slices.append(
                sequence.shrink(
                    [None if dim != axis else (position, position + 1) for dim in range(sequence.ndim)]
                ).squeeze(axis)
            )
        outputs = [_tensor(output, "a Scan body output") for output in body([*states, *slices])]
        states = outputs[: len(states)]
        if not collected:
            collected = [[] for _ in outputs[len(states) :]]
        for bucket, value in zip(collected, outputs[len(states) :]):
            bucket.append(value)
    output_axes = call.attributes.ints("scan_output_axes") or [0] * len(collected)
    output_directions = call.attributes.ints("scan_output_directions") or [0] * len(collected)
    results = []
    for bucket, axis, direction in zip(collected, output_axes, output_directions):
        ordered = list(reversed(bucket)) if direction else bucket
        results.append(_stack(ordered, axis % (ordered[0].ndim + 1)))
    return [*states, *results]
