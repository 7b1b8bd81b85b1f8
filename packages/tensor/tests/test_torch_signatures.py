"""The signatures of functions written once for several torch names: the creation functions' shared keyword-only
options (`TensorOptions`), the 1-d / 2-d / 3-d siblings made by `dimensioned`, the `*_with_indices` pools and
LSTM / GRU's shared constructor. The expected parameter names are PyTorch's (its documented signatures, as
torch 2's `inspect.signature` and docstrings give them); what kiln leaves out of torch's (out=, layout=, ...) is
absent here too."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, dtypes, nn
from kiln.tensor.nn import functional as F
from kiln.tensor.ops.dimensioned import dimensioned

OPTIONS = ["dtype", "device", "requires_grad"]


def _names(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


def _keyword_only(function: Callable[..., Any]) -> list[str]:
    parameters = inspect.signature(function).parameters.values()
    return [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]


@pytest.mark.parametrize(
    ("name", "leading"),
    [
        ("empty", ["shape"]),
        ("zeros", ["shape"]),
        ("ones", ["shape"]),
        ("rand", ["shape"]),
        ("randn", ["shape"]),
        ("randint", ["shape", "low", "high"]),
        ("arange", ["start", "stop", "step"]),
        ("linspace", ["start", "end", "steps"]),
        ("scaled_uniform", ["shape"]),
        ("kaiming_uniform", ["shape", "a"]),
        ("xavier_normal", ["shape", "gain"]),
    ],
)
def test_creation_functions_show_torchs_keyword_only_options(name: str, leading: list[str]) -> None:
    function = getattr(Tensor, name)
    assert _names(function) == [*leading, *OPTIONS]
    assert _keyword_only(function)[-3:] == OPTIONS
    assert all(inspect.signature(function).parameters[option].default is None for option in OPTIONS)


@pytest.mark.parametrize("name", ["ones_like", "empty_like", "rand_like", "randn_like", "full_like"])
def test_like_functions_take_the_options_by_keyword(name: str) -> None:
    function = getattr(Tensor.zeros(2), name)
    assert _keyword_only(function) == OPTIONS
    arguments = (3,) if name == "full_like" else ()
    made = function(*arguments, dtype=dtypes.float64, requires_grad=True)
    assert made.dtype == dtypes.float64 and made.requires_grad is True and made.shape == (2,)


def test_an_unknown_creation_keyword_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="zeros\\(\\) got an unexpected keyword argument 'dtyp'"):
        Tensor.zeros(2, dtyp=dtypes.int32)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'devices'"):
        Tensor.zeros(2).ones_like(devices="CPU")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'gains'"):
        Tensor.xavier_uniform(2, 2, gains=2.0)  # type: ignore[call-arg]


def test_options_reach_the_result() -> None:
    ones = Tensor.ones(2, dtype=dtypes.int32)
    assert ones.dtype == dtypes.int32 and ones.tolist() == [1, 1]
    assert Tensor.zeros(2).dtype == dtypes.default_float
    assert Tensor.randint(50, low=3, high=5, dtype=dtypes.int16).dtype == dtypes.int16
    weight = Tensor.kaiming_normal(8, 4, a=0.0, dtype=dtypes.float64, requires_grad=True)
    assert weight.dtype == dtypes.float64 and weight.requires_grad is True
    values = Tensor([1, 2, 3]).randint_like(4, 6, dtype=dtypes.float32).numpy()
    assert values.dtype == np.float32 and set(values.tolist()) <= {4.0, 5.0}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("max_unpool1d", ["indices", "kernel_size", "stride", "padding", "output_size"]),
        ("max_unpool3d", ["indices", "kernel_size", "stride", "padding", "output_size"]),
        ("max_pool1d", ["kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"]),
        ("max_pool3d", ["kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"]),
        ("lp_pool2d", ["norm_type", "kernel_size", "stride", "ceil_mode"]),
    ],
)
def test_dimensioned_methods_show_torchs_parameters(name: str, expected: list[str]) -> None:
    method = getattr(Tensor, name)
    assert method.__name__ == name
    assert _names(method) == ["self", *expected]
    assert _names(getattr(Tensor.zeros(1, 1, 2), name)) == expected


def test_dimensioned_passes_its_dims_and_refuses_a_misnamed_implementation() -> None:
    def _count_nd(self: object, dims: int, scale: int = 1) -> int:
        return dims * scale

    count2d = dimensioned(_count_nd, 2, "twice")
    assert count2d.__name__ == "count2d" and count2d.__doc__ == "twice"
    assert count2d(None, scale=5) == 10 and _names(count2d) == ["self", "scale"]

    def _count(self: object, dims: int) -> int:
        return dims

    with pytest.raises(ValueError, match="'_count'"):
        dimensioned(_count, 1, "")


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        (F.max_pool1d_with_indices, ["input", "kernel_size", "stride", "padding", "dilation", "ceil_mode"]),
        (F.max_pool2d_with_indices, ["input", "kernel_size", "stride", "padding", "dilation", "ceil_mode"]),
        (F.adaptive_max_pool2d_with_indices, ["input", "output_size"]),
    ],
)
def test_with_indices_functions_show_torchs_parameters(function: Callable[..., Any], expected: list[str]) -> None:
    assert _names(function) == [*expected, "return_indices"]
    assert function.__name__.endswith("_with_indices")


def test_with_indices_functions_return_the_indices_whatever_return_indices_says() -> None:
    x = Tensor([[[1.0, 5.0, 2.0, 7.0]]])
    for return_indices in (False, True):
        values, indices = F.max_pool1d_with_indices(x, 2, return_indices=return_indices)
        assert values.tolist() == [[[5.0, 7.0]]] and indices.tolist() == [[[1, 3]]]
    values, indices = F.adaptive_max_pool1d_with_indices(x, 1)
    assert values.tolist() == [[[7.0]]] and indices.tolist() == [[[3]]]


def test_lstm_and_gru_take_torchs_rnnbase_arguments() -> None:
    expected = ["input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout", "bidirectional"]
    for kind in (nn.LSTM, nn.GRU):
        assert _names(kind)[: len(expected)] == expected
        assert "proj_size" in _names(kind) and "device" in _names(kind)
    assert nn.GRU(3, 4).mode == "GRU" and nn.LSTM(3, 4, proj_size=2).mode == "LSTM"
    with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
        nn.GRU(3, 4, proj_size=2)
