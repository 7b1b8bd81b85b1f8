"""Opening ONNX files: paths, bytes, ModelProto, external data kept inside the model's folder, malformed files,
unsupported operators / attributes / dtypes failing at load, the CLI, and folding of shape subgraphs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kiln.tensor.onnx import OnnxRunner  # noqa: E402
from kiln.tensor.onnx.__main__ import main as cli_main  # noqa: E402
from kiln.tensor.onnx.model_file import initializer_array  # noqa: E402
from kiln.tensor.realize.engine import Engine, use_engine  # noqa: E402


def _matmul_add_model(weight: np.ndarray, opset: int = 17) -> onnx.ModelProto:
    """y = x @ w + 1 with w an initializer."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["product"]),
            helper.make_node("Add", ["product", "one"], ["y"]),
        ],
        "matmul_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", weight.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", weight.shape[1]])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.ones((), np.float32), "one")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


_WEIGHT = np.arange(12, dtype=np.float32).reshape(3, 4) / 7


def _expected(x: np.ndarray) -> np.ndarray:
    return x @ _WEIGHT + 1


@pytest.mark.parametrize("form", ["path", "str", "bytes", "proto"])
def test_model_forms(tmp_path: Path, form: str) -> None:
    model = _matmul_add_model(_WEIGHT)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    source = {"path": path, "str": str(path), "bytes": path.read_bytes(), "proto": model}[form]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    result = OnnxRunner(source)({"x": x})["y"].numpy()
    np.testing.assert_allclose(result, _expected(x), rtol=1e-6)


def test_external_data_inside_folder(tmp_path: Path) -> None:
    model = _matmul_add_model(_WEIGHT)
    onnx.save(model, tmp_path / "model.onnx", save_as_external_data=True, location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").stat().st_size >= _WEIGHT.nbytes
    x = np.ones((1, 3), np.float32)
    np.testing.assert_allclose(OnnxRunner(tmp_path / "model.onnx")({"x": x})["y"].numpy(), _expected(x), rtol=1e-6)


def test_external_data_is_memory_mapped(tmp_path: Path) -> None:
    """Initializers in an external data file are mapped from it, not copied through protobuf; a file cut short is
    refused at load."""
    model = _matmul_add_model(_WEIGHT)
    onnx.save(model, tmp_path / "model.onnx", save_as_external_data=True, location="weights.bin", size_threshold=0)
    reloaded = onnx.load(tmp_path / "model.onnx", load_external_data=False)
    weight = next(initializer for initializer in reloaded.graph.initializer if initializer.name == "w")
    array = initializer_array(weight, tmp_path)
    assert isinstance(array, np.memmap) and Path(str(array.filename)) == (tmp_path / "weights.bin").resolve()
    np.testing.assert_array_equal(array, _WEIGHT)
    (tmp_path / "weights.bin").write_bytes(bytes(8))
    with pytest.raises(ValueError, match=r"initializer 'w': external data range .* does not fit"):
        OnnxRunner(tmp_path / "model.onnx")


def _with_external_location(tmp_path: Path, location: str) -> Path:
    model = _matmul_add_model(_WEIGHT)
    onnx.save(model, tmp_path / "model.onnx", save_as_external_data=True, location="weights.bin", size_threshold=0)
    reloaded = onnx.load(tmp_path / "model.onnx", load_external_data=False)
    for initializer in reloaded.graph.initializer:
        for entry in initializer.external_data:
            if entry.key == "location":
                entry.value = location
    path = tmp_path / "escape.onnx"
    path.write_bytes(reloaded.SerializeToString())
    return path


@pytest.mark.parametrize("location", ["../weights.bin", "sub/../../weights.bin", "/etc/passwd"])
def test_external_data_outside_folder_is_refused(tmp_path: Path, location: str) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "weights.bin").write_bytes(_WEIGHT.tobytes())
    path = _with_external_location(folder, location)
    with pytest.raises(ValueError, match="external data location"):
        OnnxRunner(path)


