"""An ONNX graph checked and translated once: initializers as realized Tensors, one checked rule per node.

`GraphProgram.run` walks the nodes in order, calling each rule's handler on kiln Tensors. Values known on the host
(initializers, constants, shapes) travel beside their Tensors; a deterministic node whose inputs are all known is
computed once per set of input shapes and kept (a Shape -> Gather -> Concat chain becomes Python ints, so Reshape
gets concrete shapes, and weight transforms such as DequantizeLinear of int8 initializers run once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from kiln.tensor.onnx.attributes import Attributes
from kiln.tensor.onnx.host_folding import host_fold
from kiln.tensor.onnx.materialize import materialized_if_computed, shared_product_inputs
from kiln.tensor.onnx.model_file import initializer_array
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import DEFAULT_DOMAINS, MICROSOFT_DOMAIN, OPERATORS, OperatorRule, rule_for
from kiln.tensor.onnx.types import dtype_of_element_type, element_type_name, numpy_dtype_of_element_type
from kiln.tensor.onnx.values import OptionalValue, TensorSequence, Value
from kiln.tensor.tensor import Tensor
from kiln.uops.dtype import DType

__all__ = ["GraphInput", "GraphProgram", "tensor_from_array"]

# What a rule's handler returns: one output, or one per output (None for one left out)
_Result = Value | np.ndarray[Any, Any] | Sequence[Value | np.ndarray[Any, Any] | None]

# Folded values are kept for this many distinct sets of input shapes.
_FOLD_SIGNATURES = 32
# Host copies are kept for known values up to this many elements (shapes, indices, scalars).
_HOST_COPY_LIMIT = 1 << 16


def _contiguous(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    # np.ascontiguousarray would turn a 0-d array into a 1-d one
    return np.require(array, requirements="C")


def tensor_from_array(array: np.ndarray[Any, Any], dtype: DType | None = None) -> Tensor:
    """A realized Tensor holding `array` (cast to `dtype` when given, e.g. bfloat16 read as float32)."""
    tensor = Tensor(_contiguous(array))
    if dtype is not None and tensor.dtype != dtype:
        tensor = tensor.cast(dtype)
    return tensor.realize()


def _with_node(error: Exception, where: str) -> Exception:
    """The same kind of error with the node named first (a RuntimeError when its class takes other arguments)."""
    message = f"{where}: {error}"
    try:
        return type(error)(message)
    except TypeError:
        return RuntimeError(message)


@dataclass(frozen=True)
class GraphInput:
    """A graph input: its name, kiln dtype and dims (an int, or a str for a named dim, or None); `kind` is "tensor",
    "sequence" or "optional" (dtype and dims then describe the elements)."""

    name: str
    dtype: DType | None
    element_type: int
    dims: tuple[int | str | None, ...] | None
    kind: str = "tensor"


@dataclass(frozen=True)
class CompiledNode:
    index: int
    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: Attributes
    rule: OperatorRule
    subgraphs: dict[str, GraphProgram]


def _shapes(value: Value) -> Any:
    """What the folded values of a graph may depend on in an input: its shape, or its items' shapes."""
    if isinstance(value, Tensor):
        return value.shape
    if isinstance(value, TensorSequence):
        return ("sequence", *(item.shape for item in value.items))
    return ("optional", None if value.value is None else _shapes(value.value))


def _node_label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"#{index} ({node.op_type} -> {', '.join(node.output)})"


def _element_tensor_type(type_proto: onnx.TypeProto) -> onnx.TypeProto.Tensor | None:
    """The tensor type inside a tensor, sequence or optional type (None when it holds none: maps, sparse)."""
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        return type_proto.tensor_type
    if which == "sequence_type":
        return _element_tensor_type(type_proto.sequence_type.elem_type)
    if which == "optional_type":
        return _element_tensor_type(type_proto.optional_type.elem_type)
    return None


