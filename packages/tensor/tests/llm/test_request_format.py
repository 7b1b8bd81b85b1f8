"""The output options of a request (`n`, logprobs, response_format, tools) and tool calls read back from text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kiln.tensor.llm.json_grammar import accepts
from kiln.tensor.llm.request_format import FormatError, parse_format, read_tool_call, tool_call_record

ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
TOOL = {"type": "function", "function": {"name": "add", "parameters": ADD}}


def test_defaults_and_counts() -> None:
    plain = parse_format({}, chat=True)
    assert (plain.n, plain.logprobs, plain.grammar, plain.tool_mode) == (1, None, None, "none")
    assert parse_format({"logprobs": True}, chat=True).logprobs == 0
    assert parse_format({"logprobs": True, "top_logprobs": 20}, chat=True).logprobs == 20
    assert parse_format({"logprobs": 3, "n": 16}, chat=False).logprobs == 3


@pytest.mark.parametrize(
    ("body", "chat", "param"),
    [({"n": 0}, True, "n"), ({"n": 17}, True, "n"), ({"n": True}, True, "n"), ({"top_logprobs": 2}, True,
     "top_logprobs"), ({"logprobs": True, "top_logprobs": 21}, True, "top_logprobs"), ({"logprobs": 6}, False,
     "logprobs"), ({"logprobs": "yes"}, True, "logprobs"), ({"response_format": {"type": "xml"}}, True,
     "response_format"), ({"response_format": {"type": "json_schema"}}, True, "response_format"),
     ({"tool_choice": "required"}, True, "tool_choice"), ({"tools": []}, True, "tools"),
     ({"tools": [{"type": "function"}]}, True, "tools"), ({"tools": [TOOL], "tool_choice": "always"}, True,
     "tool_choice"), ({"tools": [TOOL], "tool_choice": "required", "response_format": {"type": "json_object"}}, True,
     "response_format")],
)  # fmt: skip
def test_bad_options_name_their_parameter(body: dict[str, Any], chat: bool, param: str) -> None:
    with pytest.raises(FormatError) as info:
        parse_format(body, chat)
    assert info.value.param == param


def test_forced_tool_call_grammar_accepts_calls_of_the_tool_only() -> None:
    result = parse_format({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "add"}}}, True)
    assert result.tool_mode == "call" and result.grammar is not None
    (node,) = result.grammar
    assert accepts(node, '{"name":"add","arguments":{"a":1,"b":-2}}')
    assert accepts(node, '{"arguments":{"b":0,"a":7}, "name":"add"}')
    assert not accepts(node, '{"name":"sub","arguments":{"a":1,"b":2}}')
    assert not accepts(node, '{"name":"add","arguments":{"a":1}}')
    assert parse_format({"tools": [TOOL]}, True).tool_mode == "auto"
    assert parse_format({"tools": [TOOL], "tool_choice": "none"}, True).grammar is None


def test_tool_calls_read_back_from_text() -> None:
    tools = {"add": TOOL}
    assert read_tool_call('{"name": "add", "arguments": {"a": 1, "b": 2}}', tools) == ("add", {"a": 1, "b": 2})
    tagged = '<tool_call>\n{"name": "add", "parameters": {"a": 1}}\n</tool_call>\n'
    assert read_tool_call(tagged, tools) == ("add", {"a": 1})
    for text in ("The sum is 3.", '{"name": "mul", "arguments": {}}', '{"name": "add", "arguments": "1, 2"}', "[]"):
        assert read_tool_call(text, tools) is None
    record = tool_call_record("add", {"a": 1})
    assert record["type"] == "function" and record["id"].startswith("call_")
    assert record["function"] == {"name": "add", "arguments": json.dumps({"a": 1})}
