"""Attention over positions 0..start+T-1 with symbolic start and length (issue 37): logits against transformers'
recorded ones (fixtures/make_llm_fixtures.py) and the int-position path, one compile across positions and chunk
lengths (the engine's program counter), and the range errors."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from kiln.tensor import Tensor, TinyJit, Variable
from kiln.tensor.llm import load_model
from kiln.tensor.llm.model import Transformer
from kiln.tensor.realize.engine import Engine

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
MAX_CONTEXT = 24
CHUNK = 8  # the longest prefill chunk: chunk starts range over [0, MAX_CONTEXT - CHUNK]


def _model(name: str) -> tuple[Transformer, np.ndarray, np.ndarray]:
    expected = np.load(FIXTURES / name / "expected.npz")
    return load_model(FIXTURES / name, max_context=MAX_CONTEXT).model, expected["prompt"], expected["logits"]


def _tokens(ids: np.ndarray) -> Tensor:
    return Tensor(ids.reshape(1, -1).astype(np.int32))


def _chunk(
    model: Transformer, ids: np.ndarray, start: int, count: int, start_var: Variable, length: Variable
) -> Tensor:
    """Logits of ids[start:start+count] as a chunk at a bound start and of a bound length (a (1, CHUNK) token
    buffer sliced by the length)."""
    padded = np.zeros(CHUNK, np.int32)
    padded[:count] = ids[start : start + count]
    h = model.embed(_tokens(padded)[:, : length.bind(count)])
    return model.forward_embedded(h, start_var.bind(start))


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_symbolic_decode_equals_transformers_and_the_int_path(name: str, engine: Engine) -> None:
    model, prompt, expected = _model(name)
    prefix = 7
    model(_tokens(prompt[:prefix]), 0).realize()
    position = Variable("start_pos", 0, MAX_CONTEXT - 1)
    got = []
    for index in range(prefix, len(prompt)):  # 5 positions, each a one-token step at a bound position
        got.append(model(_tokens(prompt[index : index + 1]), position.bind(index)).numpy()[0, 0])
        if index == prefix:
            built = engine.programs_built
    assert engine.programs_built == built, "a new position compiled a new kernel"
    np.testing.assert_allclose(np.stack(got), expected[prefix:], atol=2e-5, rtol=0)
    reference, _, _ = _model(name)  # the int-position path, one token at a time
    reference(_tokens(prompt[:prefix]), 0).realize()
    ints = [reference(_tokens(prompt[i : i + 1]), i).numpy()[0, 0] for i in range(prefix, len(prompt))]
    np.testing.assert_allclose(np.stack(got), np.stack(ints), atol=1e-5, rtol=0)


def test_prefill_in_two_symbolic_chunks_equals_one_pass(engine: Engine) -> None:
    model, prompt, expected = _model("llama")
    start_var, length = Variable("start", 0, MAX_CONTEXT - CHUNK), Variable("length", 1, CHUNK)
    first = _chunk(model, prompt, 0, CHUNK, start_var, length).numpy()[0]
    second = _chunk(model, prompt, CHUNK, len(prompt) - CHUNK, start_var, length).numpy()[0]
    assert first.shape == (CHUNK, 128) and second.shape == (len(prompt) - CHUNK, 128)
    chunked = np.concatenate([first, second])
    np.testing.assert_allclose(chunked, expected, atol=2e-5, rtol=0)
    one_pass, _, _ = _model("llama")
    np.testing.assert_allclose(chunked, one_pass(_tokens(prompt), 0).numpy()[0], atol=1e-5, rtol=0)


def test_one_compile_across_positions_and_chunk_lengths(engine: Engine) -> None:
    """A jitted chunked prefill (the generator's use): after its warm-up, 5 positions and 3 chunk lengths compile
    nothing, and each chunk's logits equal a plain forward pass over the same tokens."""
    model, prompt, _ = _model("qwen3")
    ids = np.concatenate([prompt, prompt])  # 24 tokens
    start_var, length = Variable("start", 0, MAX_CONTEXT - CHUNK), Variable("length", 1, CHUNK)

    def prefill(tokens: Tensor, start: Tensor, count: Tensor) -> Tensor:
        return model.forward_embedded(model.embed(tokens[:, :count]), start).realize()

    step = TinyJit(prefill)

    def run(start: int, count: int) -> np.ndarray:
        padded = np.zeros(CHUNK, np.int32)
        padded[:count] = ids[start : start + count]
        return step(_tokens(padded), start_var.bind(start), length.bind(count)).numpy()[0]

    got = {(0, 3): run(0, 3), (3, 2): run(3, 2)}  # run, capture
    built = engine.programs_built
    for start, count in [(5, 3), (8, 5), (13, 2), (15, 5), (16, 3)]:  # 5 positions; lengths 3, 5, 2
        got[start, count] = run(start, count)
    assert engine.programs_built == built, f"{engine.programs_built - built} programs compiled for new values"
    reference, _, _ = _model("qwen3")
    one_pass = reference(_tokens(ids[:20]), 0).numpy()[0]
    for (start, count), logits in got.items():
        np.testing.assert_allclose(logits, one_pass[start : start + count], atol=1e-5, rtol=0)


def test_unjitted_chunks_compile_once(engine: Engine) -> None:
    """Unjitted calls too: each new start and length reuses the programs (the sum start + length unbinds to one
    structure whatever the values)."""
    model, prompt, _ = _model("qwen3")
    ids = np.concatenate([prompt, prompt])
    start_var, length = Variable("start", 0, MAX_CONTEXT - CHUNK), Variable("length", 1, CHUNK)
    _chunk(model, ids, 0, CHUNK, start_var, length).realize()
    built = engine.programs_built
    for start, count in [(3, 8), (5, 2), (9, 5), (12, 8), (16, 1)]:
        _chunk(model, ids, start, count, start_var, length).realize()
    assert engine.programs_built == built


def test_jitted_chunked_prefill_and_decode_replay(engine: Engine) -> None:
    """The lead's use: a TinyJit function receiving the chunk's start and length as bound Variables."""
    model, prompt, expected = _model("llama")
    start_var, length = Variable("start", 0, MAX_CONTEXT - CHUNK), Variable("length", 1, CHUNK)

    def prefill(tokens: Tensor, start: Tensor, count: Tensor) -> Tensor:
        return model.forward_embedded(model.embed(tokens[:, :count]), start).realize()

    step = TinyJit(prefill)
    rows = []
    for start in range(0, len(prompt), 3):  # chunks of 3: run, capture, then replays at new starts
        count = min(3, len(prompt) - start)
        padded = np.zeros(CHUNK, np.int32)
        padded[:count] = prompt[start : start + count]
        rows.append(step(_tokens(padded), start_var.bind(start), length.bind(count)).numpy()[0])
    assert step.captured is not None
    np.testing.assert_allclose(np.concatenate(rows), expected, atol=2e-5, rtol=0)


def test_positions_past_the_cache_raise() -> None:
    model, _prompt, _ = _model("llama")
    with pytest.raises(ValueError, match=r"positions 20\.\.27 exceed the context length 24"):
        model(_tokens(np.arange(8)), 20)
    with pytest.raises(ValueError, match=r"positions 24\.\.24 exceed the context length 24"):
        model(_tokens(np.arange(1)), 24)
    wide = Variable("start", 0, MAX_CONTEXT - 1)  # start + 8 can reach past the cache for some values
    with pytest.raises(ValueError, match=r"reaches 31 for some values of .*'start' in \[0, 23\].*context length 24"):
        model(_tokens(np.arange(8)), wide.bind(2))
    with pytest.raises(TypeError, match="start_pos must be an int or a bound Variable"):
        model(_tokens(np.arange(2)), 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unbound"):
        model(_tokens(np.arange(2)), wide)  # type: ignore[arg-type]
