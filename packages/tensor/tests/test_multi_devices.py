"""Tensors on several CPU devices: kernels run on the device of their buffers, and `to()` copies through the
runtime (with its gradient copying back)."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import Tensor


def test_kernels_run_on_each_cpu_device() -> None:
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    on_one = Tensor(values).to("CPU:1")
    on_two = Tensor(values).to("CPU:2")
    assert (on_one.device, on_two.device) == ("CPU:1", "CPU:2")
    np.testing.assert_allclose((on_one * 2 + 1).numpy(), values * 2 + 1)
    np.testing.assert_allclose(on_two.sum(axis=1).numpy(), values.sum(axis=1))
    moved = (on_one.to("CPU:2") + on_two).to("CPU")
    assert moved.device == "CPU"
    np.testing.assert_allclose(moved.numpy(), values * 2)


def test_mixing_devices_without_a_copy_is_refused() -> None:
    with pytest.raises(ValueError, match="different devices, 'CPU:1' and 'CPU'"):
        (Tensor([1.0]).to("CPU:1") + Tensor([1.0], device="CPU")).realize()


def test_gradient_flows_back_across_devices() -> None:
    values = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    leaf = Tensor(values, device="CPU", requires_grad=True)
    ((leaf.to("CPU:1") * leaf.to("CPU:1")).to("CPU:2").sum()).backward()
    assert leaf.grad is not None and leaf.grad.device == "CPU"
    np.testing.assert_allclose(leaf.grad.numpy(), 2 * values)