def _describe_dims(value: onnx.ValueInfoProto) -> tuple[int | str | None, ...] | None:
    tensor_type = _element_tensor_type(value.type)
    if tensor_type is None:
        return None
    if not tensor_type.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param"):
            dims.append(str(dim.dim_param))
        else:
            dims.append(None)
    return tuple(dims)


@dataclass(frozen=True)
class BoundSubgraph:
    """A subgraph with the enclosing graph's values in scope: called with its inputs, returns its outputs."""

    program: GraphProgram
    outer: Mapping[str, Value]
    outer_host: Mapping[str, np.ndarray[Any, Any]]

    @property
    def input_names(self) -> list[str]:
        return [entry.name for entry in self.program.inputs]

    def __call__(self, feeds: Sequence[Value | np.ndarray[Any, Any]]) -> list[Value]:
        names = self.input_names
        if len(feeds) != len(names):
            raise ValueError(f"{self.program.where}: takes {len(names)} inputs, got {len(feeds)}")
        results = self.program.run(dict(zip(names, feeds)), self.outer, self.outer_host)
        return [results[name] for name in self.program.outputs]


class GraphProgram:
    """One ONNX graph (the model's, or an If / Loop / Scan body) ready to run."""

    def __init__(
        self,
        graph: onnx.GraphProto,
        opset: int,
        outer_names: Sequence[str] = (),
        where: str = "graph",
        external_base: Path | None = None,
    ):
        self.opset = opset
        self.external_base = external_base
        self.where = where
        # a subgraph's values also depend on the enclosing graph's, which its cache key does not see: no folding
        self.folding = not outer_names
        self.initializers: dict[str, Tensor] = {}
        self.initializer_host: dict[str, np.ndarray[Any, Any]] = {}
        for initializer in graph.initializer:
            label = f"{where}: initializer {initializer.name!r}"
            dtype = dtype_of_element_type(initializer.data_type, label)
            try:
                array = initializer_array(initializer, external_base)
            except (ValueError, TypeError) as error:
                raise ValueError(f"{label}: unreadable data ({error})") from error
            array = array.astype(numpy_dtype_of_element_type(initializer.data_type), copy=False)
            self.initializers[initializer.name] = tensor_from_array(array, dtype)
            if array.size <= _HOST_COPY_LIMIT:
                self.initializer_host[initializer.name] = np.array(array)  # not a view of a mapped file
        self.inputs: list[GraphInput] = []
        # an initializer also listed as a graph input is a default a caller may override (IR version 4 and later)
        self.defaults: dict[str, GraphInput] = {}
        for value in graph.input:
            if value.name in self.initializers:
                self.defaults[value.name] = self._graph_input(value, subgraph=bool(outer_names))
                continue
            self.inputs.append(self._graph_input(value, subgraph=bool(outer_names)))
        self.outputs = [value.name for value in graph.output]
        for value in graph.output:
            self._check_value_type(value, "output")
        known = set(self.initializers) | {entry.name for entry in self.inputs} | set(outer_names) | {""}
        self.nodes: list[CompiledNode] = []
        for index, node in enumerate(graph.node):
            self.nodes.append(self._compile_node(node, index, known))
            known.update(node.output)
        for name in self.outputs:
            if name not in known:
                raise ValueError(f"{where}: output {name!r} is produced by no node")
        self._folds: dict[tuple[Any, ...], dict[int, list[tuple[Tensor | None, np.ndarray[Any, Any] | None]]]] = {}
        # computed once into memory for all their readers (see materialize.py)
        self.materialized = shared_product_inputs(graph)

    def _check_value_type(self, value: onnx.ValueInfoProto, kind: str) -> DType | None:
        which = value.type.WhichOneof("value")
        if which is None:
            return None  # subgraph inputs and outputs may leave their type to inference
        tensor_type = _element_tensor_type(value.type)
        if tensor_type is None:
            raise NotImplementedError(
                f"{self.where}: {kind} {value.name!r} is a {which}; "
                "kiln runs tensors and sequences or optionals of them"
            )
        element_type = tensor_type.elem_type
        if element_type == 0:
            return None
        return dtype_of_element_type(element_type, f"{self.where}: {kind} {value.name!r}")

    def _graph_input(self, value: onnx.ValueInfoProto, subgraph: bool) -> GraphInput:
        dtype = self._check_value_type(value, "input")
        kind = {"sequence_type": "sequence", "optional_type": "optional"}.get(str(value.type.WhichOneof("value")))
        if dtype is None and not subgraph and kind is None:
            raise ValueError(f"{self.where}: input {value.name!r} declares no element type")
        tensor_type = _element_tensor_type(value.type)
        element_type = 0 if tensor_type is None else tensor_type.elem_type
        return GraphInput(value.name, dtype, element_type, _describe_dims(value), kind or "tensor")

    def _compile_node(self, node: onnx.NodeProto, index: int, known: set[str]) -> CompiledNode:
        label = _node_label(node, index)
        where = f"{self.where}: node {label}, op type {node.op_type!r}, domain {node.domain or 'ai.onnx'!r}"
        if node.domain not in (*DEFAULT_DOMAINS, MICROSOFT_DOMAIN):
            raise NotImplementedError(
                f"{where}: the domain {node.domain!r} is not supported (only ai.onnx and {MICROSOFT_DOMAIN})"
            )
        rule = rule_for(node.domain, node.op_type)
        if rule is None:
            raise NotImplementedError(f"{where}: kiln has no rule for this operator")
        if node.domain in DEFAULT_DOMAINS and self.opset < rule.since:
            raise NotImplementedError(f"{where}: supported from opset {rule.since}, the model uses opset {self.opset}")
        unknown = sorted({attribute.name for attribute in node.attribute} - rule.attributes)
        if unknown:
            raise NotImplementedError(f"{where}: unsupported attribute(s) {', '.join(unknown)}")
        try:
            attributes = Attributes.of_node(node)
        except NotImplementedError as error:
            raise NotImplementedError(f"{where}: {error}") from error
        for name in ("to", "output_dtype", "dtype"):
            if name in attributes and isinstance(attributes.values[name], int) and attributes.values[name] != 0:
                dtype_of_element_type(attributes.values[name], f"{where}: attribute {name}")
        if rule.check is not None:
            problem = rule.check(attributes, self.opset)
            if problem is not None:
                raise NotImplementedError(f"{where}: unsupported {problem}")
        for name in node.input:
            if name not in known:
                raise ValueError(f"{where}: input {name!r} is not produced before this node")
        subgraphs = {
            name: GraphProgram(
                attributes.graph(name), self.opset, sorted(known), f"{self.where}/{label}.{name}", self.external_base
            )
            for name in rule.graph_attributes
            if name in attributes
        }
        return CompiledNode(
            index, label, node.op_type, tuple(node.input), tuple(node.output), attributes, rule, subgraphs
        )

    def _feed_value(self, entry: GraphInput, value: Any) -> Value:
        """A graph input: a tensor, a sequence (a list of arrays or Tensors), an optional (None or its value)."""
        if entry.kind == "optional":
            held = value.value if isinstance(value, OptionalValue) else value
            if held is None:
                return OptionalValue(None)
            if isinstance(held, TensorSequence | list | tuple):
                return OptionalValue(self._feed_sequence(entry, held))
            return OptionalValue(self._feed(entry, held))
        if entry.kind == "sequence":
            return self._feed_sequence(entry, value)
        if value is None or isinstance(value, list | tuple | TensorSequence | OptionalValue):
            raise TypeError(f"input {entry.name!r}: expected a tensor, got {type(value).__name__}")
        return self._feed(entry, value)

    def tensor_feeds(self, feeds: Mapping[str, Any]) -> dict[str, Tensor] | None:
        """Every graph input of `feeds` as the Tensor `run` would make of it, or None when the graph takes a
        sequence, an optional or an input of undeclared type (those stay on the plain path), or one is missing."""
        tensors: dict[str, Tensor] = {}
        for entry in self.inputs:
            if entry.kind != "tensor" or entry.dtype is None or entry.name not in feeds:
                return None
            value = self._feed_value(entry, feeds[entry.name])
            assert isinstance(value, Tensor)
            tensors[entry.name] = value
        return tensors

    def _feed_sequence(self, entry: GraphInput, value: Any) -> TensorSequence:
        if isinstance(value, TensorSequence):
            return value
        if not isinstance(value, list | tuple):
            raise TypeError(f"input {entry.name!r}: expected a sequence (a list of arrays), got {type(value).__name__}")
        element = GraphInput(entry.name, entry.dtype, entry.element_type, None)
        return TensorSequence(tuple(self._feed(element, item) for item in value), entry.dtype)

    def _feed(self, entry: GraphInput, value: Any) -> Tensor:
        if isinstance(value, Tensor):
            tensor = value
        elif entry.dtype is None:
            tensor = Tensor(_contiguous(np.asarray(value)))
        else:
            array = np.asarray(value)
            expected = numpy_dtype_of_element_type(entry.element_type)
            if array.dtype.kind not in "biuf" and array.dtype.name != "bfloat16":
                name = element_type_name(entry.element_type)
                raise TypeError(f"input {entry.name!r}: expected {name} data, got numpy {array.dtype}")
            tensor = Tensor(_contiguous(array.astype(expected, copy=False)))
        if entry.dtype is not None and tensor.dtype != entry.dtype:
            tensor = tensor.cast(entry.dtype)
        # a named or unknown dim takes any size; a fixed one must match (models often leave ranks loose)
        fixed = [] if entry.dims is None or len(entry.dims) != len(tensor.shape) else entry.dims
        if any(isinstance(dim, int) and dim > 0 and dim != size for dim, size in zip(fixed, tensor.shape)):
            raise ValueError(f"input {entry.name!r}: expected shape {list(fixed)}, got {list(tensor.shape)}")
        return tensor

    def run(
        self,
        feeds: Mapping[str, Any],
        outer: Mapping[str, Value] | None = None,
        outer_host: Mapping[str, np.ndarray[Any, Any]] | None = None,
    ) -> dict[str, Value]:
        """Run the graph on `feeds` (every graph input by name); `outer` holds an enclosing graph's values."""
        missing = [entry.name for entry in self.inputs if entry.name not in feeds]
        if missing:
            raise ValueError(f"{self.where}: missing input(s) {', '.join(map(repr, missing))}")
        values: dict[str, Value] = dict(outer or {})
        host: dict[str, np.ndarray[Any, Any]] = dict(outer_host or {})
        # outer values may change between calls of a subgraph: only its own initializers fold
        static: set[str] = set(self.initializers)
        values.update(self.initializers)
        host.update(self.initializer_host)
        for entry in self.inputs:
            feed = feeds[entry.name]
            values[entry.name] = self._feed_value(entry, feed)
            host.pop(entry.name, None)
            if isinstance(feed, np.ndarray) and feed.size <= _HOST_COPY_LIMIT and entry.dtype is None:
                host[entry.name] = feed
        overridden = sorted(name for name in feeds if name in self.defaults)
        for name in overridden:
            values[name] = self._feed_value(self.defaults[name], feeds[name])
            static.discard(name)
            host.pop(name, None)
        # folds depend on the input shapes (through Shape), and on which defaults are overridden (those never fold)
        signature = (
            *(_shapes(values[entry.name]) for entry in self.inputs),
            *((name, _shapes(values[name])) for name in overridden),
        )
        folds = self._folds.pop(signature, None)
        if folds is None:
            folds = {}
            if len(self._folds) >= _FOLD_SIGNATURES:
                # forget the least recently used set of input shapes (dicts keep insertion order)
                del self._folds[next(iter(self._folds))]
        self._folds[signature] = folds
        for node in self.nodes:
            self._run_node(node, values, host, static, folds)
        return {name: values[name] for name in self.outputs}

    def _host_folded(
        self, node: CompiledNode, host: dict[str, np.ndarray[Any, Any]], static: set[str]
    ) -> np.ndarray[Any, Any] | None:
        """The node's one output computed with numpy (host_folding.py) when it would fold and every input is a
        known value; None otherwise."""
        if not self.folding or len(node.outputs) != 1 or node.rule is not OPERATORS.get(node.op_type):
            return None
        if not node.rule.deterministic or node.subgraphs or not all(name in static for name in node.inputs):
            return None  # an empty name (a missing optional input) is never in static
        return host_fold(node.op_type, [host.get(name) for name in node.inputs], node.attributes)

    def _run_node(
        self,
        node: CompiledNode,
        values: dict[str, Value],
        host: dict[str, np.ndarray[Any, Any]],
        static: set[str],
        folds: dict[int, list[tuple[Tensor | None, np.ndarray[Any, Any] | None]]],
    ) -> None:
        folded = folds.get(node.index)
        if folded is not None:
            for name, (tensor, array) in zip(node.outputs, folded):
                if tensor is None or not name:
                    continue
                values[name] = tensor
                static.add(name)
                if array is not None:
                    host[name] = array
            return
        result: _Result | None = self._host_folded(node, host, static)
        if result is None:
            call = NodeCall(
                node.name,
                node.op_type,
                self.opset,
                node.attributes,
                [values[name] if name else None for name in node.inputs],
                [host.get(name) if name else None for name in node.inputs],
                len(node.outputs),
                {name: BoundSubgraph(program, values, host) for name, program in node.subgraphs.items()},
            )
            try:
                result = node.rule.handler(call)
            except (ValueError, TypeError, IndexError, NotImplementedError, RuntimeError) as error:
                raise _with_node(error, f"{self.where}: node {node.name} ({node.op_type})") from error
        results = list(result) if isinstance(result, list | tuple) else [result]
        if len(results) < len(node.outputs):
            results += [None] * (len(node.outputs) - len(results))
        # a handler returns numpy only for values fixed by the input shapes (Shape, Size) or by known values
        host_only = all(output is None or isinstance(output, np.ndarray) for output in results)
        tensors_only = all(isinstance(values[name], Tensor) for name in node.inputs if name) and not any(
            isinstance(output, TensorSequence | OptionalValue) for output in results
        )
        foldable = (
            self.folding
            and node.rule.deterministic
            and not node.subgraphs
            and tensors_only
            and (host_only or all(not name or name in static for name in node.inputs))
        )
        record: list[tuple[Tensor | None, np.ndarray[Any, Any] | None]] = []
        for name, output in zip(node.outputs, results):
            known: np.ndarray[Any, Any] | None = None
            if isinstance(output, TensorSequence | OptionalValue):
                if name:
                    values[name] = output
                    host.pop(name, None)
                continue
            if output is None:
                tensor = None
            elif isinstance(output, Tensor):
                tensor = output
            else:
                known = np.asarray(output)
                tensor = Tensor(_contiguous(known))
            if name and tensor is not None:
                if foldable:
                    tensor = tensor.realize()
                    if known is None and tensor.numel() <= _HOST_COPY_LIMIT:
                        known = np.asarray(tensor.numpy())
                elif name in self.materialized:
                    tensor = materialized_if_computed(tensor)
                values[name] = tensor
                if known is not None:
                    host[name] = known
                if foldable:
                    static.add(name)
            record.append((tensor, known))
        if foldable:
            folds[node.index] = record
