"""Explicit context (issue 41): what realizing, capturing, drawing random numbers, recording gradients and writing
in place depend on lives on an `Engine` or on the calling thread's context, never in module globals.

Two threads, each in an `Engine` of its own, run side by side with barriers forcing their steps to interleave: a
capture in one sees none of the other's kernels, their random streams and tensor registries stay apart, and one
thread's `no_grad` leaves the other recording. Values are checked against numpy, counts against hand-counted
numbers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from kiln.tensor import Tensor, nn, no_grad, optim
from kiln.tensor.realize import Engine, Recording, default_engine, engines_in_context, use_engine

STEP_TIMEOUT = 60.0  # seconds a barrier waits: a deadlock fails the test instead of hanging it


def _run_in_threads(*works: Callable[[], None]) -> None:
    """Runs each work on a thread of its own; re-raises the first exception one raised."""
    errors: list[BaseException] = []

    def guarded(work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as error:  # kept, then raised in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(work,)) for work in works]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=4 * STEP_TIMEOUT)
    assert not any(thread.is_alive() for thread in threads), "a thread did not finish"
    if errors:
        raise errors[0]


def test_two_engines_in_two_threads_are_independent() -> None:
    first, second = Engine(), Engine()
    barrier = threading.Barrier(2, timeout=STEP_TIMEOUT)
    seen: dict[str, object] = {}
    a_host, b_host = np.arange(6, dtype=np.float32), np.arange(5, dtype=np.float32) * 3

    def thread_a() -> None:
        with use_engine(first):
            assert default_engine() is first
            Tensor.manual_seed(5)
            leaf = Tensor(a_host).requires_grad_()
            with first.capture() as recording:
                barrier.wait()  # 1: A captures while B realizes, seeds, draws and tracks tensors in its engine
                barrier.wait()  # 2
                result = (leaf * 2).exp2()
                result.realize()
            seen["a_recording"] = recording
            seen["a_values"] = result.numpy()
            seen["a_leaf"] = leaf
            seen["a_draw_calls"] = first.random.calls
            Tensor.rand(3).realize()  # one draw: the call counter of A alone moves
            seen["a_calls_after_draw"] = first.random.calls
            with no_grad():
                barrier.wait()  # 3: A's no_grad is on while B builds from its leaf
                barrier.wait()  # 4
            loss = (leaf * leaf).sum()
            loss.backward()
            assert leaf.grad is not None
            seen["a_grad"] = leaf.grad.numpy()

    def thread_b() -> None:
        with use_engine(second):
            barrier.wait()  # 1
            Tensor.manual_seed(11)
            for _ in range(3):
                Tensor.rand(4).realize()
            leaf = Tensor(b_host).requires_grad_()
            seen["b_values"] = (leaf + 1).numpy()
            seen["b_leaf"] = leaf
            barrier.wait()  # 2
            barrier.wait()  # 3
            seen["b_result_requires_grad"] = (leaf * 3).requires_grad
            barrier.wait()  # 4
            seen["b_calls"] = second.random.calls
            seen["b_seed"] = second.random.seed

    _run_in_threads(thread_a, thread_b)

    recording = seen["a_recording"]
    assert isinstance(recording, Recording)
    # A's capture saw its own kernel only: one fused kernel (multiply, exp2), none of B's four
    assert len(recording.kernels) == 1 and recording.copies == [] and recording.stream_calls == []
    np.testing.assert_allclose(seen["a_values"], np.exp2(a_host * 2), rtol=1e-6)
    np.testing.assert_array_equal(seen["b_values"], b_host + 1)
    # random streams: A seeded 5 and had drawn nothing at capture time; B's seed and its three draws are its own
    assert (first.random.seed, seen["a_draw_calls"], seen["a_calls_after_draw"]) == (5, 0, 1)
    assert (seen["b_seed"], seen["b_calls"]) == (11, 3)
    # no_grad on A's thread did not reach B's
    assert seen["b_result_requires_grad"] is True
    np.testing.assert_allclose(seen["a_grad"], 2 * a_host, rtol=1e-6)
    # each engine's registries hold its own tensors only
    a_leaf, b_leaf = seen["a_leaf"], seen["b_leaf"]
    assert any(tensor is a_leaf for tensor in first.tensors.alive())
    assert not any(tensor is b_leaf for tensor in first.tensors.alive())
    assert any(tensor is b_leaf for tensor in second.tensors.requiring_grad())
    assert not any(tensor is a_leaf for tensor in second.tensors.requiring_grad())


def test_a_capture_records_only_the_thread_that_opened_it() -> None:
    engine = Engine()
    barrier = threading.Barrier(2, timeout=STEP_TIMEOUT)
    host = np.linspace(-1, 1, 7, dtype=np.float32)
    outcome: dict[str, object] = {}

    def capturing() -> None:
        with use_engine(engine), engine.capture() as recording:
            barrier.wait()  # 1: the other thread realizes in the same engine
            barrier.wait()  # 2
            outcome["values"] = (Tensor(host) + 2).numpy()
        outcome["recording"] = recording

    def other() -> None:
        with use_engine(engine):
            barrier.wait()  # 1
            outcome["other"] = (Tensor(host) * 4).sin().numpy()
            assert engine.recording is None  # not this thread's capture
            barrier.wait()  # 2

    _run_in_threads(capturing, other)
    recording = outcome["recording"]
    assert isinstance(recording, Recording)
    assert len(recording.kernels) == 1 and len(recording.host_reads) == 1
    np.testing.assert_allclose(outcome["values"], host + 2, rtol=1e-6)
    np.testing.assert_allclose(outcome["other"], np.sin(host * 4), rtol=1e-6)
    assert engine.programs_built == 2


def test_capture_reports_kernels_random_streams_and_host_reads() -> None:
    engine = Engine()
    with use_engine(engine):
        Tensor.manual_seed(3)
        Tensor.rand(2).realize()  # call 0, before the capture
        with engine.capture() as recording:
            noise = Tensor.rand(4)  # call 1
            values = noise.numpy()
    assert recording.stream_calls == [1]
    assert len(recording.host_reads) == 1 and "shape (4,)" in recording.host_reads[0]
    assert len(recording.kernels) >= 1
    assert values.shape == (4,) and ((values >= 0) & (values < 1)).all()
    assert engine.recording is None  # closed with the block


def test_capture_refuses_nesting_and_bad_recordings() -> None:
    engine = Engine()
    with engine.capture(), pytest.raises(RuntimeError, match="capturing already"):
        engine.capture().__enter__()
    with pytest.raises(TypeError, match="Recording"):
        engine.capture("a list")  # type: ignore[call-overload]


def test_a_subclassed_recording_sees_every_launch() -> None:
    class Names(Recording):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def record_kernel(self, program, runner, buffers, var_vals):  # type: ignore[no-untyped-def]
            super().record_kernel(program, runner, buffers, var_vals)
            self.names.append(program.name)

    engine = Engine()
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    with use_engine(engine), engine.capture(Names()) as names:
        total = Tensor(host).sum(axis=1).numpy()
    np.testing.assert_array_equal(total, host.sum(axis=1))
    assert len(names.names) == len(names.kernels) == engine.programs_built == 1


def test_tensors_made_before_use_engine_are_rebound_by_writes_inside_it() -> None:
    # a write inside the block must find the views made outside it (the process engine's registry)
    host = np.arange(6, dtype=np.float32)
    base = Tensor(host.copy()).realize()
    view = base[2:5]
    engine = Engine()
    with use_engine(engine):
        assert engines_in_context()[-1] is engine and len(engines_in_context()) == 2
        base[3] = 100.0
        expected = host.copy()
        expected[3] = 100.0
        np.testing.assert_array_equal(view.numpy(), expected[2:5])
    np.testing.assert_array_equal(base.numpy(), expected)


def test_gradients_reach_leaves_made_outside_the_engine() -> None:
    host = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    leaf = Tensor(host).requires_grad_()
    with use_engine(Engine()):
        (leaf * leaf * leaf).sum().backward()
    assert leaf.grad is not None
    np.testing.assert_allclose(leaf.grad.numpy(), 3 * host**2, rtol=1e-6)


def test_use_engine_is_per_thread() -> None:
    engine = Engine()
    inside = threading.Event()
    leave = threading.Event()
    seen: list[Engine] = []

    def holder() -> None:
        with use_engine(engine):
            inside.set()
            leave.wait(STEP_TIMEOUT)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert inside.wait(STEP_TIMEOUT)
        seen.append(default_engine())  # this thread did not switch
    finally:
        leave.set()
        thread.join(STEP_TIMEOUT)
    assert seen[0] is not engine


def test_batchnorm_statistics_stay_with_their_module_in_two_threads() -> None:
    # each thread trains its own BatchNorm in its own engine; the running statistics are the module's (no list shared
    # between threads or optimizers): after two steps each matches numpy's running average of its own batches
    rng = np.random.default_rng(41)
    batches = {name: [rng.standard_normal((6, 3)).astype(np.float32) for _ in range(2)] for name in ("a", "b")}
    barrier = threading.Barrier(2, timeout=STEP_TIMEOUT)
    layers: dict[str, nn.BatchNorm1d] = {}

    def train(name: str) -> Callable[[], None]:
        def work() -> None:
            with use_engine(Engine()):
                layer = layers[name] = nn.BatchNorm1d(3, momentum=0.5)
                optimizer = optim.SGD(layer.parameters(), lr=0.1)
                for batch in batches[name]:
                    barrier.wait()  # both threads are between steps at once
                    optimizer.zero_grad()
                    layer(Tensor(batch)).square().mean().backward()
                    optimizer.step()

        return work

    _run_in_threads(train("a"), train("b"))
    for name, layer in layers.items():
        mean, var = np.zeros(3), np.ones(3)
        for batch in batches[name]:
            mean = 0.5 * mean + 0.5 * batch.mean(0)
            var = 0.5 * var + 0.5 * batch.var(0, ddof=1)
        np.testing.assert_allclose(layer.running_mean.numpy(), mean, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(layer.running_var.numpy(), var, rtol=1e-5, atol=1e-6, err_msg=name)
        assert layer.num_batches_tracked.item() == 2
