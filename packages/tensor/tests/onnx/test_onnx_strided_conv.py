"""Stride-2 convolutions regrouped over a space-to-depth copy (strided_conv.py), against onnxruntime: the shapes that
take the regrouped form, and those that keep the direct one."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln.tensor import Tensor  # noqa: E402
from kiln.tensor.onnx import OnnxRunner  # noqa: E402
from kiln.tensor.onnx.strided_conv import space_to_depth_convolution  # noqa: E402

_RNG = np.random.default_rng(392)


def _conv_model(weight: np.ndarray, bias: np.ndarray, input_shape: tuple[int, ...], **attributes: object) -> bytes:
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attributes)
    graph = helper.make_graph(
        [node],
        "strided_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(input_shape))],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(model.SerializeToString())


def _compare(
    input_shape: tuple[int, ...], weight_shape: tuple[int, ...], pads: list[int], group: int = 1
) -> np.ndarray:
    x = _RNG.standard_normal(input_shape).astype(np.float32)
    weight = _RNG.standard_normal(weight_shape).astype(np.float32)
    bias = _RNG.standard_normal(weight_shape[0]).astype(np.float32)
    model = _conv_model(weight, bias, input_shape, strides=[2, 2], pads=pads, group=group)
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x})
    result = OnnxRunner(model)({"x": x})["y"].numpy()
    assert result.shape == expected.shape
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))
    return x


# (input shape, weight shape, pads): a 7x7 stem, 3x3 downsampling convolutions, odd sizes, a 5x5, an even 4x4 kernel,
# a 3x5 kernel with uneven pads
REGROUPED = [
    ((2, 3, 64, 64), (8, 3, 7, 7), [3, 3, 3, 3]),
    ((2, 3, 65, 63), (8, 3, 7, 7), [3, 3, 3, 3]),
    ((1, 8, 16, 16), (16, 8, 3, 3), [1, 1, 1, 1]),
    ((2, 16, 9, 11), (32, 16, 3, 3), [1, 1, 1, 1]),
    ((1, 3, 30, 30), (4, 3, 5, 5), [2, 2, 2, 2]),
    ((1, 8, 17, 16), (4, 8, 4, 4), [0, 0, 0, 0]),
    ((1, 8, 16, 16), (4, 8, 3, 5), [1, 2, 0, 1]),
]


@pytest.mark.parametrize(("input_shape", "weight_shape", "pads"), REGROUPED)
def test_regrouped_convolution_matches_onnxruntime(
    input_shape: tuple[int, ...], weight_shape: tuple[int, ...], pads: list[int]
) -> None:
    x = _compare(input_shape, weight_shape, pads)
    # these shapes do take the regrouped form
    count = len(input_shape) - 2
    padded = Tensor(x).pad([(0, 0), (0, 0), *((pads[index], pads[index + count]) for index in range(count))])
    weight = np.zeros(weight_shape, np.float32)
    assert space_to_depth_convolution(padded, Tensor(weight), weight, None, [2, 2], [1, 1], 1) is not None


# a depthwise convolution, a 1x1 kernel, a 3x3 over 3 channels, 2 x 2 outputs: the direct form
DIRECT = [
    ((1, 16, 32, 32), (16, 1, 3, 3), [1, 1, 1, 1], 16),
    ((1, 8, 16, 16), (16, 8, 1, 1), [0, 0, 0, 0], 1),
    ((1, 3, 32, 32), (8, 3, 3, 3), [1, 1, 1, 1], 1),
    ((1, 32, 4, 4), (64, 32, 3, 3), [1, 1, 1, 1], 1),
]


@pytest.mark.parametrize(("input_shape", "weight_shape", "pads", "group"), DIRECT)
def test_direct_convolution_kept(
    input_shape: tuple[int, ...], weight_shape: tuple[int, ...], pads: list[int], group: int
) -> None:
    x = _compare(input_shape, weight_shape, pads, group)
    padded = Tensor(x).pad([(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    weight = np.zeros(weight_shape, np.float32)
    assert space_to_depth_convolution(padded, Tensor(weight), weight, None, [2, 2], [1, 1], group) is None


def test_weight_not_on_host_keeps_the_direct_form() -> None:
    padded = Tensor(np.zeros((1, 8, 18, 18), np.float32))
    weight = Tensor(np.zeros((16, 8, 3, 3), np.float32))
    assert space_to_depth_convolution(padded, weight, None, None, [2, 2], [1, 1], 1) is None
    assert space_to_depth_convolution(padded, weight, np.zeros((16, 8, 3, 3)), None, [1, 1], [1, 1], 1) is None
