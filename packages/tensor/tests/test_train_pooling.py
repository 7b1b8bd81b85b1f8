"""max_pool2d in training on a lazy input (a convolution and its ReLU, computed once into a buffer first): the
pooled values and the gradients of the convolution's input and weight against numpy's."""

from __future__ import annotations

import numpy as np

from kiln.tensor import Tensor


def _conv_numpy(images: np.ndarray, weights: np.ndarray) -> np.ndarray:
    windows = np.lib.stride_tricks.sliding_window_view(images, weights.shape[2:], axis=(2, 3))
    return np.einsum("ncyxuv,ocuv->noyx", windows, weights)


def test_max_pool_of_a_lazy_convolution_gives_numpys_values_and_gradients() -> None:
    rng = np.random.default_rng(9)
    images = rng.standard_normal((3, 2, 10, 10)).astype(np.float32)
    weights = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    upstream = rng.standard_normal((3, 4, 4, 4)).astype(np.float32)
    x, w = Tensor(images, requires_grad=True), Tensor(weights, requires_grad=True)
    pooled = x.conv2d(w).relu().max_pool2d(2)
    (pooled * Tensor(upstream)).sum().backward()
    activation = np.maximum(_conv_numpy(images.astype(np.float64), weights.astype(np.float64)), 0)  # (3, 4, 8, 8)
    blocks = activation.reshape(3, 4, 4, 2, 4, 2).transpose(0, 1, 2, 4, 3, 5).reshape(3, 4, 4, 4, 4)
    np.testing.assert_allclose(pooled.numpy(), blocks.max(-1), rtol=1e-5, atol=1e-5)
    # the upstream gradient goes to each window's first largest tap, then through the ReLU and the convolution
    first = blocks.argmax(-1)
    routed = np.zeros_like(blocks)
    np.put_along_axis(routed, first[..., None], upstream[..., None].astype(np.float64), axis=-1)
    grad_activation = routed.reshape(3, 4, 4, 4, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(3, 4, 8, 8)
    grad_conv = grad_activation * (activation > 0)
    windows = np.lib.stride_tricks.sliding_window_view(images.astype(np.float64), (3, 3), axis=(2, 3))
    grad_weight = np.einsum("noyx,ncyxuv->ocuv", grad_conv, windows)
    grad_images = np.zeros((3, 2, 10, 10))
    for u in range(3):
        for v in range(3):
            grad_images[:, :, u : u + 8, v : v + 8] += np.einsum("noyx,oc->ncyx", grad_conv, weights[:, :, u, v])
    assert x.grad is not None and w.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), grad_weight, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), grad_images, rtol=1e-4, atol=1e-4)
