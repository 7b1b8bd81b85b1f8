"""get_state_dict / get_parameters / load_state_dict against hand-built objects and torch's error formats."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, dtypes
from kiln.tensor.state import IncompatibleKeys, get_parameters, get_state_dict, load_state_dict


class Linear:
    def __init__(self, fan_in: int, fan_out: int) -> None:
        self.weight = Tensor(np.arange(fan_in * fan_out, dtype=np.float32).reshape(fan_out, fan_in))
        self.bias = Tensor(np.zeros(fan_out, dtype=np.float32))
        self.name = "linear"  # a non-tensor attribute: skipped
        self._cache = Tensor([1.0])  # private: skipped


class Model:
    def __init__(self) -> None:
        self.layers = [Linear(2, 3), Linear(3, 1)]
        self.norms = {"first": Tensor([1.0, 1.0, 1.0])}
        self.pair = (Tensor([7], dtype=dtypes.int32),)
        self.activation = np.tanh  # a function: skipped


def test_names_follow_the_walk() -> None:
    model = Model()
    state = get_state_dict(model)
    assert list(state) == [
        "layers.0.weight",
        "layers.0.bias",
        "layers.1.weight",
        "layers.1.bias",
        "norms.first",
        "pair.0",
    ]
    assert state["layers.1.weight"] is model.layers[1].weight
    assert list(get_state_dict(model.layers[0], prefix="encoder.")) == ["encoder.weight", "encoder.bias"]
    leaf = Tensor([1.0])
    assert get_state_dict(leaf, prefix="x") == {"x": leaf}


def test_cycles_and_shared_tensors() -> None:
    model = Model()
    model.parent = model  # type: ignore[attr-defined]  # a cycle back to the root
    shared = model.layers[0].weight
    model.tied = shared  # type: ignore[attr-defined]
    state = get_state_dict(model)
    assert state["tied"] is shared and state["layers.0.weight"] is shared
    assert not any(name.startswith("parent") for name in state)
    params = get_parameters(model)
    assert len(params) == len(state) - 1
    assert sum(p is shared for p in params) == 1


def test_load_writes_in_place_with_cast() -> None:
    model = Model()
    weight = model.layers[0].weight
    new_weight = np.random.default_rng(0).standard_normal((3, 2))  # float64 source: cast to float32 like torch
    result = load_state_dict(
        model,
        {
            "layers.0.weight": Tensor(new_weight),
            "layers.0.bias": np.array([1.0, 2.0, 3.0], dtype=np.float32),
            "layers.1.weight": Tensor(np.ones((1, 3), dtype=np.float32)),
            "layers.1.bias": Tensor([5.0]),
            "norms.first": Tensor([2, 3, 4], dtype=dtypes.int32),
            "pair.0": Tensor([9.7]),
        },
    )
    assert result == IncompatibleKeys([], [])
    assert model.layers[0].weight is weight and weight.dtype == dtypes.float32
    np.testing.assert_array_equal(weight.numpy(), new_weight.astype(np.float32))
    np.testing.assert_array_equal(model.layers[0].bias.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(model.norms["first"].numpy(), [2.0, 3.0, 4.0])
    assert model.pair[0].dtype == dtypes.int32 and model.pair[0].tolist() == [9]  # float -> int truncates


def test_strict_errors_are_reported_together() -> None:
    model = Linear(2, 3)
    bad = {"weight": Tensor(np.zeros((2, 3), dtype=np.float32)), "extra": Tensor([1.0]), "more": Tensor([2.0])}
    with pytest.raises(RuntimeError) as info:
        load_state_dict(model, bad)
    assert str(info.value) == (
        "Error(s) in loading state_dict for Linear:\n"
        '\tMissing key(s) in state_dict: "bias". \n'
        '\tUnexpected key(s) in state_dict: "extra", "more". \n'
        "\tsize mismatch for weight: copying a param with shape [2, 3] from checkpoint, the shape in current "
        "model is [3, 2]."
    )
    np.testing.assert_array_equal(model.weight.numpy(), np.arange(6).reshape(3, 2))  # nothing was written


def test_non_tensor_value_is_an_error() -> None:
    model = Linear(1, 1)
    with pytest.raises(RuntimeError, match='While copying the parameter named "bias", expected a Tensor or numpy'):
        load_state_dict(model, {"weight": Tensor([[1.0]]), "bias": [3.0]})


def test_not_strict_returns_the_keys_and_consume_pops() -> None:
    model = Linear(1, 2)
    state: dict[str, Any] = {"weight": Tensor([[4.0], [5.0]]), "unused": Tensor([0.0])}
    missing, unexpected = load_state_dict(model, state, strict=False, consume=True)
    assert (missing, unexpected) == (["bias"], ["unused"])
    assert list(state) == ["unused"]
    np.testing.assert_array_equal(model.weight.numpy(), [[4.0], [5.0]])
    with pytest.raises(RuntimeError, match=r"size mismatch for weight: copying a param with shape \[2\]"):
        load_state_dict(model, {"weight": Tensor([1.0, 2.0])}, strict=False)


def test_round_trip_between_models() -> None:
    source, target = Model(), Model()
    for tensor in get_parameters(source):
        tensor.assign(tensor + 1).realize()
    load_state_dict(target, get_state_dict(source))
    for name, tensor in get_state_dict(target).items():
        np.testing.assert_array_equal(tensor.numpy(), get_state_dict(source)[name].numpy(), err_msg=name)
