"""Sparse MoE: each token runs only the experts its router picks (their matrices gathered on the device), against a
numpy reference written from the definition; unchosen experts' weights are never read (NaN there stays out), also
for quantized experts."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from kiln.tensor import GlobalCounters, Tensor
from kiln.tensor.llm.config import LlamaConfig
from kiln.tensor.llm.layers import MoE
from kiln.tensor.llm.quantized import QuantizedWeight
from kiln.tensor.state.quantization import GGMLType

DIM, HIDDEN, EXPERTS, USED, SHARED = 64, 32, 8, 2, 48
BIG_HIDDEN = 256  # experts large enough that their matrices outweigh the router's and top-k's own traffic


def _config(normalize: bool, shared: int = 0, experts: int = EXPERTS, hidden: int = HIDDEN) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=16, dim=DIM, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=hidden, head_dim=16,
        n_experts=experts, n_experts_used=USED, norm_topk_prob=normalize, shared_expert_dim=shared,
    )  # fmt: skip


def _weights(
    rng: np.random.Generator, shared: int, experts: int = EXPERTS, hidden: int = HIDDEN
) -> dict[str, np.ndarray]:
    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    weights = {
        "ffn_norm.weight": 1 + w(DIM) * 0.1,
        "ffn_gate_inp.weight": w(experts, DIM) * 3,
        "ffn_gate_exps.weight": w(experts, hidden, DIM),
        "ffn_up_exps.weight": w(experts, hidden, DIM),
        "ffn_down_exps.weight": w(experts, DIM, hidden),
    }
    if shared:
        weights |= {
            "ffn_gate_inp_shexp.weight": w(1, DIM),
            "ffn_gate_shexp.weight": w(shared, DIM),
            "ffn_up_shexp.weight": w(shared, DIM),
            "ffn_down_shexp.weight": w(DIM, shared),
        }
    return weights


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def _routing(weights: dict[str, np.ndarray], h: np.ndarray, normalize: bool) -> tuple[np.ndarray, list[list[int]]]:
    """The normed inputs (N, dim) and each token's chosen experts, float64."""
    x = h.reshape(-1, DIM).astype(np.float64)
    x = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * weights["ffn_norm.weight"]
    return x, [list(np.argsort(-(row @ weights["ffn_gate_inp.weight"].T.astype(np.float64)))[:USED]) for row in x]


def _reference(weights: dict[str, np.ndarray], h: np.ndarray, normalize: bool) -> np.ndarray:
    """The MoE's output from its definition: per token, the softmax-weighted SwiGLU of its top-k experts only."""
    x, chosen = _routing(weights, h, normalize)
    out = np.zeros_like(x)
    for n, row in enumerate(x):
        logits = row @ weights["ffn_gate_inp.weight"].T.astype(np.float64)
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        share = probs[chosen[n]] / (probs[chosen[n]].sum() if normalize else 1.0)
        for expert, weight in zip(chosen[n], share, strict=True):
            gate = weights["ffn_gate_exps.weight"][expert] @ row
            up = weights["ffn_up_exps.weight"][expert] @ row
            out[n] += weight * (weights["ffn_down_exps.weight"][expert] @ (_silu(gate) * up))
        if "ffn_gate_shexp.weight" in weights:
            hidden = _silu(weights["ffn_gate_shexp.weight"] @ row) * (weights["ffn_up_shexp.weight"] @ row)
            gate = 1 / (1 + np.exp(-(weights["ffn_gate_inp_shexp.weight"] @ row)))
            out[n] += (weights["ffn_down_shexp.weight"] @ hidden) * gate
    return out.reshape(h.shape)


def _moe(
    weights: dict[str, np.ndarray | QuantizedWeight],
    normalize: bool,
    shared: int,
    experts: int = EXPERTS,
    hidden: int = HIDDEN,
) -> MoE:
    layer = MoE(_config(normalize, shared, experts, hidden))
    layer.load_state_dict({k: v if isinstance(v, QuantizedWeight) else Tensor(v) for k, v in weights.items()})
    return layer


# 2 picks a token of 8 experts: up to 3 tokens gather their experts' matrices, more run every expert and select
@pytest.mark.parametrize(
    ("normalize", "shared", "tokens"), [(True, 0, 1), (False, SHARED, 3), (False, SHARED, 5), (True, 0, 9)]
)
def test_sparse_moe_matches_numpy(normalize: bool, shared: int, tokens: int) -> None:
    rng = np.random.default_rng(tokens)
    weights = _weights(rng, shared)
    h = rng.standard_normal((1, tokens, DIM)).astype(np.float32)
    got = _moe(dict(weights), normalize, shared)(Tensor(h)).numpy()
    np.testing.assert_allclose(got, _reference(weights, h, normalize), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize(("experts", "tokens"), [(EXPERTS, 3), (4, 2)])  # gathered; every expert, selected
def test_unchosen_experts_are_never_read(experts: int, tokens: int) -> None:
    """NaN in every expert no token chooses: the output is finite and equals the reference (a dense sum weighting
    each expert's result by its share computes 0 * NaN = NaN)."""
    rng = np.random.default_rng(11)
    weights = _weights(rng, 0, experts)
    h = rng.standard_normal((1, tokens, DIM)).astype(np.float32)
    expected = _reference(weights, h, True)
    _, chosen = _routing(weights, h, True)
    unchosen = sorted(set(range(experts)) - {expert for row in chosen for expert in row})
    assert unchosen
    poisoned = dict(weights)
    for kind in ("gate", "up", "down"):
        matrices = weights[f"ffn_{kind}_exps.weight"].copy()
        matrices[unchosen] = np.nan
        poisoned[f"ffn_{kind}_exps.weight"] = matrices
    got = _moe(dict(poisoned), True, 0, experts)(Tensor(h)).numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-4)


