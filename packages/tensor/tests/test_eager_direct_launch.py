"""The eager lane's direct launch (`HCQProgramRunner.direct_launcher`, no timeline value): where it refuses (PROFILE,
queued work on the device) the lane falls back to the runner's full launch, and every result equals numpy's."""

from __future__ import annotations

import numpy as np

from kiln.runtime import Device
from kiln.tensor import Tensor
from kiln.tensor.realize import Engine, use_engine
from kiln.uops import Context

DEVICE = "CPU"


def _warm(engine: Engine, start: np.ndarray) -> Tensor:
    x = Tensor(start, device=DEVICE).realize()
    for _ in range(4):
        x = (x * 2).realize()
    assert engine.fast.lanes and vars(x).get("_lane") is not None
    return x


def test_direct_launches_take_no_timeline_value_and_match_numpy() -> None:
    engine = Engine()
    start = np.linspace(-1, 1, 16, dtype=np.float32)
    device = Device[DEVICE]
    with use_engine(engine):
        x = _warm(engine, start)
        device.synchronize()
        value = device.timeline_value  # type: ignore[attr-defined]
        for _ in range(5):
            x = (x * 2).realize()
        assert device.timeline_value == value  # type: ignore[attr-defined]  # all five launched directly
        np.testing.assert_array_equal(x.numpy(), start * np.float32(2**9))


def test_profiling_falls_back_to_the_full_launch_with_numpys_values() -> None:
    engine = Engine()
    start = np.linspace(-1, 1, 16, dtype=np.float32)
    device = Device[DEVICE]
    with use_engine(engine):
        x = _warm(engine, start)
        device.synchronize()
        value = device.timeline_value  # type: ignore[attr-defined]
        hits = engine.fast.hits
        with Context(PROFILE=1):
            x = (x * 2).realize()
            x = (x * 2).realize()
        device.synchronize()
        assert engine.fast.hits == hits + 2  # still the lane's kernel, launched through the queue
        assert device.timeline_value == value + 2  # type: ignore[attr-defined]
        np.testing.assert_array_equal(x.numpy(), start * np.float32(2**6))


def test_queued_work_on_the_device_falls_back_and_keeps_the_order() -> None:
    engine = Engine()
    start = np.arange(16, dtype=np.float32)
    device = Device[DEVICE]
    with use_engine(engine):
        x = _warm(engine, start)
        compute = device.compute_engine  # type: ignore[attr-defined]
        with compute._state_lock:
            compute._outstanding += 1  # a list counted as queued: the device is not idle
        try:
            value = device.timeline_value  # type: ignore[attr-defined]
            x = (x * 2).realize()
            assert device.timeline_value == value + 1  # type: ignore[attr-defined]  # the full launch ran instead
        finally:
            with compute._state_lock:
                compute._outstanding -= 1
        np.testing.assert_array_equal(x.numpy(), start * np.float32(2**5))
