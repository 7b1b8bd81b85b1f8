"""JSON schemas of the subset that grammar-constrained decoding supports, compiled into nodes (`Node`) for the
automaton of kiln.tensor.llm.json_grammar.

`compile_schema(schema)` refuses any keyword outside the subset with `SchemaError` (which names it). The subset:
`type` (object, array, string, number, integer, boolean, null, or a list of those), `properties`, `required`,
`additionalProperties` (true or false: only the listed keys are written; an object without `properties` takes any
keys and values), `items`, `enum` (scalars), nested freely; `title`, `description`, `default`, `examples` and
`$schema` are annotations and ignored. `JSON_OBJECT` is JSON mode's schema: any object. Each node knows the fewest
characters of a value of it (`shortest`), which the automaton's `remaining` adds up.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

__all__ = ["ANY", "JSON_OBJECT", "Node", "SchemaError", "compile_schema", "key_text", "make_node", "rest_cost"]

_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "strict"})
_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "items", "enum"}) | _ANNOTATIONS
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")


class SchemaError(ValueError):
    """A JSON schema outside the supported subset; `keyword` names what was refused."""

    def __init__(self, message: str, keyword: str) -> None:
        super().__init__(message)
        self.keyword = keyword


@dataclass(frozen=True)
class Node:
    """A compiled schema: `kind` is one of _TYPES, "any" (any JSON value), "enum" or "union" (`options`, told apart
    by their first character). Equal schemas compile to equal nodes (with one hash, worked out once), so the grammar
    states of two requests with the same schema share their cached masks."""

    kind: str
    properties: tuple[tuple[str, Node], ...] | None = None  # object: None takes any key with any value
    required: frozenset[str] = frozenset()
    items: Node | None = None  # array
    literals: tuple[str, ...] = ()  # enum: the values' JSON texts
    options: tuple[Node, ...] = ()  # union
    shortest: int = field(default=1, compare=False)  # the fewest characters of a value

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((self.kind, self.properties, self.required, self.items, self.literals, self.options))

    def prop(self, name: str) -> Node:
        return self._by_name[name]

    @cached_property
    def _by_name(self) -> dict[str, Node]:
        return dict(self.properties or ())

    @cached_property
    def key_texts(self) -> dict[str, str]:
        """Each property's name -> the JSON text of its key."""
        return {name: key_text(name) for name, _ in self.properties or ()}


def make_node(kind: str, **fields: Any) -> Node:
    """A `Node` with its `shortest` value length worked out."""
    node = Node(kind, **fields)
    object.__setattr__(node, "shortest", _shortest(node))
    return node


def _shortest(node: Node) -> int:
    if node.kind == "string":
        return 2
    if node.kind in ("boolean", "null"):
        return 4
    if node.kind == "enum":
        return min(len(text) for text in node.literals)
    if node.kind == "union":
        return min(option.shortest for option in node.options)
    if node.kind == "object":
        return 1 + rest_cost(node, node.required) - (1 if node.required else 0)
    if node.kind == "array":
        return 2
    return 1  # number, integer, any (a digit)


def key_text(name: str) -> str:
    """A property name as the JSON text of its key."""
    return json.dumps(name, ensure_ascii=False)


def rest_cost(node: Node, missing: Iterable[str]) -> int:
    """Characters that close an object after a value: each missing required key as `,"key":value`, then `}`."""
    return 1 + sum(2 + len(node.key_texts[name]) + node.prop(name).shortest for name in missing)


ANY = Node("any")
JSON_OBJECT = make_node("object")
"""JSON mode (`response_format: {"type": "json_object"}`): any object."""


def compile_schema(schema: Any, path: str = "schema") -> Node:
    """The node of a JSON schema (see the module docstring); SchemaError names an unsupported keyword or value."""
    if not isinstance(schema, Mapping):
        raise SchemaError(f"{path} must be a JSON object (a schema), got {schema!r:.80}", "type")
    for keyword in schema:
        if keyword not in _KEYWORDS:
            raise SchemaError(f"{path} uses the keyword {keyword!r}, which constrained decoding does not support "
                              f"(supported: {', '.join(sorted(_KEYWORDS - _ANNOTATIONS))})", str(keyword))  # fmt: skip
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise SchemaError(f"{path}.enum must be a non-empty list, got {values!r:.80}", "enum")
        for value in values:
            if isinstance(value, (dict, list)):
                raise SchemaError(f"{path}.enum holds {value!r:.40}; only strings, numbers, booleans and null "
                                  "are supported", "enum")  # fmt: skip
        return make_node("enum", literals=tuple(json.dumps(v, ensure_ascii=False, allow_nan=False) for v in values))
    kind = schema.get("type")
    if kind is None:
        if "properties" in schema:
            kind = "object"
        elif "items" in schema:
            kind = "array"
        else:
            return ANY
    if isinstance(kind, list):
        if not kind or any(k not in _TYPES for k in kind):
            raise SchemaError(f"{path}.type must name types among {_TYPES}, got {kind!r:.80}", "type")
        options = tuple(compile_schema({**schema, "type": k}, path) for k in dict.fromkeys(kind))
        return options[0] if len(options) == 1 else make_node("union", options=options)
    if kind not in _TYPES:
        raise SchemaError(f"{path}.type must be one of {_TYPES}, got {kind!r:.80}", "type")
    if kind == "object":
        return _compile_object(schema, path)
    if kind == "array":
        items = schema.get("items")
        return make_node("array", items=ANY if items is None else compile_schema(items, f"{path}.items"))
    return make_node(kind)


def _compile_object(schema: Mapping[str, Any], path: str) -> Node:
    properties = schema.get("properties")
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", properties is None)
    if properties is None:
        if required:
            raise SchemaError(f"{path}.required names keys but the object has no 'properties'", "required")
        if extra is False:
            return make_node("object", properties=())
        if extra is not True:
            raise SchemaError(f"{path}.additionalProperties must be true or false, got {extra!r:.80}",
                              "additionalProperties")  # fmt: skip
        return JSON_OBJECT
    if not isinstance(properties, Mapping):
        raise SchemaError(f"{path}.properties must be an object, got {properties!r:.80}", "properties")
    if not isinstance(extra, bool):  # only the listed keys are written, which any boolean allows
        raise SchemaError(f"{path}.additionalProperties must be true or false, got {extra!r:.80}",
                          "additionalProperties")  # fmt: skip
    if not isinstance(required, list) or any(name not in properties for name in required):
        raise SchemaError(f"{path}.required must list keys of 'properties', got {required!r:.80}", "required")
    compiled = tuple((str(name), compile_schema(sub, f"{path}.properties.{name}")) for name, sub in properties.items())
    return make_node("object", properties=compiled, required=frozenset(required))
