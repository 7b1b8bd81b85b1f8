"""Sequences and optionals through OnnxRunner's interface (onnx's conformance cases check the operators' values):
lists in and out, None for an empty optional, and the errors a wrong value or position raises."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from kiln.tensor.onnx import OnnxRunner  # noqa: E402

_RNG = np.random.default_rng(3902)


def _sequence_type(element: int = TensorProto.FLOAT) -> onnx.TypeProto:
    return helper.make_sequence_type_proto(helper.make_tensor_type_proto(element, ["rows", "columns"]))


def _split_and_rejoin() -> onnx.ModelProto:
    """x -> SplitToSequence along dim 1 -> drop position `erase` -> insert y at the front -> concat (and length)."""
    nodes = [
        helper.make_node("SplitToSequence", ["x", "sizes"], ["pieces"], axis=1),
        helper.make_node("SequenceErase", ["pieces", "erase"], ["kept"]),
        helper.make_node("SequenceInsert", ["kept", "y", "front"], ["joined"]),
        helper.make_node("SequenceLength", ["joined"], ["length"]),
        helper.make_node("ConcatFromSequence", ["joined"], ["rejoined"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "sequences",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("erase", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("rejoined", TensorProto.FLOAT, [2, "width"]),
            helper.make_tensor_value_info("length", TensorProto.INT64, []),
            helper.make_value_info("joined", _sequence_type()),
        ],
        [
            helper.make_tensor(name="sizes", data_type=TensorProto.INT64, dims=[3], vals=[1, 2, 3]),
            helper.make_tensor(name="front", data_type=TensorProto.INT64, dims=[], vals=[0]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("erase", [0, -1, 1])
def test_sequence_pipeline_matches_onnxruntime(erase: int) -> None:
    model = _split_and_rejoin()
    feeds = {"x": _RNG.standard_normal((2, 6)).astype(np.float32), "y": _RNG.standard_normal((2, 3)).astype(np.float32)}
    feeds["erase"] = np.array(erase, np.int64)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rejoined, length, joined = session.run(None, feeds)
    results = OnnxRunner(model)(feeds)
    np.testing.assert_allclose(results["rejoined"].numpy(), rejoined, rtol=1e-6)
    assert int(results["length"].numpy()) == int(length) == 3
    assert isinstance(results["joined"], list) and len(results["joined"]) == len(joined)
    for ours, theirs in zip(results["joined"], joined):
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-6)


def test_sequence_position_out_of_range_names_the_node() -> None:
    model = _split_and_rejoin()
    feeds = {"x": np.zeros((2, 6), np.float32), "y": np.zeros((2, 3), np.float32), "erase": np.array(3, np.int64)}
    with pytest.raises(IndexError, match=r"SequenceErase.*position 3 is outside a sequence of 3 tensors"):
        OnnxRunner(model)(feeds)


def _optional_model() -> onnx.ModelProto:
    optional_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, ["n"]))
    nodes = [
        helper.make_node("OptionalHasElement", ["maybe"], ["present"]),
        helper.make_node("Identity", ["maybe"], ["same"]),
    ]
    graph = helper.make_graph(
        nodes,
        "optional",
        [helper.make_value_info("maybe", optional_type)],
        [helper.make_tensor_value_info("present", TensorProto.BOOL, []), helper.make_value_info("same", optional_type)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_optional_input_and_output() -> None:
    runner = OnnxRunner(_optional_model())
    empty = runner({"maybe": None})
    assert not bool(empty["present"].numpy()) and empty["same"] is None
    value = np.arange(3, dtype=np.float32)
    held = runner({"maybe": value})
    assert bool(held["present"].numpy())
    np.testing.assert_array_equal(held["same"].numpy(), value)


def test_a_sequence_where_a_tensor_is_expected_is_refused() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["items"], ["y"], name="relu")],
        "wrong",
        [helper.make_value_info("items", _sequence_type())],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(TypeError, match=r"relu.*input 0 must be a tensor, got a sequence of 2 tensors"):
        OnnxRunner(model)({"items": [np.zeros(2, np.float32), np.ones(2, np.float32)]})
