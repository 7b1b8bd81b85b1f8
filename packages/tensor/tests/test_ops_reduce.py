"""Reductions (sum, mean, max, min, prod, var, std, argmax, argmin, any, all, logsumexp, softmax, log_softmax,
cumsum, cummax) against numpy over shapes, axes (int, tuple, negative, None), keepdim and dtypes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kiln.tensor.ops import reduce as reduce_module
from kiln.tensor.tensor import Tensor
from kiln.uops import DType, dtypes

DEVICE = "PYTHON"
Array = np.ndarray[Any, Any]


pytestmark = pytest.mark.default_device(DEVICE)


def _tensor(a: Array) -> Tensor:
    # a 0-dim array goes in as one element reshaped to (): Tensor(0-dim numpy array) is the engine's (see report)
    return Tensor(a.reshape(1)).reshape(()) if a.ndim == 0 else Tensor(a)


def _values(shape: tuple[int, ...], seed: int = 0) -> Array:
    generator = np.random.default_rng(seed)
    # half steps make ties (for argmax / max) likely
    return (np.round(generator.uniform(-4, 4, size=shape) * 2) / 2).astype(np.float32)


CASES = [
    ((5,), None),
    ((5,), 0),
    ((5,), -1),
    ((3, 4), None),
    ((3, 4), 0),
    ((3, 4), 1),
    ((3, 4), -2),
    ((3, 4), (0, 1)),
    ((2, 3, 4), (0, 2)),
    ((2, 3, 4), (1, -1)),
    ((2, 3, 4), -2),
    ((1, 5, 1), (0, 2)),
    ((1, 5, 1), 1),
    ((), None),
    ((), 0),
    ((4, 1, 3), ()),
]


def _numpy_axis(axis: int | tuple[int, ...] | None, ndim: int) -> int | tuple[int, ...] | None:
    if ndim == 0:
        return None  # numpy has no axis 0 on a 0-dim array; reducing it is the identity
    return axis


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(("shape", "axis"), CASES)
def test_float_reductions(shape: tuple[int, ...], axis: Any, keepdim: bool) -> None:
    a = _values(shape)
    x = _tensor(a)
    results = {
        "sum": x.sum(axis, keepdim),
        "mean": x.mean(axis, keepdim),
        "max": x.amax(axis, keepdim),
        "min": x.amin(axis, keepdim),
        "prod": x.prod(axis, keepdim),
        "any": x.any(axis, keepdim),
        "all": x.all(axis, keepdim),
    }
    Tensor.realize_all(*results.values())
    numpy_axis = _numpy_axis(axis, a.ndim)
    references: dict[str, Callable[..., Any]] = {
        "sum": np.sum,
        "mean": np.mean,
        "max": np.max,
        "min": np.min,
        "prod": np.prod,
        "any": np.any,
        "all": np.all,
    }
    for name, result in results.items():
        expected = np.asarray(references[name](a.astype(np.float64), axis=numpy_axis, keepdims=keepdim))
        if a.ndim == 0 and keepdim:
            expected = expected.reshape(())
        assert result.shape == expected.shape, name
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (dtypes.int8, dtypes.int64),
        (dtypes.uint8, dtypes.int64),
        (dtypes.int32, dtypes.int64),
        (dtypes.bool, dtypes.int64),
        (dtypes.int64, dtypes.int64),
        (dtypes.float16, dtypes.float16),
        (dtypes.float64, dtypes.float64),
    ],
)
def test_sum_and_prod_dtypes_follow_pytorch(dtype: DType, expected: DType) -> None:
    numpy_dtype = np.bool_ if dtype is dtypes.bool else np.dtype(dtype.name)
    a = np.array([[1, 2, 3, 4], [5, 6, 7, 8], [100, 110, 120, 127]]).astype(numpy_dtype)
    x = Tensor(a)
    sums, products, column_sums = x.sum(), x.prod(axis=1), x.sum(axis=0, keepdim=True)
    Tensor.realize_all(sums, products, column_sums)
    for result in (sums, products, column_sums):
        assert result.dtype is expected
    wide = a.astype(np.float64 if dtypes.is_float(dtype) else np.int64)
    # int8 products overflow int8 but not int64: the accumulation is in int64 (like PyTorch)
    np.testing.assert_allclose(sums.numpy(), wide.sum(), rtol=1e-3)
    # float16 products round (and overflow to inf) in float16, like PyTorch's result
    with np.errstate(over="ignore"):
        expected_products = wide.prod(axis=1).astype(np.float16 if dtype is dtypes.float16 else np.float64)
    np.testing.assert_allclose(products.numpy(), expected_products, rtol=1e-3)
    np.testing.assert_allclose(column_sums.numpy(), wide.sum(axis=0, keepdims=True), rtol=1e-3)


def test_sum_accumulates_float16_in_float32() -> None:
    a = np.full(4096, 1.0, dtype=np.float16)
    a[0] = 2048.0
    # a float16 running sum would stall at 2048 (2048 + 1 rounds back to 2048); float32 accumulation does not
    total = Tensor(a).sum()
    assert total.dtype is dtypes.float16
    assert total.item() == float(np.float16(2048.0 + 4095.0))
    assert Tensor(a).mean().item() == float(np.float16((2048.0 + 4095.0) / 4096))


def test_sum_with_dtype_argument() -> None:
    x = Tensor([[250, 10], [5, 1]], dtype=dtypes.uint8)
    assert x.sum(dtype=dtypes.uint8).item() == (266 % 256)
    assert x.sum(axis=0, dtype=dtypes.float32).tolist() == [255.0, 11.0]
    assert x.float().mean(dim=1).tolist() == [130.0, 3.0]


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint8, dtypes.int64, dtypes.bool])
def test_integer_extremes_and_positions(dtype: DType) -> None:
    numpy_dtype = np.bool_ if dtype is dtypes.bool else np.dtype(dtype.name)
    generator = np.random.default_rng(9)
    a = generator.integers(0, 4 if dtype is not dtypes.bool else 2, size=(3, 5)).astype(numpy_dtype)
    x = Tensor(a)
    results = [x.amax(axis=1), x.amin(axis=0), x.argmax(axis=1), x.argmin(axis=0), x.argmax(), x.min()]
    Tensor.realize_all(*results)
    expected = [a.max(axis=1), a.min(axis=0), a.argmax(axis=1), a.argmin(axis=0), a.argmax(), a.min()]
    for result, wanted in zip(results, expected):
        np.testing.assert_array_equal(result.numpy(), wanted)
    assert results[0].dtype is dtype and results[2].dtype is dtypes.default_int


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(("shape", "axis"), [((7,), 0), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), 1), ((4,), None)])
def test_argmax_argmin_first_occurrence(shape: tuple[int, ...], axis: int | None, keepdim: bool) -> None:
    a = _values(shape, seed=4)
    x = Tensor(a)
    largest, smallest = x.argmax(axis, keepdim), x.argmin(axis, keepdim=keepdim)
    Tensor.realize_all(largest, smallest)
    if axis is None:
        np.testing.assert_array_equal(largest.numpy(), np.argmax(a))
        np.testing.assert_array_equal(smallest.numpy(), np.argmin(a))
        return
    np.testing.assert_array_equal(largest.numpy(), np.argmax(a, axis=axis, keepdims=keepdim))
    np.testing.assert_array_equal(smallest.numpy(), np.argmin(a, axis=axis, keepdims=keepdim))


def test_nan_wins_in_max_min_and_arg_positions() -> None:
    a = np.array([[1.0, math.nan, 3.0, math.nan], [2.0, 5.0, -1.0, 0.0], [math.inf, -math.inf, 1.0, 1.0]], np.float32)
    x = Tensor(a)
    results = [x.amax(axis=1), x.amin(axis=1), x.argmax(axis=1), x.argmin(axis=1), x.max()]
    Tensor.realize_all(*results)
    np.testing.assert_array_equal(results[0].numpy(), [math.nan, 5.0, math.inf])
    np.testing.assert_array_equal(results[1].numpy(), [math.nan, -1.0, -math.inf])
    assert results[2].tolist() == [1, 1, 0]  # the first NaN, like PyTorch
    assert results[3].tolist() == [1, 2, 1]
    assert math.isnan(results[4].item())


@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize(("shape", "axis"), [((6,), None), ((3, 4), 0), ((3, 4), -1), ((2, 3, 4), (0, 2))])
def test_var_and_std(shape: tuple[int, ...], axis: Any, correction: int) -> None:
    a = _values(shape, seed=2)
    x = Tensor(a)
    variance, deviation = x.var(axis, correction=correction), x.std(axis, keepdim=True, correction=correction)
    Tensor.realize_all(variance, deviation)
    np.testing.assert_allclose(variance.numpy(), np.var(a.astype(np.float64), axis=axis, ddof=correction), rtol=1e-5)
    np.testing.assert_allclose(
        deviation.numpy(), np.std(a.astype(np.float64), axis=axis, ddof=correction, keepdims=True), rtol=1e-5
    )


def test_var_of_a_single_element_is_nan_with_bessel_correction() -> None:
    assert math.isnan(Tensor([3.0]).var().item())
    assert Tensor([3.0]).var(correction=0).item() == 0.0


def _logsumexp(a: Array, axis: int | tuple[int, ...] | None, keepdims: bool = False) -> Array:
    peak = np.max(a, axis=axis, keepdims=True)
    peak = np.where(np.isinf(peak), 0.0, peak)
    total = np.log(np.sum(np.exp(a - peak), axis=axis, keepdims=True)) + peak
    result: Array = total if keepdims else np.squeeze(total, axis=axis)
    return result


@pytest.mark.parametrize(("shape", "axis"), [((5,), 0), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), (1, 2)), ((3, 4), None)])
def test_logsumexp(shape: tuple[int, ...], axis: Any) -> None:
    a = _values(shape, seed=6).astype(np.float64) * 30  # large enough that exp overflows without the shift
    result = Tensor(a.astype(np.float32)).logsumexp(axis)
    np.testing.assert_allclose(result.numpy(), _logsumexp(a, axis), rtol=1e-5, atol=1e-5)


def test_logsumexp_of_infinite_rows() -> None:
    a = np.array([[-math.inf, -math.inf], [math.inf, 1.0], [0.0, -math.inf]], dtype=np.float32)
    result = Tensor(a).logsumexp(axis=1, keepdim=True)
    np.testing.assert_allclose(result.numpy(), [[-math.inf], [math.inf], [0.0]])


def _softmax(a: Array, axis: int) -> Array:
    shifted = np.exp(a - a.max(axis=axis, keepdims=True))
    result: Array = shifted / shifted.sum(axis=axis, keepdims=True)
    return result


@pytest.mark.parametrize(("shape", "axis"), [((5,), -1), ((3, 4), 0), ((3, 4), -1), ((2, 3, 4), 1), ((1, 1), 1)])
def test_softmax_and_log_softmax(shape: tuple[int, ...], axis: int) -> None:
    a = _values(shape, seed=8).astype(np.float64) * 20
    x = Tensor(a.astype(np.float32))
    probabilities, logarithms = x.softmax(axis), x.log_softmax(dim=axis)
    Tensor.realize_all(probabilities, logarithms)
    np.testing.assert_allclose(probabilities.numpy(), _softmax(a, axis), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(logarithms.numpy(), a - _logsumexp(a, axis, keepdims=True), rtol=1e-5, atol=1e-5)


def test_softmax_float16_and_masked_entries() -> None:
    a = np.array([[0.0, 1.0, -math.inf, 2.0], [10.0, 10.0, 10.0, -math.inf]], dtype=np.float16)
    result = Tensor(a).softmax()
    assert result.dtype is dtypes.float16
    np.testing.assert_allclose(result.numpy(), _softmax(a.astype(np.float64), -1), rtol=2e-3, atol=1e-4)
    integers = Tensor([[1, 2], [3, 3]]).softmax()
    assert integers.dtype is dtypes.float32
    np.testing.assert_allclose(integers.numpy(), _softmax(np.array([[1.0, 2.0], [3.0, 3.0]]), -1), rtol=1e-6)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize(("shape", "axis"), [((64, 1000), -1), ((33, 250), 0), ((4, 7, 130), 1), ((5, 16), -1)])
def test_softmax_rows_long_enough_to_keep_their_values(device: str, shape: tuple[int, ...], axis: int) -> None:
    # on serial devices the sum loop stores each exp and the output loop rescales it (codegen's reuse_row_values);
    # in place (assign) too, and with -inf entries (their exp is 0)
    if device == "PYTHON" and math.prod(shape) > 5000:
        shape = tuple(min(size, 40) for size in shape)
    a = _values(shape, seed=31).astype(np.float64) * 8
    a.reshape(-1)[::7] = -math.inf
    x = Tensor(a.astype(np.float32), device=device)
    expected = _softmax(a.astype(np.float32).astype(np.float64), axis)
    np.testing.assert_allclose(x.softmax(axis).numpy(), expected, rtol=2e-6, atol=1e-8)
    x.assign(x.softmax(axis)).realize()
    np.testing.assert_allclose(x.numpy(), expected, rtol=2e-6, atol=1e-8)


@pytest.mark.parametrize(("shape", "axis"), [((1,), 0), ((7,), 0), ((3, 5), 1), ((3, 5), 0), ((2, 3, 4), -2)])
def test_cumsum(shape: tuple[int, ...], axis: int) -> None:
    a = _values(shape, seed=10)
    result = Tensor(a).cumsum(axis)
    np.testing.assert_allclose(result.numpy(), np.cumsum(a.astype(np.float64), axis=axis), rtol=1e-6, atol=1e-6)


def test_cumsum_dtypes_and_long_axes() -> None:
    ints = np.arange(-5, 295, dtype=np.int32).reshape(1, 300)  # longer than one block of 256
    results = [Tensor(ints).cumsum(axis=1), Tensor(ints > 0).cumsum(1), Tensor(ints.astype(np.float16) / 64).cumsum(1)]
    Tensor.realize_all(*results)
    assert results[0].dtype is dtypes.int64 and results[1].dtype is dtypes.int64
    np.testing.assert_array_equal(results[0].numpy(), np.cumsum(ints, axis=1))
    np.testing.assert_array_equal(results[1].numpy(), np.cumsum(ints > 0, axis=1))
    assert results[2].dtype is dtypes.float16
    np.testing.assert_allclose(results[2].numpy(), np.cumsum(ints / 64, axis=1), rtol=2e-3)


def test_cumsum_block_recursion(monkeypatch: pytest.MonkeyPatch) -> None:
    # small blocks exercise the recursive combination of block totals (25 blocks -> 7 -> 2)
    monkeypatch.setattr(reduce_module, "_CUMULATIVE_BLOCK", 4)
    a = np.arange(1, 101, dtype=np.int64).reshape(1, 100) * np.array([[1], [-1]])
    np.testing.assert_array_equal(Tensor(a).cumsum(1).numpy(), np.cumsum(a, axis=1))


def _cummax(a: Array) -> tuple[Array, Array]:
    """PyTorch's cummax along the last axis: ties and NaNs take the latest position, a NaN stays the maximum."""
    values, positions = np.empty_like(a), np.empty(a.shape, dtype=np.int64)
    for row in np.ndindex(a.shape[:-1]):
        best, where = None, 0
        for i, value in enumerate(a[row]):
            if best is None or math.isnan(value) or (not math.isnan(best) and value >= best):
                best, where = value, i
            values[(*row, i)], positions[(*row, i)] = best, where
    return values, positions