def test_external_data_symlink_out_of_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(_WEIGHT.tobytes())
    os.symlink(tmp_path / "secret.bin", folder / "link.bin")
    path = _with_external_location(folder, "link.bin")
    with pytest.raises(ValueError, match="outside the model's folder"):
        OnnxRunner(path)


def test_truncated_file(tmp_path: Path) -> None:
    data = _matmul_add_model(_WEIGHT).SerializeToString()
    for cut in (1, len(data) // 3, len(data) - 5):
        path = tmp_path / f"cut{cut}.onnx"
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=str(path)):
            OnnxRunner(path)


@pytest.mark.parametrize("data", [b"", b"\xff" * 64, b"not an onnx model at all", bytes(range(256))])
def test_garbage_bytes(data: bytes) -> None:
    with pytest.raises(ValueError, match="bytes"):
        OnnxRunner(data)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nothere\.onnx"):
        OnnxRunner(tmp_path / "nothere.onnx")


def test_wrong_argument_type() -> None:
    with pytest.raises(TypeError, match=r"expected a path, bytes or onnx\.ModelProto, got int"):
        OnnxRunner(3)  # type: ignore[arg-type]


def _single_node_model(node: onnx.NodeProto, opset: int = 17, element_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "single",
        [helper.make_tensor_value_info("x", element_type, [2])],
        [helper.make_tensor_value_info("y", element_type, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_unsupported_operator_fails_at_load() -> None:
    node = helper.make_node("ImageDecoder", ["x"], ["y"], name="decoder")
    model = _single_node_model(node, opset=20, element_type=TensorProto.UINT8)
    with pytest.raises(NotImplementedError, match=r"node decoder, op type 'ImageDecoder', domain 'ai.onnx'.*no rule"):
        OnnxRunner(model)


def test_unsupported_domain_fails_at_load() -> None:
    node = helper.make_node("FastGelu", ["x"], ["y"], name="gelu", domain="com.example")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(NotImplementedError, match=r"op type 'FastGelu', domain 'com.example'"):
        OnnxRunner(model)


def test_unsupported_attribute_value_fails_at_load() -> None:
    node = helper.make_node("DepthToSpace", ["x"], ["y"], name="d2s", blocksize=2, mode="XYZ")
    with pytest.raises(NotImplementedError, match=r"node d2s.*mode='XYZ'"):
        OnnxRunner(_single_node_model(node))


def test_unknown_attribute_fails_at_load() -> None:
    node = helper.make_node("Relu", ["x"], ["y"], name="relu", flavour=3)
    # an attribute the operator does not define is caught by onnx's checker
    with pytest.raises(ValueError, match=r"fails onnx's checker: Unrecognized attribute: flavour"):
        OnnxRunner(
            helper.make_model(
                helper.make_graph(
                    [node],
                    "g",
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                ),
                opset_imports=[helper.make_opsetid("", 17)],
            )
        )


def test_unhandled_attribute_fails_at_load() -> None:
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("values", TensorProto.FLOAT, [1], [1.0]),
        helper.make_tensor("indices", TensorProto.INT64, [1], [0]),
        [2],
    )
    node = helper.make_node("Constant", [], ["y"], name="sparse", sparse_value=sparse)
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(NotImplementedError, match=r"node sparse, op type 'Constant'.*sparse_value"):
        OnnxRunner(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_corrupt_initializer_is_refused() -> None:
    weight = numpy_helper.from_array(np.zeros(2, np.float32), "w")
    weight.dims[0] = 1000  # declares more elements than its raw data holds
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1000])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1000])],
        [weight],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with pytest.raises(ValueError, match=r"raw_data size \(8 bytes\) is too small"):
        OnnxRunner(data)


