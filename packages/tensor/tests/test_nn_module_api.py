"""The torch.nn.Module API of kiln's `Module` (issue 38): forward hooks and pre-hooks (order, replacement, removal),
buffers (persistent or not), registration, named_modules / children / apply, train / eval propagation into every
container and the recurrent and transformer layers, load_state_dict(strict=False), requires_grad_, to(dtype),
get_submodule / get_parameter, and repr. Expected names and reprs are torch 2.13's, printed by torch."""

from __future__ import annotations

import doctest
import importlib
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, nn
from kiln.uops import dtypes

pytestmark = pytest.mark.default_device("PYTHON")


def test_forward_hooks_run_in_order_and_replace_values() -> None:
    layer = nn.Linear(2, 2)
    calls: list[str] = []

    def pre_a(module: nn.Module, args: tuple[Any, ...]) -> None:
        calls.append("pre_a")

    def pre_double(module: nn.Module, args: tuple[Any, ...]) -> Tensor:
        calls.append("pre_double")
        return args[0] * 2  # a single value replaces the arguments

    def post_a(module: nn.Module, args: tuple[Any, ...], output: Tensor) -> None:
        calls.append("post_a")

    def post_negate(module: nn.Module, args: tuple[Any, ...], output: Tensor) -> Tensor:
        calls.append("post_negate")
        return -output

    x = Tensor(np.array([[1.0, -2.0]], np.float32))
    plain = layer(x).numpy()
    handles = [
        layer.register_forward_pre_hook(pre_double),
        layer.register_forward_pre_hook(pre_a, prepend=True),
        layer.register_forward_hook(post_a),
        layer.register_forward_hook(post_negate),
    ]
    out = layer(x).numpy()
    assert calls == ["pre_a", "pre_double", "post_a", "post_negate"]
    weight, bias = layer.weight.numpy(), layer.bias.numpy()
    np.testing.assert_allclose(out, -((2 * x.numpy()) @ weight.T + bias), rtol=1e-6)
    for handle in handles:
        handle.remove()
    handles[0].remove()  # a second remove does nothing
    calls.clear()
    np.testing.assert_allclose(layer(x).numpy(), plain)
    assert calls == []


def test_hooks_with_kwargs_and_handle_as_context_manager() -> None:
    attention = nn.MultiheadAttention(4, 2)
    seen: dict[str, Any] = {}

    def pre(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return args, {**kwargs, "need_weights": False}

    def post(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        seen["kwargs"] = dict(kwargs)
        seen["weights"] = output[1]

    x = Tensor(np.ones((3, 1, 4), np.float32))
    with (
        attention.register_forward_pre_hook(pre, with_kwargs=True),
        attention.register_forward_hook(post, with_kwargs=True),
    ):
        attention(x, x, x, need_weights=True)
    assert seen == {"kwargs": {"need_weights": False}, "weights": None}
    assert attention(x, x, x)[1] is not None  # hooks gone after the with block
    with pytest.raises(TypeError, match="callable"):
        attention.register_forward_hook(3)  # type: ignore[arg-type]


def test_non_persistent_buffers_stay_out_of_the_state_dict() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(2, 2)
            self.register_buffer("scale", Tensor([2.0]))
            self.register_buffer("cache", Tensor([0.0, 0.0]), persistent=False)

        def forward(self, x: Tensor) -> Tensor:
            return self.linear(x) * self.scale + self.cache

    model = nn.Sequential(Scaled())
    assert list(model.state_dict()) == ["0.linear.weight", "0.linear.bias", "0.scale"]
    assert [name for name, _ in model.named_buffers()] == ["0.scale", "0.cache"]
    assert [name for name, _ in model.named_parameters()] == ["0.linear.weight", "0.linear.bias"]
    state = {name: Tensor(np.full(t.shape, 3.0, np.float32)) for name, t in model.state_dict().items()}
    assert model.load_state_dict(state) == ([], [])  # the non-persistent buffer is not missing
    assert model[0].scale.tolist() == [3.0]
    model[0].register_buffer("cache", Tensor([1.0, 1.0]), persistent=True)
    assert "0.cache" in model.state_dict()
    with pytest.raises(TypeError, match="buffer 'bad'"):
        model[0].register_buffer("bad", [1.0])  # type: ignore[arg-type]
    with pytest.raises(KeyError, match=r'contain "\."'):
        model[0].register_buffer("a.b", Tensor([1.0]))


def test_register_parameter_and_module() -> None:
    module = nn.Module()
    module.register_parameter("scale", Tensor([1.0, 2.0]))
    module.add_module("inner", nn.Linear(2, 1))
    module.register_module("none", None)
    assert module.scale.requires_grad is True
    assert [name for name, _ in module.named_parameters()] == ["scale", "inner.weight", "inner.bias"]
    assert [name for name, _ in module.named_parameters(recurse=False)] == ["scale"]
    assert module.get_submodule("inner") is module.inner
    assert module.get_parameter("inner.bias") is module.inner.bias
    with pytest.raises(TypeError, match="not a Module subclass"):
        module.add_module("bad", 3)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="empty"):
        module.register_parameter("", Tensor([1.0]))
    with pytest.raises(TypeError, match="parameter 'w'"):
        module.register_parameter("w", 1.0)  # type: ignore[arg-type]


def test_load_state_dict_strict_false_returns_missing_and_unexpected_keys() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.ModuleList([nn.Linear(3, 3) for _ in range(3)]))
    weight = np.arange(6, dtype=np.float32).reshape(3, 2)
    result = model.load_state_dict({"0.weight": Tensor(weight), "x": Tensor([1.0])}, strict=False)
    # torch 2.13: _IncompatibleKeys(missing_keys=[...], unexpected_keys=['x'])
    assert result.missing_keys == [
        "0.bias", "2.0.weight", "2.0.bias", "2.1.weight", "2.1.bias", "2.2.weight", "2.2.bias"
    ]  # fmt: skip
    assert result.unexpected_keys == ["x"]
    assert result == (result.missing_keys, ["x"])
    np.testing.assert_array_equal(model[0].weight.numpy(), weight)
    with pytest.raises(RuntimeError, match=r"for Sequential:[\s\S]*Unexpected key\(s\) in state_dict: \"x\""):
        model.load_state_dict({"x": Tensor([1.0])})


