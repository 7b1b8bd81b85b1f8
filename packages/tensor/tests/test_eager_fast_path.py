"""The eager fast path (`kiln.tensor.realize.fast_path`): a small op met again on same-shaped buffers runs its
remembered kernel without scheduling. Each test runs an op until the fast path serves it, then changes one thing the
result depends on (a write, the dtype, the device, the broadcast, the constant, gradient mode, a knob, the random
stream) and checks the value against numpy; the fast path's hit count says which path ran."""

from __future__ import annotations

import contextlib
import io
import threading

import numpy as np
import pytest

from kiln.tensor import Tensor, TinyJit, dtypes, no_grad
from kiln.tensor.realize import Engine, use_engine
from kiln.uops import Context, DType

DEVICE = "CPU"


def _warm(engine: Engine, make: np.ndarray) -> Tensor:
    # `x = (x + 1).realize()` three times: the first plans, the second on is served by the fast path
    x = Tensor(make, device=DEVICE)
    for _ in range(3):
        x = (x + 1).realize()
    assert engine.fast.hits >= 1
    return x


def test_a_cached_small_op_takes_the_fast_path_and_gives_numpys_values() -> None:
    engine = Engine()
    start = np.arange(16, dtype=np.float32)
    with use_engine(engine):
        x = Tensor(start, device=DEVICE)
        results = []
        for _ in range(8):
            x = (x + 1).realize()
            results.append(x)
        assert engine.fast.hits == 7 and engine.schedule.misses == 1
        for step, result in enumerate(results, start=1):  # each result kept its own memory
            np.testing.assert_array_equal(result.numpy(), start + step)
        assert len({id(result.data_buffer()) for result in results}) == len(results)


@pytest.mark.parametrize("write", ["assign", "setitem", "inplace", "view_setitem", "copy_"])
def test_a_write_to_the_input_is_seen_by_the_next_fast_launch(write: str) -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(16, np.float32))
        expected = np.full(16, 3, np.float32)
        if write == "assign":
            x.assign(Tensor(np.arange(16, dtype=np.float32), device=DEVICE))
            expected = np.arange(16, dtype=np.float32)
        elif write == "setitem":
            x[2] = 40.0
            expected[2] = 40.0
        elif write == "inplace":
            x += 5
            expected += 5
        elif write == "view_setitem":
            x.reshape(4, 4)[1] = -1.0
            expected[4:8] = -1.0
        else:
            x.copy_(Tensor(np.full(16, 9, np.float32), device=DEVICE))
            expected = np.full(16, 9, np.float32)
        np.testing.assert_array_equal(x.numpy(), expected)
        np.testing.assert_array_equal((x + 1).realize().numpy(), expected + 1)
        np.testing.assert_array_equal((x + 1).realize().numpy(), expected + 1)


def test_a_lazy_result_built_before_a_write_keeps_the_old_value() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(16, np.float32))
        before = x + 1  # lazy: reads x as it is now
        x.assign(Tensor(np.full(16, 100, np.float32), device=DEVICE))
        np.testing.assert_array_equal(before.realize().numpy(), np.full(16, 4, np.float32))
        np.testing.assert_array_equal((x + 1).realize().numpy(), np.full(16, 101, np.float32))


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.float64, np.int8])
def test_another_dtype_takes_its_own_plan(dtype: type) -> None:
    engine = Engine()
    with use_engine(engine):
        _warm(engine, np.zeros(16, np.float32))
        hits = engine.fast.hits
        start: np.ndarray = np.arange(16).astype(dtype)
        y = (Tensor(start, device=DEVICE) + 1).realize()
        assert engine.fast.hits == hits  # a new structure: the slow path
        np.testing.assert_array_equal(y.numpy(), start + dtype(1))
        kiln_dtypes: dict[type, DType] = {np.int32: dtypes.int32, np.float16: dtypes.float16}
        kiln_dtypes.update({np.float64: dtypes.float64, np.int8: dtypes.int8})
        assert y.dtype == kiln_dtypes[dtype]


@pytest.mark.parametrize("device", ["CPU:1", "PYTHON"])
def test_another_device_takes_its_own_plan(device: str) -> None:
    engine = Engine()
    with use_engine(engine):
        _warm(engine, np.zeros(16, np.float32))
        hits = engine.fast.hits
        start = np.arange(16, dtype=np.float32)
        x = Tensor(start, device=device)
        y = (x + 1).realize()
        assert engine.fast.hits == hits
        assert y.device == device
        np.testing.assert_array_equal(y.numpy(), start + 1)
        z = (y + 1).realize()  # now served on that device
        assert engine.fast.hits == hits + 1
        np.testing.assert_array_equal(z.numpy(), start + 2)