def _q8_0(values: np.ndarray) -> tuple[QuantizedWeight, np.ndarray]:
    """Q8_0 blocks of `values` (a float16 scale, 32 int8 quants) and gguf-py's dequantization of those bytes."""
    raw = gguf.quants.quantize(values.reshape(-1, values.shape[-1]), gguf.GGMLQuantizationType.Q8_0)
    decoded = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q8_0).reshape(values.shape)
    return QuantizedWeight(Tensor(raw.reshape(-1)), int(GGMLType.Q8_0), values.shape), decoded.astype(np.float32)


def _quantized(weights: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray | QuantizedWeight], dict[str, np.ndarray]]:
    """The experts' matrices as Q8_0 weights, and the float weights with them decoded as gguf-py decodes them."""
    loaded: dict[str, np.ndarray | QuantizedWeight] = dict(weights)
    decoded = dict(weights)
    for name in ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"):
        loaded[name], decoded[name] = _q8_0(weights[name])
    return loaded, decoded


@pytest.mark.parametrize("tokens", [3, 6])
def test_quantized_experts_match_numpy(tokens: int) -> None:
    rng = np.random.default_rng(5)
    loaded, decoded = _quantized(_weights(rng, SHARED))
    h = rng.standard_normal((1, tokens, DIM)).astype(np.float32)
    got = _moe(loaded, False, SHARED)(Tensor(h)).numpy()
    np.testing.assert_allclose(got, _reference(decoded, h, False), atol=2e-5, rtol=1e-4)


def _bytes_moved(experts: int, quantized: bool) -> int:
    """The bytes a decode step's MoE layer moves (the engine's estimate of every kernel's loads and stores)."""
    rng = np.random.default_rng(3)
    weights = _weights(rng, 0, experts, BIG_HIDDEN)
    layer = _moe(_quantized(weights)[0] if quantized else dict(weights), True, 0, experts, BIG_HIDDEN)
    x = Tensor(rng.standard_normal((1, 1, DIM)).astype(np.float32)).realize()
    layer(x).realize()
    GlobalCounters.reset()
    layer(x).realize()
    return GlobalCounters.mem_bytes


@pytest.mark.parametrize("quantized", [False, True])
def test_more_experts_add_no_expert_reads(quantized: bool) -> None:
    """Four times the experts (the router's choice is still two): the extra experts' matrices are not read (a
    dense layer would move every one of them)."""
    expert_bytes = 3 * BIG_HIDDEN * DIM * (34 / 32 if quantized else 4)  # one expert's three matrices
    extra = _bytes_moved(4 * EXPERTS, quantized) - _bytes_moved(EXPERTS, quantized)
    # a dense layer moves all 24 more experts; the sparse one moves only the router's and top-k's larger vectors
    # (and a product over the gathered matrices may get another kernel layout)
    assert extra < 3 * EXPERTS * expert_bytes / 3, f"{extra} more bytes moved for {3 * EXPERTS} more experts"


def test_unchosen_quantized_experts_are_never_read() -> None:
    """NaN block scales in every Q8_0 expert no token chooses: the output is finite and equals the reference."""
    rng = np.random.default_rng(12)
    weights = _weights(rng, 0)
    h = rng.standard_normal((1, 2, DIM)).astype(np.float32)
    loaded, decoded = _quantized(weights)
    _, chosen = _routing(decoded, h, True)
    unchosen = sorted(set(range(EXPERTS)) - {expert for row in chosen for expert in row})
    assert len(unchosen) >= 4
    for name in ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"):
        weight = loaded[name]
        assert isinstance(weight, QuantizedWeight)
        blocks = weight.raw.numpy().reshape(EXPERTS, -1, 34)  # Q8_0: a float16 scale, then 32 int8 quants
        blocks[unchosen, :, 0:2] = np.frombuffer(np.float16(np.nan).tobytes(), np.uint8)
        loaded[name] = QuantizedWeight(Tensor(blocks.reshape(-1)), int(GGMLType.Q8_0), weight.shape)
    got = _moe(loaded, True, 0)(Tensor(h)).numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, _reference(decoded, h, True), atol=2e-5, rtol=1e-4)
