"""Translation choices that shape the kernels, against onnxruntime: BatchNormalization folded into the Conv before
it (batchnorm_folding.py), values computed once for all their readers (materialize.py)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from onnx import NodeProto, TensorProto, helper, numpy_helper  # noqa: E402

from kiln.tensor import Tensor, TinyJit  # noqa: E402
from kiln.tensor.onnx import OnnxRunner  # noqa: E402
from kiln.tensor.onnx.materialize import materialized_if_costly, shared_product_inputs  # noqa: E402
from kiln.uops.ops import Ops  # noqa: E402

_RNG = np.random.default_rng(1939)


def _array(*shape: int, positive: bool = False) -> np.ndarray:
    values = _RNG.standard_normal(shape).astype(np.float32)
    return np.abs(values) + 0.1 if positive else values


def _model(
    nodes: list[NodeProto],
    inputs: list[tuple[str, tuple[int, ...]]],
    outputs: list[str],
    initializers: dict[str, np.ndarray],
    opset: int,
    rank: int = 4,
) -> bytes:
    graph = helper.make_graph(
        nodes,
        "fusion",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)) for name, shape in inputs],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [None] * rank) for name in outputs],
        [numpy_helper.from_array(array, name) for name, array in initializers.items()],
    )
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())


def _matches_onnxruntime(model: bytes, feeds: dict[str, np.ndarray]) -> OnnxRunner:
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    runner = OnnxRunner(model)
    results = runner(feeds)
    for name, expected in zip(names, session.run(None, feeds)):
        got = results[name].numpy()
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))
    return runner


def _statistics(channels: int) -> dict[str, np.ndarray]:
    return {
        "scale": _array(channels),
        "shift": _array(channels),
        "mean": _array(channels),
        "var": _array(channels, positive=True),
    }


def _conv_batch_norm(channels: int, group: int, conv_bias: bool, opset: int, **bn_attributes: float | int) -> bytes:
    initializers = {"w": _array(channels, 8 // group, 3, 3), **_statistics(channels)}
    conv_inputs = ["x", "w"]
    if conv_bias:
        initializers["b"] = _array(channels)
        conv_inputs.append("b")
    normalization = helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["y"])
    normalization.attribute.extend(helper.make_attribute(name, value) for name, value in bn_attributes.items())
    nodes = [
        helper.make_node("Conv", conv_inputs, ["c"], pads=[1, 1, 1, 1], group=group),
        normalization,
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    return _model(nodes, [("x", (2, 8, 10, 10))], ["z"], initializers, opset)


def _op_types(runner: OnnxRunner) -> list[str]:
    return [node.op_type for node in runner.model.graph.node]


@pytest.mark.parametrize(
    ("channels", "group", "conv_bias", "opset", "attributes"),
    [
        (16, 1, True, 15, {"epsilon": 1e-3}),
        (16, 1, False, 15, {}),
        (8, 8, False, 13, {"epsilon": 1e-4}),  # depthwise
        (16, 1, True, 7, {"spatial": 1}),
    ],
)
def test_batch_normalization_after_a_conv_folds_into_it(
    channels: int, group: int, conv_bias: bool, opset: int, attributes: dict[str, float | int]
) -> None:
    model = _conv_batch_norm(channels, group, conv_bias, opset, **attributes)
    runner = _matches_onnxruntime(model, {"x": _array(2, 8, 10, 10)})
    assert _op_types(runner) == ["Conv", "Relu"]
    # the original weight, bias and statistics are no longer loaded
    assert sorted(runner.graph.initializers) == sorted(runner.model.graph.node[0].input[1:])


def test_batch_normalization_stays_where_another_reader_sees_the_conv_output() -> None:
    initializers = {"w": _array(4, 8, 3, 3), **_statistics(4)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["y"]),
    ]
    model = _model(nodes, [("x", (1, 8, 6, 6))], ["y", "c"], initializers, 15)
    runner = _matches_onnxruntime(model, {"x": _array(1, 8, 6, 6)})
    assert _op_types(runner) == ["Conv", "BatchNormalization"]


def test_batch_normalization_stays_where_a_statistic_can_be_fed() -> None:
    statistics = _statistics(4)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["y"]),
    ]
    # "mean" is both an initializer (its default) and a graph input a caller may override
    model = _model(nodes, [("x", (1, 8, 6, 6)), ("mean", (4,))], ["y"], {"w": _array(4, 8, 3, 3), **statistics}, 15)
    x = _array(1, 8, 6, 6)
    runner = _matches_onnxruntime(model, {"x": x})
    assert "BatchNormalization" in _op_types(runner)
    # fed, the input replaces the default, also on calls that would otherwise replay or reuse folded values
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    for feeds in [{"x": x}, {"x": x, "mean": _array(4)}, {"x": x, "mean": _array(4)}, {"x": x}, {"x": x}]:
        (expected,) = session.run(None, feeds)
        np.testing.assert_allclose(runner(feeds)["y"].numpy(), expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


def _residual_blocks(count: int) -> bytes:
    """count identical blocks: y = relu(conv(relu(conv(x) + b1)) + b2 + x)."""
    nodes, initializers = [], {}
    current = "x"
    for block in range(count):
        first, second = f"w{block}a", f"w{block}b"
        initializers.update({first: _array(8, 8, 3, 3), second: _array(8, 8, 3, 3)})
        initializers.update({f"b{block}a": _array(8), f"b{block}b": _array(8)})
        nodes += [
            helper.make_node("Conv", [current, first, f"b{block}a"], [f"h{block}"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"h{block}"], [f"r{block}"]),
            helper.make_node("Conv", [f"r{block}", second, f"b{block}b"], [f"g{block}"], pads=[1, 1, 1, 1]),
            helper.make_node("Add", [f"g{block}", current], [f"s{block}"]),
            helper.make_node("Relu", [f"s{block}"], [f"y{block}"]),
        ]
        current = f"y{block}"
    return _model(nodes, [("x", (2, 8, 12, 12))], [current], initializers, 17)


def test_a_block_output_read_by_a_conv_and_a_residual_add_is_computed_once() -> None:
    model = _residual_blocks(3)
    parsed = onnx.load_from_string(model)
    assert shared_product_inputs(parsed.graph) == {"x", "y0", "y1"}
    x = _array(2, 8, 12, 12)
    runner = _matches_onnxruntime(model, {"x": x})
    jitted = TinyJit(lambda **inputs: runner(inputs))
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x})
    for _ in range(3):
        (result,) = jitted(x=Tensor(x)).values()
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))
    assert jitted.captured is not None
    launches = [step.runner for step in jitted.captured.steps if step.runner is not None]
    # every bias, add and relu runs in its convolution's kernel, and the blocks after the first (whose convolution
    # reads the graph input) share their programs
    assert len(launches) == 6
    assert [id(launch) for launch in launches[2:4]] == [id(launch) for launch in launches[4:6]]


def test_a_transcendental_read_once_per_output_column_is_materialized() -> None:
    x = Tensor(_array(16, 8)).realize()
    gelu = x * 0.5 * (1 + (x / np.sqrt(2.0)).erf())
    assert materialized_if_costly(gelu, 32).uop.op is Ops.CONTIGUOUS
    assert materialized_if_costly(gelu, 1) is gelu  # read once: fusing is free
    cheap = x * 2.0 + 1.0
    assert materialized_if_costly(cheap, 32) is cheap
    assert materialized_if_costly(x, 32) is x


def test_matmul_of_a_gelu_matches_onnxruntime() -> None:
    nodes = [
        helper.make_node("Div", ["x", "root2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["p"]),
        helper.make_node("Mul", ["x", "p"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["g"]),
        helper.make_node("MatMul", ["g", "w"], ["y"]),
    ]
    constants = {
        "root2": np.array(np.sqrt(2.0), np.float32),
        "one": np.array(1.0, np.float32),
        "half": np.array(0.5, np.float32),
        "w": _array(64, 24),
    }
    model = _model(nodes, [("x", (3, 16, 64))], ["y"], constants, 17, rank=3)
    _matches_onnxruntime(model, {"x": _array(3, 16, 64)})


def _captured_launches(model: bytes, feeds: dict[str, np.ndarray]) -> int:
    runner = OnnxRunner(model)
    jitted = TinyJit(lambda **inputs: runner(inputs))
    for _ in range(3):
        jitted(**{name: Tensor(value) for name, value in feeds.items()})
    assert jitted.captured is not None
    return jitted.captured.kernels


def test_a_layer_normalization_of_a_residual_sum_runs_in_one_kernel() -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["p"]),
        helper.make_node("Add", ["p", "b1"], ["q"]),
        helper.make_node("Add", ["q", "x"], ["s"]),
        helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["n"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["n", "w2"], ["y"]),
        helper.make_node("Add", ["y", "n"], ["z"]),
    ]
    weights = {"w1": _array(32, 32), "b1": _array(32), "gamma": _array(32), "beta": _array(32), "w2": _array(32, 32)}
    model = _model(nodes, [("x", (4, 16, 32))], ["z"], weights, 17, rank=3)
    feeds = {"x": _array(4, 16, 32)}
    _matches_onnxruntime(model, feeds)
    # the first product with its bias and residual, the normalization (mean, variance and result in one kernel, its
    # input read from memory), the second product with its residual
    assert _captured_launches(model, feeds) == 3


def _operations(model: bytes, feeds: dict[str, np.ndarray]) -> set[Ops]:
    """The ops of the lazy graph a first call (a plain run: later calls may replay realized kernels) leaves."""
    (value,) = OnnxRunner(model)(feeds).values()
    return {node.op for node in value.uop.toposort()}


@pytest.mark.parametrize("power", [2.0, 3.0, 2.5])
def test_pow_of_a_known_small_integer_is_products(power: float) -> None:
    nodes = [helper.make_node("Pow", ["x", "p"], ["y"])]
    model = _model(nodes, [("x", (3, 5))], ["y"], {"p": np.array(power, np.float32)}, 17, rank=2)
    x = _array(3, 5)
    x[0, :2] = [-2.0, 0.0]
    if power == 2.5:
        x = np.abs(x)  # a negative base to a fractional power is NaN
    runner = _matches_onnxruntime(model, {"x": x})
    # 2 and 3 multiply; another exponent (or an unknown one) stays a general power
    assert (Ops.POW in _operations(model, {"x": x})) == (power == 2.5)
    np.testing.assert_allclose(runner({"x": x})["y"].numpy(), np.power(x, np.float32(power)), rtol=1e-6)


def test_pow_of_a_scalar_by_a_one_element_exponent_has_the_broadcast_shape() -> None:
    nodes = [helper.make_node("Pow", ["x", "p"], ["y"])]
    model = _model(nodes, [("x", ())], ["y"], {"p": np.array([2.0], np.float32)}, 17, rank=1)
    result = _matches_onnxruntime(model, {"x": np.array(-3.0, np.float32)})({"x": np.array(-3.0, np.float32)})
    assert result["y"].shape == (1,)
    assert result["y"].numpy().tolist() == [9.0]


@pytest.mark.parametrize("op_type", ["LayerNormalization", "InstanceNormalization", "MeanVarianceNormalization"])
def test_a_normalization_squares_by_a_product(op_type: str) -> None:
    inputs = ["x", "gamma", "beta"] if op_type != "MeanVarianceNormalization" else ["x"]
    nodes = [helper.make_node(op_type, inputs, ["y"])]
    weights = {"gamma": _array(6), "beta": _array(6)} if op_type == "LayerNormalization" else {}
    if op_type == "InstanceNormalization":
        weights = {"gamma": _array(4), "beta": _array(4)}
    model = _model(nodes, [("x", (2, 4, 3, 6))], ["y"], weights, 17)
    x = _array(2, 4, 3, 6) * 3.0 + 1.0
    _matches_onnxruntime(model, {"x": x})
    # the variance's square is x * x, not a general power (log2 and exp2 per element)
    assert Ops.POW not in _operations(model, {"x": x})


def test_a_gather_of_table_rows_reads_the_picked_rows_only() -> None:
    table = _array(512, 16)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0)]
    graph = helper.make_graph(
        nodes,
        "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [3, 5])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [3, 5, 16])],
        [numpy_helper.from_array(table, "table")],
    )
    model = bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    ids = np.array([[0, 511, -1, -512, 7], [3, 3, 100, 200, 300], [1, 2, 4, 8, 16]], np.int64)
    _matches_onnxruntime(model, {"ids": ids})
    runner = OnnxRunner(model)
    jitted = TinyJit(lambda **inputs: runner(inputs))
    for _ in range(3):
        (result,) = jitted(ids=Tensor(ids)).values()
    np.testing.assert_array_equal(result.numpy(), table[ids])
    assert jitted.captured is not None
    programs = [step.runner.program for step in jitted.captured.steps if step.runner is not None]
    # int32 row positions let codegen's gather rewrite load one row per index; int64 ones kept a compare (and a
    # multiply-add) against each of the 512 rows for every output element
    work = sum(int(program.estimates.flops) for program in programs)
    assert work < 15 * 16 * 512
