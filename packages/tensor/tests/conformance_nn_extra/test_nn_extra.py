"""BatchNorm3d, ConvTranspose3d, the Lazy* modules, the in-place activations and pdist against torch's recorded
answers (`nn_extra.npz`, written by `record_nn_extra.py`): forward, input and parameter gradients, running statistics
and state-dict names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kiln.tensor import Tensor, nn
from kiln.tensor.nn import functional as F

DATA = np.load(Path(__file__).resolve().parent / "nn_extra.npz")

ACTIVATIONS: dict[str, tuple[Any, dict[str, Any]]] = {
    "relu_": (F.relu_, {}),
    "elu_": (F.elu_, {"alpha": 0.7}),
    "celu_": (F.celu_, {"alpha": 1.3}),
    "selu_": (F.selu_, {}),
    "leaky_relu_": (F.leaky_relu_, {"negative_slope": 0.2}),
    "hardtanh_": (F.hardtanh_, {"min_val": -0.5, "max_val": 0.8}),
    "rrelu_": (F.rrelu_, {"lower": 0.1, "upper": 0.3, "training": False}),
    "threshold_": (F.threshold_, {"threshold": 0.25, "value": -2.0}),
}

MODULES: dict[str, tuple[Any, bool]] = {
    "batchnorm3d_train": (lambda: nn.BatchNorm3d(3, momentum=0.3), True),
    "batchnorm3d_eval": (lambda: nn.BatchNorm3d(3), False),
    "convtranspose3d": (lambda: nn.ConvTranspose3d(4, 3, (2, 3, 2), stride=2, padding=1, output_padding=1), True),
    "convtranspose3d_groups": (lambda: nn.ConvTranspose3d(4, 6, 2, groups=2, dilation=2, bias=False), True),
    "lazylinear": (lambda: nn.LazyLinear(5), True),
    "lazyconv1d": (lambda: nn.LazyConv1d(4, 3, padding=1), True),
    "lazyconv2d": (lambda: nn.LazyConv2d(6, 3, stride=2, groups=2), True),
    "lazyconv3d": (lambda: nn.LazyConv3d(2, 2), True),
    "lazyconvtranspose1d": (lambda: nn.LazyConvTranspose1d(3, 3, stride=2), True),
    "lazyconvtranspose2d": (lambda: nn.LazyConvTranspose2d(4, 2, groups=2), True),
    "lazyconvtranspose3d": (lambda: nn.LazyConvTranspose3d(2, 2, bias=False), True),
    "lazybatchnorm1d": (lambda: nn.LazyBatchNorm1d(), True),
    "lazybatchnorm2d": (lambda: nn.LazyBatchNorm2d(momentum=None), True),
    "lazybatchnorm3d": (lambda: nn.LazyBatchNorm3d(affine=False), True),
    "lazyinstancenorm1d": (lambda: nn.LazyInstanceNorm1d(affine=True), True),
    "lazyinstancenorm2d": (lambda: nn.LazyInstanceNorm2d(), True),
    "lazyinstancenorm3d": (lambda: nn.LazyInstanceNorm3d(track_running_stats=True), True),
}


def _state(case: str, part: str) -> dict[str, np.ndarray]:
    prefix = f"{case}/{part}/"
    return {key[len(prefix) :]: DATA[key] for key in DATA.files if key.startswith(prefix)}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_inplace_activation_writes_torchs_result_into_its_input(name: str) -> None:
    fn, kwargs = ACTIVATIONS[name]
    x = Tensor(DATA[f"act/{name}/in"])
    result = fn(x, **kwargs)
    assert result is x
    np.testing.assert_allclose(x.numpy(), DATA[f"act/{name}/out"], rtol=1e-5, atol=1e-6)


def test_inplace_activation_refuses_a_leaf_that_requires_grad() -> None:
    x = Tensor([1.0, -1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        F.relu_(x)


@pytest.mark.parametrize("p", ["2.0", "1.0", "0.0", "3.5", "inf"])
def test_pdist_matches_torch_forward_and_backward(p: str) -> None:
    x = Tensor(DATA[f"pdist/{p}/in"], requires_grad=True)
    out = F.pdist(x, float(p))
    np.testing.assert_allclose(out.numpy(), DATA[f"pdist/{p}/out"], rtol=1e-5, atol=1e-6)
    if p != "0.0":  # torch's p = 0 gradient is 0; kiln's count of non-zeros has no gradient either
        (out * Tensor(DATA[f"pdist/{p}/up"])).sum().backward()
        assert x.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), DATA[f"pdist/{p}/grad"], rtol=1e-4, atol=1e-5)


def test_pdist_of_one_row_is_empty_and_bad_input_raises() -> None:
    assert F.pdist(Tensor([[1.0, 2.0]])).shape == (0,)
    with pytest.raises(RuntimeError, match="2D"):
        F.pdist(Tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="non-negative"):
        F.pdist(Tensor([[1.0], [2.0]]), -1.0)


@pytest.mark.parametrize("case", list(MODULES))
def test_module_matches_torch(case: str) -> None:
    build, training = MODULES[case]
    module = build()
    x = DATA[f"{case}/in"]
    if case.startswith("lazy"):
        assert module.state_dict() == {} and module.parameters() == []
        module(Tensor.zeros(*x.shape))  # the first call sizes the module and turns it into the regular one
    assert type(module).__name__ == str(DATA[f"{case}/type"])
    assert list(module.state_dict()) == list(DATA[f"{case}/names"])
    before = _state(case, "state")
    assert {k: v.shape for k, v in module.state_dict().items()} == {k: v.shape for k, v in before.items()}
    module.load_state_dict({key: Tensor(value) for key, value in before.items()})
    module.train(training)
    for param in module.parameters():
        param.requires_grad = True
    inp = Tensor(x, requires_grad=True)
    out = module(inp)
    np.testing.assert_allclose(out.numpy(), DATA[f"{case}/out"], rtol=1e-4, atol=1e-5)
    (out * Tensor(DATA[f"{case}/up"])).sum().backward()
    assert inp.grad is not None
    np.testing.assert_allclose(inp.grad.numpy(), DATA[f"{case}/grad"], rtol=1e-4, atol=1e-4)
    grads = dict(module.named_parameters())
    for key, expected in _state(case, "pgrad").items():
        grad = grads[key].grad
        assert grad is not None
        np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-4, atol=1e-4)
    for key, expected in _state(case, "after").items():
        np.testing.assert_allclose(module.state_dict()[key].numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", [case for case in MODULES if case.startswith("lazy") and "instance" not in case])
def test_lazy_module_loads_a_regular_state_dict_before_its_first_call(case: str) -> None:
    build, _ = MODULES[case]
    module = build()
    before = _state(case, "state")
    module.load_state_dict({key: Tensor(value) for key, value in before.items()})
    assert type(module).__name__ == str(DATA[f"{case}/type"])
    for key, value in module.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), before[key])


def test_lazy_module_keeps_its_hooks_and_mode_when_it_becomes_the_regular_one() -> None:
    seen: list[tuple[int, ...]] = []
    layer = nn.LazyLinear(2)
    layer.eval()
    layer.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    layer(Tensor.ones(3, 4))
    layer(Tensor.ones(1, 4))
    assert seen == [(3, 2), (1, 2)] and not layer.training and isinstance(layer, nn.Linear)
    with pytest.raises(ValueError, match="last dim 4"):
        layer(Tensor.ones(1, 5))


def test_lazy_conv_refuses_an_input_of_the_wrong_rank() -> None:
    with pytest.raises(RuntimeError, match="4D"):
        nn.LazyConv2d(3, 2)(Tensor.ones(2, 3))
