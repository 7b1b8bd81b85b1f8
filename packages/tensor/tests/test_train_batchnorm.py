"""Training-mode batch_norm against torch's recorded values (fixtures/make_train_batchnorm.py): the output, the
gradients of x, weight and bias (the gradient shortcut of kiln.tensor.ops.normalization), the running statistics
after the in-place update; and the step's kernel count."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from kiln.tensor import GlobalCounters, Tensor, nn

FIXTURE = np.load(pathlib.Path(__file__).parent / "fixtures" / "train_batchnorm.npz")
CASES = sorted({key.split("/")[0] for key in FIXTURE.files})


def _record(name: str) -> dict[str, np.ndarray]:
    prefix = f"{name}/"
    return {key[len(prefix) :]: FIXTURE[key] for key in FIXTURE.files if key.startswith(prefix)}


@pytest.mark.parametrize("name", CASES)
def test_batch_norm_training_matches_torch(name: str) -> None:
    record = _record(name)
    x = Tensor(record["x"], requires_grad=True)
    weight = Tensor(record["weight"], requires_grad=True) if "weight" in record else None
    bias = Tensor(record["bias"], requires_grad=True) if "bias" in record else None
    running_mean, running_var = Tensor(record["running_mean"]), Tensor(record["running_var"])
    out = x.batch_norm(running_mean, running_var, weight, bias, True, 0.1, 1e-5)
    (out * Tensor(record["upstream"])).sum().backward()
    # the large-mean case: float32 values around 1e4 are 1e-3 apart, ~5e-4 of a spread of 2 once normalized
    scale = max(1.0, float(np.abs(record["x"]).max()) * 1e-3)
    np.testing.assert_allclose(out.numpy(), record["out"], rtol=1e-4, atol=1e-4 * scale)
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), record["grad_x"], rtol=1e-3, atol=1e-4 * scale)
    for tensor, key in ((weight, "grad_weight"), (bias, "grad_bias")):
        if tensor is not None:
            assert tensor.grad is not None
            np.testing.assert_allclose(tensor.grad.numpy(), record[key], rtol=1e-4, atol=1e-3 * scale)
    np.testing.assert_allclose(running_mean.numpy(), record["running_mean_after"], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(running_var.numpy(), record["running_var_after"], rtol=1e-4, atol=1e-4)


def test_batch_norm_gradient_through_a_later_op_matches_torch() -> None:
    # the upstream gradient is itself lazy (a ReLU after the normalization, then a product): the shortcut receives it
    record = _record("affine")
    x = Tensor(record["x"], requires_grad=True)
    weight, bias = Tensor(record["weight"], requires_grad=True), Tensor(record["bias"], requires_grad=True)
    out = x.batch_norm(None, None, weight, bias, True)
    (out * Tensor(record["upstream"])).sum().backward()
    assert x.grad is not None and weight.grad is not None and bias.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), record["grad_x"], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(weight.grad.numpy(), record["grad_weight"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bias.grad.numpy(), record["grad_bias"], rtol=1e-4, atol=1e-4)


def test_batch_norm2d_step_kernel_count() -> None:
    # BatchNorm2d on a realized input, then sum(out * g).backward(): the running update's schedule (the sums, the
    # two statistics' writes, the batch count) and the forward-and-backward one: the statistics in one reduce
    # kernel, the backward's two sums in one, the input gradient, the loss (the primitives' rules took 9 kernels for
    # the second schedule, 13 in all)
    rng = np.random.default_rng(3)
    layer = nn.BatchNorm2d(4)
    x = Tensor(rng.standard_normal((8, 4, 6, 6)).astype(np.float32), requires_grad=True).realize()
    upstream = Tensor(rng.standard_normal((8, 4, 6, 6)).astype(np.float32)).realize()
    GlobalCounters.reset()
    out = layer(x)
    writes = GlobalCounters.kernel_count
    (out * upstream).sum().backward()
    assert x.grad is not None and layer.weight is not None and layer.bias is not None
    Tensor.realize_all(x.grad, layer.weight.grad, layer.bias.grad)
    assert writes <= 4, f"the running statistics took {writes} kernels"
    assert GlobalCounters.kernel_count - writes <= 7, f"{GlobalCounters.kernel_count - writes} kernels for the step"
