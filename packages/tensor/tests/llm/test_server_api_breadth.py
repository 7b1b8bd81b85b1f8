"""OpenAI API breadth through the official `openai` client: logprobs (against a numpy log-softmax of the model's own
forward logits), `n`, JSON mode, JSON schemas and forced tool calls (the text always parses), their errors."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from kiln.tensor.llm import load_model
from kiln.tensor.tensor import Tensor

openai = pytest.importorskip("openai")
MESSAGES = [{"role": "user", "content": "Give me a number."}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                            "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"], "additionalProperties": False}  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "time", "parameters": {"type": "object", "properties": {
             "zone": {"type": ["string", "null"]}}, "required": ["zone"]}}}]  # fmt: skip


def numpy_log_softmax(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float64)
    return row - row.max() - np.log(np.exp(row - row.max()).sum())


def test_chat_logprobs_are_the_log_softmax_of_the_model_logits(client, model, chat_model_dir) -> None:  # type: ignore[no-untyped-def]
    reference = load_model(chat_model_dir).model
    answer = client.chat.completions.create(model=model.name, messages=MESSAGES, max_tokens=6, temperature=0,
                                            logprobs=True, top_logprobs=3)  # fmt: skip
    content = answer.choices[0].logprobs.content
    ids = model.encode_chat(MESSAGES)
    produced = 0
    for entry in content:
        expected = numpy_log_softmax(reference(Tensor(np.array([ids], np.int32)), 0).numpy()[0, -1])
        order = np.argsort(-expected)[:3]
        chosen = int(order[0])  # greedy
        assert entry.logprob == pytest.approx(expected[chosen], abs=2e-4)
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx(expected[order].tolist(), abs=2e-4)
        assert entry.top_logprobs[0].token == entry.token
        assert bytes(entry.bytes).decode(errors="backslashreplace") == entry.token
        ids.append(chosen)
        produced += 1
    assert b"".join(bytes(e.bytes) for e in content).decode(errors="replace") == answer.choices[0].message.content
    assert produced == answer.usage.completion_tokens - (answer.choices[0].finish_reason == "stop")
    stream = client.chat.completions.create(model=model.name, messages=MESSAGES, max_tokens=6, temperature=0,
                                            logprobs=True, top_logprobs=3, stream=True)  # fmt: skip
    streamed = [e for c in stream if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]


def test_completion_logprobs_shape_and_offsets(client, model) -> None:  # type: ignore[no-untyped-def]
    answer = client.completions.create(model=model.name, prompt="Hello world", max_tokens=5, temperature=0, logprobs=2)
    logprobs = answer.choices[0].logprobs
    assert len(logprobs.tokens) == answer.usage.completion_tokens == 5
    if not any("\\x" in token for token in logprobs.tokens):  # no token holds part of a character
        assert "".join(logprobs.tokens) == answer.choices[0].text
        assert logprobs.text_offset == [len("".join(logprobs.tokens[:i])) for i in range(5)]
    for token, value, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs, strict=True):
        assert len(top) == 2 and max(top.values()) == pytest.approx(value)  # greedy: the most likely token
        assert top[token] == pytest.approx(value)
    with pytest.raises(openai.BadRequestError, match="logprobs"):
        client.completions.create(model=model.name, prompt="x", max_tokens=1, logprobs=9)
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(model=model.name, messages=MESSAGES, max_tokens=1, top_logprobs=2)


def test_n_choices_are_reproducible_with_a_seed(client, model) -> None:  # type: ignore[no-untyped-def]
    def ask(n: int, **extra: Any) -> list[str]:
        answer = client.chat.completions.create(model=model.name, messages=MESSAGES, max_tokens=8, n=n, **extra)
        assert [c.index for c in answer.choices] == list(range(n))
        return [c.message.content for c in answer.choices]

    first = ask(4, seed=123, temperature=1.0)
    assert ask(4, seed=123, temperature=1.0) == first
    assert len(set(first)) > 1  # independent draws
    assert ask(1, seed=123, temperature=1.0) == first[:1]
    greedy = ask(3, temperature=0)
    assert greedy == [greedy[0]] * 3
    stream = client.chat.completions.create(model=model.name, messages=MESSAGES, max_tokens=8, n=4, seed=123,
                                            temperature=1.0, stream=True)  # fmt: skip
    texts = [""] * 4
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == first
    with pytest.raises(openai.BadRequestError, match="'n'"):
        ask(0)


def valid(value: Any, schema: dict[str, Any]) -> bool:
    if "enum" in schema:
        return value in schema["enum"]
    kind = schema.get("type")
    if isinstance(kind, list):
        return any(valid(value, {**schema, "type": k}) for k in kind)
    if kind == "object":
        properties = schema.get("properties", {})
        return (isinstance(value, dict) and all(k in value for k in schema.get("required", []))
                and all(k in properties and valid(v, properties[k]) for k, v in value.items()))  # fmt: skip
    return {"string": isinstance(value, str), "null": value is None,
            "integer": isinstance(value, int) and not isinstance(value, bool)}[kind]  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_mode_and_json_schema_always_parse(client, model, seed: int) -> None:  # type: ignore[no-untyped-def]
    answer = client.chat.completions.create(model=model.name, messages=MESSAGES, max_tokens=30, seed=seed,
                                            response_format={"type": "json_object"})  # fmt: skip
    assert isinstance(json.loads(answer.choices[0].message.content), dict)
    assert answer.choices[0].finish_reason == "stop"
    answer = client.chat.completions.create(
        model=model.name, messages=MESSAGES, max_tokens=40, seed=seed, temperature=1.5,
        response_format={"type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER}},
    )  # fmt: skip
    assert valid(json.loads(answer.choices[0].message.content), WEATHER)


def test_unsupported_schema_keywords_are_a_400_naming_them(client, model) -> None:  # type: ignore[no-untyped-def]
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}}
    with pytest.raises(openai.BadRequestError, match="maxLength") as info:
        client.chat.completions.create(model=model.name, messages=MESSAGES, max_tokens=5, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}})  # fmt: skip
    assert info.value.body["param"] == "response_format"
    bad_tool = [{"type": "function", "function": {"name": "f", "parameters": {"oneOf": []}}}]
    with pytest.raises(openai.BadRequestError, match="oneOf"):
        client.chat.completions.create(model=model.name, messages=MESSAGES, tools=bad_tool, tool_choice="required")
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        client.chat.completions.create(model=model.name, messages=MESSAGES, tools=TOOLS,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})  # fmt: skip


def test_forced_tool_calls_come_back_in_openais_shape(client, model) -> None:  # type: ignore[no-untyped-def]
    for seed in range(3):
        answer = client.chat.completions.create(model=model.name, messages=MESSAGES, max_tokens=70, seed=seed,
                                                tools=TOOLS, tool_choice="required")  # fmt: skip
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.id.startswith("call_")
        schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[call.function.name]
        assert valid(json.loads(call.function.arguments), schema)
    named = {"type": "function", "function": {"name": "weather"}}
    stream = client.chat.completions.create(model=model.name, messages=MESSAGES, max_tokens=70, seed=9, tools=TOOLS,
                                            tool_choice=named, stream=True)  # fmt: skip
    chunks = [c for c in stream if c.choices]
    calls = [t for c in chunks for t in c.choices[0].delta.tool_calls or []]
    assert len(calls) == 1 and calls[0].function.name == "weather"
    assert valid(json.loads(calls[0].function.arguments), WEATHER)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