@pytest.mark.parametrize(("shape", "axis"), [((8,), 0), ((3, 6), 1), ((3, 6), 0), ((2, 3, 4), -1)])
def test_cummax(shape: tuple[int, ...], axis: int) -> None:
    a = _values(shape, seed=12)
    values, positions = Tensor(a).cummax(axis)
    Tensor.realize_all(values, positions)
    expected_values, expected_positions = _cummax(np.moveaxis(a, axis, -1))
    np.testing.assert_array_equal(values.numpy(), np.moveaxis(expected_values, -1, axis))
    np.testing.assert_array_equal(positions.numpy(), np.moveaxis(expected_positions, -1, axis))
    assert positions.dtype is dtypes.default_int


def test_cummax_nan_and_integers() -> None:
    a = np.array([1.0, math.nan, 5.0, math.nan, 2.0], dtype=np.float32)
    values, positions = Tensor(a).cummax()
    expected_values, expected_positions = _cummax(a)
    np.testing.assert_array_equal(values.numpy(), expected_values)
    assert positions.tolist() == expected_positions.tolist() == [0, 1, 1, 3, 3]
    ints = np.array([[3, 1, 3, 7, 7, 2]], dtype=np.int32)
    values, positions = Tensor(ints).cummax(dim=1)
    assert values.tolist() == [[3, 3, 3, 7, 7, 7]] and positions.tolist() == [[0, 0, 2, 3, 4, 4]]


