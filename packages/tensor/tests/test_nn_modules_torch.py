"""The `kiln.tensor.nn` modules of issue 38 beyond their forward (which `test_nn_functional.py` replays against
torch): reprs against torch's recorded ones, containers' state-dict names, initialisation, dropout's statistics,
compile counts and constructor errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conformance.functional_cases import REPRS, STATES, build_port_model, port_loss

from kiln.tensor import Tensor, nn
from kiln.tensor.realize.engine import Engine

FOLDER = Path(__file__).parent / "conformance"

FIXTURE = np.load(FOLDER / "functional.npz")


def _resolve(call: str) -> Any:
    target: Any = nn
    for part in call.split(".")[1:]:
        target = getattr(target, part)
    return target


@pytest.mark.parametrize("index", range(len(REPRS)), ids=[f"{call}-{i}" for i, (call, _) in enumerate(REPRS)])
def test_repr_matches_torch(index: int) -> None:
    call, init = REPRS[index]
    assert repr(_resolve(call)(**init)) == str(FIXTURE[f"repr/{index}"])


@pytest.mark.parametrize("index", range(len(STATES)), ids=[f"{call}-{i}" for i, (call, _) in enumerate(STATES)])
def test_state_dict_names_and_shapes_match_torch(index: int) -> None:
    call, init = STATES[index]
    state = _resolve(call)(**init).state_dict()
    assert list(state) == [str(name) for name in FIXTURE[f"state_names/{index}"]]
    assert [str(list(value.shape)) for value in state.values()] == [str(s) for s in FIXTURE[f"state_shapes/{index}"]]


def test_bilinear_initialisation_bound() -> None:
    Tensor.manual_seed(0)
    layer = nn.Bilinear(16, 3, 64)
    weight, bias = layer.weight.numpy(), layer.bias.numpy()
    # torch draws both from U(-1/sqrt(in1_features), 1/sqrt(in1_features)): max near the bound, std bound/sqrt(3)
    assert np.abs(weight).max() <= 0.25 and np.abs(weight).max() > 0.24
    assert abs(weight.std() - 0.25 / np.sqrt(3)) < 0.01
    assert np.abs(bias).max() <= 0.25


def test_max_unpool_layers_invert_max_pool() -> None:
    x = np.random.default_rng(4).permutation(32).astype(np.float32).reshape(1, 2, 4, 4)
    values, indices = Tensor(x).max_pool2d(2, return_indices=True)
    restored = nn.MaxUnpool2d(2)(values, indices).numpy()
    windows = x.reshape(1, 2, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 2, 2, 2, 4)
    is_max = x == np.repeat(np.repeat(windows.max(-1), 2, axis=2), 2, axis=3)
    np.testing.assert_array_equal(restored, np.where(is_max, x, 0.0))


def test_alpha_dropout_keeps_selu_statistics() -> None:
    Tensor.manual_seed(5)
    x = np.random.default_rng(5).standard_normal(20000).astype(np.float32)
    out = nn.AlphaDropout(0.2)(Tensor(x)).numpy()
    alpha = 1.6732632423543772 * 1.0507009873554805
    a = 1.0 / np.sqrt((alpha * alpha * 0.2 + 1) * 0.8)
    dropped = np.isclose(out, a * alpha * (0.2 - 1), atol=1e-6)
    np.testing.assert_allclose(out[~dropped], a * x[~dropped] + alpha * a * 0.2, rtol=1e-5, atol=1e-6)
    assert 0.18 < dropped.mean() < 0.22
    assert abs(out.mean()) < 0.05 and abs(out.std() - 1.0) < 0.05


def test_rrelu_training_slopes_lie_between_bounds() -> None:
    Tensor.manual_seed(6)
    x = -np.ones(4000, np.float32)
    slopes = -nn.RReLU(0.1, 0.3)(Tensor(x)).numpy()
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3 and abs(slopes.mean() - 0.2) < 0.01


def test_gumbel_softmax_hard_is_one_hot_with_soft_gradient() -> None:
    import kiln.tensor.nn.functional as F

    Tensor.manual_seed(8)
    logits = Tensor(np.log(np.array([[0.7, 0.2, 0.1]] * 3000, np.float32)), requires_grad=True)
    sample = F.gumbel_softmax(logits, tau=0.5, hard=True)
    values = sample.numpy()
    assert set(np.unique(values)) == {0.0, 1.0} and np.all(values.sum(-1) == 1.0)
    # Gumbel-max: the argmax is distributed as softmax(logits)
    np.testing.assert_allclose(values.mean(0), [0.7, 0.2, 0.1], atol=0.03)
    (sample * Tensor([1.0, 2.0, 3.0])).sum().backward()
    assert logits.grad is not None and np.abs(logits.grad.numpy()).sum() > 0


def test_module_list_names_like_torch() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)])

    net = Net()
    assert list(net.state_dict()) == ["layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias"]
    assert len(net.layers) == 3 and isinstance(net.layers[-1], nn.Linear)
    net.layers.insert(1, nn.Linear(3, 3))
    net.layers.append(nn.Linear(1, 1))
    del net.layers[2]  # the ReLU, now at index 2
    assert [type(layer).__name__ for layer in net.layers] == ["Linear", "Linear", "Linear", "Linear"]
    assert list(net.state_dict())[::2] == [f"layers.{i}.weight" for i in range(4)]
    assert isinstance(net.layers[1:], nn.ModuleList) and len(net.layers[1:]) == 3
    net.eval()
    assert all(not layer.training for layer in net.layers)
    assert len(net.parameters()) == 8


def test_module_list_repr_and_errors() -> None:
    layers = nn.ModuleList([nn.ReLU()])
    assert repr(layers) == "ModuleList(\n  (0): ReLU()\n)"
    with pytest.raises(TypeError, match="only hold Modules"):
        layers.append(3)
    with pytest.raises(IndexError, match="index 5 is out of range"):
        layers[5]
    with pytest.raises(NotImplementedError):
        layers(Tensor.ones(1))


def test_module_dict_names_and_mapping_methods() -> None:
    heads = nn.ModuleDict({"query": nn.Linear(2, 2), "value": nn.Linear(2, 1, bias=False)})
    assert list(heads.state_dict()) == ["query.weight", "query.bias", "value.weight"]
    assert heads.keys() == ["query", "value"] and "query" in heads and len(heads) == 2
    heads["key"] = nn.Linear(2, 2)
    assert heads.pop("query").out_features == 2
    assert list(heads) == ["value", "key"]
    assert [name for name, _ in heads.items()] == ["value", "key"]
    with pytest.raises(KeyError, match="already exists"):
        heads["keys"] = nn.ReLU()
    with pytest.raises(KeyError, match="'\\.'"):
        heads["a.b"] = nn.ReLU()
    with pytest.raises(TypeError, match="only hold Modules"):
        heads["x"] = Tensor.ones(2)
    heads.clear()
    assert len(heads) == 0 and heads.state_dict() == {}


def test_parameter_containers() -> None:
    scales = nn.ParameterList([Tensor([1.0, 2.0]), nn.Parameter(Tensor([3.0]))])
    assert [p.requires_grad for p in scales] == [True, True]
    assert list(scales.state_dict()) == ["0", "1"]
    table = nn.ParameterDict({"w": Tensor.ones(2, 3)})
    table["b"] = Tensor.zeros(3)
    assert list(table.state_dict()) == ["w", "b"] and table["b"].requires_grad is True
    frozen = nn.Parameter(Tensor([1.0]), requires_grad=False)
    assert frozen.requires_grad is False
    with pytest.raises(TypeError, match="needs a Tensor"):
        nn.Parameter([1.0])  # type: ignore[arg-type]


def test_containers_train_with_an_optimizer() -> None:
    from kiln.tensor.optim import SGD

    layers = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 1)])
    scale = nn.ParameterList([Tensor([2.0])])
    x = Tensor([[1.0, -1.0]])
    before = layers[1].weight.numpy().copy()
    optimizer = SGD([*layers.parameters(), *scale.parameters()], lr=0.1)
    loss = (layers[1](layers[0](x)) * scale[0]).sum()
    loss.backward()
    optimizer.step()
    assert not np.allclose(layers[1].weight.numpy(), before)
    assert scale[0].grad is not None


def test_embedding_padding_row_is_zero_and_from_pretrained_copies() -> None:
    Tensor.manual_seed(3)
    table = nn.Embedding(6, 3, padding_idx=-1)
    assert table.padding_idx == 5
    np.testing.assert_array_equal(table.weight.numpy()[5], np.zeros(3, np.float32))
    assert np.all(table.weight.numpy()[:5] != 0)
    pretrained = Tensor(np.arange(6.0, dtype=np.float32).reshape(3, 2))
    frozen = nn.Embedding.from_pretrained(pretrained)
    assert frozen.weight.requires_grad is False
    np.testing.assert_array_equal(frozen(Tensor([2, 0])).numpy(), [[4.0, 5.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="2-dimensional"):
        nn.Embedding.from_pretrained(Tensor.ones(3))
    with pytest.raises(ValueError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding(4, 2, padding_idx=4)
    with pytest.raises(ValueError, match="does not match num_embeddings"):
        nn.Embedding(4, 2, _weight=Tensor.ones(3, 2))


def test_prelu_and_instance_norm_parameters() -> None:
    prelu = nn.PReLU(4, init=0.3)
    np.testing.assert_allclose(prelu.weight.numpy(), np.full(4, 0.3, np.float32))
    norm = nn.InstanceNorm2d(3, affine=True, track_running_stats=True)
    assert list(norm.state_dict()) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    assert [name for name, _ in norm.named_parameters()] == ["weight", "bias"]
    assert list(nn.InstanceNorm1d(3).state_dict()) == []


def test_instance_norm_eval_uses_running_statistics() -> None:
    norm = nn.InstanceNorm1d(2, track_running_stats=True, momentum=0.5)
    x = np.random.default_rng(1).standard_normal((3, 2, 6)).astype(np.float32)
    norm(Tensor(x))
    mean = 0.5 * x.mean(axis=2).mean(axis=0)
    var = 0.5 + 0.5 * x.var(axis=2, ddof=1).mean(axis=0)
    np.testing.assert_allclose(norm.running_mean.numpy(), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(norm.running_var.numpy(), var, rtol=1e-5, atol=1e-6)
    norm.eval()
    expected = (x - mean[None, :, None]) / np.sqrt(var[None, :, None] + 1e-5)
    np.testing.assert_allclose(norm(Tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_instance_norm_checks_its_input() -> None:
    with pytest.raises(ValueError, match="expected 3D or 4D input \\(got 2D input\\)"):
        nn.InstanceNorm2d(3)(Tensor.ones(3, 4))
    with pytest.raises(ValueError, match="to match num_features \\(3\\), but got: 2"):
        nn.InstanceNorm1d(3, affine=True)(Tensor.ones(1, 2, 5))
    with pytest.warns(UserWarning, match="does not match num_features"):
        nn.InstanceNorm1d(3)(Tensor.ones(1, 2, 5))


@pytest.mark.parametrize("layer", [nn.Dropout2d(0.25), nn.Dropout1d(0.25), nn.Dropout3d(0.25)])
def test_channel_dropout_drops_whole_channels(layer: nn.Module) -> None:
    Tensor.manual_seed(7)
    shape = {nn.Dropout1d: (8, 64, 5), nn.Dropout2d: (8, 64, 3, 3), nn.Dropout3d: (8, 64, 2, 2, 2)}[type(layer)]
    out = layer(Tensor.ones(*shape)).numpy().reshape(8, 64, -1)
    per_channel = out[:, :, :1]
    assert np.all(out == per_channel), "a channel was partly dropped"
    assert set(np.unique(per_channel)) <= {0.0, np.float32(1 / 0.75)}
    dropped = float((per_channel == 0).mean())
    assert 0.17 < dropped < 0.33, f"dropped fraction {dropped} far from p = 0.25"
    assert np.all(layer.eval()(Tensor.ones(*shape)).numpy() == 1.0)


def test_dropout_layers_reject_bad_p() -> None:
    with pytest.raises(ValueError, match=r"between 0 and 1, but got 1\.5"):
        nn.Dropout2d(1.5)


def test_padding_layers_check_their_padding() -> None:
    with pytest.raises(ValueError, match="ZeroPad2d padding must be an int or 4 ints, got \\(1, 2\\)"):
        nn.ZeroPad2d((1, 2))


def test_unflatten_checks_sizes() -> None:
    with pytest.raises(TypeError, match="unflattened_size must be a tuple or list of ints"):
        nn.Unflatten(1, 6)  # type: ignore[arg-type]


def test_triplet_margin_loss_rejects_non_positive_margin() -> None:
    with pytest.raises(ValueError, match="expected margin to be greater than 0, got 0"):
        nn.TripletMarginLoss(margin=0)


def test_loss_modules_legacy_reduction_and_buffers() -> None:
    with pytest.warns(UserWarning, match="reduction='sum'"):
        loss = nn.MSELoss(size_average=False)
    assert loss.reduction == "sum"
    assert loss(Tensor([1.0, 2.0]), Tensor([0.0, 0.0])).item() == 5.0
    weighted = nn.CrossEntropyLoss(weight=Tensor([1.0, 2.0]))
    assert list(weighted.state_dict()) == ["weight"] and weighted.parameters() == []
    assert nn.CrossEntropyLoss().state_dict() == {}


def test_a_small_cnn_compiles_once(engine: Engine) -> None:
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.InstanceNorm2d(4, affine=True), nn.LeakyReLU(0.1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3),
    )  # fmt: skip
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    rng = np.random.default_rng(0)

    def step() -> None:
        x = Tensor(rng.standard_normal((2, 3, 5, 5)).astype(np.float32))
        loss = criterion(model(x), Tensor(rng.integers(0, 3, 2)))
        loss.backward()
        Tensor.realize_all(loss, *[p.grad for p in model.parameters() if p.grad is not None])
        model.zero_grad()

    step()
    built = engine.programs_built
    assert built >= 1
    step()
    assert engine.programs_built == built, "a second step of the same shapes compiled new kernels"


@pytest.mark.parametrize("options", [{}, {"padding_idx": 0}, {"scale_grad_by_freq": True}])
def test_embedding_reads_only_the_picked_rows(options: dict[str, Any]) -> None:
    from kiln.tensor import GlobalCounters

    vocab, dim = 8000, 128
    layer = nn.Embedding(vocab, dim, **options)
    layer.weight.realize()
    layer(Tensor(np.array([[3, 17]], np.int32)).realize()).realize()  # compile once
    GlobalCounters.reset()
    out = layer(Tensor(np.array([[8, 7000]], np.int32))).numpy()
    np.testing.assert_array_equal(out[0, 1], layer.weight.numpy()[7000])
    assert GlobalCounters.mem_bytes < vocab * dim * 4 // 100, "the lookup read the whole table"


def test_a_pytorch_style_model_matches_torch_from_the_same_state() -> None:
    # the same model code built on kiln.tensor.nn, loaded with torch's initial state dict: loss and every gradient
    model = build_port_model(nn)
    prefix = "port/state/"
    state = {key[len(prefix) :]: FIXTURE[key] for key in FIXTURE.files if key.startswith(prefix)}
    assert list(model.state_dict()) == list(state)
    model.load_state_dict({name: Tensor(value) for name, value in state.items()})
    loss = port_loss(
        nn, model, Tensor(FIXTURE["port/x"]), Tensor(FIXTURE["port/labels"]), Tensor(FIXTURE["port/aux_target"])
    )
    loss.backward()
    np.testing.assert_allclose(loss.numpy(), FIXTURE["port/loss"], rtol=1e-5)
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, f"{name} got no gradient"
        np.testing.assert_allclose(
            parameter.grad.numpy(), FIXTURE[f"port/grad/{name}"], rtol=2e-4, atol=2e-6, err_msg=name
        )
