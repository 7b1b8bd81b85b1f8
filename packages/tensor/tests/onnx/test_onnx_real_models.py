"""Real models exported by torch.onnx.export (models/*.onnx, written by record_models.py), run by kiln and by
onnxruntime (the oracle) on the same random inputs: batch 1 and 4 through the dynamic batch dim, and under TinyJit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from kiln.tensor import Tensor, TinyJit  # noqa: E402
from kiln.tensor.onnx import OnnxRunner  # noqa: E402

MODELS = Path(__file__).resolve().parent / "models"
_RNG = np.random.default_rng(390)


def _images(batch: int) -> dict[str, np.ndarray]:
    return {"x": _RNG.standard_normal((batch, 3, 64, 64)).astype(np.float32)}


def _tokens(batch: int, sequence: int = 9) -> dict[str, np.ndarray]:
    mask = np.ones((batch, sequence), np.int64)
    mask[-1, sequence - 3 :] = 0  # the last row is padded
    return {
        "input_ids": _RNG.integers(0, 100, (batch, sequence)),
        "attention_mask": mask,
        "token_type_ids": _RNG.integers(0, 2, (batch, sequence)),
    }


def _decoder_step(batch: int, new: int = 2, cached: int = 5) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {"input_ids": _RNG.integers(0, 100, (batch, new))}
    for layer in range(2):
        for kind in ("key", "value"):
            feeds[f"past_{kind}_{layer}"] = _RNG.standard_normal((batch, 4, cached, 8)).astype(np.float32)
    return feeds


def _sequence(batch: int) -> dict[str, np.ndarray]:
    return {"x": _RNG.standard_normal((batch, 6, 8)).astype(np.float32)}


INPUTS: dict[str, Callable[[int], dict[str, np.ndarray]]] = {
    "resnet18": _images,
    "mobilenet": _images,
    "bert": _tokens,
    "gpt2": _decoder_step,
    "lstm": _sequence,
    "bert_int8_dynamic": _tokens,
    "bert_fused": _tokens,  # after onnxruntime's transformer optimizer: com.microsoft ops
    "gpt2_fused": _decoder_step,
}


def _reference(path: Path, feeds: dict[str, np.ndarray], optimize: bool = True) -> list[np.ndarray]:
    options = onnxruntime.SessionOptions()
    if not optimize:
        # run each QuantizeLinear / DequantizeLinear as written (fused, onnxruntime requantizes in integers)
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [np.asarray(value) for value in session.run(None, feeds)]


def _assert_close(results: dict[str, Any], expected: list[np.ndarray], names: list[str]) -> None:
    for name, reference in zip(names, expected):
        value = results[name]
        value = value.numpy() if isinstance(value, Tensor) else value
        assert value.shape == reference.shape, f"{name}: shape {value.shape}, onnxruntime {reference.shape}"
        # 1e-4 relative, to the element or (for values near zero) to the output's largest magnitude
        scale = float(np.abs(reference).max()) if reference.size else 1.0
        np.testing.assert_allclose(value, reference, rtol=1e-4, atol=1e-4 * scale, err_msg=name)


def test_fixtures_are_small_exports() -> None:
    """The fixtures are torch exports, some passed through onnxruntime's tools, and stay a few MB in all."""
    total = 0
    for name in [*INPUTS, "resnet18_int8_qdq"]:
        path = MODELS / f"{name}.onnx"
        total += path.stat().st_size
        producer = onnx.load(str(path), load_external_data=False).producer_name
        assert producer in ("pytorch", "onnx.quantize", "onnxruntime.transformers"), f"{name}: producer {producer!r}"
    assert total < 4 << 20


@pytest.mark.parametrize("name", list(INPUTS))
def test_model_matches_onnxruntime_at_batch_1_and_4(name: str) -> None:
    path = MODELS / f"{name}.onnx"
    runner = OnnxRunner(path)
    assert all(entry.dims and isinstance(entry.dims[0], str) for entry in runner.inputs), "a fixed batch dim"
    for batch in (1, 4):
        feeds = INPUTS[name](batch)
        _assert_close(runner(feeds), _reference(path, feeds), runner.outputs)


