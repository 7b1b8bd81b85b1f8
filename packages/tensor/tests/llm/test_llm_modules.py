"""The LLM as kiln.tensor.nn modules: state-dict names are the GGUF file's tensor names, quantized weights load and
stay encoded, and a missing / unexpected / wrongly shaped weight is an error naming it."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.tensor.llm import load_model
from kiln.tensor.llm.config import LlamaConfig
from kiln.tensor.llm.layers import Block, FeedForward, MoE, Projection
from kiln.tensor.llm.model import Transformer
from kiln.tensor.llm.quantized import QuantizedWeight
from kiln.tensor.nn import Module, RMSNorm
from kiln.tensor.state.gguf import gguf_load_raw

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    "file",
    ["llama/llama-q4_0.gguf", "qwen3/qwen3-f32.gguf", "qwen2_moe/qwen2_moe-f32.gguf", "mixtral/mixtral-f32.gguf"],
)
def test_state_dict_names_and_shapes_are_the_gguf_tensors(file: str) -> None:
    _metadata, raw = gguf_load_raw(FIXTURES / file)  # gguf's own listing: names and shapes as the file declares
    expected = {name: tuple(shape) for name, (_data, _kind, shape) in raw.items() if name != "rope_freqs.weight"}
    model = load_model(FIXTURES / file).model
    state = model.state_dict()
    assert {name: tuple(weight.shape) for name, weight in state.items()} == expected
    quantized = {name for name, (_data, kind, shape) in raw.items() if int(kind) not in (0, 1, 30) and len(shape) > 1}
    assert quantized == {name for name, weight in state.items() if isinstance(weight, QuantizedWeight)}
    assert model.weights.keys() == state.keys()


def test_the_module_tree() -> None:
    model = load_model(FIXTURES / "qwen2_moe" / "qwen2_moe-f32.gguf").model
    block = model.blk[1]
    assert isinstance(block, Block) and isinstance(block.feed_forward, MoE)
    assert isinstance(block.attn_q, Projection) and block.attn_q.bias is not None  # qwen2: q/k/v biases
    assert isinstance(model.output_norm, RMSNorm) and isinstance(model.token_embd, Module)
    assert block.attn_q is block.attention.attn_q  # the block lists its parts' layers under GGUF names
    dense = load_model(FIXTURES / "qwen3" / "qwen3-f32.gguf").model
    assert isinstance(dense.blk[0].feed_forward, FeedForward)
    assert "blk.0.attn_q_norm.weight" in dense.state_dict() and "blk.0.attn_q.bias" not in dense.state_dict()


def test_tied_head_has_no_output_weight() -> None:
    loaded = load_model(FIXTURES / "qwen2")  # tie_word_embeddings
    assert loaded.config.tie_embeddings and "output.weight" not in loaded.model.state_dict()


def test_load_state_dict_puts_weights_in_place() -> None:
    loaded = load_model(FIXTURES / "llama" / "llama-q8_0.gguf")
    weights = loaded.model.state_dict()
    model = Transformer(loaded.config, max_context=16)
    result = model.load_state_dict(weights)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert model.blk[0].attn_q.weight is weights["blk.0.attn_q.weight"]  # the object itself: still quantized
    tokens = Tensor(np.array([[3, 1, 4, 1, 5]], np.int32))
    np.testing.assert_array_equal(model(tokens, 0).numpy(), loaded.model(tokens, 0).numpy())


def test_bad_weights_are_named() -> None:
    loaded = load_model(FIXTURES / "qwen3" / "qwen3-f32.gguf")
    weights = loaded.model.state_dict()
    config: LlamaConfig = loaded.config
    missing = {name: weight for name, weight in weights.items() if name != "blk.1.ffn_up.weight"}
    with pytest.raises(ValueError, match=r"lacks weights \['blk\.1\.ffn_up\.weight'\]"):
        Transformer(config, missing)
    extra = {**weights, "blk.0.attn_q.bias": Tensor.zeros(config.n_heads * config.head_dim)}
    with pytest.raises(ValueError, match=r"unexpected weights \['blk\.0\.attn_q\.bias'\]"):
        Transformer(config, extra)
    wrong = {**weights, "blk.0.ffn_down.weight": Tensor.zeros(3, 4)}
    with pytest.raises(ValueError, match=r"blk\.0\.ffn_down\.weight has shape \(3, 4\), the model expects"):
        Transformer(config, wrong)
    model = Transformer(config)
    with pytest.raises(RuntimeError, match=r"output_norm\.weight must be a float Tensor, got QuantizedWeight"):
        quantized = QuantizedWeight(Tensor(np.zeros(34 * config.dim // 32, np.uint8)), 8, (config.dim,))
        model.load_state_dict({**weights, "output_norm.weight": quantized})
    partial = model.load_state_dict({"output_norm.weight": weights["output_norm.weight"]}, strict=False)
    assert "output_norm.weight" not in partial.missing_keys and "token_embd.weight" in partial.missing_keys
