"""The eager lane's recycled output buffers (`LaneEntry.spare`): a lane result that dies without its graph node
ever being built gives its buffer to the next launch of its key. Each test warms an op until the lane serves it,
then checks that a buffer anything else can still see (a read, a view, a write, a pending op over it, a kept
tensor) is never handed out again, with every value checked against numpy."""

from __future__ import annotations

import gc

import numpy as np

from kiln.tensor import Tensor
from kiln.tensor.realize import Engine, use_engine
from kiln.tensor.realize.eager_lane import SPARE_BYTES, SPARE_COUNT, LaneEntry
from kiln.uops import Context

DEVICE = "CPU"


def _entry(engine: Engine) -> LaneEntry:
    (entry,) = engine.fast.lanes.values()
    assert isinstance(entry, LaneEntry)
    return entry


def _warm(engine: Engine, start: np.ndarray, steps: int = 4) -> Tensor:
    x = Tensor(start, device=DEVICE).realize()
    for _ in range(steps):
        x = (x + 1).realize()
    assert vars(x).get("_lane") is not None
    return x


def test_a_loop_reuses_its_dead_outputs_and_keeps_numpys_values() -> None:
    engine = Engine()
    start = np.linspace(-1, 1, 16, dtype=np.float32)
    with use_engine(engine):
        x = _warm(engine, start)
        seen = set()
        for _ in range(20):
            x = (x + 1).realize()
            seen.add(id(vars(x)["_lane"].buffer))
        entry = _entry(engine)
        assert entry.spare is not None and 1 <= len(entry.spare) <= SPARE_COUNT
        assert len(seen) <= SPARE_COUNT + 1  # the live result and the recycled ones, no new buffer per op
        expected = start
        for _ in range(24):
            expected = expected + np.float32(1)
        np.testing.assert_array_equal(x.numpy(), expected)


def test_a_result_read_to_numpy_keeps_its_memory() -> None:
    engine = Engine()
    start = np.arange(16, dtype=np.float32)
    with use_engine(engine):
        x = _warm(engine, start)
        read = x.numpy()  # builds the node: the buffer now belongs to the graph
        copy = read.copy()
        kept = x.data_buffer()
        del x
        gc.collect()
        assert all(buffer is not kept for buffer in _entry(engine).spare or ())
        y = Tensor(start, device=DEVICE).realize()
        for _ in range(6):
            y = (y + 1).realize()
        np.testing.assert_array_equal(read, copy)
        np.testing.assert_array_equal(y.numpy(), start + np.float32(6))


def test_a_view_of_a_dead_result_keeps_reading_its_values() -> None:
    engine = Engine()
    start = np.arange(16, dtype=np.float32)
    with use_engine(engine):
        x = _warm(engine, start)
        view = x.reshape(4, 4)
        del x
        y = Tensor(np.zeros(16, np.float32), device=DEVICE).realize()
        for _ in range(6):
            y = (y + 1).realize()
        np.testing.assert_array_equal(view.numpy(), (start + np.float32(4)).reshape(4, 4))
        np.testing.assert_array_equal(y.numpy(), np.full(16, 6, np.float32))


def test_a_pending_op_over_a_dead_tensor_reads_the_values_it_was_built_on() -> None:
    engine = Engine()
    start = np.arange(16, dtype=np.float32)
    with use_engine(engine):
        x = _warm(engine, start)
        pending = x + 1  # its lane value holds x's value (and its buffer) until it runs
        del x
        gc.collect()
        y = Tensor(np.full(16, 100, np.float32), device=DEVICE).realize()
        for _ in range(6):  # these launches take the spare buffers: never x's
            y = (y + 1).realize()
        np.testing.assert_array_equal(pending.realize().numpy(), start + np.float32(5))
        np.testing.assert_array_equal(y.numpy(), np.full(16, 106, np.float32))


def test_a_written_result_keeps_the_write_after_later_ops() -> None:
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(16, np.float32))
        x.assign(Tensor(np.full(16, 7, np.float32), device=DEVICE)).realize()
        alias = x[2:6]
        del x
        y = Tensor(np.zeros(16, np.float32), device=DEVICE).realize()
        for _ in range(6):
            y = (y + 1).realize()
        np.testing.assert_array_equal(alias.numpy(), np.full(4, 7, np.float32))


def test_a_result_used_by_another_op_keeps_its_value_for_that_op() -> None:
    engine = Engine()
    start = np.arange(16, dtype=np.float32)
    with use_engine(engine):
        x = _warm(engine, start)
        other = Tensor(np.full(16, 2, np.float32), device=DEVICE).realize()
        product = x * other  # a tensor-tensor op: the normal path, over x's node
        del x
        y = Tensor(np.zeros(16, np.float32), device=DEVICE).realize()
        for _ in range(6):
            y = (y + 1).realize()
        np.testing.assert_array_equal(product.numpy(), (start + np.float32(4)) * np.float32(2))


def test_large_outputs_and_lru_off_are_not_kept() -> None:
    size = SPARE_BYTES // 4 + 1  # float32 elements: one past the largest recycled buffer
    engine = Engine()
    with use_engine(engine):
        x = _warm(engine, np.zeros(size, np.float32))
        x = (x + 1).realize()
        assert _entry(engine).spare is None
        np.testing.assert_array_equal(x.numpy(), np.full(size, 5, np.float32))
    engine = Engine()
    with use_engine(engine), Context(LRU=0):
        x = _warm(engine, np.zeros(16, np.float32))
        assert _entry(engine).spare is None
        np.testing.assert_array_equal(x.numpy(), np.full(16, 4, np.float32))
