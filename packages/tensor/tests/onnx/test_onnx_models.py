"""Small models built with onnx's helper, run by kiln and by onnxruntime (the oracle) on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln.tensor.onnx import OnnxRunner  # noqa: E402
from kiln.tensor.realize.engine import Engine, use_engine  # noqa: E402

_RNG = np.random.default_rng(39)


def _weight(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((_RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(value) for value in session.run(None, feeds)]


def _cnn() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["n1"], epsilon=1e-5),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], group=8, kernel_shape=[3, 3], auto_pad="SAME_UPPER"),
        helper.make_node("Clip", ["c2", "low", "high"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    initializers = [
        _weight("w1", 8, 3, 3, 3),
        _weight("b1", 8),
        numpy_helper.from_array(np.linspace(0.5, 1.5, 8).astype(np.float32), "gamma"),
        _weight("beta", 8),
        _weight("mean", 8),
        numpy_helper.from_array(np.linspace(0.5, 2.0, 8).astype(np.float32), "var"),
        _weight("w2", 8, 1, 3, 3),
        numpy_helper.from_array(np.array(0.0, np.float32), "low"),
        numpy_helper.from_array(np.array(6.0, np.float32), "high"),
        _weight("w3", 4, 8),
        _weight("b3", 4),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _attention_block(heads: int = 2, width: int = 8) -> onnx.ModelProto:
    """Self-attention with a Shape -> Gather -> Concat -> Reshape head split and LayerNormalization."""
    size = width // heads
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Gather", ["shape", "one"], ["sequence"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axis0"], ["batch_1d"]),
        helper.make_node("Unsqueeze", ["sequence", "axis0"], ["sequence_1d"]),
        helper.make_node("Concat", ["batch_1d", "sequence_1d", "head_dims"], ["split_shape"], axis=0),
        *[
            node
            for name in ("q", "k", "v")
            for node in (
                helper.make_node("MatMul", ["x", f"w_{name}"], [f"{name}_flat"]),
                helper.make_node("Reshape", [f"{name}_flat", "split_shape"], [f"{name}_split"]),
                helper.make_node("Transpose", [f"{name}_split"], [name], perm=[0, 2, 1, 3]),
            )
        ],
        helper.make_node("Transpose", ["k"], ["k_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "k_t"], ["scores"]),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["weights"], axis=-1),
        helper.make_node("MatMul", ["weights", "v"], ["mixed"]),
        helper.make_node("Transpose", ["mixed"], ["mixed_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Concat", ["batch_1d", "sequence_1d", "minus_one"], ["merge_shape"], axis=0),
        helper.make_node("Reshape", ["mixed_t", "merge_shape"], ["merged"]),
        helper.make_node("Add", ["merged", "x"], ["residual"]),
        helper.make_node("LayerNormalization", ["residual", "ln_scale", "ln_bias"], ["y"], axis=-1),
    ]
    initializers = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array([heads, size], np.int64), "head_dims"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
        numpy_helper.from_array(np.array(1 / np.sqrt(size), np.float32), "scale"),
        _weight("w_q", width, width),
        _weight("w_k", width, width),
        _weight("w_v", width, width),
        _weight("ln_scale", width),
        _weight("ln_bias", width),
    ]
    graph = helper.make_graph(
        nodes,
        "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", width])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("batch", [1, 3])
def test_cnn_matches_onnxruntime(batch: int) -> None:
    model = _cnn()
    x = _RNG.standard_normal((batch, 3, 16, 16)).astype(np.float32)
    (expected,) = _reference(model, {"x": x})
    result = OnnxRunner(model)({"x": x})["y"].numpy()
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-6)


def test_attention_block_matches_onnxruntime_over_shapes() -> None:
    """Dynamic batch and sequence: each new shape folds its Reshape targets once; a repeated shape builds nothing."""
    model = _attention_block()
    runner = OnnxRunner(model)
    engine = Engine()
    with use_engine(engine):
        for batch, sequence in ((1, 5), (2, 3), (1, 5)):
            x = _RNG.standard_normal((batch, sequence, 8)).astype(np.float32)
            built = engine.programs_built
            (expected,) = _reference(model, {"x": x})
            np.testing.assert_allclose(runner({"x": x})["y"].numpy(), expected, rtol=1e-4, atol=1e-6)
        assert engine.programs_built == built, "the repeated (1, 5) shape compiled new kernels"
