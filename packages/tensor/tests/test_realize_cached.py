"""Realizing cached work: a plan served from the schedule cache runs on the new call's buffers and values, and the
lean paths (scalar operands, the prepared run of a plan, the CPU's inline launch) give numpy's results, fresh memory
per result, and the same DEBUG output and mutation behaviour as a first run."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import Tensor, dtypes
from kiln.tensor.realize import Engine, use_engine
from kiln.uops import Context

DEVICE = "CPU"


@pytest.mark.parametrize(
    ("dtype", "size"), [(np.float32, 4), (np.float32, 16), (np.int32, 7), (np.float64, 1), (np.int8, 16)]
)
def test_a_cached_tiny_op_runs_on_each_new_buffer(dtype: type[np.generic], size: int) -> None:
    engine = Engine()
    start = np.arange(size).astype(dtype)
    with use_engine(engine):
        x = Tensor(start, device=DEVICE)
        results = []
        for _ in range(6):
            x = (x + 1).realize()
            results.append(x)
        assert engine.schedule.misses == 1 and engine.schedule.hits == 5  # one plan, served five times
        expected = start.copy()
        for step, result in enumerate(results, start=1):  # every result kept its own memory and value
            np.testing.assert_array_equal(result.numpy(), (start + step).astype(dtype))
        assert len({id(result.data_buffer()) for result in results}) == len(results)
        expected = expected + 6
        np.testing.assert_array_equal(x.numpy(), expected.astype(dtype))


def test_a_cached_plan_with_temporaries_and_copies_runs_on_new_inputs() -> None:
    engine = Engine()
    rng = np.random.default_rng(0)
    with use_engine(engine):
        for _ in range(3):
            a, b = rng.normal(size=(8, 5)).astype(np.float32), rng.normal(size=(5,)).astype(np.float32)
            # two reductions whose results are read by a later kernel (temporaries), and a copy to another device
            left, right = Tensor(a, device=DEVICE), Tensor(b, device=DEVICE)
            centred = left - left.mean(0)
            moved = (centred * right).to("CPU:1")
            result = (moved.sum(1) / moved.amax(1)).realize()
            expected = ((a - a.mean(0)) * b).sum(1) / ((a - a.mean(0)) * b).max(1)
            np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5)
            assert result.device == "CPU:1"
    assert engine.schedule.hits >= 2


def test_scalar_operands_promote_and_swap_like_the_tensor_path() -> None:
    ints = Tensor(np.array([1, 2, 3], np.int32))
    assert (ints + 1).dtype == dtypes.int32 and (ints + 1.5).dtype == dtypes.default_float
    np.testing.assert_array_equal((ints + 1.5).numpy(), np.array([2.5, 3.5, 4.5], np.float32))
    np.testing.assert_array_equal((10 - ints).numpy(), np.array([9, 8, 7], np.int32))
    np.testing.assert_array_equal((ints - 10).numpy(), np.array([-9, -8, -7], np.int32))
    np.testing.assert_allclose((2.0 / Tensor([4.0, 8.0])).numpy(), [0.5, 0.25])
    small = Tensor(np.array([100, -100], np.int8))
    assert (small * 2).dtype == dtypes.int8  # a Python int keeps the tensor's integer dtype, as in PyTorch
    np.testing.assert_array_equal((small * 2).numpy(), (np.array([100, -100], np.int8) * np.int8(2)))
    flags = Tensor([True, False])
    assert (flags + True).dtype == dtypes.bool and (flags * 2).dtype == dtypes.default_int
    assert (Tensor([1.0, 2.0]) < 2).dtype == dtypes.bool
    np.testing.assert_array_equal((Tensor([1.0, 2.0]) < 2).numpy(), [True, False])
    assert np.isnan((ints + float("nan")).numpy()).all()  # promoted to float first, as in PyTorch


def test_scalar_operands_keep_gradients_and_subclasses() -> None:
    class Marked(Tensor):
        pass

    w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    ((3.0 - w) * 2.0 + 1).sum().backward()
    assert w.grad is not None
    np.testing.assert_array_equal(w.grad.numpy(), [-2.0, -2.0, -2.0])
    marked = Marked([1.0, 2.0])
    assert type(marked + 1) is Marked and type(1 - marked) is Marked
    assert (marked + 1).requires_grad is None


def test_debug_prints_every_kernel_of_a_cached_plan(capsys: pytest.CaptureFixture[str]) -> None:
    x = Tensor(np.zeros(16, np.float32), device=DEVICE)
    for _ in range(3):
        x = (x + 1).realize()  # warm: the plan and the program are cached
    capsys.readouterr()
    with Context(DEBUG=2):
        for _ in range(2):
            x = (x + 1).realize()
    output = capsys.readouterr().out
    assert output.count("*** CPU") == 2 and output.count("scheduled 1 kernels") == 2
    np.testing.assert_array_equal(x.numpy(), np.full(16, 5.0, np.float32))


def test_a_write_after_cached_realizes_is_seen_by_later_ops_and_not_by_earlier_results() -> None:
    x = Tensor(np.arange(4, dtype=np.float32), device=DEVICE)
    before = []
    for _ in range(3):
        before.append((x + 1).realize())  # one hash-consed graph, realized again (each result owns its memory)
    x.assign(x * 10)
    after = (x + 1).realize()
    np.testing.assert_array_equal(after.numpy(), np.arange(4) * 10 + 1)
    for result in before:
        np.testing.assert_array_equal(result.numpy(), np.arange(4) + 1)
    before[0].assign(before[0] * 0)  # each earlier result is its own buffer: writing one leaves the others
    np.testing.assert_array_equal(before[1].numpy(), np.arange(4) + 1)
    np.testing.assert_array_equal(before[0].numpy(), np.zeros(4))


def test_one_kernel_plans_hit_only_for_the_same_structure_and_match_numpy() -> None:
    # the lean paths of a small op (shallow normalize, the single-kernel run): a plan per shape, dtype, device and
    # structure; a constant seen with two values is lifted into an input (one more plan, then hits)
    engine = Engine()
    rng = np.random.default_rng(7)
    with use_engine(engine):
        cases: list[tuple[str, np.ndarray, str, object]] = [
            ("add 1", rng.normal(size=16).astype(np.float32), DEVICE, 1),
            ("add 1 other shape", rng.normal(size=17).astype(np.float32), DEVICE, 1),
            ("add 1 int32", rng.integers(-9, 9, size=16).astype(np.int32), DEVICE, 1),
            ("add 1 other device", rng.normal(size=16).astype(np.float32), "CPU:1", 1),
            ("add 2", rng.normal(size=16).astype(np.float32), DEVICE, 2),
        ]
        for label, values, device, constant in cases:
            x = Tensor(values, device=device).realize()
            misses, hits = engine.schedule.misses, engine.schedule.hits
            results = [(x + constant).realize() for _ in range(3)]
            # a new structure plans once, then hits ("add 2" differs from "add 1" only in its constant: lifted
            # into an input on its first call, a new plan that the next calls hit)
            assert (engine.schedule.misses - misses, engine.schedule.hits - hits) == (1, 2), label
            for result in results:
                np.testing.assert_array_equal(result.numpy(), values + constant, err_msg=label)
        x = Tensor(np.arange(8, dtype=np.float32), device=DEVICE).realize()
        other = Tensor(np.ones(8, np.float32), device=DEVICE).realize()
        misses = engine.schedule.misses
        both = (x + x).realize()  # one buffer read twice: one input, a new structure
        pair = (x + other).realize()  # two buffers: another structure
        assert engine.schedule.misses == misses + 2
        np.testing.assert_array_equal(both.numpy(), 2 * np.arange(8))
        np.testing.assert_array_equal(pair.numpy(), np.arange(8) + 1)
        x.assign(x * 3)  # a mutated input: the next op reads the new contents, from the cached plan
        hits = engine.schedule.hits
        again = (x + x).realize()
        assert engine.schedule.hits == hits + 1
        np.testing.assert_array_equal(again.numpy(), 6 * np.arange(8))
        np.testing.assert_array_equal(both.numpy(), 2 * np.arange(8))  # the earlier result keeps its value
