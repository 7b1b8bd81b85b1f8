"""Inference BatchNormalization folded into the Conv before it, once at load.

An inference BatchNormalization is a per-channel affine map, y = (x - mean) * s + bias with s = scale /
sqrt(var + epsilon). After a Conv with weight W and bias B it equals one Conv with weight W * s (per output channel)
and bias (B - mean) * s + bias: the normalization costs nothing at run time, and the convolution's epilogue (bias,
activation, residual add) stays one kernel. onnxruntime's graph optimizer makes the same rewrite.

A pair is folded only when nothing else can tell: the Conv's output is read by the BatchNormalization alone (not by
another node, a subgraph or the graph's outputs), the weight, the Conv bias and the four statistics are initializers
that are not also graph inputs (a caller could feed another value), the dtypes are floating point and the node is in
inference mode with per-channel statistics. The folded values are computed in float64 and stored in the weight's
dtype.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from kiln.tensor.onnx.model_file import initializer_array

__all__ = ["fold_batch_normalizations"]

_DEFAULT_DOMAINS = ("", "ai.onnx")
_FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16})


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            yield from attribute.graphs


def _names_read_inside(graph: onnx.GraphProto) -> set[str]:
    """Every name a node of `graph` or of its nested subgraphs reads (outer values included)."""
    names: set[str] = set()
    for node in graph.node:
        names.update(node.input)
        for subgraph in _subgraphs(node):
            names |= _names_read_inside(subgraph)
    return names


def _inference_mode(node: onnx.NodeProto) -> bool:
    attributes = {attribute.name: attribute for attribute in node.attribute}
    if "training_mode" in attributes and attributes["training_mode"].i != 0:
        return False
    if "spatial" in attributes and attributes["spatial"].i != 1:
        return False  # opset < 9 with spatial 0: statistics per element, not per channel
    if "is_test" in attributes and attributes["is_test"].i == 0:
        return False
    return len(node.input) == 5 and sum(1 for name in node.output if name) == 1


def _epsilon(node: onnx.NodeProto) -> float:
    for attribute in node.attribute:
        if attribute.name == "epsilon":
            return float(attribute.f)
    return 1e-5


def _folded_arrays(
    weight: np.ndarray[Any, Any],
    conv_bias: np.ndarray[Any, Any] | None,
    statistics: list[np.ndarray[Any, Any]],
    epsilon: float,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
    """(W * s, (B - mean) * s + bias) in W's dtype, or None when the shapes do not line up per output channel."""
    channels = weight.shape[0]
    if any(array.shape != (channels,) for array in statistics):
        return None
    if conv_bias is not None and conv_bias.shape != (channels,):
        return None
    scale, bias, mean, variance = (array.astype(np.float64) for array in statistics)
    factor = scale / np.sqrt(variance + epsilon)
    folded_weight = weight.astype(np.float64) * factor.reshape(channels, *[1] * (weight.ndim - 1))
    shift = np.zeros(channels) if conv_bias is None else conv_bias.astype(np.float64)
    folded_bias = (shift - mean) * factor + bias
    return folded_weight.astype(weight.dtype), folded_bias.astype(weight.dtype)


def fold_batch_normalizations(model: onnx.ModelProto, external_base: Path | None) -> onnx.ModelProto:
    """`model` with each foldable Conv -> BatchNormalization pair of its main graph made one Conv (a copy; `model`
    itself is returned when there is nothing to fold)."""
    graph = model.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    fed = {value.name for value in graph.input}
    readers: Counter[str] = Counter(name for node in graph.node for name in node.input if name)
    readers.update(value.name for value in graph.output)
    for node in graph.node:
        for subgraph in _subgraphs(node):
            readers.update(_names_read_inside(subgraph))
    producers = {name: node for node in graph.node for name in node.output if name}

    def constant(name: str) -> bool:
        return name in initializers and name not in fed and initializers[name].data_type in _FLOAT_TYPES

    plans: dict[int, tuple[onnx.NodeProto, onnx.NodeProto]] = {}  # id(conv) -> (conv, batch normalization)
    for node in graph.node:
        if node.op_type != "BatchNormalization" or node.domain not in _DEFAULT_DOMAINS or not _inference_mode(node):
            continue
        conv = producers.get(node.input[0])
        if conv is None or conv.op_type != "Conv" or conv.domain not in _DEFAULT_DOMAINS or readers[node.input[0]] != 1:
            continue
        if not all(constant(name) for name in (*conv.input[1:], *node.input[1:]) if name):
            continue
        plans[id(conv)] = (conv, node)
    if not plans:
        return model
    folded_model = onnx.ModelProto()
    folded_model.CopyFrom(model)
    replaced: dict[int, onnx.NodeProto] = {}
    new_initializers: list[onnx.TensorProto] = []
    for number, (conv, normalization) in enumerate(plans.values()):
        arrays = [initializer_array(initializers[name], external_base) for name in normalization.input[1:]]
        weight = initializer_array(initializers[conv.input[1]], external_base)
        bias_input = conv.input[2] if len(conv.input) > 2 else ""
        conv_bias = initializer_array(initializers[bias_input], external_base) if bias_input else None
        folded = _folded_arrays(weight, conv_bias, arrays, _epsilon(normalization))
        if folded is None:
            continue
        weight_name = f"{conv.input[1]}/folded_batch_normalization_{number}"
        bias_name = f"{normalization.output[0]}/folded_batch_normalization_bias_{number}"
        new_initializers.append(numpy_helper.from_array(folded[0], weight_name))
        new_initializers.append(numpy_helper.from_array(folded[1], bias_name))
        merged = onnx.NodeProto()
        merged.CopyFrom(conv)
        del merged.input[:]
        merged.input.extend([conv.input[0], weight_name, bias_name])
        del merged.output[:]
        merged.output.extend([normalization.output[0]])
        replaced[id(conv)] = merged
        replaced[id(normalization)] = onnx.NodeProto()  # dropped
    nodes = [replaced.get(id(node), node) for node in graph.node]
    del folded_model.graph.node[:]
    folded_model.graph.node.extend(node for node in nodes if node.op_type)
    still_read = _names_read_inside(folded_model.graph) | {value.name for value in graph.output} | fed
    kept = [tensor for tensor in folded_model.graph.initializer if tensor.name in still_read]
    del folded_model.graph.initializer[:]
    folded_model.graph.initializer.extend([*kept, *new_initializers])
    return folded_model
