"""Bad inputs raise at the user's call (when the op is built, nothing is realized) with the right exception type and
a message that names the values involved."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from kiln.runtime import Device
from kiln.tensor.ops._checks import AxisError
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

DEVICE = "PYTHON"


pytestmark = pytest.mark.default_device(DEVICE)


def m34() -> Tensor:
    return Tensor.zeros(3, 4)


def ints() -> Tensor:
    return Tensor([1, 2, 3])


def flags() -> Tensor:
    return Tensor([True, False])


def pick_both() -> Any:
    return m34().sum(axis=0, dim=1)


# (id, the bad call, the exception type, fragments the message must contain)
CASES: list[tuple[str, Callable[[], Any], type[BaseException], list[str]]] = [
    # broadcasting and shapes
    ("add shapes", lambda: m34() + Tensor.zeros(5), ValueError, ["(3, 4)", "(5,)"]),
    ("mul shapes", lambda: Tensor.zeros(2, 3) * Tensor.zeros(3, 2), ValueError, ["(2, 3)", "(3, 2)"]),
    ("where shapes", lambda: (m34() > 0).where(Tensor.zeros(2), 1.0), ValueError, ["(3, 4)", "(2,)"]),
    ("reshape size", lambda: Tensor.zeros(2, 3).reshape(4, 2), ValueError, ["(2, 3)", "(4, 2)"]),
    ("reshape two unknown", lambda: m34().reshape(-1, -1), ValueError, ["(-1, -1)"]),
    ("reshape indivisible", lambda: Tensor.zeros(2, 3).reshape(4, -1), ValueError, ["(2, 3)", "(4, -1)"]),
    ("expand non-1", lambda: Tensor.zeros(3, 1).expand(4, 2), ValueError, ["(3, 1)", "(4, 2)"]),
    ("expand fewer dims", lambda: m34().expand(4), ValueError, ["(4,)", "(3, 4)"]),
    ("permute repeat", lambda: m34().permute(0, 0), ValueError, ["(0, 0)"]),
    ("permute length", lambda: m34().permute(1, 0, 2), ValueError, ["(1, 0, 2)", "2 dims"]),
    ("shrink bounds", lambda: m34().shrink(((0, 5), None)), ValueError, ["(0, 5)", "(3, 4)"]),
    ("flatten order", lambda: Tensor.zeros(2, 3, 4).flatten(2, 1), ValueError, ["2", "1", "(2, 3, 4)"]),
    ("unflatten sizes", lambda: m34().unflatten(1, (3, 2)), ValueError, ["4", "(3, 2)"]),
    ("repeat counts", lambda: m34().repeat(2), ValueError, ["(2,)", "(3, 4)"]),
    ("tril of a vector", lambda: ints().tril(), ValueError, ["tril", "(3,)"]),
    ("flip repeat", lambda: m34().flip(0, -2), ValueError, ["(0, -2)"]),
    # axes
    ("sum axis range", lambda: m34().sum(axis=2), AxisError, ["2", "(3, 4)"]),
    ("sum axis negative range", lambda: m34().sum(axis=-3), AxisError, ["-3", "(3, 4)"]),
    ("sum axis repeat", lambda: m34().sum(axis=(0, -2)), ValueError, ["(0, -2)", "(3, 4)"]),
    ("sum axis float", lambda: m34().sum(axis=1.5), TypeError, ["1.5"]),  # type: ignore[arg-type]
    ("axis and dim", pick_both, TypeError, ["axis=0", "dim=1"]),
    ("softmax axis", lambda: m34().softmax(5), IndexError, ["5", "(3, 4)"]),
    ("transpose dim", lambda: m34().transpose(0, 3), IndexError, ["3", "(3, 4)"]),
    ("unsqueeze dim", lambda: m34().unsqueeze(4), IndexError, ["4"]),
    ("cumsum axis", lambda: ints().cumsum(1), IndexError, ["1", "(3,)"]),
    # reductions
    ("max of empty", lambda: Tensor.zeros(0, 3).max(), ValueError, ["max", "(0, 3)"]),
    ("argmax of empty", lambda: Tensor.zeros(2, 0).argmax(1), ValueError, ["argmax", "(2, 0)"]),
    ("mean of ints", lambda: ints().mean(), TypeError, ["mean", "dtypes.int32"]),
    ("var of ints", lambda: ints().var(), TypeError, ["var", "dtypes.int32"]),
    # dtypes
    ("bitwise float", lambda: m34() & 1, TypeError, ["bitwise_and", "dtypes.float32"]),
    ("shift bool", lambda: flags() << flags(), TypeError, ["lshift", "dtypes.bool"]),
    ("shift float", lambda: ints() << 1.5, TypeError, ["lshift", "dtypes.float32"]),
    ("invert float", lambda: ~m34(), TypeError, ["bitwise_not", "dtypes.float32"]),
    ("negate bool", lambda: -flags(), TypeError, ["bool"]),
    ("subtract bools", lambda: flags() - flags(), TypeError, ["bool"]),
    ("int negative power", lambda: ints() ** -2, RuntimeError, ["-2"]),  # torch raises RuntimeError
    ("div rounding", lambda: ints().div(2, rounding_mode="round"), ValueError, ["'round'", "'floor'"]),
    (
        "uint64 with int8",
        lambda: Tensor([1], dtype=dtypes.uint64) + Tensor([1], dtype=dtypes.int8),
        TypeError,
        ["uint64", "int8"],
    ),
    ("bitcast size", lambda: m34().bitcast(dtypes.int16), TypeError, ["dtypes.float32", "dtypes.int16"]),
    ("cast to a name", lambda: m34().cast("float33"), TypeError, ["'float33'"]),  # type: ignore[arg-type]
    ("cast to a number", lambda: m34().cast(5), TypeError, ["5"]),  # type: ignore[arg-type]
    ("operand list", lambda: ints().add([1, 2, 3]), TypeError, ["[1, 2, 3]", "list"]),  # type: ignore[arg-type]
    ("operand string", lambda: ints() * "2", TypeError, ["'2'", "str"]),  # type: ignore[operator]
    ("masked_fill dtype", lambda: ints().masked_fill(Tensor([1, 0, 1]), 0), TypeError, ["dtypes.int32"]),
    ("masked_fill grows", lambda: ints().masked_fill(Tensor([[True], [False]]), 0), ValueError, ["(2, 1)", "(3,)"]),
    (
        "masked_fill value",
        lambda: ints().masked_fill(Tensor([True, False, True]), Tensor([1, 2])),
        ValueError,
        ["(2,)"],
    ),
    ("clamp nothing", lambda: ints().clamp(), ValueError, ["min", "max"]),
    (
        "inf into int8",
        lambda: Tensor([1], dtype=dtypes.int8).masked_fill(Tensor([True]), float("inf")),
        ValueError,
        ["inf", "dtypes.int8"],
    ),
    # devices
    ("add devices", lambda: ints() + Tensor([1, 2, 3], device="CPU"), ValueError, ["'PYTHON'", "'CPU'"]),
    ("cat devices", lambda: ints().cat(Tensor([1], device="CPU")), ValueError, ["PYTHON", "CPU"]),
    ("gather devices", lambda: m34().gather(0, Tensor([[0]], device="CPU")), ValueError, ["PYTHON", "CPU"]),
    # joining and splitting
    ("cat shapes", lambda: m34().cat(Tensor.zeros(3, 5)), ValueError, ["(3, 5)", "(3, 4)", "dim 0"]),
    ("cat 0-dim", lambda: Tensor(1.0).cat(Tensor(2.0)), ValueError, ["0-dim"]),
    ("cat non-tensor", lambda: ints().cat([4, 5]), TypeError, ["list", "position 1"]),  # type: ignore[arg-type]
    ("stack shapes", lambda: ints().stack(Tensor([1, 2])), ValueError, ["(3,)", "(2,)"]),
    ("split sizes", lambda: ints().split([1, 1]), ValueError, ["[1, 1]", "3"]),
    ("split size zero", lambda: ints().split(0), ValueError, ["0"]),
    ("chunk zero", lambda: ints().chunk(0), ValueError, ["0"]),
    # padding
    ("pad mode", lambda: ints().pad((1, 1), mode="wrap"), ValueError, ["'wrap'", "'reflect'"]),
    ("pad odd", lambda: m34().pad((1, 1, 1)), ValueError, ["(1, 1, 1)", "(3, 4)"]),
    ("pad too many", lambda: ints().pad((1, 1, 1, 1)), ValueError, ["(1, 1, 1, 1)", "(3,)"]),
    ("pad reflect size", lambda: ints().pad((3, 0), mode="reflect"), ValueError, ["(3, 0)", "3"]),
    # negative amounts crop first (PyTorch's F.pad), but not more than the dim holds
    ("pad replicate crop", lambda: ints().pad((-4, 0), mode="replicate"), ValueError, ["-4", "(3,)"]),
    ("pad per-dim count", lambda: m34().pad(((1, 1),)), ValueError, ["(3, 4)"]),
    # indexing
    ("index range", lambda: Tensor.zeros(4, 5)[5], IndexError, ["5", "size 4"]),
    ("index negative range", lambda: Tensor.zeros(4, 5)[:, -6], IndexError, ["-6", "size 5"]),
    ("too many indices", lambda: m34()[0, 0, 0], IndexError, ["(3, 4)", "3 dims"]),
    ("two ellipses", lambda: m34()[..., 0, ...], IndexError, ["ellipsis"]),
    ("float index", lambda: m34()[1.5], TypeError, ["1.5", "float"]),
    ("float index tensor", lambda: m34()[Tensor([0.0, 1.0])], TypeError, ["dtypes.float32"]),
    ("bool scalar index", lambda: m34()[True], TypeError, ["True"]),
    ("mask shape", lambda: m34()[Tensor([True, False])], IndexError, ["(2,)", "(3,)"]),
    ("list index range", lambda: m34()[[0, 3]], IndexError, ["3", "size 3"]),
    ("index broadcast", lambda: m34()[Tensor([0, 1]), Tensor([0, 1, 2])], IndexError, ["(2,)", "(3,)"]),
    ("slice step zero", lambda: m34()[::0], ValueError, ["zero"]),
    ("slice float", lambda: m34()[0.5:], TypeError, ["0.5"]),
    ("gather ndim", lambda: m34().gather(0, Tensor([0, 1])), ValueError, ["(2,)", "2 dims"]),
    ("gather float index", lambda: m34().gather(0, Tensor([[0.0]])), TypeError, ["dtypes.float32"]),
    (
        "gather index shape",
        lambda: m34().gather(0, Tensor.zeros(2, 5, dtype=dtypes.int32)),
        ValueError,
        ["(2, 5)", "(3, 4)"],
    ),
    ("scatter reduce", lambda: m34().scatter(0, Tensor([[0]]), 1.0, reduce="mean"), ValueError, ["'mean'"]),
    ("scatter source", lambda: m34().scatter(0, Tensor([[0, 1]]), Tensor([[1.0]])), ValueError, ["(1, 1)", "(1, 2)"]),
    # creation
    ("zeros negative", lambda: Tensor.zeros(2, -3), ValueError, ["(2, -3)"]),
    ("zeros float", lambda: Tensor.zeros(2.5), TypeError, ["2.5"]),  # type: ignore[arg-type]
    ("arange step", lambda: Tensor.arange(0, 5, 0), ValueError, ["step", "zero"]),
    ("arange bool", lambda: Tensor.arange(True), TypeError, ["True"]),
    ("rand int dtype", lambda: Tensor.rand(3, dtype=dtypes.int32), TypeError, ["rand", "dtypes.int32"]),
    ("randint range", lambda: Tensor.randint(3, low=5, high=5), ValueError, ["low=5", "high=5"]),
    (
        "randint dtype",
        lambda: Tensor.randint(3, low=0, high=300, dtype=dtypes.uint8),
        ValueError,
        ["300", "dtypes.uint8"],
    ),
    ("eye negative", lambda: Tensor.eye(-1), ValueError, ["n=-1"]),
    ("linspace steps", lambda: Tensor.linspace(0, 1, -2), ValueError, ["-2"]),
    ("manual_seed float", lambda: Tensor.manual_seed(1.5), TypeError, ["1.5"]),  # type: ignore[arg-type]
    ("int floor division by 0", lambda: ints() // 0, ZeroDivisionError, ["floor_divide", "dtypes.int32"]),
    ("int remainder by 0", lambda: ints() % 0, RuntimeError, ["remainder", "divisor 0"]),
    ("int trunc division by 0", lambda: ints().div(0, rounding_mode="trunc"), RuntimeError, ["div", "divisor 0"]),
    ("normal negative std", lambda: Tensor.normal(3, std=-0.5), ValueError, ["std=-0.5"]),
    ("uniform reversed", lambda: Tensor.uniform(3, low=2.0, high=1.0), ValueError, ["low=2.0", "high=1.0"]),
    ("uniform bound type", lambda: Tensor.uniform(3, low="0"), TypeError, ["'0'", "str"]),
    ("int requires grad", lambda: Tensor([1, 2], requires_grad=True), RuntimeError, ["dtypes.int32"]),
    ("int zeros requires grad", lambda: Tensor.zeros(2, dtype=dtypes.int8, requires_grad=True), RuntimeError, ["int8"]),
    (
        "full inf int",
        lambda: Tensor.full((2,), float("-inf"), dtype=dtypes.int32),
        ValueError,
        ["-inf", "dtypes.int32"],
    ),
    # activations and misc
    ("hardtanh bounds", lambda: m34().hardtanh(2.0, 1.0), ValueError, ["2.0", "1.0"]),
    ("gelu mode", lambda: m34().gelu("erf"), ValueError, ["'erf'"]),
    ("softplus beta", lambda: m34().softplus(beta=0), ValueError, ["beta"]),
]


@pytest.mark.parametrize(("call", "error", "fragments"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_raises_naming_the_values(
    call: Callable[[], Any], error: type[BaseException], fragments: list[str]
) -> None:
    with pytest.raises(error) as raised:
        call()
    message = str(raised.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_axis_error_is_both_index_and_value_error() -> None:
    with pytest.raises(IndexError):
        m34().max(axis=7)
    with pytest.raises(ValueError, match="7"):
        m34().max(axis=7)


def test_truth_value_of_many_elements() -> None:
    with pytest.raises(RuntimeError, match=r"3 elements.*\(3,\)"):
        bool(ints())
    with pytest.raises(TypeError, match="0-dim"):
        len(Tensor(1))


def test_setitem_value_shape() -> None:
    x = Tensor(np.zeros((3, 4), np.float32)).realize()
    with pytest.raises(ValueError, match=r"\(2,\).*\(3, 4\)"):
        x[:] = Tensor([1.0, 2.0])
    with pytest.raises(ValueError, match=r"'CPU'.*'PYTHON'"):
        x[0] = Tensor([1.0, 2.0, 3.0, 4.0], device="CPU")


def test_errors_do_not_realize_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    import kiln.tensor.tensor as tensor_module

    def refuse(*_: Any) -> Any:
        raise AssertionError("an argument check realized a tensor")

    monkeypatch.setattr(tensor_module, "realize_uops", refuse)
    for _, call, error, _ in CASES:
        with pytest.raises(error):
            call()


# ---------------------------------------------------------------------------------------------------------------
# dtypes a device cannot store fail at the call that asks for them
# ---------------------------------------------------------------------------------------------------------------

_NARROW = frozenset({dtypes.bool, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.float32})

DTYPE_CASES: list[tuple[str, Callable[[], Any], str]] = [
    ("host data", lambda: Tensor([1.0, 2.0], dtype=dtypes.float64), "float64"),
    ("numpy float64", lambda: Tensor(np.zeros(2)), "float64"),
    ("scalar", lambda: Tensor(2.0, dtype=dtypes.float16), "float16"),
    ("scalar int64", lambda: Tensor(5, dtype=dtypes.int64), "int64"),
    ("tensor with dtype", lambda: Tensor(Tensor([1.0]), dtype=dtypes.float64), "float64"),
    ("zeros", lambda: Tensor.zeros(3, dtype=dtypes.float64), "float64"),
    ("full", lambda: Tensor.full((2,), 1, dtype=dtypes.int8), "int8"),
    ("empty", lambda: Tensor.empty(2, dtype=dtypes.uint8), "uint8"),
    ("arange", lambda: Tensor.arange(4, dtype=dtypes.int64), "int64"),
    ("linspace", lambda: Tensor.linspace(0, 1, 3, dtype=dtypes.float64), "float64"),
    ("eye", lambda: Tensor.eye(2, dtype=dtypes.float16), "float16"),
    ("rand", lambda: Tensor.rand(3, dtype=dtypes.float64), "float64"),
    ("randn", lambda: Tensor.randn(3, dtype=dtypes.float16), "float16"),
    ("randint", lambda: Tensor.randint(3, low=0, high=4, dtype=dtypes.int8), "int8"),
    ("zeros_like", lambda: Tensor([1.0]).zeros_like(dtype=dtypes.float64), "float64"),
    ("randint_like", lambda: Tensor([1, 2]).randint_like(5, dtype=dtypes.int64), "int64"),
    ("cast", lambda: Tensor([1.0]).cast(dtypes.float64), "float64"),
    ("double", lambda: Tensor([1.0]).double(), "float64"),
    ("bitcast", lambda: Tensor([1, 2], dtype=dtypes.int16).bitcast(dtypes.float16), "float16"),
]


@pytest.fixture
def narrow_device() -> Iterator[None]:
    # the PYTHON device pretends to store only five dtypes
    device = Device[DEVICE]
    saved = device.supported_dtypes
    device.supported_dtypes = _NARROW
    try:
        yield
    finally:
        device.supported_dtypes = saved


@pytest.mark.parametrize(("call", "dtype_name"), [case[1:] for case in DTYPE_CASES], ids=[c[0] for c in DTYPE_CASES])
def test_unsupported_dtype_fails_at_creation(narrow_device: None, call: Callable[[], Any], dtype_name: str) -> None:
    with pytest.raises(TypeError) as raised:
        call()
    message = str(raised.value)
    assert f"device {DEVICE!r}" in message and f"dtypes.{dtype_name}" in message, message
    assert "float32" in message  # what the device does support


def test_supported_dtypes_still_work_on_a_narrow_device(narrow_device: None) -> None:
    assert Tensor.arange(4, dtype=dtypes.int32).tolist() == [0, 1, 2, 3]
    assert Tensor([1.5, 2.5]).cast(dtypes.int32).tolist() == [1, 2]
    assert Tensor([1.0]).bitcast(dtypes.uint32).tolist() == [1065353216]


def test_moving_to_a_device_that_cannot_store_the_dtype() -> None:
    data = Tensor(np.arange(3.0), device="CPU")
    device = Device[DEVICE]
    saved = device.supported_dtypes
    device.supported_dtypes = _NARROW
    try:
        with pytest.raises(TypeError, match=r"device 'PYTHON' cannot store dtypes\.float64"):
            data.to(DEVICE)
    finally:
        device.supported_dtypes = saved
