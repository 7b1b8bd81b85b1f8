"""Buffer: dtype round trips, lazy allocation, views, copies and their error messages."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from kiln.runtime import Buffer, BufferSpec, Device, copy_between, numpy_dtype
from kiln.uops import DType, dtypes

HOST = "TESTHOST"
OPAQUE = "TESTOPAQUE"


def random_array(dtype: np.dtype[np.generic], count: int, rng: np.random.Generator) -> np.ndarray:
    """Values of `dtype` spanning its range, including the float specials."""
    if dtype == np.bool_:
        return rng.integers(0, 2, count).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(int(info.min), int(info.max), count, dtype=dtype, endpoint=True)
    values = (rng.standard_normal(count) * 100).astype(dtype)
    values[:3] = [np.inf, -np.inf, np.nan]
    return values


@pytest.mark.parametrize("dtype", dtypes.all, ids=lambda dtype: dtype.name)
def test_every_dtype_round_trips(dtype: DType) -> None:
    count = 37
    buffer = Buffer(HOST, count, dtype)
    if dtype.fmt is None:  # bfloat16 / fp8: numpy has no type, the raw bytes must survive
        payload = os.urandom(count * dtype.itemsize)
        buffer.copyin(payload)
        out = bytearray(len(payload))
        buffer.copyout(out)
        assert bytes(out) == payload
        with pytest.raises(TypeError, match=f"numpy has no dtype for dtypes.{dtype.name}"):
            buffer.numpy()
        raw = buffer.view(count, getattr(dtypes, f"uint{8 * dtype.itemsize}")).numpy()
        assert raw.tobytes() == payload
        return
    values = random_array(np.dtype(dtype.fmt), count, np.random.default_rng(7))
    assert values.itemsize == dtype.itemsize
    buffer.copyin(values)
    result = buffer.numpy()
    assert result.dtype == values.dtype and result.shape == (count,)
    assert result.tobytes() == values.tobytes()
    np.testing.assert_array_equal(result, values)  # NaNs compare equal here
    out = np.empty_like(values)
    buffer.copyout(out)
    assert out.tobytes() == values.tobytes()


def test_vector_dtype_buffer_has_lanes_in_the_last_axis() -> None:
    values = np.arange(24, dtype=np.float32)
    buffer = Buffer(HOST, 6, dtypes.float32.vec(4)).copyin(values)
    assert buffer.nbytes == 96
    np.testing.assert_array_equal(buffer.numpy(), values.reshape(6, 4))


def test_allocation_is_lazy() -> None:
    buffer = Buffer(HOST, 16, dtypes.int32)
    assert not buffer.is_allocated
    assert buffer.allocate() is buffer and buffer.is_allocated
    opaque = buffer.opaque
    assert buffer.allocate().opaque is opaque  # allocate() is idempotent


def test_copyout_of_a_never_allocated_buffer_raises() -> None:
    with pytest.raises(RuntimeError, match="never allocated"):
        Buffer(HOST, 4, dtypes.int8).copyout(bytearray(4))


def test_views_alias_their_base() -> None:
    base = Buffer(HOST, 16, dtypes.int32).copyin(np.zeros(16, np.int32))
    view = base.view(4, dtypes.int32, offset=8 * 4)
    view.copyin(np.array([1, 2, 3, 4], np.int32))  # write through the view ...
    np.testing.assert_array_equal(base.numpy(), [0] * 8 + [1, 2, 3, 4] + [0] * 4)  # ... read the base
    base.copyin(np.arange(16, dtype=np.int32))  # write the base ...
    np.testing.assert_array_equal(view.numpy(), [8, 9, 10, 11])  # ... read the view


def test_view_of_a_view_adds_offsets_and_may_change_dtype() -> None:
    values = np.arange(32, dtype=np.uint8)
    base = Buffer(HOST, 32, dtypes.uint8).copyin(values)
    middle = base.view(16, dtypes.uint8, offset=8)
    inner = middle.view(2, dtypes.uint32, offset=4)
    assert inner.base is base and inner.offset == 12
    np.testing.assert_array_equal(inner.numpy(), values[12:20].view(np.uint32))


def test_view_allocates_its_base_on_first_use() -> None:
    base = Buffer(HOST, 8, dtypes.float32)
    view = Buffer(HOST, 2, dtypes.float32, base=base, offset=4)
    view.copyin(np.array([1.5, 2.5], np.float32))
    assert base.is_allocated
    np.testing.assert_array_equal(base.numpy()[1:3], [1.5, 2.5])


@pytest.mark.parametrize(
    ("size", "offset", "message"),
    [
        (5, 0, r"view of 5 x dtypes.int32 \(20 bytes\) at byte offset 0 does not fit"),
        (1, 16, r"at byte offset 16 does not fit"),
        (4, 4, r"\(16 bytes\) at byte offset 4 does not fit"),
    ],
)
def test_out_of_bounds_views_raise(size: int, offset: int, message: str) -> None:
    base = Buffer(HOST, 4, dtypes.int32)
    with pytest.raises(ValueError, match=message):
        base.view(size, dtypes.int32, offset)
    with pytest.raises(ValueError, match="does not fit in the base buffer of 16 bytes"):
        Buffer(HOST, size, dtypes.int32, base=base, offset=offset)


def test_bad_sizes_offsets_and_dtypes_raise() -> None:
    with pytest.raises(ValueError, match="Buffer size must not be negative, got -1"):
        Buffer(HOST, -1, dtypes.float32)
    with pytest.raises(TypeError, match="Buffer size must be an int, got float"):
        Buffer(HOST, 2.0, dtypes.float32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Buffer offset must not be negative"):
        Buffer(HOST, 1, dtypes.float32, base=Buffer(HOST, 4, dtypes.float32), offset=-4)
    with pytest.raises(ValueError, match="offset=4 given without a base"):
        Buffer(HOST, 1, dtypes.float32, offset=4)
    for dtype in (dtypes.void, dtypes.index, dtypes.float32.ptr()):
        with pytest.raises(TypeError, match="cannot hold"):
            Buffer(HOST, 1, dtype)
    with pytest.raises(TypeError, match="must be a DType"):
        Buffer(HOST, 1, "float32")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown device kind 'NOSUCHDEVICE'"):
        Buffer("nosuchdevice", 1, dtypes.float32)


def test_copy_size_mismatches_raise() -> None:
    buffer = Buffer(HOST, 4, dtypes.float32)
    with pytest.raises(ValueError, match=r"copyin of 12 bytes into .* which holds 16 bytes"):
        buffer.copyin(np.zeros(3, np.float32))
    buffer.copyin(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=r"copyout of .* \(16 bytes\) into 20 bytes"):
        buffer.copyout(bytearray(20))
    with pytest.raises(ValueError, match="writable"):
        buffer.copyout(bytes(16))
    with pytest.raises(ValueError, match="C-contiguous"):
        buffer.copyin(np.zeros(8, np.float32)[::2])
    with pytest.raises(TypeError, match="buffer protocol"):
        buffer.copyin([1.0, 2.0, 3.0, 4.0])


def test_views_must_share_device_and_options() -> None:
    base = Buffer(HOST, 4, dtypes.float32)
    with pytest.raises(ValueError, match="view on 'TESTOPAQUE', base on 'TESTHOST'"):
        Buffer(OPAQUE, 1, dtypes.float32, base=base)
    with pytest.raises(ValueError, match="takes its base's options"):
        Buffer(HOST, 1, dtypes.float32, base=base, options=BufferSpec(uncached=True))


def test_base_with_live_view_cannot_be_deallocated() -> None:
    base = Buffer(HOST, 8, dtypes.int8).allocate()
    view = base.view(4, dtypes.int8).allocate()
    with pytest.raises(RuntimeError, match="1 allocated view"):
        base.deallocate()
    view.deallocate()
    base.deallocate()
    assert not base.is_allocated


def test_deallocated_memory_is_reused_through_the_lru_cache() -> None:
    first = Buffer(HOST, 1000, dtypes.uint8).allocate()
    memory = first.opaque
    first.deallocate()
    second = Buffer(HOST, 250, dtypes.float32).allocate()  # same byte size, same options
    assert second.opaque is memory


def test_numpy_is_zero_copy_and_keeps_the_buffer_alive() -> None:
    buffer = Buffer(HOST, 4, dtypes.int16).copyin(np.array([1, 2, 3, 4], np.int16))
    array = buffer.numpy()
    array[0] = 99  # writes reach the buffer
    out = np.empty(4, np.int16)
    buffer.copyout(out)
    np.testing.assert_array_equal(out, [99, 2, 3, 4])
    memory = buffer.opaque
    del buffer
    gc.collect()
    # The array still owns the buffer, so its memory was not returned to the cache and reused.
    reused = Buffer(HOST, 4, dtypes.int16).allocate()
    assert reused.opaque is not memory
    np.testing.assert_array_equal(array, [99, 2, 3, 4])


def test_numpy_copies_when_the_device_has_no_host_view() -> None:
    values = np.linspace(0, 1, 10, dtype=np.float64)
    buffer = Buffer(OPAQUE, 10, dtypes.float64).copyin(values)
    array = buffer.numpy()
    np.testing.assert_array_equal(array, values)
    array[0] = 5.0
    assert buffer.numpy()[0] == 0.0
    with pytest.raises(RuntimeError, match="no host view"):
        buffer.host_view()


def test_views_need_an_allocator_with_sub_buffers() -> None:
    view = Buffer(OPAQUE, 4, dtypes.uint8).view(2, dtypes.uint8, 1)
    with pytest.raises(RuntimeError, match="does not support views"):
        view.allocate()


def test_unsupported_dtype_is_rejected_at_allocation() -> None:
    device = Device[HOST]
    saved = device.supported_dtypes
    device.supported_dtypes = frozenset({dtypes.float32})
    try:
        Buffer(HOST, 1, dtypes.float32).allocate()
        with pytest.raises(TypeError, match=r"cannot store dtypes.float64; it supports: float32"):
            Buffer(HOST, 1, dtypes.float64).allocate()
    finally:
        device.supported_dtypes = saved


def test_zero_element_buffers_allocate_and_copy_nothing() -> None:
    buffer = Buffer(HOST, 0, dtypes.float32).copyin(b"")
    assert buffer.nbytes == 0 and buffer.is_allocated
    assert buffer.numpy().shape == (0,)
    assert buffer.copyout(bytearray()).nbytes == 0


@pytest.mark.parametrize(
    ("source_device", "dest_device"), [(HOST, HOST), (HOST, OPAQUE), (OPAQUE, HOST), (OPAQUE, OPAQUE)]
)
def test_copy_between_devices(source_device: str, dest_device: str) -> None:
    values = np.random.default_rng(1).standard_normal(100).astype(np.float32)
    source = Buffer(source_device, 100, dtypes.float32).copyin(values)
    dest = Buffer(dest_device, 50, dtypes.float64)  # same bytes, another dtype
    copy_between(dest, source)
    out = np.empty(100, np.float32)
    dest.copyout(out)
    np.testing.assert_array_equal(out, values)


def test_copy_between_overlapping_views_behaves_like_memmove() -> None:
    values = np.arange(20, dtype=np.int32)
    base = Buffer(HOST, 20, dtypes.int32).copyin(values)
    copy_between(base.view(10, dtypes.int32, 4 * 4), base.view(10, dtypes.int32, 0))
    expected = values.copy()
    expected[4:14] = values[0:10]
    np.testing.assert_array_equal(base.numpy(), expected)


def test_copy_between_checks_sizes_and_source_state() -> None:
    with pytest.raises(ValueError, match=r"different sizes: .* \(8 bytes\) into .* \(4 bytes\)"):
        copy_between(Buffer(HOST, 1, dtypes.int32), Buffer(HOST, 1, dtypes.int64).allocate())
    with pytest.raises(RuntimeError, match="never allocated"):
        copy_between(Buffer(HOST, 1, dtypes.int32), Buffer(HOST, 1, dtypes.int32))


def test_numpy_dtype_mapping() -> None:
    assert numpy_dtype(dtypes.float16) == np.float16
    assert numpy_dtype(dtypes.bool) == np.bool_
    assert numpy_dtype(dtypes.uint64) == np.uint64
    with pytest.raises(TypeError, match="bfloat16"):
        numpy_dtype(dtypes.bfloat16)
