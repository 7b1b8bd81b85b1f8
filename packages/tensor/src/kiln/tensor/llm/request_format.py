"""The parts of an OpenAI request that shape its output: `n`, `logprobs` / `top_logprobs`, `response_format` and
`tools` / `tool_choice`, validated into a `RequestFormat`; and tool calls read back from the generated text.

- `response_format: {"type": "json_object"}` constrains the text to a JSON object, `{"type": "json_schema",
  "json_schema": {"name", "schema"}}` to a document of the schema (kiln.tensor.llm.json_schema; an unsupported
  keyword is a 400 naming it);
- `tool_choice: "required"` or `{"type": "function", "function": {"name"}}` constrains the text to a call
  `{"name": ..., "arguments": {...}}` of one of the tools (its `parameters` as the arguments' schema), answered as
  `message.tool_calls` with finish_reason "tool_calls"; `"auto"` (the default with tools) leaves the text free and
  answers with a tool call when the whole text is one (a JSON call, maybe inside `<tool_call>` tags); `"none"`
  never calls.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kiln.tensor.llm.json_schema import JSON_OBJECT, Node, SchemaError, compile_schema, make_node
from kiln.tensor.llm.logprobs import MAX_TOP_LOGPROBS

__all__ = ["MAX_CHOICES", "FormatError", "RequestFormat", "parse_format", "read_tool_call", "tool_call_record"]

MAX_CHOICES = 16
"""The most choices (`n`) one request may ask for."""
_TAGGED = re.compile(r"^\s*<tool_call>\s*(.*?)\s*</tool_call>\s*$", re.DOTALL)


class FormatError(ValueError):
    """A bad output option: the message and the request parameter it concerns."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class RequestFormat:
    """How to produce and answer a request's output."""

    n: int = 1
    logprobs: int | None = None
    """Log-probabilities with this many alternatives per token (None: none)."""
    grammar: list[Node] | None = None
    """Constrain the text to a document of one of these nodes (None: free text)."""
    tools: dict[str, Any] = field(default_factory=dict)
    """The request's tools by name (rendered by the chat template)."""
    tool_mode: str = "none"
    """"call": the text is a constrained call; "auto": a call when the text is one; "none": text only."""


def _count(body: Mapping[str, Any], name: str, low: int, high: int, default: int | None) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise FormatError(f"'{name}' must be an integer in [{low}, {high}], got {value!r:.40}", name)
    return value


def parse_format(body: Mapping[str, Any], chat: bool) -> RequestFormat:
    """The output options of a request body; FormatError names a bad one."""
    result = RequestFormat(n=_count(body, "n", 1, MAX_CHOICES, 1) or 1)
    if chat:
        wanted = body.get("logprobs", False)
        if wanted is not None and not isinstance(wanted, bool):
            raise FormatError(f"'logprobs' must be true or false, got {wanted!r:.40}", "logprobs")
        top = _count(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, None)
        if top is not None and not wanted:
            raise FormatError("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        result.logprobs = (top or 0) if wanted else None
    else:
        result.logprobs = _count(body, "logprobs", 0, 5, None)
    result.grammar = _response_format(body.get("response_format"))
    if chat:
        _tools(body, result)
    return result


def _response_format(spec: Any) -> list[Node] | None:
    if spec is None:
        return None
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return [JSON_OBJECT]
    if kind != "json_schema":
        raise FormatError(f"'response_format.type' must be 'text', 'json_object' or 'json_schema', got {spec!r:.80}",
                          "response_format")  # fmt: skip
    described = spec.get("json_schema")
    if not isinstance(described, Mapping) or not isinstance(described.get("name"), str):
        raise FormatError("'response_format.json_schema' must be an object with a 'name' and a 'schema'",
                          "response_format")  # fmt: skip
    try:
        return [compile_schema(described.get("schema", {}), "response_format.json_schema.schema")]
    except SchemaError as error:
        raise FormatError(str(error), "response_format") from None


def _tools(body: Mapping[str, Any], result: RequestFormat) -> None:
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none"):
            raise FormatError(f"'tool_choice' {choice!r:.60} needs 'tools'", "tool_choice")
        return
    if not isinstance(tools, list) or not tools:
        raise FormatError(f"'tools' must be a non-empty list of functions, got {tools!r:.80}", "tools")
    nodes: dict[str, Node] = {}
    for position, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) and tool.get("type") == "function" else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            raise FormatError(f"tools[{position}] must be {{'type': 'function', 'function': {{'name', "
                              f"'parameters'}}}}, got {tool!r:.80}", "tools")  # fmt: skip
        try:
            arguments = compile_schema(function.get("parameters") or {"type": "object"},  # type: ignore[union-attr]
                                       f"tools[{position}].function.parameters")  # fmt: skip
        except SchemaError as error:
            raise FormatError(str(error), "tools") from None
        result.tools[name] = tool
        called = make_node("enum", literals=(json.dumps(name),))
        properties = (("name", called), ("arguments", arguments))
        nodes[name] = make_node("object", properties=properties, required=frozenset({"name", "arguments"}))
    if choice in (None, "auto"):
        result.tool_mode = "auto"
    elif choice == "none":
        result.tool_mode = "none"
    elif choice == "required":
        result.tool_mode, result.grammar = "call", list(nodes.values())
    else:
        named = choice.get("function", {}).get("name") if isinstance(choice, Mapping) else None
        if not isinstance(named, str) or named not in nodes:
            raise FormatError(f"'tool_choice' must be 'none', 'auto', 'required' or {{'type': 'function', "
                              f"'function': {{'name'}}}} naming one of {sorted(nodes)}, got {choice!r:.80}",
                              "tool_choice")  # fmt: skip
        result.tool_mode, result.grammar = "call", [nodes[named]]
    if result.tool_mode == "call" and body.get("response_format") not in (None, {"type": "text"}):
        raise FormatError("a forced tool call cannot also have a 'response_format'", "response_format")


def read_tool_call(text: str, tools: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The (name, arguments) of a text that is one call of a known tool, bare JSON or inside <tool_call> tags: an
    object with "name" and "arguments" (or "parameters") an object; else None."""
    tagged = _TAGGED.match(text)
    try:
        call = json.loads(tagged.group(1) if tagged else text)
    except ValueError:
        return None
    if not isinstance(call, dict) or call.get("name") not in tools:
        return None
    arguments = call.get("arguments", call.get("parameters"))
    return (str(call["name"]), arguments) if isinstance(arguments, dict) else None


def tool_call_record(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call in OpenAI's shape: {id, type: "function", function: {name, arguments (a JSON string)}}."""
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip
