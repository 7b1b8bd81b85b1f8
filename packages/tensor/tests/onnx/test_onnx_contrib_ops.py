"""onnxruntime's com.microsoft contrib operators on graphs built with onnx.helper, run by kiln and by onnxruntime
(which implements them: the oracle) on the same random inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln.tensor.onnx import OnnxRunner  # noqa: E402

_RNG = np.random.default_rng(3901)
_MS = "com.microsoft"


def _value(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
    element = helper.np_dtype_to_tensor_dtype(array.dtype)
    return helper.make_tensor_value_info(name, element, list(array.shape))


def _model(
    node: onnx.NodeProto,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    constants: dict[str, np.ndarray] | None = None,
    opset: int = 17,
    shape: list[int] | None = None,
) -> onnx.ModelProto:
    """One node's model; its outputs are FLOAT, of `shape` (or of none, for onnxruntime, until _check sets them)."""
    graph = helper.make_graph(
        [node],
        node.op_type,
        [_value(name, array) for name, array in inputs.items()],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name in outputs if name],
        [numpy_helper.from_array(array, name) for name, array in (constants or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(_MS, 1)])


def _check(
    op_type: str,
    inputs: dict[str, np.ndarray | None],
    outputs: list[str],
    constants: dict[str, np.ndarray] | None = None,
    rtol: float = 1e-4,
    domain: str = _MS,
    opset: int = 17,
    **attributes: Any,
) -> None:
    """Run one node in both; every named output must agree (an absent optional input is passed as None)."""
    fed = {name: array for name, array in inputs.items() if array is not None}
    names = [name if array is not None or name in (constants or {}) else "" for name, array in inputs.items()]
    node = helper.make_node(op_type, names, outputs, domain=domain, **attributes)
    model = _model(node, fed, outputs, constants, opset)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, fed)
    for output, reference in zip(model.graph.output, expected):  # onnx's checker wants output shapes
        output.CopyFrom(helper.make_tensor_value_info(output.name, TensorProto.FLOAT, list(reference.shape)))
    results = OnnxRunner(model)(fed)
    for name, reference in zip([name for name in outputs if name], expected):
        value = results[name].numpy()
        assert value.shape == reference.shape, f"{op_type} {name}: {value.shape} vs onnxruntime {reference.shape}"
        scale = float(np.abs(reference).max()) if reference.size else 1.0
        np.testing.assert_allclose(value, reference, rtol=rtol, atol=rtol * scale, err_msg=f"{op_type} {name}")


def _normal(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (_RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("op_type", ["Gelu", "FastGelu", "QuickGelu"])
def test_gelu_family(op_type: str) -> None:
    _check(op_type, {"x": _normal(2, 5, 16, scale=3)}, ["y"])


def test_quick_gelu_alpha_and_biased_gelus() -> None:
    _check("QuickGelu", {"x": _normal(3, 8, scale=3)}, ["y"], alpha=1.2)
    _check("FastGelu", {"x": _normal(2, 4, 16, scale=2), "bias": _normal(16)}, ["y"])
    _check("BiasGelu", {"x": _normal(2, 4, 16, scale=2), "bias": _normal(16)}, ["y"])


def test_bias_add() -> None:
    """onnxruntime runs BiasAdd on CUDA only: numpy is the oracle here."""
    inputs = {"x": _normal(2, 3, 16), "bias": _normal(16), "skip": _normal(2, 3, 16)}
    node = helper.make_node("BiasAdd", list(inputs), ["y"], domain=_MS)
    result = OnnxRunner(_model(node, inputs, ["y"], shape=[2, 3, 16]))(inputs)["y"].numpy()
    np.testing.assert_allclose(result, inputs["x"] + inputs["bias"] + inputs["skip"], rtol=1e-6)


@pytest.mark.parametrize("with_bias", [False, True])
def test_skip_layer_normalization(with_bias: bool) -> None:
    inputs = {"x": _normal(2, 5, 16), "skip": _normal(2, 5, 16), "gamma": _normal(16), "beta": _normal(16)}
    if with_bias:
        inputs["bias"] = _normal(16)
    outputs = ["y", "mean", "inverse", "sum"] if with_bias else ["y"]
    _check("SkipLayerNormalization", inputs, outputs, epsilon=1e-5)


def test_skip_simplified_layer_normalization() -> None:
    inputs = {"x": _normal(2, 5, 16), "skip": _normal(2, 5, 16), "gamma": _normal(16)}
    _check("SkipSimplifiedLayerNormalization", inputs, ["y", "", "", "sum"], epsilon=1e-6)


def test_default_domain_layer_norms_onnxruntime_defines() -> None:
    """SimplifiedLayerNormalization (any opset) and LayerNormalization before opset 17, as onnxruntime's optimizer
    writes them in the default domain (onnx's checker knows neither)."""
    x = _normal(3, 4, 16, scale=2)
    _check("SimplifiedLayerNormalization", {"x": x, "gamma": _normal(16)}, ["y"], domain="", epsilon=1e-6)
    inputs = {"x": x, "gamma": _normal(16), "beta": _normal(16)}
    _check("LayerNormalization", inputs, ["y"], domain="", opset=13, epsilon=1e-5)


def _attention_inputs(batch: int, sequence: int, width: int) -> dict[str, np.ndarray | None]:
    return {
        "x": _normal(batch, sequence, width),
        "weights": _normal(width, 3 * width, scale=0.3),
        "bias": _normal(3 * width, scale=0.3),
    }


@pytest.mark.parametrize("mask", ["none", "2d", "3d", "lengths"])
def test_attention_masks(mask: str) -> None:
    inputs = _attention_inputs(2, 5, 16)
    masks = {
        "2d": np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32),
        "3d": (_RNG.random((2, 5, 5)) > 0.3).astype(np.int32),
        "lengths": np.array([5, 3], np.int32),
    }
    if mask != "none":
        masks["3d"][:, :, 0] = 1  # every query sees a key
        inputs["mask_index"] = masks[mask]
    _check("Attention", inputs, ["y", "present"], num_heads=4)


def test_attention_with_past_unidirectional() -> None:
    inputs = _attention_inputs(2, 3, 16)
    inputs["mask_index"] = np.array([[1] * 7, [1] * 6 + [0]], np.int32)
    inputs["past"] = _normal(2, 2, 4, 4, 4)
    _check("Attention", inputs, ["y", "present"], num_heads=4, unidirectional=1)


def test_attention_bias_input() -> None:
    inputs = _attention_inputs(2, 3, 16)
    inputs |= {"mask_index": None, "past": None, "attention_bias": _normal(1, 4, 3, 3)}
    _check("Attention", inputs, ["y"], num_heads=4)


def test_attention_uneven_qkv_sizes_and_scale() -> None:
    inputs = {"x": _normal(1, 4, 8), "weights": _normal(8, 8 + 8 + 12, scale=0.3), "bias": _normal(28)}
    _check("Attention", inputs, ["y"], num_heads=2, qkv_hidden_sizes=[8, 8, 12], scale=0.3)


def test_multi_head_attention_cross_and_cache() -> None:
    query, key, value = _normal(2, 3, 16), _normal(2, 6, 16), _normal(2, 6, 16)
    inputs: dict[str, np.ndarray | None] = {"q": query, "k": key, "v": value, "bias": _normal(48)}
    inputs["key_padding_mask"] = np.array([[1] * 6, [1] * 4 + [0] * 2], np.int32)
    _check("MultiHeadAttention", inputs, ["y"], num_heads=4)
    cached = {
        "q": query,
        "k": _normal(2, 3, 16),
        "v": _normal(2, 3, 16),
        "bias": None,
        "key_padding_mask": None,
        "attention_bias": None,
        "past_key": _normal(2, 4, 5, 4),
        "past_value": _normal(2, 4, 5, 4),
    }
    _check("MultiHeadAttention", cached, ["y", "present_key", "present_value"], num_heads=4, unidirectional=1)


def test_multi_head_attention_packed_qkv_and_kv() -> None:
    """onnxruntime's CPU kernel refuses packed inputs: its result on the unpacked ones is the oracle."""
    packed = _normal(2, 4, 2, 3, 8)
    query, key, value = (packed[:, :, :, part].reshape(2, 4, 16) for part in range(3))
    session_inputs = {"q": query, "k": key, "v": value}
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain=_MS, num_heads=2)
    model = _model(node, session_inputs, ["y"])
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, session_inputs)
    node = helper.make_node("MultiHeadAttention", ["qkv"], ["y"], domain=_MS, num_heads=2)
    result = OnnxRunner(_model(node, {"qkv": packed}, ["y"], shape=[2, 4, 16]))({"qkv": packed})["y"].numpy()
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-5)
    packed_kv = np.stack([key.reshape(2, 4, 2, 8), value.reshape(2, 4, 2, 8)], axis=3)
    node = helper.make_node("MultiHeadAttention", ["q", "kv"], ["y"], domain=_MS, num_heads=2)
    feeds = {"q": query, "kv": packed_kv}
    result = OnnxRunner(_model(node, feeds, ["y"], shape=[2, 4, 16]))(feeds)["y"].numpy()
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-5)


def _caches(positions: int, rotary: int) -> tuple[np.ndarray, np.ndarray]:
    angles = np.arange(positions).reshape(-1, 1) / 10000 ** (np.arange(rotary // 2) / (rotary // 2))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding(interleaved: int) -> None:
    cosine, sine = _caches(32, 8)
    x = _normal(2, 5, 4 * 8)
    positions = _RNG.integers(0, 32, (2, 5)).astype(np.int64)
    inputs = {"x": x, "positions": positions, "cos": cosine, "sin": sine}
    _check("RotaryEmbedding", inputs, ["y"], interleaved=interleaved, num_heads=4)
    start = {"x": _normal(1, 2, 4, 8), "positions": np.array([7], np.int64), "cos": cosine, "sin": sine}
    _check("RotaryEmbedding", start, ["y"], interleaved=interleaved)


def test_rotary_embedding_partial_rotation() -> None:
    cosine, sine = _caches(16, 4)
    inputs = {"x": _normal(2, 3, 2 * 8), "positions": np.array([[0, 1, 2], [3, 4, 5]], np.int64)}
    inputs |= {"cos": cosine, "sin": sine}
    _check("RotaryEmbedding", inputs, ["y"], num_heads=2, rotary_embedding_dim=4)


def _gqa_inputs(batch: int, sequence: int, past: int, size: int = 8) -> dict[str, np.ndarray | None]:
    total = past + sequence
    return {
        "q": _normal(batch, sequence, 4 * size),
        "k": _normal(batch, sequence, 2 * size),
        "v": _normal(batch, sequence, 2 * size),
        "past_key": _normal(batch, 2, past, size),
        "past_value": _normal(batch, 2, past, size),
        "seqlens_k": np.full(batch, total - 1, np.int32),
        "total_sequence_length": np.array(total, np.int32),
    }


@pytest.mark.parametrize(("batch", "sequence", "past"), [(2, 4, 0), (2, 1, 6), (1, 3, 5)])
def test_group_query_attention(batch: int, sequence: int, past: int) -> None:
    _check(
        "GroupQueryAttention",
        _gqa_inputs(batch, sequence, past),
        ["y", "present_key", "present_value"],
        num_heads=4,
        kv_num_heads=2,
    )


def test_group_query_attention_rotary_window_softcap() -> None:
    cosine, sine = _caches(32, 16)
    inputs = _gqa_inputs(1, 3, 4, size=16) | {"cos": cosine, "sin": sine}
    attributes = {"num_heads": 4, "kv_num_heads": 2, "do_rotary": 1}
    outputs = ["y", "present_key", "present_value"]
    _check("GroupQueryAttention", inputs, outputs, **attributes)
    _check("GroupQueryAttention", inputs, outputs, **attributes, rotary_interleaved=1, local_window_size=2)
    _check("GroupQueryAttention", _gqa_inputs(1, 2, 3), outputs, num_heads=4, kv_num_heads=2, softcap=0.5)


def test_group_query_attention_padded_batch_is_refused() -> None:
    inputs = _gqa_inputs(2, 1, 4)
    inputs["seqlens_k"] = np.array([4, 2], np.int32)
    fed = {name: array for name, array in inputs.items() if array is not None}
    node = helper.make_node("GroupQueryAttention", list(inputs), ["y"], domain=_MS, num_heads=4, kv_num_heads=2)
    runner = OnnxRunner(_model(node, fed, ["y"], shape=[2, 1, 32]))
    with pytest.raises(NotImplementedError, match=r"seqlens_k=\[4, 2\].*unpadded"):
        runner(fed)


def _quantized_weight(rows: int, columns: int, bits: int, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(packed B, scales, packed zero points) of random `bits`-bit values, packed lowest bits first."""
    blocks = -(-columns // block)
    per_byte = 8 // bits
    values = _RNG.integers(0, 1 << bits, (rows, blocks * block))
    shifts = (np.arange(values.shape[1]) % per_byte) * bits
    packed = np.zeros((rows, blocks * block // per_byte), np.int64)
    np.add.at(packed, (slice(None), np.arange(values.shape[1]) // per_byte), values << shifts)
    zero_values = _RNG.integers(0, 1 << bits, (rows, -(-blocks // per_byte) * per_byte))
    zero_shifts = (np.arange(zero_values.shape[1]) % per_byte) * bits
    zeros = np.zeros((rows, zero_values.shape[1] // per_byte), np.int64)
    np.add.at(zeros, (slice(None), np.arange(zero_values.shape[1]) // per_byte), zero_values << zero_shifts)
    scales = (_RNG.random(rows * blocks) * 0.1 + 0.01).astype(np.float32)
    return packed.astype(np.uint8).reshape(rows, blocks, -1), scales, zeros.astype(np.uint8)


@pytest.mark.parametrize(("bits", "columns", "zero_points"), [(4, 64, False), (4, 80, True), (8, 48, True)])
def test_matmul_n_bits(bits: int, columns: int, zero_points: bool) -> None:
    rows, block = 24, 16
    packed, scales, zeros = _quantized_weight(rows, columns, bits, block)
    constants = {"B": packed, "scales": scales} | ({"zero_points": zeros} if zero_points else {})
    inputs: dict[str, np.ndarray | None] = {"A": _normal(2, 3, columns)}
    inputs |= {name: None for name in constants}
    if not zero_points:
        inputs["zero_points"] = None
    inputs["g_idx"] = None
    constants["bias"] = _normal(rows)
    inputs["bias"] = None
    attributes = {"K": columns, "N": rows, "bits": bits, "block_size": block}
    _check("MatMulNBits", inputs, ["y"], constants, **attributes)


def test_unknown_contrib_operator_fails_at_load() -> None:
    node = helper.make_node("BiasSoftmax", ["x", "x"], ["y"], name="fused", domain=_MS)
    model = _model(node, {"x": _normal(2, 3)}, ["y"], shape=[2, 3])
    with pytest.raises(
        NotImplementedError, match=r"node fused, op type 'BiasSoftmax', domain 'com.microsoft'.*no rule"
    ):
        OnnxRunner(model)


def test_unsupported_contrib_mode_fails_at_load() -> None:
    node = helper.make_node("Attention", ["x", "w"], ["y"], name="rotary", domain=_MS, num_heads=2, do_rotary=1)
    model = _model(node, {"x": _normal(1, 2, 8), "w": _normal(8, 24)}, ["y"], shape=[1, 2, 8])
    with pytest.raises(NotImplementedError, match=r"node rotary, op type 'Attention'.*do_rotary=1 \(only 0\)"):
        OnnxRunner(model)