def test_another_shape_or_broadcast_gives_numpys_values() -> None:
    engine = Engine()
    rng = np.random.default_rng(0)
    with use_engine(engine):
        _warm(engine, np.zeros(16, np.float32))
        matrix = rng.normal(size=(4, 4)).astype(np.float32)
        row, column = rng.normal(size=(4,)).astype(np.float32), rng.normal(size=(4, 1)).astype(np.float32)
        m = Tensor(matrix, device=DEVICE)
        for _ in range(2):  # the second of each is the fast path's where it can serve it
            np.testing.assert_allclose((m + 1).realize().numpy(), matrix + 1, rtol=1e-6)
            np.testing.assert_allclose((m + Tensor(row, device=DEVICE)).realize().numpy(), matrix + row, rtol=1e-6)
            np.testing.assert_allclose(
                (m + Tensor(column, device=DEVICE)).realize().numpy(), matrix + column, rtol=1e-6
            )
            wide = Tensor(np.arange(32, dtype=np.float32), device=DEVICE)
            np.testing.assert_array_equal((wide + 1).realize().numpy(), np.arange(32, dtype=np.float32) + 1)


def test_a_result_of_two_dims_is_served_with_its_shape() -> None:
    engine = Engine()
    start = np.arange(12, dtype=np.float32).reshape(3, 4)
    with use_engine(engine):
        m = Tensor(start, device=DEVICE)
        for step in range(1, 4):
            m = (m * 2).realize()
            assert m.shape == (3, 4)
            np.testing.assert_array_equal(m.numpy(), start * 2**step)
        assert engine.fast.hits == 2
        m.reshape(12)[0] = -5.0  # the result's view aliases its memory like a first run's
        expected = start * 8
        expected[0, 0] = -5.0
        np.testing.assert_array_equal(m.numpy(), expected)
        np.testing.assert_array_equal(m.permute(1, 0).numpy(), expected.T)
        m[1] = 7.0  # a write into the input between two launches of the remembered kernel
        expected[1] = 7.0
        np.testing.assert_array_equal((m * 2).realize().numpy(), expected * 2)
        np.testing.assert_array_equal((m * m).realize().numpy(), expected * expected)


def test_one_buffer_twice_and_two_buffers_are_other_structures() -> None:
    engine = Engine()
    a_values, b_values = np.arange(16, dtype=np.float32), np.full(16, 0.5, np.float32)
    with use_engine(engine):
        for _ in range(3):
            a, b = Tensor(a_values, device=DEVICE).realize(), Tensor(b_values, device=DEVICE).realize()
            np.testing.assert_array_equal((a + a).realize().numpy(), a_values + a_values)
            np.testing.assert_array_equal((a + b).realize().numpy(), a_values + b_values)
            np.testing.assert_array_equal((b + a).realize().numpy(), b_values + a_values)
            np.testing.assert_array_equal((a - b).realize().numpy(), a_values - b_values)
            np.testing.assert_array_equal((b - a).realize().numpy(), b_values - a_values)
        assert engine.fast.hits >= 8


@pytest.mark.parametrize("constants", [(1.0, 2.0, 2.5, -0.0, 7.0), (3, 3, 4, 5, 3)])
def test_a_new_constant_takes_the_slow_path_and_gives_the_right_value(constants: tuple[float, ...]) -> None:
    engine = Engine()
    start = np.linspace(-2, 2, 16).astype(np.float32)
    with use_engine(engine):
        x = Tensor(start, device=DEVICE).realize()
        for constant in constants:
            for reverse in (False, True):
                for _ in range(2):
                    y = ((constant - x) if reverse else (x - constant)).realize()
                    np.testing.assert_array_equal(
                        y.numpy(), (np.float32(constant) - start) if reverse else (start - np.float32(constant))
                    )


def test_constants_that_vary_every_call_stay_right_once_lifted() -> None:
    engine = Engine()
    start = np.arange(16, dtype=np.float32)
    with use_engine(engine):
        x = Tensor(start, device=DEVICE).realize()
        for step in range(8):  # the schedule cache lifts the varying constant into a buffer after two calls
            np.testing.assert_array_equal((x * step).realize().numpy(), start * step)
        for step in (3, 3, 5, 3):  # values met before: served with the lifted buffer holding each one
            np.testing.assert_array_equal((x * step).realize().numpy(), start * step)


