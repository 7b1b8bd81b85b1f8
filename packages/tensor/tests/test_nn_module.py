"""kiln.tensor.nn.Module: state-dict naming (PyTorch's names, plain classes), parameters vs buffers,
load_state_dict in place with every error at once, train / eval, children / modules, zero_grad."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tensor import Tensor, nn
from kiln.tensor.state import get_parameters, get_state_dict
from kiln.uops import dtypes

pytestmark = pytest.mark.default_device("PYTHON")


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.bn(self.conv(x)))


def test_sequential_names_match_pytorch() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)))
    assert list(model.state_dict()) == [
        "0.weight",
        "0.bias",
        "2.0.weight",
        "2.0.bias",
        "2.1.weight",
        "2.1.bias",
        "2.1.running_mean",
        "2.1.running_var",
        "2.1.num_batches_tracked",
    ]
    assert [name for name, _ in model.named_parameters()] == [
        "0.weight",
        "0.bias",
        "2.0.weight",
        "2.0.bias",
        "2.1.weight",
        "2.1.bias",
    ]
    assert [name for name, _ in model.named_buffers()] == [
        "2.1.running_mean",
        "2.1.running_var",
        "2.1.num_batches_tracked",
    ]
    assert model[2][1].num_batches_tracked.dtype == dtypes.int64
    assert len(model) == 3 and isinstance(model[-1], nn.Sequential)
    with pytest.raises(IndexError, match="out of range"):
        model[3]


def test_plain_class_model_works_with_the_state_walk() -> None:
    class Plain:  # tinygrad style: attributes and lists of layers, no base class
        def __init__(self) -> None:
            self.layers = [nn.Linear(2, 2), nn.Linear(2, 1)]
            self.scale = Tensor([2.0])
            self.settings = {"head": nn.Linear(1, 1), "name": "x"}
            self._private = Tensor([0.0])
            self.count = 3

    model = Plain()
    names = list(get_state_dict(model))
    assert names == [
        "layers.0.weight",
        "layers.0.bias",
        "layers.1.weight",
        "layers.1.bias",
        "scale",
        "settings.head.weight",
        "settings.head.bias",
    ]
    assert get_parameters(model)[0] is model.layers[0].weight
    shared = nn.Linear(2, 2)
    model.layers = [shared, shared]  # a tensor reached twice is one parameter
    assert len(get_parameters(model)) == 2 + 1 + 2


def test_load_state_dict_writes_in_place() -> None:
    source, target = Block(), Block()
    weight_before = target.conv.weight
    target.load_state_dict(source.state_dict())
    assert target.conv.weight is weight_before  # same tensor object, new values
    for name, tensor in source.state_dict().items():
        np.testing.assert_array_equal(target.state_dict()[name].numpy(), tensor.numpy(), err_msg=name)
    assert target.conv.weight.requires_grad is True


def test_load_state_dict_reports_every_problem_at_once() -> None:
    model = Block()
    state = dict(model.state_dict())
    del state["bn.running_var"]
    state["extra.weight"] = Tensor([1.0])
    state["conv.bias"] = Tensor(np.zeros(3, np.float32))
    state["bn.num_batches_tracked"] = Tensor(np.zeros((), np.float32))
    with pytest.raises(RuntimeError) as error:
        model.load_state_dict(state)
    message = str(error.value)
    # PyTorch's format; a dtype difference is no error (the value is cast, as torch's copy_ does)
    for expected in (
        "Error(s) in loading state_dict for Block:",
        'Missing key(s) in state_dict: "bn.running_var"',
        'Unexpected key(s) in state_dict: "extra.weight"',
        "size mismatch for conv.bias: copying a param with shape [3] from checkpoint, the shape in current model is "
        "[2]",
    ):
        assert expected in message, (expected, message)
    assert "num_batches_tracked" not in message
    # strict=False ignores missing / unexpected keys but not mismatches
    with pytest.raises(RuntimeError, match=r"conv\.bias"):
        model.load_state_dict(state, strict=False)
    del state["conv.bias"], state["bn.num_batches_tracked"]
    model.load_state_dict(state, strict=False)


def test_train_eval_reach_every_submodule() -> None:
    model = nn.Sequential(Block(), nn.Dropout(0.5))
    assert all(module.training for module in model.modules())
    assert model.eval() is model
    assert not any(module.training for module in model.modules())
    x = Tensor(np.ones((1, 1, 4, 4), np.float32))
    np.testing.assert_array_equal(model(x).numpy(), model(x).numpy())  # no dropout, running statistics
    model.train()
    assert model[0].bn.training and model[1].training
    assert [type(m).__name__ for m in model.modules()] == [
        "Sequential",
        "Block",
        "Conv2d",
        "BatchNorm2d",
        "Dropout",
        "Dropout",
    ]
    assert [type(m).__name__ for m in model[0].children()] == ["Conv2d", "BatchNorm2d", "Dropout"]


def test_zero_grad_and_parameters() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))
    model(Tensor(np.ones((3, 2), np.float32))).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    assert len(model.parameters()) == 4
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(Tensor([1.0]))
    with pytest.raises(TypeError, match="callable"):
        nn.Sequential(nn.Linear(1, 1), 3)  # type: ignore[arg-type]
