"""Nodes whose inputs are known values are computed with numpy at translation (host_folding.py): the values against
onnx's reference evaluator, and no kernel launched for them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import ModelProto, TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from kiln.tensor.counters import GlobalCounters  # noqa: E402
from kiln.tensor.onnx import OnnxRunner  # noqa: E402

_INT = np.int64
_FLOAT = np.float32

# (op type, attributes, inputs): every input an initializer, so the node folds at the first call
_CASES: list[tuple[str, dict[str, Any], list[np.ndarray]]] = [
    ("Gather", {"axis": 0}, [np.array([4, 16, 32], _INT), np.array([0, -1], _INT)]),
    ("Gather", {"axis": 1}, [np.arange(12, dtype=_FLOAT).reshape(3, 4) * 0.5, np.array([[3, 0], [-2, 1]], _INT)]),
    ("Gather", {"axis": 0}, [np.arange(6, dtype=_FLOAT).reshape(6, 1), np.array(2, _INT)]),
    ("Concat", {"axis": 0}, [np.array([1], _INT), np.array([-1, 8], _INT), np.array([4], _INT)]),
    ("Concat", {"axis": -1}, [np.ones((2, 1), _FLOAT), np.zeros((2, 3), _FLOAT)]),
    ("Add", {}, [np.array([3, -7], _INT), np.array(5, _INT)]),
    ("Sub", {}, [np.array([0.25, -1.5], _FLOAT), np.array([[1.0], [2.0]], _FLOAT)]),
    ("Mul", {}, [np.array(8, _INT), np.array([4, -2], _INT)]),
    ("Mul", {}, [np.array([1.0, 0.0], _FLOAT), np.array(-10000.0, _FLOAT)]),
    ("Div", {}, [np.array([7, -7, 7, -7, 6], _INT), np.array([2, 2, -2, -2, 3], _INT)]),
    ("Div", {}, [np.array([1.0, -3.0], _FLOAT), np.array(np.sqrt(8.0), _FLOAT)]),
    ("Equal", {}, [np.array([1, 2, 3], _INT), np.array(2, _INT)]),
    ("Less", {}, [np.array([1.0, 2.0], _FLOAT), np.array([2.0, 2.0], _FLOAT)]),
    ("LessOrEqual", {}, [np.arange(4, dtype=_INT).reshape(1, 4), np.arange(3, dtype=_INT).reshape(3, 1) + 1]),
    ("Greater", {}, [np.array([1, 5], _INT), np.array([3, 3], _INT)]),
    ("GreaterOrEqual", {}, [np.array([1, 3], _INT), np.array([3, 3], _INT)]),
    ("Where", {}, [np.array([[True], [False]]), np.array(0.0, _FLOAT), np.array([-1e9, 2.0], _FLOAT)]),
    ("Range", {}, [np.array(2, _INT), np.array(11, _INT), np.array(3, _INT)]),
    ("Range", {}, [np.array(5, _INT), np.array(-4, _INT), np.array(-2, _INT)]),
    ("Range", {}, [np.array(5, _INT), np.array(1, _INT), np.array(1, _INT)]),
]


def _folded_model(
    op_type: str, attributes: dict[str, Any], inputs: list[np.ndarray], output: np.ndarray | None = None
) -> ModelProto:
    """One node over initializers, its output typed like `output` (the reference evaluator runs the untyped model)."""
    names = [f"i{index}" for index in range(len(inputs))]
    node = helper.make_node(op_type, names, ["y"], **attributes)
    element = TensorProto.UNDEFINED if output is None else helper.np_dtype_to_tensor_dtype(output.dtype)
    graph = helper.make_graph(
        [node],
        "folded",
        [],
        [helper.make_tensor_value_info("y", element, None if output is None else list(output.shape))],
        [numpy_helper.from_array(array, name) for name, array in zip(names, inputs)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("case", range(len(_CASES)))
def test_a_node_of_known_values_folds_on_the_host_like_the_reference(case: int) -> None:
    op_type, attributes, inputs = _CASES[case]
    (reference,) = ReferenceEvaluator(_folded_model(op_type, attributes, inputs)).run(None, {})
    expected = np.asarray(reference)
    model = _folded_model(op_type, attributes, inputs, expected)
    launched = GlobalCounters.kernel_count
    result = OnnxRunner(model)({})["y"]
    assert GlobalCounters.kernel_count == launched  # computed with numpy: no kernel launched
    got = result.numpy()
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_a_shape_chain_folds_without_kernels_and_feeds_a_reshape() -> None:
    # x's shape (batch, sequence, width) -> (batch, sequence, heads, width / heads) as a transformer export builds it
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Gather", ["shape", "one"], ["sequence"], axis=0),
        helper.make_node("Gather", ["shape", "two"], ["width"], axis=0),
        helper.make_node("Div", ["width", "heads"], ["size"]),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["b"]),
        helper.make_node("Unsqueeze", ["sequence", "axes"], ["s"]),
        helper.make_node("Unsqueeze", ["size", "axes"], ["d"]),
        helper.make_node("Concat", ["b", "s", "h", "d"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    constants = {
        "zero": np.array(0, _INT),
        "one": np.array(1, _INT),
        "two": np.array(2, _INT),
        "heads": np.array(4, _INT),
        "h": np.array([4], _INT),
        "axes": np.array([0], _INT),
    }
    graph = helper.make_graph(
        nodes,
        "shape_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)],
        [numpy_helper.from_array(array, name) for name, array in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(39).standard_normal((2, 5, 32)).astype(_FLOAT)
    launched = GlobalCounters.kernel_count
    result = OnnxRunner(model)({"x": x})["y"]
    assert result.shape == (2, 5, 4, 8)
    assert GlobalCounters.kernel_count == launched  # the reshape is a view of the input buffer
    np.testing.assert_array_equal(result.numpy(), x.reshape(2, 5, 4, 8))


def test_an_integer_division_by_zero_is_left_to_the_kiln_rule() -> None:
    model = _folded_model("Div", {}, [np.array([4, 5], _INT), np.array([2, 0], _INT)], np.zeros(2, _INT))
    # not folded on the host (numpy would warn and give 0): the kiln rule names the zero divisor
    with pytest.raises(RuntimeError, match=r"division by zero .*position \(1,\)"):
        OnnxRunner(model)({})["y"].numpy()


def test_an_out_of_range_gather_index_is_left_to_the_kiln_rule() -> None:
    model = _folded_model("Gather", {"axis": 0}, [np.array([1, 2, 3], _INT), np.array([3], _INT)], np.zeros(1, _INT))
    with pytest.raises((IndexError, ValueError, RuntimeError), match="3"):
        OnnxRunner(model)({})["y"].numpy()