def test_fused_models_hold_contrib_operators() -> None:
    for name in ("bert_fused", "gpt2_fused"):
        model = onnx.load(str(MODELS / f"{name}.onnx"))
        fused = {node.op_type for node in model.graph.node if node.domain == "com.microsoft"}
        assert "SkipLayerNormalization" in fused and fused & {"BiasGelu", "FastGelu"}, f"{name}: {fused}"


def test_decoder_kv_cache_grows_step_by_step() -> None:
    """GPT-2 decoding: each step's present_* are the next step's past_*, the cached length grows 5 -> 7 -> 8."""
    path = MODELS / "gpt2.onnx"
    runner = OnnxRunner(path)
    feeds = _decoder_step(2)
    for new in (2, 1):
        expected = _reference(path, feeds)
        results = runner(feeds)
        _assert_close(results, expected, runner.outputs)
        cached = feeds["past_key_0"].shape[2]
        assert results["present_key_0"].shape == (2, 4, cached + feeds["input_ids"].shape[1], 8)
        feeds = {name.replace("present", "past"): results[name].numpy() for name in runner.outputs[1:]}
        feeds["input_ids"] = _RNG.integers(0, 100, (2, new))


def test_statically_quantized_resnet_matches_onnxruntime_to_a_quantization_step() -> None:
    """A QDQ-quantized ResNet: kiln and onnxruntime (running each Q/DQ as written) round the same values, but a float
    sum that lands within an ulp of a rounding boundary may round either way and the difference travels on. So
    most logits match to 1e-4 relative and every one lies within 4 steps of the output's quantization scale."""
    path = MODELS / "resnet18_int8_qdq.onnx"
    model = onnx.load(str(path))
    output_scale = next(
        float(onnx.numpy_helper.to_array(tensor)) for tensor in model.graph.initializer if tensor.name == "logits_scale"
    )
    runner = OnnxRunner(model)
    for batch in (1, 4):
        feeds = _images(batch)
        (expected,) = _reference(path, feeds, optimize=False)
        result = runner(feeds)["logits"].numpy()
        np.testing.assert_allclose(result, expected, rtol=0, atol=4 * output_scale)
        exact = np.isclose(result, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))
        assert exact.mean() >= 0.75, f"only {exact.mean():.0%} of the logits match to 1e-4"


@pytest.mark.parametrize("name", ["mobilenet", "gpt2"])
def test_model_under_tinyjit_matches_onnxruntime(name: str) -> None:
    """Captured on the second call, replayed on the third and fourth with new data."""
    path = MODELS / f"{name}.onnx"
    runner = OnnxRunner(path)
    jitted = TinyJit(lambda **feeds: runner(feeds))
    for call in range(4):
        feeds = INPUTS[name](2)
        results = jitted(**{key: Tensor(value) for key, value in feeds.items()})
        _assert_close(results, _reference(path, feeds), runner.outputs)
        assert (jitted.captured is not None) == (call >= 1)


@pytest.mark.parametrize("name", ["bert", "gpt2", "lstm", "mobilenet"])
def test_plain_calls_replay_and_match_onnxruntime(name: str) -> None:
    """Four plain calls with new data each time: the graph is translated by the first two (the second under the
    replay cache's capture), the third and fourth replay its kernels."""
    path = MODELS / f"{name}.onnx"
    runner = OnnxRunner(path)
    translations = [0]
    run = runner.replays.run

    def counted(inputs: Any) -> Any:
        translations[0] += 1
        return run(inputs)

    runner.replays.run = counted
    for _ in range(4):
        feeds = INPUTS[name](2)
        _assert_close(runner(feeds), _reference(path, feeds), runner.outputs)
    assert translations[0] == 2
