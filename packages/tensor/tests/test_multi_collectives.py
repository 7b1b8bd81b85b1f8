"""In-process collectives (kiln.tensor.multi) against numpy: every collective and reduction, several dtypes, sizes
that do not divide by the device count, zero-size tensors, 1 to 3 devices."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import Tensor
from kiln.tensor.multi import allgather, allreduce, broadcast, reduce_scatter

DEVICES = ["CPU", "CPU:1", "CPU:2"]
NUMPY_REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}
NUMPY_BOOL_REDUCE = {"sum": np.logical_or, "max": np.logical_or, "min": np.logical_and, "prod": np.logical_and}


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.startswith("float"):
        return rng.uniform(-2, 2, shape).astype(dtype)
    return rng.integers(0 if dtype == "uint8" else -5, 6, shape).astype(dtype)


def _inputs(count: int, shape: tuple[int, ...], dtype: str, seed: int) -> tuple[list[np.ndarray], list[Tensor]]:
    rng = np.random.default_rng(seed)
    arrays = [_values(rng, shape, dtype) for _ in range(count)]
    return arrays, [Tensor(array).to(device) for array, device in zip(arrays, DEVICES)]


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64", "uint8", "bool"])
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (5, 3), (2, 0, 3)])
def test_allreduce_matches_numpy(count: int, op: str, dtype: str, shape: tuple[int, ...]) -> None:
    arrays, tensors = _inputs(count, shape, dtype, seed=count * 100 + len(shape))
    table = NUMPY_BOOL_REDUCE if dtype == "bool" else NUMPY_REDUCE
    expected = arrays[0]
    for array in arrays[1:]:
        expected = table[op](expected, array)
    results = allreduce(tensors, op)
    assert [result.device for result in results] == DEVICES[:count]
    for result in results:
        assert result.shape == shape and result.dtype == tensors[0].dtype
        tolerance = 2e-3 if dtype == "float16" else 1e-6
        np.testing.assert_allclose(result.numpy(), expected.astype(dtype), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
@pytest.mark.parametrize(("shape", "axis"), [((0,), 0), ((1,), 0), ((7,), 0), ((5, 4), 1), ((4, 2, 3), -1)])
def test_reduce_scatter_matches_numpy(count: int, dtype: str, shape: tuple[int, ...], axis: int) -> None:
    arrays, tensors = _inputs(count, shape, dtype, seed=7 + count)
    reduce = np.logical_or if dtype == "bool" else np.add
    total = arrays[0]
    for array in arrays[1:]:
        total = reduce(total, array)
    expected = np.array_split(total, count, axis=axis)  # the first size % count parts one longer, as kiln splits
    results = reduce_scatter(tensors, axis=axis)
    assert [result.device for result in results] == DEVICES[:count]
    for result, part in zip(results, expected):
        np.testing.assert_allclose(result.numpy(), part.astype(dtype), rtol=1e-6)


@pytest.mark.parametrize("count", [1, 2, 3])
@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "bool"])
@pytest.mark.parametrize("axis", [0, 1])
def test_allgather_of_unequal_parts_matches_numpy(count: int, dtype: str, axis: int) -> None:
    rng = np.random.default_rng(count)
    sizes = [3, 0, 2][:count]
    arrays = [_values(rng, (size, 4) if axis == 0 else (4, size), dtype) for size in sizes]
    tensors = [Tensor(array).to(device) for array, device in zip(arrays, DEVICES)]
    expected = np.concatenate(arrays, axis=axis)
    results = allgather(tensors, axis=axis)
    assert [result.device for result in results] == DEVICES[:count]
    for result in results:
        np.testing.assert_array_equal(result.numpy(), expected)


@pytest.mark.parametrize("shape", [(0,), (5,), (2, 3)])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_broadcast_matches_numpy(shape: tuple[int, ...], dtype: str) -> None:
    array = _values(np.random.default_rng(3), shape, dtype)
    source = Tensor(array).to("CPU:1")
    results = broadcast(source, DEVICES)
    assert [result.device for result in results] == DEVICES
    for result in results:
        np.testing.assert_array_equal(result.numpy(), array)


def test_allreduce_has_a_gradient() -> None:
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(7).astype(np.float32) for _ in range(3)]
    weights = rng.standard_normal(7).astype(np.float32)
    leaves = [Tensor(array, requires_grad=True) for array in arrays]
    summed = allreduce([leaf.to(device) for leaf, device in zip(leaves, DEVICES)])
    (summed[2] * Tensor(weights).to("CPU:2")).sum().backward()
    for leaf in leaves:
        assert leaf.grad is not None
        np.testing.assert_allclose(leaf.grad.numpy(), weights, rtol=1e-6)


def test_collectives_refuse_bad_groups() -> None:
    with pytest.raises(ValueError, match="one tensor per device, got none"):
        allreduce([])
    with pytest.raises(ValueError, match="must be distinct"):
        allreduce([Tensor([1.0]), Tensor([2.0])])
    with pytest.raises(ValueError, match=r"tensor 1 has shape \(2,\), tensor 0 has \(1,\)"):
        allreduce([Tensor([1.0]), Tensor([1.0, 2.0]).to("CPU:1")])
    with pytest.raises(TypeError, match="tensor 1 has dtype"):
        allreduce([Tensor([1.0]), Tensor([1]).to("CPU:1")])
    with pytest.raises(ValueError, match="unknown reduction 'mean'"):
        allreduce([Tensor([1.0]), Tensor([1.0]).to("CPU:1")], "mean")
    with pytest.raises(ValueError, match="differs from tensor 0's"):
        allgather([Tensor([[1.0]]), Tensor([[1.0, 2.0]]).to("CPU:1")], axis=0)
    with pytest.raises(IndexError, match="axis 2 is out of range"):
        reduce_scatter([Tensor([1.0]), Tensor([1.0]).to("CPU:1")], axis=2)


@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", ["float64", "int8", "int16", "uint16", "uint32", "uint64"])
@pytest.mark.parametrize("shape", [(0,), (2,), (7,)])
def test_allreduce_of_more_dtypes_matches_numpy(op: str, dtype: str, shape: tuple[int, ...]) -> None:
    arrays, tensors = _inputs(3, shape, dtype, seed=21)
    expected = arrays[0]
    for array in arrays[1:]:
        expected = NUMPY_REDUCE[op](expected, array)
    for result in allreduce(tensors, op):
        assert result.numpy().dtype == np.dtype(dtype)
        np.testing.assert_array_equal(result.numpy(), expected.astype(dtype))