def test_unsupported_dtype_fails_at_load() -> None:
    model = _single_node_model(helper.make_node("Identity", ["x"], ["y"]), element_type=TensorProto.STRING)
    with pytest.raises(NotImplementedError, match="input 'x': element type STRING has no kiln dtype"):
        OnnxRunner(model)


def test_old_opset_is_converted() -> None:
    # opset 6: Relu converts to opset 7 with onnx's version converter
    model = _single_node_model(helper.make_node("Relu", ["x"], ["y"]), opset=6)
    result = OnnxRunner(model)({"x": np.array([-1.0, 2.0], np.float32)})["y"].numpy()
    np.testing.assert_array_equal(result, [0.0, 2.0])


def test_bad_inputs_at_call() -> None:
    runner = OnnxRunner(_matmul_add_model(_WEIGHT))
    with pytest.raises(ValueError, match="missing input"):
        runner({})
    with pytest.raises(ValueError, match="unknown input"):
        runner({"x": np.ones((1, 3), np.float32), "z": 1})
    with pytest.raises(ValueError, match=r"input 'x': expected shape \['batch', 3\], got \[1, 5\]"):
        runner({"x": np.ones((1, 5), np.float32)})


def test_shape_subgraph_folds_to_ints() -> None:
    """Shape -> Gather -> Concat -> Reshape: after the first run, a second run of the same shapes builds nothing."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch_1d"]),
        helper.make_node("Concat", ["batch_1d", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("ReduceSum", ["flat", "one_axis"], ["y"], keepdims=0),
    ]
    initializers = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
        numpy_helper.from_array(np.array([1], np.int64), "one_axis"),
    ]
    graph = helper.make_graph(
        nodes,
        "fold",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch"])],
        initializers,
    )
    runner = OnnxRunner(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    engine = Engine()
    with use_engine(engine):
        for batch in (2, 5):
            x = np.random.default_rng(batch).standard_normal((batch, 3, 4)).astype(np.float32)
            np.testing.assert_allclose(runner({"x": x})["y"].numpy(), x.reshape(batch, -1).sum(1), rtol=1e-5)
        built = engine.programs_built
        x = np.ones((5, 3, 4), np.float32)
        np.testing.assert_allclose(runner({"x": x})["y"].numpy(), np.full(5, 12.0), rtol=1e-6)
        assert engine.programs_built == built, "a repeated shape compiled new kernels"


def test_cli_prints_inputs_outputs_and_timing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(_matmul_add_model(_WEIGHT), path)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "inputs.npz", x=x)
    assert cli_main([str(path), "--inputs", str(tmp_path / "inputs.npz"), "--benchmark", "2"]) == 0
    printed = capsys.readouterr().out
    assert "input  x: FLOAT[batch, 3]" in printed
    assert "output y" in printed
    assert f"y: dtypes.float32 [2, 4] {_expected(x).reshape(-1)[:6]}" in printed
    assert "2 runs:" in printed and "ms median" in printed


def test_data_dependent_outputs_are_not_folded() -> None:
    """NonMaxSuppression's result has a data-dependent size: two calls with equal shapes but different scores must
    give different selections (a host-computed result may not be cached by shape)."""
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit"], ["selected"])]
    graph = helper.make_graph(
        nodes,
        "nms",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 2, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 2]),
        ],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, [None, 3])],
        [numpy_helper.from_array(np.array([1], np.int64), "limit")],
    )
    runner = OnnxRunner(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    boxes = np.array([[[0, 0, 1, 1], [0, 2, 1, 3]]], np.float32)  # disjoint: no suppression
    first = runner({"boxes": boxes, "scores": np.array([[[0.9, 0.1]]], np.float32)})["selected"].numpy()
    second = runner({"boxes": boxes, "scores": np.array([[[0.1, 0.9]]], np.float32)})["selected"].numpy()
    np.testing.assert_array_equal(first, [[0, 0, 0]])
    np.testing.assert_array_equal(second, [[0, 0, 1]])
