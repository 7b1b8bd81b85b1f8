"""The eager lane (`kiln.tensor.realize.eager_lane`): a tensor-and-number op met again makes no graph node and runs
its remembered kernel at realize. Each test warms an op until the lane serves it (the fast path's hit count and the
lane's entries say so), then changes one thing the result depends on (a write before or after, the constant, the
dtype, the shape, gradient mode, a knob, a capture) and checks the value against numpy."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable

import numpy as np
import pytest

from kiln.tensor import Tensor, TinyJit, dtypes, no_grad
from kiln.tensor.realize import Engine, use_engine
from kiln.uops import Context

DEVICE = "CPU"

_OPS: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = {
    "add": (lambda x: x + 3, lambda a: a + np.float32(3)),
    "radd": (lambda x: 3 + x, lambda a: np.float32(3) + a),
    "sub": (lambda x: x - 2.5, lambda a: a - np.float32(2.5)),
    "rsub": (lambda x: 2.5 - x, lambda a: np.float32(2.5) - a),
    "mul": (lambda x: x * 1.5, lambda a: a * np.float32(1.5)),
    "rmul": (lambda x: 1.5 * x, lambda a: np.float32(1.5) * a),
    "truediv": (lambda x: x / 4.0, lambda a: a / np.float32(4.0)),
    "rtruediv": (lambda x: 4.0 / x, lambda a: np.float32(4.0) / a),
}


def _lane_state(tensor: Tensor) -> object:
    # the tensor's lane value while it has no graph node (None once it has one)
    return vars(tensor).get("_lane")


def _warm(engine: Engine, start: np.ndarray, steps: int = 4) -> Tensor:
    x = Tensor(start, device=DEVICE).realize()
    for _ in range(steps):
        x = (x + 1).realize()
    assert engine.fast.lanes and _lane_state(x) is not None
    return x


def test_a_loop_of_cached_ops_runs_on_the_lane_with_numpys_values() -> None:
    engine = Engine()
    start = np.linspace(-2, 2, 16, dtype=np.float32)
    with use_engine(engine):
        x = Tensor(start, device=DEVICE).realize()
        results = []
        for _ in range(10):
            x = (x + 1).realize()
            results.append(x)
        assert engine.fast.hits == 9 and engine.schedule.misses == 2  # the upload, the first add
        assert sum(_lane_state(result) is not None for result in results) >= 7  # no node was built for those
        expected = start
        for result in results:
            expected = expected + np.float32(1)
            np.testing.assert_array_equal(result.numpy(), expected)
        assert len({id(result.data_buffer()) for result in results}) == len(results)


@pytest.mark.parametrize("name", sorted(_OPS))
def test_each_operator_with_a_number_matches_numpy(name: str) -> None:
    build, expected = _OPS[name]
    engine = Engine()
    start = np.linspace(0.5, 3, 12, dtype=np.float32)
    with use_engine(engine):
        x, values = Tensor(start, device=DEVICE).realize(), start
        for _ in range(5):
            x, values = build(x).realize(), expected(values)
            np.testing.assert_allclose(x.numpy(), values, rtol=1e-6)
        assert any(key[0] == name for key in engine.fast.lanes)


def test_a_write_before_the_pending_result_is_realized_keeps_the_old_value() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(16, np.float32))
        hits = engine.fast.hits
        y = x + 1  # pending on the lane: no node yet
        assert _lane_state(y) is not None and engine.fast.hits == hits
        x.assign(Tensor(np.full(16, 100, np.float32), device=DEVICE))
        np.testing.assert_array_equal(y.numpy(), np.full(16, 5, np.float32))
        np.testing.assert_array_equal(x.numpy(), np.full(16, 100, np.float32))


@pytest.mark.parametrize("write", ["assign", "setitem", "inplace"])
def test_a_write_into_a_lane_result_is_seen_by_the_next_op(write: str) -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(8, np.float32))
        expected = np.full(8, 4, np.float32)
        if write == "assign":
            x.assign(Tensor(np.arange(8, dtype=np.float32), device=DEVICE))
            expected = np.arange(8, dtype=np.float32)
        elif write == "setitem":
            x[3] = 40.0
            expected[3] = 40.0
        else:
            x += 5
            expected += 5
        for _ in range(3):
            x, expected = (x + 1).realize(), expected + 1
            np.testing.assert_array_equal(x.numpy(), expected)


def test_a_view_of_a_lane_result_reads_and_writes_its_memory() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(8, np.float32))
        view = x[2:5]
        view.assign(Tensor(np.full(3, 9, np.float32), device=DEVICE))
        expected = np.full(8, 4, np.float32)
        expected[2:5] = 9
        np.testing.assert_array_equal(x.numpy(), expected)
        np.testing.assert_array_equal((x + 1).realize().numpy(), expected + 1)


@pytest.mark.parametrize("constants", [(1.0, 2.0, 1.0), (0.5, -0.0, 0.0, 7)])
def test_other_constants_give_their_own_values(constants: tuple[float, ...]) -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.arange(16, dtype=np.float32))
        expected = np.arange(16, dtype=np.float32) + 4
        for constant in constants:
            for _ in range(2):
                x, expected = (x * constant).realize(), expected * np.float32(constant)
                np.testing.assert_array_equal(x.numpy(), expected)
                assert np.array_equal(np.signbit(x.numpy()), np.signbit(expected))


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.float32])
def test_dtypes_and_int_or_float_numbers_promote_as_on_the_normal_path(dtype: type) -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.arange(6).astype(dtype))
        base: np.ndarray = np.arange(6).astype(dtype) + 4
        for _ in range(2):
            y = (x + 2).realize()
            np.testing.assert_array_equal(y.numpy(), base + 2)
            assert y.dtype == x.dtype
            z = (x * 0.5).realize()  # an int tensor and a float: a float result, never the int lane's
            np.testing.assert_allclose(z.numpy(), base.astype(np.float32) * 0.5, rtol=1e-3)


def test_shapes_of_two_dims_and_broadcasts_keep_their_shape() -> None:
    engine = Engine()
    with use_engine(engine):
        start = np.arange(12, dtype=np.float32).reshape(3, 4)
        x = _warm(engine, start)
        assert x.shape == (3, 4)
        other = Tensor(np.ones(4, np.float32), device=DEVICE)
        for _ in range(2):
            y = (x + other).realize()
            np.testing.assert_array_equal(y.numpy(), start + 5)
            z = (x.reshape(12) * 2).realize()
            np.testing.assert_array_equal(z.numpy(), ((start + 4) * 2).reshape(12))


def test_a_chain_of_lazy_ops_fuses_and_gives_the_right_value() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.ones(16, np.float32))
        for _ in range(3):
            y = ((x * 2) + 1).realize()
            np.testing.assert_array_equal(y.numpy(), np.full(16, 11, np.float32))


def test_gradient_mode_keeps_the_graph_and_no_grad_takes_the_lane() -> None:
    engine = Engine()
    with use_engine(engine):
        _warm(engine, np.zeros(4, np.float32))
        weight = Tensor(np.ones(4, np.float32), device=DEVICE, requires_grad=True)
        for _ in range(3):
            out = (weight * 3.0).realize()
            assert _lane_state(out) is None and out.requires_grad is True
        out.sum().backward()
        assert weight.grad is not None
        np.testing.assert_array_equal(weight.grad.numpy(), np.full(4, 3, np.float32))
        with no_grad():
            for _ in range(3):
                plain = (weight * 3.0).realize()
            assert _lane_state(plain) is not None and plain.requires_grad is not True
            np.testing.assert_array_equal(plain.numpy(), np.full(4, 3, np.float32))


def test_a_lane_result_made_to_require_grad_gets_its_gradient() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(4, np.float32))
        leaf = (x + 1).realize()
        assert _lane_state(leaf) is not None
        leaf.requires_grad = True
        (leaf * leaf).sum().backward()
        assert leaf.grad is not None
        np.testing.assert_array_equal(leaf.grad.numpy(), np.full(4, 10, np.float32))


def test_debug_output_and_other_engines_take_the_normal_path() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(8, np.float32))
        hits = engine.fast.hits
        with Context(DEBUG=1), contextlib.redirect_stdout(io.StringIO()):
            x = (x + 1).realize()
        assert engine.fast.hits == hits
        y = x + 1
        with use_engine(Engine()):
            y.realize()
        assert engine.fast.hits == hits
        np.testing.assert_array_equal(y.numpy(), np.full(8, 6, np.float32))


def test_a_jitted_function_captures_ops_the_lane_served_before() -> None:
    engine = Engine()
    with use_engine(engine):
        _warm(engine, np.zeros(8, np.float32))

        @TinyJit
        def step(value: Tensor) -> Tensor:
            return ((value + 1).realize() * 2).realize()

        for index in range(5):
            start = np.full(8, index, np.float32)
            result = step(Tensor(start, device=DEVICE).realize())
            np.testing.assert_array_equal(result.numpy(), (start + 1) * 2)


def test_clearing_the_engine_forgets_the_lane() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(8, np.float32))
        engine.clear()
        assert not engine.fast.lanes
        x = (x + 1).realize()
        assert _lane_state(x) is None
        np.testing.assert_array_equal(x.numpy(), np.full(8, 5, np.float32))


def test_a_bool_number_is_not_an_int_key() -> None:
    engine = Engine()
    with use_engine(engine):
        x = Tensor(np.arange(4, dtype=np.int32), device=DEVICE).realize()
        for _ in range(3):
            x = (x + 1).realize()
        y = (x + True).realize()
        assert y.dtype == dtypes.int32
        np.testing.assert_array_equal(y.numpy(), np.arange(4, dtype=np.int32) + 4)
