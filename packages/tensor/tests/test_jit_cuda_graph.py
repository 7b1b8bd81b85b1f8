"""TinyJit's replay segments on a CUDA device: a run of kernels becomes one CUDA graph (`CUDAGraphBatch`), checked
against a fake libcuda with the graph API (no GPU here; its kernels run in codegen's interpreter) and numpy."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from fake_libcuda import FakeLibcuda
from test_cuda_graph import SIZE, FakeGraphLibcuda, _GraphRenderer, affine, doubled

from kiln.codegen import Program, get_program
from kiln.runtime import Buffer, Device
from kiln.runtime.cuda import CUDADevice, CUDAGraphBatch, DriverAPI
from kiln.tensor.jit_replay import CapturedStep, ReplayStep, replay_segments
from kiln.uops import UOp, dtypes


def _register(library: FakeLibcuda) -> Iterator[FakeLibcuda]:
    Device.register("GRAPHCUDA", lambda name: CUDADevice(name, DriverAPI(library)))
    Device.forget("GRAPHCUDA")  # a device another test opened under this name holds another library
    try:
        yield library
    finally:
        Device.forget("GRAPHCUDA")


@pytest.fixture
def fake() -> Iterator[FakeLibcuda]:
    yield from _register(FakeGraphLibcuda(gpus=1))


def buffer(values: np.ndarray | None = None) -> Buffer:
    return Buffer("GRAPHCUDA", SIZE, dtypes.int32).copyin(np.zeros(SIZE, np.int32) if values is None else values)


def runner_of(library: FakeLibcuda, sink: UOp) -> object:
    program = Program(get_program(sink, _GraphRenderer()))
    library.programs[program.binary or b""] = program
    return Device["GRAPHCUDA"].runtime(program)


def captured(fake: FakeLibcuda) -> tuple[list[CapturedStep], Buffer]:
    # input 0 -> (a * 3 + k) -> middle -> (* 2) -> input 1, and a copy of middle out to a buffer of the capture
    first, second = runner_of(fake, affine("first", 3)), runner_of(fake, doubled("second"))
    middle, kept = buffer(), buffer()
    steps = [
        CapturedStep(first, [middle, buffer()], ((1, 0),), {"k": 4}),
        CapturedStep(second, [buffer(), middle], ((0, 1),)),
        CapturedStep(None, [kept, middle], ()),
    ]
    return steps, kept


def test_a_run_of_cuda_kernels_replays_as_one_graph(fake: FakeLibcuda) -> None:
    steps, kept = captured(fake)
    segments = replay_segments(steps)
    assert [type(segment) for segment in segments] == [CUDAGraphBatch, ReplayStep]  # the kernels, then the copy
    assert isinstance(fake, FakeGraphLibcuda)
    fake.calls.clear()
    for k in (7, -3):
        source, out = np.arange(SIZE, dtype=np.int32) - 5, buffer()
        for segment in segments:
            segment([buffer(source), out], {"k": k})
        np.testing.assert_array_equal(out.numpy(), (source * 3 + k) * 2)
        np.testing.assert_array_equal(kept.numpy(), source * 3 + k)
    assert fake.calls.count("cuGraphLaunch") == 2  # one launch per replay for both kernels


@pytest.fixture
def graphless() -> Iterator[FakeLibcuda]:
    yield from _register(FakeLibcuda(gpus=1))


def test_a_driver_without_the_graph_api_replays_kernel_by_kernel_and_says_so(graphless: FakeLibcuda) -> None:
    steps, _ = captured(graphless)
    with pytest.warns(RuntimeWarning, match="replays 2 CUDA kernels one by one: .*cuStreamCreate"):
        segments = replay_segments(steps)
    assert [type(segment) for segment in segments] == [ReplayStep, ReplayStep, ReplayStep]
    source, out = np.arange(SIZE, dtype=np.int32), buffer()
    for segment in segments:
        segment([buffer(source), out], {"k": 1})
    np.testing.assert_array_equal(out.numpy(), (source * 3 + 1) * 2)