def test_named_modules_children_and_apply_follow_torch() -> None:
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    # torch's named_modules of the same layer
    expected = ["", "self_attn", "self_attn.out_proj", "linear1", "dropout", "linear2", "norm1", "norm2", "dropout1",
                "dropout2"]  # fmt: skip
    assert [name for name, _ in layer.named_modules()] == expected
    model = nn.Sequential(
        nn.Linear(2, 3),
        nn.ReLU(),
        nn.ModuleList([nn.Linear(3, 3) for _ in range(3)]),
        nn.ModuleDict({"a": nn.Dropout(0.2)}),
    )
    assert [name for name, _ in model.named_modules()] == ["", "0", "1", "2", "2.0", "2.1", "2.2", "3", "3.a"]
    assert [name for name, _ in model.named_children()] == ["0", "1", "2", "3"]
    assert [name for name, _ in model.named_modules(prefix="net")][:2] == ["net", "net.0"]
    shared = nn.Linear(1, 1)
    twice = nn.Sequential(shared, shared)
    assert len(list(twice.modules())) == 2
    assert len(list(twice.named_modules(remove_duplicate=False))) == 3
    visited: list[str] = []
    model.apply(lambda module: visited.append(type(module).__name__))
    assert visited == [
        "Linear",
        "ReLU",
        "Linear",
        "Linear",
        "Linear",
        "ModuleList",
        "Dropout",
        "ModuleDict",
        "Sequential",
    ]
    assert model.get_submodule("2.1") is model[2][1]
    assert model.get_submodule("3.a") is model[3]["a"]
    with pytest.raises(AttributeError, match="ModuleList has no attribute `7`"):
        model.get_submodule("2.7")
    with pytest.raises(AttributeError, match=r"not an nn\.Parameter"):
        model.get_parameter("3.a.p")


def test_plain_list_attributes_count_as_submodules() -> None:
    class Blocks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = [nn.Linear(2, 2), nn.Dropout(0.5)]

    model = Blocks()
    assert [name for name, _ in model.named_modules()] == ["", "blocks.0", "blocks.1"]
    assert model.get_submodule("blocks.1") is model.blocks[1]
    model.eval()
    assert not model.blocks[1].training


def test_train_eval_reach_recurrent_and_transformer_layers() -> None:
    model = nn.ModuleDict(
        {
            "rnn": nn.LSTM(2, 3, num_layers=2, dropout=0.5),
            "stack": nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, 8), 2),
            "seq": nn.Sequential(nn.ModuleList([nn.Dropout(0.1)])),
        }
    )
    model.eval()
    assert not any(module.training for module in model.modules())
    assert not model["stack"].layers[1].dropout2.training
    model.train()
    assert all(module.training for module in model.modules())
    assert len(list(model.modules())) == 1 + 1 + 1 + 1 + 2 * 10 + 3
    with pytest.raises(ValueError, match="boolean"):
        model.train("yes")  # type: ignore[arg-type]


def test_recurrent_dropout_only_in_training() -> None:
    Tensor.manual_seed(0)
    lstm = nn.LSTM(2, 3, num_layers=2, dropout=0.9)
    x = Tensor(np.random.default_rng(0).standard_normal((4, 1, 2)).astype(np.float32))
    lstm.eval()
    first = lstm(x)[0].numpy()
    np.testing.assert_array_equal(first, lstm(x)[0].numpy())
    lstm.train()
    assert not np.allclose(lstm(x)[0].numpy(), first)


