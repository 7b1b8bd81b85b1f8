"""Log-probabilities against a numpy log-softmax of the model's own forward logits, and grammar-constrained decoding:
random schemas of the supported subset, a tiny random model, every output parses (json.loads) and validates (a
validator written here)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest

from kiln.tensor.llm import load_model
from kiln.tensor.llm.batching import BatchedGenerator, Sequence
from kiln.tensor.llm.json_grammar import JSON_OBJECT, SchemaError, TokenConstraint, Vocabulary, compile_schema
from kiln.tensor.llm.session import load_chat_model
from kiln.tensor.tensor import Tensor

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def finish(batched: BatchedGenerator, sequences: list[Sequence]) -> None:
    for _ in range(500):
        if all(s.finished for s in sequences):
            return
        batched.step()
    raise AssertionError("the sequences did not finish")


def numpy_log_softmax(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float64)
    top = row.max()
    return row - top - np.log(np.sum(np.exp(row - top)))


def test_logprobs_equal_the_log_softmax_of_the_model_logits() -> None:
    loaded = load_model(FIXTURES / "llama")
    reference = load_model(FIXTURES / "llama").model  # its own caches: forward over the whole text each time
    batched = BatchedGenerator(loaded, slots=2)
    prompt, other = [1, 7, 42, 99, 3], [5, 6, 7]
    target = batched.start(prompt, max_tokens=8, temperature=0.8, seed=11, logprobs=5)
    neighbour = batched.start(other, max_tokens=12, temperature=0.9, seed=2)  # a plain sequence in the same steps
    finish(batched, [target, neighbour])
    assert len(target.logprob_entries) == len(target.tokens) == 8
    for index, entry in enumerate(target.logprob_entries):
        ids = prompt + target.tokens[:index]
        logits = reference(Tensor(np.array([ids], np.int32)), 0).numpy()[0, -1]
        expected = numpy_log_softmax(logits)
        assert entry.token == target.tokens[index]
        np.testing.assert_allclose(entry.logprob, expected[entry.token], atol=2e-4)
        order = np.argsort(-expected)[:5]
        assert [i for i, _ in entry.top] == order.tolist()
        np.testing.assert_allclose([v for _, v in entry.top], expected[order], atol=2e-4)
        assert all(a[1] >= b[1] for a, b in zip(entry.top, entry.top[1:], strict=False))
    # asking for log-probabilities does not change the draws
    plain = BatchedGenerator(load_model(FIXTURES / "llama"), slots=2)
    again = plain.start(prompt, max_tokens=8, temperature=0.8, seed=11)
    finish(plain, [again])
    assert again.tokens == target.tokens


# -- a JSON schema validator for the subset (the test's own oracle) ------------------------------------------------
def valid(value: Any, schema: dict[str, Any]) -> bool:
    if "enum" in schema:
        return any(value == v and type(value) is type(v) for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return any(valid(value, {**schema, "type": k}) for k in kind)
    checks = {
        "string": lambda: isinstance(value, str),
        "integer": lambda: isinstance(value, int) and not isinstance(value, bool),
        "number": lambda: isinstance(value, (int, float)) and not isinstance(value, bool),
        "boolean": lambda: isinstance(value, bool),
        "null": lambda: value is None,
        "array": lambda: isinstance(value, list) and all(valid(v, schema.get("items", {})) for v in value),
        None: lambda: True,
    }
    if kind == "object":
        if not isinstance(value, dict):
            return False
        properties = schema.get("properties", {})
        if any(name not in value for name in schema.get("required", [])):
            return False
        if schema.get("additionalProperties") is False and any(name not in properties for name in value):
            return False
        return all(valid(v, properties.get(k, {})) for k, v in value.items())
    return bool(checks[kind]())


def random_schema(rng: np.random.Generator, depth: int) -> dict[str, Any]:
    kinds = ["string", "number", "integer", "boolean", "null", "enum", "union"] + ["object", "array"] * (depth > 0)
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "enum":
        pool = ["a", "bc", 1, 2.5, True, None, "x y"]
        return {"enum": [pool[i] for i in rng.choice(len(pool), size=int(rng.integers(1, 4)), replace=False)]}
    if kind == "union":
        return {"type": ["string", "null"] if rng.random() < 0.5 else ["integer", "boolean"]}
    if kind == "array":
        return {"type": "array", "items": random_schema(rng, depth - 1)}
    if kind == "object":
        names = ["a", "b", "key", "é"][: int(rng.integers(1, 5))]
        properties = {name: random_schema(rng, depth - 1) for name in names}
        required = [name for name in names if rng.random() < 0.5]
        return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {"type": kind}


@pytest.fixture(scope="module")
def chat(chat_model_dir: pathlib.Path):  # type: ignore[no-untyped-def]
    model = load_chat_model(chat_model_dir)
    return model, Vocabulary.of(model.tokenizer, model.loaded.config.vocab_size)


def test_random_schemas_always_give_documents_that_parse_and_validate(chat) -> None:  # type: ignore[no-untyped-def]
    model, vocabulary = chat
    batched = model.batched(4)
    rng = np.random.default_rng(5)
    checked = 0
    for case in range(24):
        schema = {"type": "object", "properties": {"v": random_schema(rng, 2)}, "required": ["v"],
                  "additionalProperties": False}  # fmt: skip
        node = compile_schema(schema)
        if node.shortest > 30:
            continue
        constraint = TokenConstraint(node, vocabulary)
        max_tokens = 40 if case % 2 else 70
        temperature = [0.0, 0.7, 1.5][case % 3]
        sequence = batched.start([0, 5, 9], max_tokens=max_tokens, temperature=temperature, seed=case,
                                 stop_ids=model.tokenizer.stop_ids, constraint=constraint)  # fmt: skip
        finish(batched, [sequence])
        text = model.tokenizer.decode([t for t in sequence.tokens if t not in model.tokenizer.stop_ids])
        assert text == constraint.text
        document = json.loads(text)
        assert valid(document, schema), (schema, text)
        assert len(sequence.tokens) <= max_tokens
        checked += 1
    assert checked >= 15


def test_json_mode_objects_parse_with_a_tight_token_budget(chat) -> None:  # type: ignore[no-untyped-def]
    model, vocabulary = chat
    batched = model.batched(4)
    stops = model.tokenizer.stop_ids
    sequences = []
    for n in (2, 5, 17, 40):
        constraint = TokenConstraint(JSON_OBJECT, vocabulary)
        sequences.append(batched.start([0, 7], max_tokens=n, temperature=1.0, seed=n, stop_ids=stops,
                                       constraint=constraint))  # fmt: skip
    finish(batched, sequences)
    for sequence in sequences:
        assert isinstance(json.loads(sequence.constraint.text), dict)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("schema", "keyword"),
    [({"type": "string", "minLength": 3}, "minLength"), ({"anyOf": [{"type": "string"}]}, "anyOf"),
     ({"type": "object", "properties": {"a": {"type": "string", "pattern": "x+"}}}, "pattern"),
     ({"type": "array", "items": {"type": "date"}}, "type"), ({"enum": [[1]]}, "enum")],
)  # fmt: skip
def test_unsupported_schema_keywords_are_named(schema: dict[str, Any], keyword: str) -> None:
    with pytest.raises(SchemaError, match=keyword) as info:
        compile_schema(schema)
    assert info.value.keyword == keyword
