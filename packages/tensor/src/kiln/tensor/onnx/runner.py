"""`OnnxRunner`: an ONNX model loaded, checked and translated once, then run on dicts of inputs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import onnx

# the operator families register their rules on import
from kiln.tensor.onnx import (  # noqa: F401
    attention_ops,
    contrib_ops,
    control_flow_ops,
    detection_ops,
    elementwise_ops,
    loss_ops,
    neural_ops,
    quantization_ops,
    recurrent_ops,
    reduction_ops,
    resize_ops,
    sampling_ops,
    sequence_ops,
    shape_ops,
    signal_ops,
)
from kiln.tensor.onnx.batchnorm_folding import fold_batch_normalizations
from kiln.tensor.onnx.function_expansion import expand_schema_functions
from kiln.tensor.onnx.graph_program import GraphInput, GraphProgram
from kiln.tensor.onnx.model_file import default_opset, open_model
from kiln.tensor.onnx.registry import OPERATORS
from kiln.tensor.onnx.replay_cache import ReplayCache
from kiln.tensor.onnx.values import user_value

__all__ = ["OnnxRunner"]


class OnnxRunner:
    """Run an ONNX model with kiln Tensors.

    Args:
        model: a path to a .onnx file, its bytes, or an `onnx.ModelProto`. External data files are read from the
            model's folder only.

    Every node is checked at load: an unsupported operator, opset, dtype or attribute raises NotImplementedError
    naming the node, op type and domain; a malformed file raises ValueError.

    Example:
        >>> runner = OnnxRunner("model.onnx")                       # doctest: +SKIP
        >>> outputs = runner({"input": np.zeros((1, 3), np.float32)})  # doctest: +SKIP
        >>> outputs["output"].numpy()                               # doctest: +SKIP
    """

    def __init__(self, model: str | os.PathLike[str] | bytes | onnx.ModelProto):
        opened, external_base = open_model(model)
        self.opset = default_opset(opened)
        expanded = expand_schema_functions(opened, self.opset, lambda op_type: op_type in OPERATORS)
        self.model = fold_batch_normalizations(expanded, external_base)
        self.graph = GraphProgram(self.model.graph, self.opset, external_base=external_base)
        self.replays = ReplayCache(self.graph.run)

    @property
    def inputs(self) -> list[GraphInput]:
        """The graph inputs a call must give (initializers excluded)."""
        return list(self.graph.inputs)

    @property
    def outputs(self) -> list[str]:
        return list(self.graph.outputs)

    def __call__(self, inputs: Mapping[str, Any], debug: bool = False) -> dict[str, Any]:
        """The model's outputs by name for `inputs` (numpy arrays, Tensors or scalars by input name; a list of them
        for a sequence input, None for an empty optional). Outputs are Tensors, lists of Tensors for sequences,
        None for an empty optional."""
        if not isinstance(inputs, Mapping):
            raise TypeError(f"OnnxRunner: expected a dict of inputs by name, got {type(inputs).__name__}")
        unknown = sorted(set(inputs) - {entry.name for entry in self.graph.inputs} - set(self.graph.initializers))
        if unknown:
            expected = ", ".join(entry.name for entry in self.graph.inputs)
            raise ValueError(f"OnnxRunner: unknown input(s) {', '.join(unknown)}; the model takes {expected}")
        # an overridden default would not be part of a replay's signature: such calls run plainly
        overrides = any(name in self.graph.defaults for name in inputs)
        tensors = None if overrides else self.graph.tensor_feeds(inputs)
        results = self.graph.run(inputs) if tensors is None else self.replays(tensors)
        return {name: user_value(value) for name, value in results.items()}
