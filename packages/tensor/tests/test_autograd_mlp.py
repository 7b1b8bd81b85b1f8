"""Forward + backward of a 2-layer MLP: gradients against hand-written numpy backpropagation, and kernel counts.

Stated counts (issue 7 fusion tests): realizing the loss and all four parameter gradients of
relu(x @ w1 + b1) @ w2 + b2 in one schedule takes at most
- MLP_MSE_KERNELS = 12 kernels with a mean-squared-error loss (11 measured on the CPU device),
- MLP_CROSS_ENTROPY_KERNELS = 15 kernels with softmax cross-entropy against soft targets (14 measured).
"""

from __future__ import annotations

import numpy as np

from kiln.tensor import GlobalCounters, Tensor

MLP_MSE_KERNELS = 12
MLP_CROSS_ENTROPY_KERNELS = 15


def _problem(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.normal(size=(32, 8)).astype(np.float32),
        "target": rng.normal(size=(32, 4)).astype(np.float32),
        "w1": (rng.normal(size=(8, 16)) * 0.5).astype(np.float32),
        "b1": (rng.normal(size=16) * 0.1).astype(np.float32),
        "w2": (rng.normal(size=(16, 4)) * 0.5).astype(np.float32),
        "b2": (rng.normal(size=4) * 0.1).astype(np.float32),
    }


def _numpy_backprop(data: dict[str, np.ndarray], loss: str) -> tuple[float, dict[str, np.ndarray]]:
    x, target = data["x"].astype(np.float64), data["target"].astype(np.float64)
    w1, b1, w2, b2 = (data[name].astype(np.float64) for name in ("w1", "b1", "w2", "b2"))
    pre = x @ w1 + b1
    hidden = np.maximum(pre, 0.0)
    out = hidden @ w2 + b2
    if loss == "mse":
        value = float(((out - target) ** 2).mean())
        d_out = 2.0 * (out - target) / out.size
    else:
        shifted = np.exp(out - out.max(-1, keepdims=True))
        probabilities = shifted / shifted.sum(-1, keepdims=True)
        log_probabilities = np.log(probabilities)
        value = float(-(log_probabilities * target).sum(-1).mean())
        # d/d out of -sum(t * log_softmax(out)) = softmax(out) * sum(t) - t
        d_out = (probabilities * target.sum(-1, keepdims=True) - target) / out.shape[0]
    d_hidden = d_out @ w2.T
    d_pre = d_hidden * (pre > 0)
    return value, {"w1": x.T @ d_pre, "b1": d_pre.sum(0), "w2": hidden.T @ d_out, "b2": d_out.sum(0)}


def _run(loss_kind: str) -> tuple[int, float, dict[str, np.ndarray], dict[str, np.ndarray]]:
    data = _problem(0)
    x, target = Tensor(data["x"]), Tensor(data["target"])
    parameters = {name: Tensor(data[name], requires_grad=True) for name in ("w1", "b1", "w2", "b2")}
    out = (x @ parameters["w1"] + parameters["b1"]).relu() @ parameters["w2"] + parameters["b2"]
    if loss_kind == "mse":
        loss = ((out - target) ** 2).mean()
    else:
        loss = -(out.log_softmax(-1) * target).sum(-1).mean()
    loss.backward()
    GlobalCounters.reset()
    Tensor.realize_all(loss, *(parameter.grad for parameter in parameters.values()))
    kernels = GlobalCounters.kernel_count
    expected_loss, expected = _numpy_backprop(data, loss_kind)
    np.testing.assert_allclose(loss.item(), expected_loss, rtol=1e-5)
    return kernels, float(loss.item()), {name: p.grad.numpy() for name, p in parameters.items()}, expected


def test_mlp_mse_gradients_and_kernel_count() -> None:
    kernels, _, gradients, expected = _run("mse")
    for name, gradient in gradients.items():
        np.testing.assert_allclose(gradient, expected[name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert kernels <= MLP_MSE_KERNELS, f"forward + backward took {kernels} kernels, stated at most {MLP_MSE_KERNELS}"


def test_mlp_cross_entropy_gradients_and_kernel_count() -> None:
    kernels, _, gradients, expected = _run("cross_entropy")
    for name, gradient in gradients.items():
        np.testing.assert_allclose(gradient, expected[name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert kernels <= MLP_CROSS_ENTROPY_KERNELS, (
        f"forward + backward took {kernels} kernels, stated at most {MLP_CROSS_ENTROPY_KERNELS}"
    )
