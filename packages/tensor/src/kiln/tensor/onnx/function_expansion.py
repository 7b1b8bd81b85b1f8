"""Operators kiln has no rule for but ONNX defines as a function of other operators (LinearAttention,
CausalConvWithState, SwiGLU, ...): each such node is replaced by its function body from onnx's schema, built for
the node's attributes and input types, and inlined by onnx's inliner."""

from __future__ import annotations

from collections.abc import Callable

import onnx
import onnx.inliner
import onnx.shape_inference

__all__ = ["expand_schema_functions"]

_DOMAIN = "kiln.expanded"


def _value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # inference is best effort; the checker already passed
        inferred = model
    graph = inferred.graph
    types = {value.name: value.type for value in [*graph.input, *graph.value_info, *graph.output]}
    for initializer in graph.initializer:
        types.setdefault(initializer.name, onnx.helper.make_tensor_type_proto(initializer.data_type, initializer.dims))
    return types


def _function_body(node: onnx.NodeProto, opset: int, types: dict[str, onnx.TypeProto]) -> onnx.FunctionProto | None:
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    with_defaults = onnx.NodeProto()
    with_defaults.CopyFrom(node)
    present = {attribute.name for attribute in node.attribute}
    for name, attribute in schema.attributes.items():
        if name not in present and attribute.default_value.name:
            with_defaults.attribute.append(attribute.default_value)
    # onnx's type stubs omit the function accessors of OpSchema
    if schema.has_context_dependent_function:  # type: ignore[attr-defined]
        if any(name and name not in types for name in node.input):
            return None
        input_types = [types[name].SerializeToString() if name else b"" for name in node.input]
        serialized = schema.get_context_dependent_function_with_opset_version(  # type: ignore[attr-defined]
            opset, with_defaults.SerializeToString(), input_types
        )
    elif schema.has_function:  # type: ignore[attr-defined]
        serialized = schema.get_function_with_opset_version(opset)  # type: ignore[attr-defined]
    else:
        return None
    if not serialized:
        return None
    body = onnx.FunctionProto()
    body.ParseFromString(serialized)
    del node.attribute[:]
    node.attribute.extend(with_defaults.attribute)
    return body


def expand_schema_functions(model: onnx.ModelProto, opset: int, has_rule: Callable[[str], bool]) -> onnx.ModelProto:
    """`model` with every top-level default-domain node that has no rule but a schema function body inlined."""
    candidates = [node for node in model.graph.node if node.domain in ("", "ai.onnx") and not has_rule(node.op_type)]
    if not candidates:
        return model
    expanded = onnx.ModelProto()
    expanded.CopyFrom(model)
    types = _value_types(model)
    count = 0
    for node in expanded.graph.node:
        if node.domain not in ("", "ai.onnx") or has_rule(node.op_type):
            continue
        body = _function_body(node, opset, types)
        if body is None:
            continue
        count += 1
        body.domain, body.name = _DOMAIN, f"{node.op_type}_{count}"
        if not any(entry.domain in ("", "ai.onnx") for entry in body.opset_import):
            body.opset_import.append(onnx.helper.make_opsetid("", opset))
        expanded.functions.append(body)
        node.domain, node.op_type = _DOMAIN, body.name
    if not count:
        return model
    expanded.opset_import.append(onnx.helper.make_opsetid(_DOMAIN, 1))
    inlined = onnx.inliner.inline_local_functions(expanded)
    del inlined.opset_import[:]
    inlined.opset_import.extend(entry for entry in expanded.opset_import if entry.domain != _DOMAIN)
    return inlined
