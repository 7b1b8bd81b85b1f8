"""Resources and scale: caches stay bounded, buffers die with their tensors, values that change from call to call
reuse one kernel, and very long op chains realize (numpy / exact arithmetic as the oracle)."""

from __future__ import annotations

import gc
import tracemalloc
import weakref

import numpy as np

from kiln.tensor import GlobalCounters, Tensor
from kiln.tensor.realize import default_engine, method_cache_size

DEVICE = "PYTHON"


def test_new_fill_values_reuse_one_plan_and_one_kernel() -> None:
    for value in range(3):  # the structure is seen with two values: the fill value gets lifted
        Tensor.full((1000,), float(value), device=DEVICE).contiguous().realize().numpy()
    methods, plans = method_cache_size(), default_engine().cache_sizes()["plans"]
    for value in range(3, 300):
        filled = Tensor.full((1000,), float(value), device=DEVICE).contiguous().realize()
        if value % 50 == 0:
            np.testing.assert_array_equal(filled.numpy(), np.full(1000, float(value), np.float32))
    assert method_cache_size() == methods
    assert default_engine().cache_sizes()["plans"] == plans


def test_realizing_new_fill_values_does_not_grow_memory() -> None:
    # the caches fill up first (the constant-node cache holds 1024 entries), then memory must stay flat; growth is
    # measured over three rounds and the median taken, since a hash table reaching its next size (the UOp table,
    # whose size depends on what earlier tests left alive) is a one-time step, while a leak grows in every round
    tracemalloc.start()
    try:
        for value in range(1100):
            Tensor.full((1000,), float(value), device=DEVICE).contiguous().realize()
        rounds = []
        for start in (1100, 1400, 1700):
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            for value in range(start, start + 300):
                Tensor.full((1000,), float(value), device=DEVICE).contiguous().realize()
            gc.collect()
            rounds.append(tracemalloc.get_traced_memory()[0] - before)
    finally:
        tracemalloc.stop()
    # before bounded caches and lifted constants: one kernel and one 4 KB buffer kept per value (over a megabyte a
    # round here)
    grown = sorted(rounds)[1]
    assert grown < 256 * 1024, f"{rounds} bytes more over rounds of 300 new fill values"


def test_a_buffer_is_freed_with_its_tensors() -> None:
    buffers = []
    for value in range(50):
        tensor = Tensor.full((1000,), float(value) + 0.5, device=DEVICE).contiguous().realize()
        buffers.append(weakref.ref(tensor.data_buffer()))
        del tensor
    gc.collect()
    assert [reference() for reference in buffers] == [None] * len(buffers)


def test_a_changing_learning_rate_reuses_the_update_kernel() -> None:
    rng = np.random.default_rng(0)
    start = rng.normal(size=16).astype(np.float32)
    gradient = rng.normal(size=16).astype(np.float32)
    parameter, grad = Tensor(start.copy(), device=DEVICE), Tensor(gradient, device=DEVICE)
    expected = start.copy()
    sizes = []
    for step in range(12):
        learning_rate = 0.1 / (step + 1)
        parameter -= learning_rate * grad
        expected -= np.float32(learning_rate) * gradient
        sizes.append(method_cache_size())
    np.testing.assert_allclose(parameter.numpy(), expected, rtol=1e-6)
    assert sizes[-1] == sizes[2]  # after the second value, every step reuses the lifted kernel


def test_an_integer_step_count_reuses_one_kernel() -> None:
    x = Tensor(np.arange(8, dtype=np.int32), device=DEVICE)
    sizes = []
    for step in range(10):
        assert (x * step + step).numpy().tolist() == [value * step + step for value in range(8)]
        sizes.append(method_cache_size())
    assert sizes[-1] == sizes[2]


def test_twenty_thousand_chained_ops_realize() -> None:
    x = Tensor([0.0, 1.0], device=DEVICE)
    for _ in range(20_000):
        x = x + 1
    assert x.numpy().tolist() == [20_000.0, 20_001.0]


def test_cat_of_thousands_of_small_tensors_is_cut_into_bounded_kernels() -> None:
    # one kernel per cat held one branch per operand (2,000 branches took minutes to compile); operands are joined
    # in groups, and sibling kernels merge only up to a bounded number of inputs, so work grows linearly
    count = 2000
    parts = [Tensor(np.full(3, value, np.float32), device=DEVICE) for value in range(count)]
    before = GlobalCounters.kernel_count
    joined = Tensor.cat(*parts).numpy()
    np.testing.assert_array_equal(joined, np.repeat(np.arange(count, dtype=np.float32), 3))
    kernels = GlobalCounters.kernel_count - before
    assert count // 64 <= kernels <= count // 16, kernels
