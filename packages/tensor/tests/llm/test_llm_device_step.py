"""The device-resident decode step: the token id is a step input gathered inside it (new ids compile nothing), and
sampling runs on the device (greedy, temperature, top-k, top-p, seeded) against an independent numpy reference."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from kiln.tensor import GlobalCounters, Tensor
from kiln.tensor.jit import TinyJit
from kiln.tensor.llm import load_model
from kiln.tensor.llm.generate import Generator
from kiln.tensor.llm.layers import TokenEmbedding
from kiln.tensor.llm.quantized import QuantizedWeight, Weight
from kiln.tensor.llm.sampling import SamplingMode, sample_on_device, sampling_params
from kiln.tensor.realize.engine import default_engine
from kiln.tensor.state.quantization import GGMLType
from kiln.uops import dtypes

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def _token(token: int) -> Tensor:
    return Tensor(np.array([[token]], np.int32))


@pytest.mark.parametrize("where", ["chat", "llama-q4_0"])
def test_fresh_token_ids_compile_nothing(where: str, chat_model_dir: pathlib.Path) -> None:
    path = chat_model_dir if where == "chat" else FIXTURES / "llama" / "llama-q4_0.gguf"  # a Q4_0 embedding table
    generator = Generator(load_model(path, max_context=64))
    vocab = generator.config.vocab_size
    list(generator.generate([1, 2, 3], max_tokens=4))  # warm-up: the step is captured and replayed once
    greedy = generator.step(SamplingMode(greedy=True))
    params = sampling_params(0.0, 0, 1.0, np.random.default_rng(0))
    engine = default_engine()
    built = engine.programs_built
    steps = 300
    for index in range(steps):
        token = (index * 7 + 11) % vocab  # every id of the chat model's 400 is fresh; the Q4_0 model has 128
        out = greedy(_token(token), generator.position_variable.bind(index % 64), params)
        assert out.shape == (1,) and out.dtype == dtypes.int32 and 0 <= int(out.numpy()[0]) < vocab
    assert engine.programs_built == built, f"{engine.programs_built - built} programs compiled during decode"
    # new sampling settings and seeds replay one step per mode: nothing compiles after each mode's warm-up
    rng = np.random.default_rng(1)
    for settings in [(0.9, 5, 0.8), (1.3, 0, 1.0)]:
        list(generator.generate([4, 5], max_tokens=4, temperature=settings[0], top_k=settings[1], top_p=settings[2]))
    built = engine.programs_built
    for index in range(40):
        top_k, top_p = int(rng.integers(2, vocab)), float(rng.uniform(0.1, 0.99))
        list(generator.generate([4, 5], max_tokens=3, temperature=float(rng.uniform(0.2, 2)), top_k=top_k,
                                top_p=top_p, seed=index))  # fmt: skip
        list(generator.generate([4, 5], max_tokens=3, temperature=float(rng.uniform(0.2, 2)), seed=index))
    assert engine.programs_built == built


def _reference(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """softmax(logits / T) restricted to the top_k largest, then to the smallest prefix (by descending probability)
    whose mass reaches top_p, renormalized: numpy, written from the definitions."""
    probs = np.exp((logits - logits.max()) / temperature)
    probs /= probs.sum()
    order = np.argsort(-probs)
    keep = np.zeros(len(logits), bool)
    keep[order[: top_k or len(logits)]] = True
    kept = np.where(keep, probs, 0.0)
    kept /= kept.sum()
    before = np.cumsum(kept[order]) - kept[order]  # mass ahead of each token in descending order
    nucleus = np.zeros(len(logits), bool)
    nucleus[order[before < top_p]] = True
    final = np.where(keep & nucleus, kept, 0.0)
    return final / final.sum()


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.3, 0, 1.0), (0.6, 6, 1.0), (1.0, 0, 0.7), (0.8, 10, 0.85)]
)
def test_device_sampling_matches_the_distribution(temperature: float, top_k: int, top_p: float) -> None:
    logits = np.random.default_rng(3).standard_normal(40).astype(np.float32) * 1.5
    expected = _reference(logits.astype(np.float64), temperature, top_k, top_p)
    mode = SamplingMode.of(temperature, top_k, top_p, len(logits))
    draw = TinyJit(lambda values, params: sample_on_device(values, params, mode))
    device_logits = Tensor(logits)
    draws = 3000
    counts = np.zeros(len(logits))
    for seed in range(draws):
        params = sampling_params(temperature, top_k, top_p, np.random.default_rng(seed))
        counts[int(draw(device_logits, params).numpy()[0])] += 1
    frequencies = counts / draws
    assert frequencies[expected == 0].sum() == 0, "a token outside the top-k / top-p set was drawn"
    # each frequency within 4.5 standard deviations of its binomial expectation (plus a little for tiny p)
    bound = 4.5 * np.sqrt(expected * (1 - expected) / draws) + 2 / draws
    assert np.all(np.abs(frequencies - expected) <= bound), np.abs(frequencies - expected) / bound


def test_greedy_step_is_argmax_and_ties_take_the_first() -> None:
    logits = np.array([0.5, 3.0, -1.0, 3.0, 2.9], np.float32)
    mode = SamplingMode.of(0.0, 0, 1.0, 5)
    params = sampling_params(0.0, 0, 1.0, np.random.default_rng(0))
    assert int(sample_on_device(Tensor(logits), params, mode).numpy()[0]) == 1
    assert SamplingMode.of(0.7, 1, 0.5, 5) == mode  # top_k 1 keeps only the argmax


def test_seed_reproduces_and_seeds_differ() -> None:
    generator = Generator(load_model(FIXTURES / "qwen2"))
    settings = {"max_tokens": 16, "temperature": 1.5, "top_k": 50, "top_p": 0.95}
    first = list(generator.generate([3, 4, 5], seed=5, **settings))  # type: ignore[arg-type]
    assert list(generator.generate([3, 4, 5], seed=5, **settings)) == first  # type: ignore[arg-type]
    others = [list(generator.generate([3, 4, 5], seed=seed, **settings)) for seed in (6, 7)]  # type: ignore[arg-type]
    assert any(other != first for other in others)


@pytest.mark.parametrize(("kind", "count"), [("f32", 1), ("f32", 64), ("q8_0", 64)])
def test_embed_reads_the_picked_rows_only(kind: str, count: int) -> None:
    """The one-hot embedding becomes a gather (the engine's count of bytes moved), for one token and for a prompt
    (a matmul of 64 one-hot rows was laid out for register tiles and read the whole table)."""
    vocab, dim = 4096, 256  # a size where the matmul layout did not fold (embed reads only the table)
    values = np.random.default_rng(0).standard_normal((vocab, dim)).astype(np.float32)
    table: Weight = Tensor(values)
    if kind == "q8_0":  # Q8_0 blocks: a float16 scale, then 32 int8 quants
        blocks = values.reshape(-1, 32)
        scales = (np.abs(blocks).max(1) / 127).astype(np.float16)
        quants = np.round(blocks / np.maximum(scales.astype(np.float32), 1e-8)[:, None]).astype(np.int8)
        values = (quants.astype(np.float32) * scales.astype(np.float32)[:, None]).reshape(vocab, dim)
        raw = np.concatenate([scales.view(np.uint8).reshape(-1, 2), quants.view(np.uint8)], axis=1)
        table = QuantizedWeight(Tensor(raw.reshape(-1)), int(GGMLType.Q8_0), (vocab, dim))
    embedding = TokenEmbedding(vocab, dim)
    embedding.load_state_dict({"weight": table})
    ids = np.random.default_rng(count).choice(vocab, count, replace=False)
    GlobalCounters.reset()
    got = embedding(Tensor(ids.astype(np.int32).reshape(1, count))).realize()
    row_bytes = dim * (4 if kind == "f32" else 34 / 32)
    # the rows read (twice, with slack), ids, output; a quantized table's picked rows are gathered as bytes by a
    # kernel of their own, then decoded: their bytes pass three times (read, stored, read again)
    passes = 2 if kind == "f32" else 3
    rows_only = count * (passes * row_bytes + 4 + 4 * dim) + 2048
    assert GlobalCounters.mem_bytes <= rows_only < vocab * row_bytes / 4
    np.testing.assert_allclose(got.numpy()[0], values[ids], rtol=1e-6, atol=1e-6)


def test_prompts_of_random_lengths_compile_nothing(chat_model_dir: pathlib.Path) -> None:
    """The jitted prefill: after one prompt, 20 prompts of random lengths (one to three chunks, any remainder) and the
    decode after each compile nothing, and each prompt's greedy tokens equal those of a one-chunk prefill. Chunks of
    24 in a 64-row cache: a prompt past 48 tokens has its last chunk start at 40, before the previous chunk's end."""
    loaded = load_model(chat_model_dir, max_context=64)
    chunked, whole = Generator(loaded, prefill_chunk=24), Generator(load_model(chat_model_dir, max_context=64))
    assert whole.chunk == 64
    rng = np.random.default_rng(7)
    vocab = chunked.config.vocab_size
    list(chunked.generate(rng.integers(0, vocab, 20).tolist(), max_tokens=3))  # warm-up: both steps captured
    engine = default_engine()
    built = engine.programs_built
    lengths = rng.integers(1, 60, 20)
    assert (lengths > 48).sum() >= 3 and (lengths <= 24).sum() >= 3
    got = [list(chunked.generate(rng.integers(0, vocab, n).tolist(), max_tokens=3)) for n in lengths]
    assert engine.programs_built == built, f"{engine.programs_built - built} programs compiled for new prompt lengths"
    rng = np.random.default_rng(7)
    rng.integers(0, vocab, 20)
    rng.integers(1, 60, 20)
    want = [list(whole.generate(rng.integers(0, vocab, n).tolist(), max_tokens=3)) for n in lengths]
    assert got == want


def test_prefill_chunk_must_be_a_positive_int(chat_model_dir: pathlib.Path) -> None:
    loaded = load_model(chat_model_dir, max_context=64)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="prefill_chunk"):
            Generator(loaded, prefill_chunk=bad)  # type: ignore[arg-type]
