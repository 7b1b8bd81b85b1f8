"""The Tensor core: construction, reading data, devices, detach/contiguous/assign, primitive builders, errors."""

from __future__ import annotations

import numpy as np
import pytest
from engine_graphs import FAST_DEVICE, const_like

from kiln.tensor import Tensor, default_device, dtypes, no_grad
from kiln.uops import Ops


@pytest.mark.parametrize(
    "dtype",
    [
        np.bool_,
        np.int8,
        np.uint8,
        np.int16,
        np.uint16,
        np.int32,
        np.uint32,
        np.int64,
        np.float16,
        np.float32,
        np.float64,
    ],
)
def test_numpy_round_trip_keeps_dtype(dtype: type) -> None:
    values = (np.arange(-6, 6).reshape(3, 4) % 5).astype(dtype)
    tensor = Tensor(values)
    assert tensor.shape == (3, 4) and tensor.ndim == 2 and tensor.numel() == 12
    assert tensor.dtype.name == np.dtype(dtype).name
    result = tensor.numpy()
    assert result.dtype == values.dtype
    np.testing.assert_array_equal(result, values)
    result[0, 0] = 1  # numpy() returns a copy
    np.testing.assert_array_equal(tensor.numpy(), values)


def test_lists_and_scalars() -> None:
    assert Tensor([[1, 2], [3, 4]]).dtype == dtypes.default_int
    assert Tensor([1.5, 2]).dtype == dtypes.default_float
    assert Tensor([True, False]).dtype == dtypes.bool
    assert Tensor([]).shape == (0,) and Tensor([]).dtype == dtypes.default_float
    assert Tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert Tensor(((1.0,), (2.0,))).shape == (2, 1)
    for value, dtype in ((2.5, dtypes.float32), (7, dtypes.int32), (True, dtypes.bool)):
        scalar = Tensor(value)
        assert scalar.shape == () and scalar.dtype == dtype and scalar.item() == value
        assert scalar.realize().uop.op is Ops.CONST  # no buffer for a plain scalar
        assert scalar.data_buffer().numpy().tolist() == [value]  # unless asked for one
    assert Tensor(np.float64(0.25)).dtype == dtypes.float64 and Tensor(np.float64(0.25)).item() == 0.25
    assert Tensor(3, dtype=dtypes.float32).item() == 3.0


def test_explicit_dtype_converts() -> None:
    assert Tensor([1, 2, 3], dtype=dtypes.float32).numpy().dtype == np.float32
    np.testing.assert_array_equal(Tensor(np.array([1.7, -1.7]), dtype=dtypes.int32).numpy(), [1, -1])
    # numpy has no bfloat16: the cast happens on the device, numpy() reads it back as float32
    halves = Tensor([1.0, 2.5, -3.0], dtype=dtypes.bfloat16)
    assert halves.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(halves.numpy(), np.array([1.0, 2.5, -3.0], np.float32))


def test_scalar_requiring_grad_gets_its_own_buffer() -> None:
    leaf = Tensor(2.0, requires_grad=True)
    other = Tensor(2.0, requires_grad=True)
    assert leaf.uop is not other.uop and leaf.item() == 2.0 and leaf.shape == ()


def test_item_tolist_zero_size() -> None:
    assert Tensor([[4.5]]).item() == 4.5
    with pytest.raises(RuntimeError, match="one element"):
        Tensor([1.0, 2.0]).item()
    empty = Tensor(np.zeros((2, 0), np.int16))
    assert empty.numpy().shape == (2, 0) and empty.numpy().dtype == np.int16
    assert empty.tolist() == [[], []]


def test_devices_and_copies() -> None:
    values = np.arange(5, dtype=np.float32)
    default = Tensor(values)
    assert default.device == default_device()
    other = "CPU" if default.device == FAST_DEVICE else FAST_DEVICE
    moved = default.to(other)
    assert moved.device == other and moved.to(other) is moved and default.to(default.device) is default
    np.testing.assert_array_equal(moved.numpy(), values)
    assert Tensor(values, device="cpu").device == "CPU"  # canonical names
    assert Tensor(default, device=other).device == other
    with pytest.raises(ValueError, match="unknown device kind"):
        Tensor(values, device="NOSUCHDEVICE")
    with pytest.raises(TypeError, match="a device must be a str"):
        Tensor(values, device=3)  # type: ignore[arg-type]


