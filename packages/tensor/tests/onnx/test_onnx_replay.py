"""Plain OnnxRunner calls replayed per input signature (replay_cache.py): repeated calls give numpy's results, keep
their outputs apart, stop translating the graph after the capture, and graphs a replay cannot repeat (a host read,
a sequence output) stay on the plain path."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln.tensor import Tensor, TinyJit  # noqa: E402
from kiln.tensor.onnx import OnnxRunner  # noqa: E402

_RNG = np.random.default_rng(39)
_WEIGHT = _RNG.standard_normal((5, 4)).astype(np.float32)
_BIAS = _RNG.standard_normal(4).astype(np.float32)


def _model(nodes: list[onnx.NodeProto], output: onnx.ValueInfoProto, initializers: list[Any]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "replay", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5])], [output], initializers
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _dense_relu() -> onnx.ModelProto:
    """y = relu(x @ w + b)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["product"]),
        helper.make_node("Add", ["product", "b"], ["sum"]),
        helper.make_node("Relu", ["sum"], ["y"]),
    ]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    return _model(nodes, output, [numpy_helper.from_array(_WEIGHT, "w"), numpy_helper.from_array(_BIAS, "b")])


def _counting(runner: OnnxRunner) -> list[int]:
    """Counts the graph translations of `runner` (the replay cache's calls of the graph's run)."""
    count = [0]
    run = runner.replays.run

    def counted(inputs: Mapping[str, Any]) -> dict[str, Any]:
        count[0] += 1
        return run(inputs)

    runner.replays.run = counted
    return count


def _batch(rows: int) -> np.ndarray:
    return _RNG.standard_normal((rows, 5)).astype(np.float32)


def test_repeated_calls_replay_with_outputs_of_their_own() -> None:
    runner = OnnxRunner(_dense_relu())
    translations = _counting(runner)
    inputs = [_batch(3) for _ in range(5)]
    outputs = [runner({"x": x})["y"] for x in inputs]
    # the first call translates, the second translates under the capture, the rest replay
    assert translations[0] == 2
    # every output still holds its own call's values (a replay writes into the captured buffers)
    for x, y in zip(inputs, outputs):
        np.testing.assert_allclose(y.numpy(), np.maximum(x @ _WEIGHT + _BIAS, 0), rtol=1e-5, atol=1e-6)


def test_each_input_shape_has_its_own_replay() -> None:
    runner = OnnxRunner(_dense_relu())
    translations = _counting(runner)
    for rows in (2, 7, 2, 7, 2, 7, 1):
        x = _batch(rows)
        np.testing.assert_allclose(
            runner({"x": x})["y"].numpy(), np.maximum(x @ _WEIGHT + _BIAS, 0), rtol=1e-5, atol=1e-6
        )
    assert translations[0] == 5  # 2 per batch size seen three times, 1 for the size seen once


def test_tensor_inputs_replay_too() -> None:
    runner = OnnxRunner(_dense_relu())
    for _ in range(4):
        x = _batch(2)
        result = runner({"x": Tensor(x)})["y"].numpy()
        np.testing.assert_allclose(result, np.maximum(x @ _WEIGHT + _BIAS, 0), rtol=1e-5, atol=1e-6)


def test_host_read_stays_plain() -> None:
    """NonZero reads its input on the host: its output shape depends on the values, so no replay can repeat it."""
    nodes = [helper.make_node("NonZero", ["x"], ["y"])]
    runner = OnnxRunner(_model(nodes, helper.make_tensor_value_info("y", TensorProto.INT64, [2, None]), []))
    translations = _counting(runner)
    for threshold in (0.0, 0.5, -0.5, 1.0):
        x = (_batch(3) > threshold).astype(np.float32) * _batch(3)
        np.testing.assert_array_equal(runner({"x": x})["y"].numpy(), np.array(np.nonzero(x)))
    # call 1 plain, call 2 a failed capture and a plain run, calls 3 and 4 plain
    assert translations[0] == 5


def test_sequence_output_stays_plain() -> None:
    nodes = [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=1, keepdims=1)]
    sequence = helper.make_tensor_sequence_value_info("parts", TensorProto.FLOAT, None)
    runner = OnnxRunner(_model(nodes, sequence, []))
    translations = _counting(runner)
    for _ in range(3):
        x = _batch(2)
        parts = runner({"x": x})["parts"]
        assert [part.numpy().tolist() for part in parts] == [x[:, [column]].tolist() for column in range(5)]
    assert translations[0] == 3


def test_inside_a_callers_tinyjit() -> None:
    """Inside a caller's TinyJit the caller's capture records the kernels; the runner keeps no replay of its own."""
    runner = OnnxRunner(_dense_relu())
    jitted: Callable[..., dict[str, Any]] = TinyJit(lambda x: runner({"x": x}))
    for _ in range(4):
        x = _batch(2)
        result = jitted(Tensor(x))["y"].numpy()
        np.testing.assert_allclose(result, np.maximum(x @ _WEIGHT + _BIAS, 0), rtol=1e-5, atol=1e-6)
    assert all(plan.jit is None or plan.jit.captured is None for plan in runner.replays.plans.values())