def test_gradient_mode_keeps_the_graph_and_no_grad_drops_it() -> None:
    engine = Engine()
    values = np.arange(16, dtype=np.float32)
    with use_engine(engine):
        _warm(engine, np.zeros(16, np.float32))
        leaf = Tensor(values, device=DEVICE, requires_grad=True)
        for _ in range(2):
            y = (leaf * 3).realize()
            np.testing.assert_array_equal(y.numpy(), values * 3)
            assert y.requires_grad is True
            y.sum().backward()
            assert leaf.grad is not None
            np.testing.assert_array_equal(leaf.grad.numpy(), np.full(16, 3, np.float32))
            leaf.grad = None
        with no_grad():
            z = (leaf * 3).realize()
        assert z.requires_grad is not True
        np.testing.assert_array_equal(z.numpy(), values * 3)


def test_debug_output_takes_the_slow_path() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(16, np.float32))
        hits = engine.fast.hits
        printed = io.StringIO()
        with Context(DEBUG=2), contextlib.redirect_stdout(printed):
            y = (x + 1).realize()
        assert engine.fast.hits == hits
        assert "scheduled 1 kernels" in printed.getvalue()
        np.testing.assert_array_equal(y.numpy(), np.full(16, 4, np.float32))
        np.testing.assert_array_equal((y + 1).realize().numpy(), np.full(16, 5, np.float32))
        assert engine.fast.hits == hits + 1


def test_random_operands_are_drawn_anew_each_call() -> None:
    engine = Engine()
    with use_engine(engine):
        x = Tensor(np.zeros(16, np.float32), device=DEVICE).realize()
        draws = []
        for _ in range(3):
            noise = Tensor.rand(16, device=DEVICE)
            y = (x + noise).realize()
            drawn = noise.numpy()
            np.testing.assert_array_equal(y.numpy(), drawn)
            draws.append(drawn)
        assert not np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[1], draws[2])


def test_views_of_a_fast_result_alias_it_and_writes_land_once() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(16, np.float32))
        y = (x + 1).realize()
        view = y.reshape(4, 4)
        view[0] = 0.0
        expected = np.full(16, 4, np.float32)
        expected[:4] = 0.0
        np.testing.assert_array_equal(y.numpy(), expected)
        y += 1
        np.testing.assert_array_equal(view.numpy(), (expected + 1).reshape(4, 4))
        np.testing.assert_array_equal(x.numpy(), np.full(16, 3, np.float32))  # the input was not written


def test_a_shared_lazy_node_and_a_graph_built_on_it_read_the_one_result() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(16, np.float32))
        first, second = x + 1, x + 1  # one hash-consed node
        doubled = first * 2  # built before the realize
        first.realize()
        np.testing.assert_array_equal(second.numpy(), np.full(16, 4, np.float32))
        np.testing.assert_array_equal(doubled.numpy(), np.full(16, 8, np.float32))


def test_a_jitted_step_captures_and_replays_its_kernels() -> None:
    engine = Engine()
    with use_engine(engine):
        _warm(engine, np.zeros(16, np.float32))

        @TinyJit
        def step(value: Tensor) -> Tensor:
            return (value + 1).realize()

        for call in range(4):
            start = np.full(16, call, np.float32)
            np.testing.assert_array_equal(step(Tensor(start, device=DEVICE)).numpy(), start + 1)


def test_threads_on_one_engine_each_get_their_own_results() -> None:
    engine = Engine()
    finals: dict[int, np.ndarray] = {}

    def work(index: int) -> None:
        with use_engine(engine):
            x = Tensor(np.full(16, index * 1000, np.float32), device=DEVICE)
            for _ in range(100):
                x = (x + 1).realize()
            finals[index] = x.numpy()

    threads = [threading.Thread(target=work, args=(index,)) for index in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in range(3):
        np.testing.assert_array_equal(finals[index], np.full(16, index * 1000 + 100, np.float32))
    assert engine.fast.hits >= 3 * 98


def test_clearing_the_engine_forgets_the_fast_path() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(16, np.float32))
        assert engine.cache_sizes()["fast_path"] == 1
        engine.clear()
        assert engine.cache_sizes()["fast_path"] == 0
        hits = engine.fast.hits
        np.testing.assert_array_equal((x + 1).realize().numpy(), np.full(16, 4, np.float32))
        assert engine.fast.hits == hits


def test_fast_path_limit_must_be_positive() -> None:
    from kiln.tensor.realize.fast_path import EagerFastPath

    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="positive int"):
            EagerFastPath(bad)  # type: ignore[arg-type]