def test_reductions_over_empty_ranges() -> None:
    empty = Tensor(np.zeros((0, 3), dtype=np.float32))
    results = [empty.sum(0), empty.prod(0), empty.mean(0), empty.any(0), empty.all(0), empty.sum()]
    Tensor.realize_all(*results)
    np.testing.assert_array_equal(results[0].numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(results[1].numpy(), [1.0, 1.0, 1.0])
    assert np.isnan(results[2].numpy()).all()
    assert results[3].tolist() == [False] * 3 and results[4].tolist() == [True] * 3
    assert results[5].item() == 0.0


def test_reduction_keeps_size_zero_output_dims() -> None:
    columns = Tensor(np.zeros((2, 0), dtype=np.float32))
    assert columns.amax(0).shape == (0,)
    assert columns.amax(0).numpy().shape == (0,)


def test_argmax_and_arange_share_iota_graphs_across_devices_and_sizes() -> None:
    # iota's graph is kept per (size, device): one size used on two devices, and sizes that differ by one, must each
    # get their own positions and device (numpy is the oracle)
    rng = np.random.default_rng(7)
    for size in (5, 6, 5, 17, 16, 17):
        values = rng.standard_normal((3, size)).astype(np.float32)
        for device in ("CPU", "PYTHON"):
            x = Tensor(values, device=device)
            positions = x.argmax(1)
            assert positions.device == device
            np.testing.assert_array_equal(positions.numpy(), values.argmax(1))
            counting = Tensor.arange(size, device=device)
            assert counting.device == device
            np.testing.assert_array_equal(counting.numpy(), np.arange(size))
