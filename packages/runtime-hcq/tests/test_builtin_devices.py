"""The built-in devices as memory: every dtype round-trips through CPU and PYTHON buffers and copies between them;
the registry knows CPU, PYTHON and CUDA, and the default device is the CPU unless DEV says otherwise."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.runtime import BUILTIN_DEVICES, Buffer, CPUDevice, Device, DeviceRegistry, PythonDevice, copy_between
from kiln.uops import DType, dtypes

HOST_DEVICES = ("CPU", "PYTHON")


def random_bits(dtype: DType, count: int, seed: int) -> np.ndarray:
    """Random raw bit patterns of `dtype` (every pattern, NaNs and denormals included) as unsigned ints."""
    unsigned = np.dtype(f"u{dtype.itemsize}")
    return np.random.default_rng(seed).integers(0, 2 ** (8 * dtype.itemsize), count, dtype=unsigned, endpoint=False)


@pytest.mark.parametrize("device", HOST_DEVICES)
@pytest.mark.parametrize("dtype", dtypes.all, ids=lambda dtype: dtype.name)
def test_every_dtype_round_trips_bit_exactly(device: str, dtype: DType) -> None:
    bits = random_bits(dtype, 1001, seed=dtype.itemsize)
    buffer = Buffer(device, 1001, dtype).copyin(bits)
    back = np.empty_like(bits)
    buffer.copyout(back)
    np.testing.assert_array_equal(back, bits)
    if dtype.fmt is not None:  # numpy has the type: numpy() views the same bits
        np.testing.assert_array_equal(buffer.numpy().view(bits.dtype), bits)
    vector = Buffer(device, 250, dtype.vec(4)).copyin(bits[:1000])  # 4-lane elements: the same 1000 scalars
    lanes = np.empty(1000, bits.dtype)
    vector.view(1000, dtype).copyout(lanes)
    np.testing.assert_array_equal(lanes, bits[:1000])


@pytest.mark.parametrize(("source", "target"), [("CPU", "PYTHON"), ("PYTHON", "CPU"), ("CPU", "CPU:1")])
@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.bfloat16, dtypes.float32, dtypes.uint64])
def test_copies_between_devices_keep_every_bit(source: str, target: str, dtype: DType) -> None:
    bits = random_bits(dtype, 4099, seed=7)
    if dtype == dtypes.bool:
        bits = bits & 1  # a bool byte is 0 or 1
    original = Buffer(source, 4099, dtype).copyin(bits)
    copied = Buffer(target, 4099, dtype)
    copy_between(copied, original)
    back = np.empty_like(bits)
    copied.copyout(back)
    np.testing.assert_array_equal(back, bits)
    # a view at an offset copies only its part
    part = Buffer(target, 99, dtype)
    copy_between(part, original.view(99, dtype, offset=1000 * dtype.itemsize))
    part.copyout(back[:99])
    np.testing.assert_array_equal(back[:99], bits[1000:1099])


def test_builtin_kinds_and_their_classes() -> None:
    assert list(BUILTIN_DEVICES) == ["CPU", "PYTHON", "CUDA", "CL", "WEBGPU"]
    assert Device.kinds()[:3] == ["CPU", "PYTHON", "CUDA"]
    assert isinstance(Device["cpu"], CPUDevice) and isinstance(Device["python:0"], PythonDevice)
    assert Device["CPU:1"] is not Device["CPU"] and Device["CPU:1"].name == "CPU:1"


def test_default_device_prefers_the_cpu_over_registered_test_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEV", raising=False)
    registry = DeviceRegistry(entry_point_group="kiln.test.no_such_group")
    registry.register("AAATEST", PythonDevice)  # registered at run time: after every built-in
    assert registry.DEFAULT == "CPU"
    monkeypatch.setenv("DEV", "python")
    assert registry.DEFAULT == "PYTHON"