def test_construction_errors() -> None:
    with pytest.raises(ValueError, match="ragged"):
        Tensor([[1, 2], [3]])
    with pytest.raises(TypeError, match="cannot build a Tensor from"):
        Tensor({"a": 1})
    with pytest.raises(TypeError, match="numpy dtype"):
        Tensor(np.array(["a", "b"]))
    with pytest.raises(TypeError, match="dtype must be a kiln DType"):
        Tensor([1.0], dtype=np.float32)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="requires_grad must be a bool"):
        Tensor([1.0], requires_grad=1)  # type: ignore[arg-type]


def test_detach_contiguous_and_realize() -> None:
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = Tensor(values, requires_grad=True)
    detached = x.detach()
    assert detached.requires_grad is False and detached.uop.op is Ops.DETACH
    np.testing.assert_array_equal(detached.numpy(), values)
    transposed = x._movement(Ops.PERMUTE, (1, 0)).contiguous()
    assert transposed.realize() is transposed
    np.testing.assert_array_equal(transposed.numpy(), values.T)


def test_primitive_builders_check_their_op() -> None:
    x = Tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="not a unary ALU op"):
        x._unary(Ops.ADD)
    with pytest.raises(ValueError, match="not a binary ALU op"):
        x._binary(Ops.NEG, x)
    with pytest.raises(ValueError, match="not a ternary ALU op"):
        x._ternary(Ops.ADD, x, x)
    with pytest.raises(ValueError, match="one shape"):
        x._binary(Ops.ADD, Tensor([1.0, 2.0, 3.0]))
    assert x._cast(dtypes.float32) is x and x._movement(Ops.RESHAPE, (2,)) is x and x._reduce(Ops.ADD, ()) is x


def test_requires_grad_propagates_unless_disabled() -> None:
    leaf = Tensor([1.0, 2.0], requires_grad=True)
    plain = Tensor([3.0, 4.0])
    assert leaf._binary(Ops.MUL, plain).requires_grad is True
    assert plain._binary(Ops.MUL, plain).requires_grad is None
    with no_grad():
        assert Tensor.no_grad is True
        assert leaf._binary(Ops.MUL, plain).requires_grad is None
    assert Tensor.no_grad is False


def test_realized_graph_is_kept_for_gradients() -> None:
    leaf = Tensor([1.0, 2.0], requires_grad=True)
    squared = leaf._binary(Ops.MUL, leaf)
    graph = squared.uop
    squared.realize()
    assert squared.uop is graph  # still the graph, for backward
    np.testing.assert_array_equal(squared.numpy(), [1.0, 4.0])


def test_assign() -> None:
    x = Tensor(np.zeros(3, np.float32))
    x.realize()
    buffer = x.data_buffer()
    assert x.assign(np.array([1, 2, 3], np.float32)) is x
    np.testing.assert_array_equal(x.numpy(), [1, 2, 3])
    assert x.data_buffer() is buffer
    x.assign(x._binary(Ops.MUL, const_like(x, 2.0)))
    np.testing.assert_array_equal(x.numpy(), [2, 4, 6])
    with pytest.raises(ValueError, match="assign: value shape"):
        x.assign(Tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="assign: value dtype"):
        x.assign(Tensor([1, 2, 3]))


def test_repr_is_lazy() -> None:
    x = Tensor(np.ones((2, 3), np.float32))
    text = repr(x._binary(Ops.ADD, x))
    assert text == f"<Tensor shape=(2, 3) dtype=dtypes.float32 device={x.device!r}>"
    assert "requires_grad=True" in repr(Tensor([1.0], requires_grad=True))


def test_repr_shows_the_values_of_small_realized_tensors() -> None:
    data = np.array([[1.5, -2.0], [0.25, 4.0]], np.float32)
    x = Tensor(data)
    assert repr(x) == f"<Tensor {data.tolist()} shape=(2, 2) dtype=dtypes.float32 device={x.device!r}>"
    doubled = x * 2.0
    assert "[" not in repr(doubled)  # lazy: nothing runs for repr
    doubled.realize()
    assert repr(doubled).startswith(f"<Tensor {(data * 2).tolist()} shape=(2, 2)")
    assert repr(Tensor.full((3,), 7)).startswith("<Tensor [7, 7, 7] shape=(3,) dtype=dtypes.int32")
    assert repr(Tensor(2.5)).startswith("<Tensor 2.5 shape=()")
    assert repr(Tensor([True, False])).startswith("<Tensor [True, False] shape=(2,)")
    # more than 16 elements: shape only
    assert repr(Tensor(np.arange(17.0))).startswith("<Tensor shape=(17,)")