def test_requires_grad_and_zero_grad() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    assert model.requires_grad_(False) is model
    assert all(parameter.requires_grad is False for parameter in model.parameters())
    model.requires_grad_()
    assert all(parameter.requires_grad is True for parameter in model.parameters())
    assert model[1].running_mean.requires_grad is not True  # buffers untouched
    model(Tensor(np.ones((3, 2), np.float32))).sum().backward()
    model.zero_grad(set_to_none=False)
    assert all(np.all(parameter.grad.numpy() == 0) for parameter in model.parameters())


def test_to_dtype_casts_floating_tensors_only() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    weight = model[0].weight.numpy()
    assert model.half() is model
    assert model[0].weight.dtype == dtypes.float16 and model[1].running_var.dtype == dtypes.float16
    assert model[1].num_batches_tracked.dtype == dtypes.int64
    assert model[0].weight.requires_grad is True
    np.testing.assert_array_equal(model[0].weight.numpy(), weight.astype(np.float16))
    model.to(dtype=dtypes.float32)
    assert model[0].weight.dtype == dtypes.float32
    assert [name for name, _ in model.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    model.float()(Tensor(np.ones((3, 2), np.float32))).sum().backward()
    assert model[0].weight.grad is not None
    with pytest.raises(TypeError, match="to\\(\\) expects"):
        model.to(3)


def test_repr_like_torch() -> None:
    model = nn.Sequential(
        nn.Linear(2, 3),
        nn.ReLU(),
        nn.ModuleList([nn.Linear(3, 3) for _ in range(3)]),
        nn.ModuleDict({"a": nn.Dropout(0.2)}),
    )
    assert repr(model) == (
        "Sequential(\n  (0): Linear(in_features=2, out_features=3, bias=True)\n  (1): ReLU()\n  (2): ModuleList(\n"
        "    (0-2): 3 x Linear(in_features=3, out_features=3, bias=True)\n  )\n  (3): ModuleDict(\n"
        "    (a): Dropout(p=0.2, inplace=False)\n  )\n)"
    )
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True, proj_size=2, batch_first=True)
    assert repr(lstm) == "LSTM(3, 4, proj_size=2, num_layers=2, batch_first=True, bidirectional=True)"
    assert repr(nn.GRUCell(3, 4, bias=False)) == "GRUCell(3, 4, bias=False)"
    assert repr(nn.RNN(3, 4, nonlinearity="relu", dropout=0.5)) == "RNN(3, 4, dropout=0.5)"
    assert repr(nn.RNNCell(3, 4, nonlinearity="relu")) == "RNNCell(3, 4, nonlinearity=relu)"


def test_sequential_with_names_slices_and_edits_like_torch() -> None:
    from collections import OrderedDict

    model = nn.Sequential(OrderedDict([("conv", nn.Conv2d(1, 2, 3)), ("act", nn.ReLU()), ("head", nn.Flatten())]))
    assert list(model.state_dict()) == ["conv.weight", "conv.bias"]
    assert model[0] is model.conv and len(model) == 3
    tail = model[1:]
    assert isinstance(tail, nn.Sequential) and [name for name, _ in tail.named_children()] == ["act", "head"]
    del model[1]  # torch renumbers the layers after a delete
    assert [name for name, _ in model.named_children()] == ["0", "1"]
    model.insert(1, nn.Tanh()).append(nn.Identity())
    assert [type(layer).__name__ for layer in model] == ["Conv2d", "Tanh", "Flatten", "Identity"]
    assert type(model.pop(0)).__name__ == "Conv2d" and len(model) == 3
    joined = model + nn.Sequential(nn.ReLU())
    assert len(joined) == 4 and repr(joined[3]) == "ReLU()"
    x = Tensor(np.array([[-1.0, 2.0]], np.float32))
    np.testing.assert_allclose(joined(x).numpy(), np.maximum(np.tanh(x.numpy()), 0.0), rtol=1e-6)
    with pytest.raises(IndexError, match="out of range"):
        model[5]
    with pytest.raises(TypeError, match="callable"):
        model.append(3)


def test_to_keeps_tied_weights_tied() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight

    model = Tied().half()
    assert model.head.weight is model.embed.weight and model.embed.weight.dtype == dtypes.float16
    assert len(model.parameters()) == 1


@pytest.mark.parametrize(
    "module", ["module", "rnn", "transformer", "tinygrad_names", "padding", "pooling", "instance_norm", "conv"]
)
def test_docstring_examples(module: str) -> None:
    globs = {"Tensor": Tensor, **{name: getattr(nn, name) for name in nn.__all__}}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = doctest.DocTestFinder().find(importlib.import_module(f"kiln.tensor.nn.{module}"), globs=globs)
    assert sum(len(test.examples) for test in tests) > 0
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
