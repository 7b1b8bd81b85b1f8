"""Gradients of every differentiable public Tensor method against float64 central differences.

For each case, `loss = sum(method(*inputs) * weights)` (fixed random weights) is differentiated with
`Tensor.gradient`, and the gradient is checked along random directions v of each input:
<gradient, v> must equal (loss(x + h v) - loss(x - h v)) / 2h (PyTorch's fast gradcheck idea: a wrong entry of the
gradient changes <gradient, v> for almost every v). Inputs avoid kinks and ties (see the value makers).

`test_every_public_method_is_classified` keeps the table complete: a public Tensor method must either have cases
here or be listed in NOT_DIFFERENTIABLE with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conformance.cases import CASES as CONFORMANCE_CASES
from gradient_classification_api import ALIASES, NOT_DIFFERENTIABLE_API, TORCH_CHECKED

from kiln.tensor import Tensor, dtypes

Maker = Callable[[np.random.Generator], np.ndarray]
Case = tuple[Callable[..., Tensor], tuple[Maker, ...]]

# ---------------------------------------------------------------------------------------------------------------
# input makers
# ---------------------------------------------------------------------------------------------------------------


def normal(*shape: int, scale: float = 1.0) -> Maker:
    return lambda rng: rng.normal(size=shape) * scale


def uniform(low: float, high: float, *shape: int) -> Maker:
    return lambda rng: rng.uniform(low, high, shape)


def distinct(*shape: int, spacing: float = 0.37) -> Maker:
    """Values at least `spacing` apart and away from 0: max, sort and ties never flip within a step."""

    def make(rng: np.random.Generator) -> np.ndarray:
        count = math.prod(shape)
        return ((rng.permutation(count) - count / 2 + 0.25) * spacing).reshape(shape)

    return make


def fractional(*shape: int, low: float = 0.2, high: float = 0.8) -> Maker:
    """Integers plus a fraction in [low, high]: away from the jumps of floor / ceil / trunc (and round with .5)."""
    return lambda rng: rng.integers(-3, 3, shape) + rng.uniform(low, high, shape)


def seeded(make: Callable[[], Tensor]) -> Tensor:
    """`make()` with the random generator reset first: every evaluation draws the same random numbers."""
    Tensor.manual_seed(5)
    return make()


def mask_tensor(*shape: int) -> Tensor:
    return Tensor(np.random.default_rng(99).random(shape) < 0.5)


S = (3, 4)
S3 = (2, 3, 4)

# ---------------------------------------------------------------------------------------------------------------
# the cases: method name -> list of (function of input tensors, input makers)
# ---------------------------------------------------------------------------------------------------------------

CASES: dict[str, list[Case]] = {
    # arithmetic (with broadcasting: the gradient of a broadcast input is summed over the broadcast dims)
    "add": [
        (lambda x, y: x.add(y), (normal(*S), normal(*S))),
        (lambda x, y: x.add(y, alpha=2.5), (normal(*S), normal(4))),
    ],
    "sub": [
        (lambda x, y: x.sub(y), (normal(*S), normal(3, 1))),
        (lambda x, y: x.sub(y, alpha=-1.5), (normal(*S), normal(*S))),
    ],
    "mul": [(lambda x, y: x.mul(y), (normal(*S3), normal(3, 1))), (lambda x: x.mul(3.0), (normal(*S),))],
    "div": [
        (lambda x, y: x.div(y), (normal(*S), uniform(0.5, 2.0, 4))),
        (lambda x, y: x.div(y, rounding_mode="trunc"), (uniform(0.1, 0.9, *S), uniform(2.0, 3.0, *S))),
        (lambda x, y: x.div(y, rounding_mode="floor"), (uniform(0.1, 0.9, *S), uniform(2.0, 3.0, *S))),
        (lambda x: x.div(2.0, reverse=True), (uniform(0.5, 2.0, *S),)),
    ],
    "floor_divide": [(lambda x, y: x.floor_divide(y), (uniform(0.1, 0.9, *S), uniform(2.0, 3.0, *S)))],
    "remainder": [(lambda x, y: x.remainder(y), (fractional(*S), uniform(0.9, 1.1, *S)))],
    "fmod": [(lambda x, y: x.fmod(y), (fractional(*S), uniform(0.9, 1.1, *S)))],
    "pow": [
        (lambda x, y: x.pow(y), (uniform(0.5, 2.0, *S), normal(*S))),
        (lambda x: x.pow(3), (normal(*S),)),
        (lambda x: x.pow(0.5), (uniform(0.5, 2.0, *S),)),
        (lambda x: x.pow(2.0, reverse=True), (normal(*S),)),
    ],
    "maximum": [(lambda x, y: x.maximum(y), (distinct(*S), distinct(*S, spacing=0.41)))],
    "minimum": [(lambda x, y: x.minimum(y), (distinct(*S), distinct(*S, spacing=0.41)))],
    "clamp": [
        (lambda x: x.clamp(-0.5, 0.5), (distinct(*S),)),
        (lambda x, low, high: x.clamp(low, high), (distinct(*S), uniform(-1.0, -0.95, *S), uniform(0.9, 1.0, 4))),
    ],
    "clip": [(lambda x: x.clip(min=-0.3), (distinct(*S),))],
    "lerp": [
        (lambda x, y, w: x.lerp(y, w), (normal(*S), normal(*S), uniform(0.1, 0.9, *S))),
        (lambda x, y: x.lerp(y, 0.7), (normal(*S), normal(*S))),
    ],
    "where": [(lambda x, y: (x > y).where(x * x, y), (distinct(*S), distinct(*S, spacing=0.29)))],
    "masked_fill": [(lambda x: x.masked_fill(mask_tensor(*S), 2.0), (normal(*S),))],
    # unary math
    "neg": [(lambda x: x.neg(), (normal(*S),))],
    "reciprocal": [(lambda x: x.reciprocal(), (uniform(0.5, 2.0, *S),))],
    "sqrt": [(lambda x: x.sqrt(), (uniform(0.3, 3.0, *S),))],
    "rsqrt": [(lambda x: x.rsqrt(), (uniform(0.3, 3.0, *S),))],
    "square": [(lambda x: x.square(), (normal(*S),))],
    "exp": [(lambda x: x.exp(), (normal(*S),))],
    "exp2": [(lambda x: x.exp2(), (normal(*S),))],
    "log": [(lambda x: x.log(), (uniform(0.3, 3.0, *S),))],
    "log2": [(lambda x: x.log2(), (uniform(0.3, 3.0, *S),))],
    "sin": [(lambda x: x.sin(), (normal(*S, scale=3.0),))],
    "cos": [(lambda x: x.cos(), (normal(*S, scale=3.0),))],
    "tan": [(lambda x: x.tan(), (uniform(-1.2, 1.2, *S),))],
    "trunc": [(lambda x: x.trunc(), (fractional(*S),))],
    "floor": [(lambda x: x.floor(), (fractional(*S),))],
    "ceil": [(lambda x: x.ceil(), (fractional(*S),))],
    "round": [(lambda x: x.round(), (fractional(*S, low=-0.3, high=0.3),))],
    "abs": [(lambda x: x.abs(), (distinct(*S),))],
    "sign": [(lambda x: x.sign(), (distinct(*S),))],
    "erf": [(lambda x: x.erf(), (normal(*S),))],
    "sigmoid": [(lambda x: x.sigmoid(), (normal(*S, scale=3.0),))],
    "tanh": [(lambda x: x.tanh(), (normal(*S, scale=2.0),))],
    "relu": [(lambda x: x.relu(), (distinct(*S),))],
    "relu6": [(lambda x: x.relu6(), (distinct(*S, spacing=1.3),))],
    "hardsigmoid": [(lambda x: x.hardsigmoid(), (distinct(*S, spacing=1.3),))],
    "hardswish": [(lambda x: x.hardswish(), (distinct(*S, spacing=1.3),))],
    "leaky_relu": [(lambda x: x.leaky_relu(0.1), (distinct(*S),))],
    "elu": [(lambda x: x.elu(), (distinct(*S),)), (lambda x: x.elu(alpha=0.5), (distinct(*S),))],
    "hardtanh": [(lambda x: x.hardtanh(), (distinct(*S, spacing=0.43),))],
    "gelu": [(lambda x: x.gelu(), (normal(*S, scale=2.0),)), (lambda x: x.gelu(approximate="tanh"), (normal(*S),))],
    "silu": [(lambda x: x.silu(), (normal(*S, scale=2.0),))],
    "swish": [(lambda x: x.swish(), (normal(*S),))],
    "softplus": [
        (lambda x: x.softplus(), (normal(*S, scale=2.0),)),
        (lambda x: x.softplus(beta=2.0, threshold=3.0), (distinct(*S, spacing=0.9),)),
    ],
    "mish": [(lambda x: x.mish(), (normal(*S, scale=2.0),))],
    # dtype changes (float32 / float16 rounding: see TOLERANCES)
    "cast": [(lambda x: x.cast(dtypes.float32), (normal(*S),))],
    "float": [(lambda x: x.float(), (normal(*S),))],
    "double": [(lambda x: x.float().double() * x, (normal(*S),))],
    "half": [(lambda x: x.half(), (normal(*S),))],
    "to": [(lambda x: x.to(x.device) * x, (normal(*S),))],
    "contiguous": [(lambda x: x.contiguous() * x, (normal(*S),))],
    # reductions
    "sum": [
        (lambda x: x.sum(), (normal(*S3),)),
        (lambda x: x.sum(axis=1), (normal(*S3),)),
        (lambda x: x.sum((0, 2), keepdim=True), (normal(*S3),)),
    ],
    "prod": [(lambda x: x.prod(axis=1), (uniform(0.5, 1.5, *S),)), (lambda x: x.prod(), (normal(2, 3),))],
    "mean": [(lambda x: x.mean(), (normal(*S3),)), (lambda x: x.mean(axis=-1, keepdim=True), (normal(*S3),))],
    "var": [(lambda x: x.var(axis=1), (normal(*S),)), (lambda x: x.var(correction=0), (normal(*S),))],
    "std": [(lambda x: x.std(axis=0), (normal(*S),)), (lambda x: x.std(), (normal(*S),))],
    "max": [(lambda x: x.max(), (distinct(*S),)), (lambda x: x.max(axis=1, keepdim=True).values, (distinct(*S3),))],
    "min": [(lambda x: x.min(), (distinct(*S),)), (lambda x: x.min(axis=0).values, (distinct(*S3),))],
    "amax": [(lambda x: x.amax((0, 2)), (distinct(*S3),)), (lambda x: x.amax(1, keepdim=True), (distinct(*S3),))],
    "amin": [(lambda x: x.amin(-1), (distinct(*S3),))],
    "logsumexp": [(lambda x: x.logsumexp(axis=1), (normal(*S, scale=3.0),)), (lambda x: x.logsumexp(), (normal(*S),))],
    "softmax": [(lambda x: x.softmax(-1), (normal(*S, scale=2.0),)), (lambda x: x.softmax(axis=0), (normal(*S3),))],
    "log_softmax": [
        (lambda x: x.log_softmax(-1), (normal(*S, scale=2.0),)),
        (lambda x: x.log_softmax(1), (normal(*S3),)),
    ],
    "cumsum": [(lambda x: x.cumsum(), (normal(*S),)), (lambda x: x.cumsum(axis=1), (normal(*S),))],
    "cummax": [(lambda x: x.cummax(axis=1)[0], (distinct(*S),))],
    # movement
    "reshape": [(lambda x: x.reshape(4, 3) * x.reshape(-1, 3), (normal(*S),))],
    "view": [(lambda x: x.view(2, 6), (normal(*S),))],
    "expand": [(lambda x: x.expand(3, 4, 2), (normal(3, 1, 2),)), (lambda x: x.expand(2, -1, -1), (normal(*S),))],
    "broadcast_to": [(lambda x: x.broadcast_to((2, 3, 4)), (normal(1, 4),))],
    "permute": [(lambda x: x.permute(2, 0, 1), (normal(*S3),))],
    "transpose": [(lambda x: x.transpose(0, 2), (normal(*S3),)), (lambda x: x.transpose(), (normal(*S),))],
    "T": [(lambda x: x.T * x.T, (normal(*S),))],
    "flatten": [(lambda x: x.flatten(), (normal(*S3),)), (lambda x: x.flatten(1), (normal(*S3),))],
    "unflatten": [(lambda x: x.unflatten(1, (2, 2)), (normal(*S),))],
    "squeeze": [(lambda x: x.squeeze(), (normal(3, 1, 4),)), (lambda x: x.squeeze(1), (normal(3, 1, 4),))],
    "unsqueeze": [(lambda x: x.unsqueeze(1), (normal(*S),)), (lambda x: x.unsqueeze(-1), (normal(*S),))],
    "flip": [(lambda x: x.flip(0), (normal(*S3),)), (lambda x: x.flip((1, 2)), (normal(*S3),))],
    "shrink": [(lambda x: x.shrink(((1, 3), None)), (normal(*S),))],
    "pad": [
        (lambda x: x.pad((1, 2)), (normal(*S),)),
        (lambda x: x.pad(((1, 0), (2, 1)), value=1.5), (normal(*S),)),
        (lambda x: x.pad((1, 2), mode="reflect"), (normal(*S),)),
        (lambda x: x.pad((2, 1, 1, 0), mode="replicate"), (normal(*S),)),
        (lambda x: x.pad((1, 2), mode="circular"), (normal(*S),)),
        (lambda x: x.pad((-1, 1)), (normal(*S),)),
    ],
    "cat": [(lambda x, y: x.cat(y, x, dim=1), (normal(*S), normal(3, 2)))],
    "stack": [(lambda x, y: x.stack(y, dim=1), (normal(*S), normal(*S)))],
    "split": [(lambda x: x.split(3, dim=1)[1] * x.split([1, 3], dim=1)[0], (normal(*S),))],
    "chunk": [(lambda x: x.chunk(2, dim=1)[0] * x.chunk(2, dim=1)[1], (normal(*S),))],
    "repeat": [(lambda x: x.repeat(2, 1, 3), (normal(*S),))],
    "tril": [(lambda x: x.tril(), (normal(4, 4),)), (lambda x: x.tril(-1), (normal(*S),))],
    "triu": [(lambda x: x.triu(1), (normal(4, 4),))],
    # linear algebra
    "matmul": [
        (lambda x, y: x.matmul(y), (normal(3, 4), normal(4, 5))),
        (lambda x, y: x.matmul(y), (normal(2, 3, 4), normal(4, 2))),
        (lambda x, y: x.matmul(y), (normal(2, 1, 3, 4), normal(3, 4, 2))),
        (lambda x, y: x.matmul(y), (normal(4), normal(4, 3))),
        (lambda x, y: x.matmul(y), (normal(3, 4), normal(4))),
    ],
    "dot": [(lambda x, y: x.dot(y), (normal(5), normal(5)))],
    "linear": [
        (lambda x, w, b: x.linear(w, b), (normal(3, 4), normal(2, 4), normal(2))),
        (lambda x, w: x.linear(w), (normal(2, 3, 4), normal(5, 4))),
    ],
    "einsum": [
        (lambda x, y: Tensor.einsum("ij,jk->ik", x, y), (normal(3, 4), normal(4, 2))),
        (lambda x, y: Tensor.einsum("bij,bkj->bik", x, y), (normal(2, 3, 4), normal(2, 5, 4))),
        (lambda x: Tensor.einsum("ii->i", x), (normal(4, 4),)),
        (lambda x, y: Tensor.einsum("i,j", x, y), (normal(3), normal(4))),
    ],
    "__matmul__": [(lambda x, y: x @ y, (normal(3, 4), normal(4, 2)))],
    "__rmatmul__": [(lambda x: [[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]] @ x, (normal(3, 4),))],
    # convolutions (every input: data, weight and bias)
    "conv1d": [
        (lambda x, w, b: x.conv1d(w, b, stride=2, padding=1), (normal(2, 2, 7), normal(3, 2, 3), normal(3))),
        (lambda x, w: x.conv1d(w, padding="same", dilation=2, groups=2), (normal(1, 4, 6), normal(4, 2, 2))),
    ],
    "conv2d": [
        (lambda x, w, b: x.conv2d(w, b), (normal(2, 2, 5, 4), normal(3, 2, 3, 2), normal(3))),
        (lambda x, w: x.conv2d(w, stride=(2, 1), padding=1, dilation=(1, 2)), (normal(1, 2, 5, 5), normal(2, 2, 2, 2))),
        (lambda x, w: x.conv2d(w, groups=2), (normal(1, 4, 4, 4), normal(2, 2, 3, 3))),
    ],
    "conv3d": [(lambda x, w, b: x.conv3d(w, b, padding=1), (normal(1, 2, 3, 3, 3), normal(2, 2, 2, 2, 2), normal(2)))],
    "conv_transpose1d": [
        (lambda x, w, b: x.conv_transpose1d(w, b, stride=2, padding=1), (normal(1, 2, 4), normal(2, 3, 3), normal(3)))
    ],
    "conv_transpose2d": [
        (lambda x, w, b: x.conv_transpose2d(w, b), (normal(1, 2, 3, 3), normal(2, 3, 2, 2), normal(3))),
        (
            lambda x, w: x.conv_transpose2d(w, stride=2, padding=1, output_padding=1, groups=2),
            (normal(1, 4, 3, 3), normal(4, 1, 3, 3)),
        ),
    ],
    "conv_transpose3d": [
        (lambda x, w: x.conv_transpose3d(w, stride=2), (normal(1, 2, 2, 2, 2), normal(2, 1, 2, 2, 2)))
    ],
    # pooling and resampling
    "max_pool1d": [(lambda x: x.max_pool1d(2), (distinct(2, 2, 6),))],
    "max_pool2d": [
        (lambda x: x.max_pool2d(2), (distinct(1, 2, 4, 4),)),
        (lambda x: x.max_pool2d(3, stride=2, padding=1, ceil_mode=True), (distinct(1, 1, 5, 5),)),
        (lambda x: x.max_pool2d((2, 1), dilation=(2, 1)), (distinct(1, 1, 5, 3),)),
    ],
    "max_pool3d": [(lambda x: x.max_pool3d(2), (distinct(1, 1, 4, 4, 2),))],
    "lp_pool1d": [(lambda x: x.lp_pool1d(2, 3), (uniform(0.5, 2.0, 1, 2, 7),))],
    "lp_pool2d": [(lambda x: x.lp_pool2d(3.0, 2, ceil_mode=True), (uniform(0.5, 2.0, 1, 1, 5, 5),))],
    "lp_pool3d": [(lambda x: x.lp_pool3d(1.5, 2), (uniform(0.5, 2.0, 1, 1, 2, 2, 4),))],
    "adaptive_avg_pool1d": [(lambda x: x.adaptive_avg_pool1d(3), (normal(2, 2, 7),))],
    "adaptive_avg_pool2d": [(lambda x: x.adaptive_avg_pool2d((2, 4)), (normal(1, 2, 5, 3),))],
    "adaptive_avg_pool3d": [(lambda x: x.adaptive_avg_pool3d(2), (normal(1, 1, 3, 4, 5),))],
    "adaptive_max_pool1d": [(lambda x: x.adaptive_max_pool1d(3), (distinct(2, 2, 7),))],
    "adaptive_max_pool2d": [(lambda x: x.adaptive_max_pool2d((2, 3)), (distinct(1, 2, 5, 4),))],
    "adaptive_max_pool3d": [(lambda x: x.adaptive_max_pool3d(2), (distinct(1, 1, 3, 4, 3),))],
    "max_unpool1d": [(lambda x: x.max_unpool1d(Tensor([[[0, 3, 5]]]), 2), (normal(1, 1, 3),))],
    "max_unpool2d": [(lambda x: x.max_unpool2d(Tensor([[[[0, 7], [9, 15]]]]), 2), (normal(1, 1, 2, 2),))],
    "max_unpool3d": [
        (lambda x: x.max_unpool3d(Tensor([[[[[0, 7]]]]]), 2, output_size=(2, 2, 4)), (normal(1, 1, 1, 1, 2),))
    ],
    "avg_pool1d": [(lambda x: x.avg_pool1d(3, stride=2, padding=1), (normal(2, 2, 7),))],
    "avg_pool2d": [
        (lambda x: x.avg_pool2d(2), (normal(1, 2, 4, 4),)),
        (lambda x: x.avg_pool2d(3, stride=2, padding=1, count_include_pad=False), (normal(1, 1, 5, 5),)),
        (lambda x: x.avg_pool2d(2, ceil_mode=True, divisor_override=3), (normal(1, 1, 5, 5),)),
    ],
    "avg_pool3d": [(lambda x: x.avg_pool3d(2, stride=1), (normal(1, 1, 3, 3, 3),))],
    "interpolate": [
        (lambda x: x.interpolate(scale_factor=2, mode="nearest"), (normal(1, 2, 3, 3),)),
        (lambda x: x.interpolate(size=5, mode="nearest-exact"), (normal(1, 1, 3),)),
        (lambda x: x.interpolate(size=(5, 4), mode="bilinear"), (normal(1, 2, 3, 3),)),
        (lambda x: x.interpolate(size=7, mode="linear", align_corners=True), (normal(2, 1, 4),)),
        (lambda x: x.interpolate(scale_factor=1.5, mode="trilinear"), (normal(1, 1, 2, 2, 2),)),
        (lambda x: x.interpolate(size=(5, 3), mode="bicubic"), (normal(1, 2, 3, 4),)),
        (lambda x: x.interpolate(size=(2, 3), mode="area"), (normal(1, 1, 5, 4),)),
    ],
    # sorting (values only: the positions are integers)
    "sort": [
        (lambda x: x.sort()[0], (distinct(*S),)),
        (lambda x: x.sort(dim=0, descending=True)[0], (distinct(*S),)),
    ],
    "topk": [
        (lambda x: x.topk(2)[0], (distinct(*S),)),
        (lambda x: x.topk(2, dim=0, largest=False)[0], (distinct(*S),)),
    ],
    # normalization
    "layer_norm": [
        (lambda x, w, b: x.layer_norm(4, w, b), (normal(*S3), normal(4), normal(4))),
        (lambda x: x.layer_norm((3, 4)), (normal(*S3),)),
    ],
    "batch_norm": [
        (lambda x, w, b: x.batch_norm(None, None, w, b, training=True), (normal(4, 3, 2), normal(3), normal(3))),
        (
            lambda x, mean, var: x.batch_norm(mean, var, training=False),
            (normal(4, 3), normal(3), uniform(0.5, 2.0, 3)),
        ),
    ],
    "group_norm": [(lambda x, w, b: x.group_norm(2, w, b), (normal(2, 4, 3), normal(4), normal(4)))],
    "rms_norm": [
        (lambda x, w: x.rms_norm(4, w), (normal(*S3), normal(4))),
        (lambda x: x.rms_norm((3, 4)), (normal(*S3),)),
    ],
    "dropout": [(lambda x: seeded(lambda: x.dropout(0.4)), (normal(4, 5),))],
    "scaled_dot_product_attention": [
        (lambda q, k, v: q.scaled_dot_product_attention(k, v), (normal(2, 3, 4), normal(2, 5, 4), normal(2, 5, 2))),
        (
            lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
            (normal(1, 4, 4), normal(1, 4, 4), normal(1, 4, 3)),
        ),
        (
            lambda q, k, v, m: q.scaled_dot_product_attention(k, v, attn_mask=m, scale=0.7),
            (normal(3, 4), normal(5, 4), normal(5, 2), normal(3, 5)),
        ),
    ],
    # losses
    "cross_entropy": [
        (lambda x: x.cross_entropy(Tensor([1, 0, 3])), (normal(3, 4),)),
        (lambda x, t: x.cross_entropy(t.softmax(-1)), (normal(3, 4), normal(3, 4))),
        (
            lambda x, w: x.cross_entropy(Tensor([1, 0, 3, 2]), weight=w, label_smoothing=0.1),
            (normal(4, 4), uniform(0.5, 2.0, 4)),
        ),
        (
            lambda x: x.cross_entropy(Tensor([[1, 0], [2, -100]]), ignore_index=-100, reduction="sum"),
            (normal(2, 3, 2),),
        ),
    ],
    "nll_loss": [
        (lambda x: x.log_softmax(-1).nll_loss(Tensor([2, 0, 1])), (normal(3, 4),)),
        (lambda x: x.nll_loss(Tensor([2, 0, 1]), reduction="none"), (normal(3, 4),)),
    ],
    "binary_cross_entropy": [
        (lambda x, t: x.binary_cross_entropy(t), (uniform(0.1, 0.9, *S), uniform(0.0, 1.0, *S))),
        (lambda x: x.binary_cross_entropy(Tensor(np.full(S, 0.3)), reduction="sum"), (uniform(0.1, 0.9, *S),)),
    ],
    "binary_cross_entropy_with_logits": [
        (lambda x, t: x.binary_cross_entropy_with_logits(t), (normal(*S), uniform(0.0, 1.0, *S))),
        (
            lambda x, p: x.binary_cross_entropy_with_logits(Tensor(np.full(S, 0.7)), pos_weight=p),
            (normal(*S), uniform(0.5, 2.0, 4)),
        ),
    ],
    "mse_loss": [
        (lambda x, t: x.mse_loss(t), (normal(*S), normal(*S))),
        (lambda x, t: x.mse_loss(t, reduction="sum"), (normal(*S), normal(4))),
    ],
    "l1_loss": [(lambda x, t: x.l1_loss(t), (distinct(*S), distinct(*S, spacing=0.29)))],
    "smooth_l1_loss": [(lambda x, t: x.smooth_l1_loss(t, beta=0.5), (distinct(*S), distinct(*S, spacing=0.29)))],
    "huber_loss": [(lambda x, t: x.huber_loss(t, delta=0.7), (distinct(*S), distinct(*S, spacing=0.29)))],
    "kl_div": [
        (lambda x, t: x.log_softmax(-1).kl_div(t.softmax(-1), reduction="batchmean"), (normal(*S), normal(*S))),
        (lambda x, t: x.kl_div(t, log_target=True), (normal(*S), normal(*S))),
    ],
    "margin_ranking_loss": [
        (lambda x, y: x.margin_ranking_loss(y, Tensor([1.0, -1.0, 1.0, -1.0]), margin=0.1), (distinct(4), normal(4)))
    ],
    "hinge_embedding_loss": [
        (lambda x: x.hinge_embedding_loss(Tensor(np.where(np.arange(12) % 3, 1.0, -1.0).reshape(S))), (distinct(*S),))
    ],
    "binary_crossentropy": [(lambda x: x.binary_crossentropy(Tensor(np.full(S, 0.2))), (uniform(0.1, 0.9, *S),))],
    "binary_crossentropy_logits": [
        (lambda x, p: x.binary_crossentropy_logits(Tensor(np.full(S, 0.6)), pos_weight=p), (normal(*S), normal(4)))
    ],
    "sparse_categorical_crossentropy": [
        (
            lambda x: x.sparse_categorical_crossentropy(Tensor([[1, -1, 3], [0, 2, 2]]), label_smoothing=0.2),
            (normal(2, 3, 4),),
        ),
    ],
    "cosine_similarity": [(lambda x, y: x.cosine_similarity(y, dim=-1), (normal(*S), normal(4)))],
    "pairwise_distance": [
        (lambda x, y: x.pairwise_distance(y), (normal(*S), normal(*S))),
        (lambda x, y: x.pairwise_distance(y, p=3.0), (normal(*S), normal(*S))),
    ],
    # indexing
    "__getitem__": [
        (lambda x: x[1], (normal(*S3),)),
        (lambda x: x[:, 1:3, ::2], (normal(*S3),)),
        (lambda x: x[..., ::-2, None], (normal(*S3),)),
        (lambda x: x[-1, :, 2], (normal(*S3),)),
        (lambda x: x[mask_tensor(*S)], (normal(*S),)),
        (lambda x: x[Tensor([2, 0, 2, 1])], (normal(*S),)),
        (lambda x: x[Tensor([0, 1, 1]), Tensor([3, 0, 3])], (normal(*S),)),
        (lambda x: x[:, [1, 1, 0]], (normal(*S3),)),
    ],
    "gather": [
        (lambda x: x.gather(1, Tensor([[0, 0, 3], [1, 2, 1], [3, 3, 3]])), (normal(*S),)),
        (lambda x: x.gather(0, Tensor([[2, 0, 1, 2], [0, 0, 0, 1]])), (normal(*S),)),
    ],
    "scatter": [
        (lambda x, y: x.scatter(1, Tensor([[2, 0], [1, 3], [0, 1]]), y), (normal(*S), normal(3, 2))),
        (lambda x, y: x.scatter(0, Tensor([[0, 1, 2, 0]]), y, reduce="add"), (normal(*S), normal(2, 4))),
        (lambda x, y: x.scatter(1, Tensor([[0, 0], [1, 1], [2, 3]]), y, reduce="multiply"), (normal(*S), normal(3, 2))),
    ],
    "scatter_add": [
        (lambda x, y: x.scatter_add(1, Tensor([[0, 0, 2], [1, 1, 1], [3, 0, 3]]), y), (normal(*S), normal(*S)))
    ],
    # operators
    "__add__": [(lambda x, y: x + y, (normal(*S), normal(*S)))],
    "__radd__": [(lambda x: 2.0 + x, (normal(*S),))],
    "__sub__": [(lambda x, y: x - y, (normal(*S), normal(4)))],
    "__rsub__": [(lambda x: 1.0 - x * x, (normal(*S),))],
    "__mul__": [(lambda x, y: x * y, (normal(*S), normal(*S)))],
    "__rmul__": [(lambda x: 3.0 * x * x, (normal(*S),))],
    "__truediv__": [(lambda x, y: x / y, (normal(*S), uniform(0.5, 2.0, *S)))],
    "__rtruediv__": [(lambda x: 1.0 / x, (uniform(0.5, 2.0, *S),))],
    "__floordiv__": [(lambda x: x // 2.5, (uniform(0.1, 2.4, *S),))],
    "__rfloordiv__": [(lambda x: 1.0 // x, (uniform(1.5, 2.0, *S),))],
    "__mod__": [(lambda x: x % 1.3, (uniform(0.1, 1.2, *S),))],
    "__rmod__": [(lambda x: 1.0 % x, (uniform(1.2, 2.0, *S),))],
    "__pow__": [(lambda x: x**2, (normal(*S),)), (lambda x, y: x**y, (uniform(0.5, 2.0, *S), normal(*S)))],
    "__rpow__": [(lambda x: 3.0**x, (normal(*S),))],
    "__neg__": [(lambda x: -x * x, (normal(*S),))],
    "__pos__": [(lambda x: +x * x, (normal(*S),))],
    "__abs__": [(lambda x: abs(x), (distinct(*S),))],
}

# rounding of a float64 -> narrower -> float64 round trip over the step: checked with a wider step
TOLERANCES: dict[str, tuple[float, float]] = {  # name -> (step, relative tolerance)
    "cast": (1e-2, 1e-4),
    "float": (1e-2, 1e-4),
    "double": (1e-2, 1e-4),
    "half": (1e-1, 2e-2),
}

INPLACE_DUNDERS = [
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__", "__iand__",
    "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__",
]  # fmt: skip
NOT_DIFFERENTIABLE: dict[str, str] = {
    **dict.fromkeys(
        [
            "arange",
            "empty",
            "empty_like",
            "eye",
            "full",
            "full_like",
            "linspace",
            "manual_seed",
            "normal",
            "ones",
            "ones_like",
            "rand",
            "rand_like",
            "randint",
            "randint_like",
            "randn",
            "randn_like",
            "uniform",
            "kaiming_uniform",
            "kaiming_normal",
            "glorot_uniform",
            "scaled_uniform",
            "xavier_uniform",
            "xavier_normal",
            "zeros",
            "zeros_like",
        ],
        "creates a tensor from its arguments (no tensor input to differentiate)",
    ),
    **dict.fromkeys(
        [
            "eq",
            "ne",
            "lt",
            "gt",
            "le",
            "ge",
            "isnan",
            "isinf",
            "isfinite",
            "all",
            "any",
            "argmax",
            "argmin",
            "argsort",
            "one_hot",
        ],
        "bool or integer result",
    ),
    **dict.fromkeys(
        [
            "logical_and",
            "logical_or",
            "logical_xor",
            "logical_not",
            "bitwise_and",
            "bitwise_or",
            "bitwise_xor",
            "bitwise_not",
            "lshift",
            "rshift",
            "bool",
            "int",
            "long",
            "bitcast",
        ],
        "integer or bool ops (no float gradient)",
    ),
    **dict.fromkeys(
        ["device", "dtype", "shape", "ndim", "nbytes", "element_size", "numel", "requires_grad", "no_grad", "grad"],
        "property, not an op",
    ),
    **dict.fromkeys(
        ["numpy", "item", "tolist", "data_buffer", "realize", "realize_all"], "reads or computes data, not an op"
    ),
    **dict.fromkeys(["backward", "gradient", "requires_grad_"], "autograd itself (tested in test_autograd.py)"),
    "detach": "a gradient stop: finite differences see through it (tested in test_autograd.py)",
    "assign": "writes into a buffer (gradient to the written value tested in test_autograd.py)",
    "__setitem__": "writes into a buffer by assign (gradient to the written value tested in test_autograd.py)",
    **dict.fromkeys(
        ["add_", "sub_", "mul_", "div_", "clamp_", "fill_", "zero_", "copy_", *INPLACE_DUNDERS],
        "in-place write by assign (values tested in test_mutation.py)",
    ),
}

# operator dunders that must be classified when Tensor defines them
OPERATOR_DUNDERS = [
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
    "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__neg__", "__pos__", "__abs__",
    "__matmul__", "__rmatmul__", "__getitem__", "__setitem__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
    "__ge__", "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__lshift__", "__rlshift__",
    "__rshift__", "__rrshift__", "__invert__", "__bool__", *INPLACE_DUNDERS,
]  # fmt: skip
NOT_DIFFERENTIABLE.update(
    dict.fromkeys(
        [
            "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__and__", "__rand__", "__or__", "__ror__",
            "__xor__", "__rxor__", "__lshift__", "__rlshift__", "__rshift__", "__rrshift__", "__invert__", "__bool__",
        ],
        "comparison, bitwise or truth value (no float gradient)",
    )
)  # fmt: skip

# ---------------------------------------------------------------------------------------------------------------
# the check
# ---------------------------------------------------------------------------------------------------------------


def directional_check(
    function: Callable[..., Tensor], arrays: list[np.ndarray], seed: int, step: float = 1e-6, tolerance: float = 1e-6
) -> None:
    """<gradient, v> against the central difference along v, for two random directions v per input."""
    rng = np.random.default_rng(seed)
    probe = function(*[Tensor(array) for array in arrays])
    assert dtypes.is_float(probe.dtype), f"result dtype {probe.dtype!r} is not a float"
    weights = Tensor(rng.uniform(0.5, 1.5, probe.shape))

    def loss(values: list[np.ndarray]) -> Tensor:
        return (function(*[Tensor(value) for value in values]) * weights).sum()

    inputs = [Tensor(array) for array in arrays]
    # each gradient in its own schedule: this file checks values, test_autograd_mlp.py checks joint schedules
    gradients = (function(*inputs) * weights).sum().gradient(*inputs)
    for position, (array, gradient_tensor) in enumerate(zip(arrays, gradients)):
        gradient = gradient_tensor.numpy()
        assert gradient.shape == array.shape and gradient.dtype == array.dtype
        for _ in range(2):
            direction = rng.normal(size=array.shape)
            plus = [value + step * direction if index == position else value for index, value in enumerate(arrays)]
            minus = [value - step * direction if index == position else value for index, value in enumerate(arrays)]
            numeric = (float(loss(plus).item()) - float(loss(minus).item())) / (2 * step)
            analytic = float(np.sum(gradient * direction))
            scale = float(np.sum(np.abs(gradient * direction))) + 1e-3
            assert abs(numeric - analytic) <= tolerance * max(1.0, scale), (
                f"input {position}: <gradient, v> = {analytic!r}, central difference {numeric!r}"
            )


CASE_IDS = [(name, index) for name in sorted(CASES) for index in range(len(CASES[name]))]


@pytest.mark.parametrize(("name", "index"), CASE_IDS, ids=[f"{name}-{index}" for name, index in CASE_IDS])
def test_gradient_matches_central_differences(name: str, index: int) -> None:
    if not hasattr(Tensor, name):
        pytest.skip(f"Tensor.{name} is not implemented yet")
    function, makers = CASES[name][index]
    seed = sum(map(ord, name)) * 10 + index
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(make(rng), dtype=np.float64) for make in makers]
    step, tolerance = TOLERANCES.get(name, (1e-6, 1e-6))
    directional_check(function, arrays, seed, step, tolerance)


def _public_names() -> list[str]:
    names = [name for name in dir(Tensor) if not name.startswith("_")]
    return names + [name for name in OPERATOR_DUNDERS if getattr(Tensor, name, None) is not getattr(object, name, None)]


def test_every_public_method_is_classified() -> None:
    # the API parity methods: gradients compared with torch's (conformance suite), aliases, or not differentiable
    classified_elsewhere = {**TORCH_CHECKED, **ALIASES, **NOT_DIFFERENTIABLE_API}
    unclassified = [
        name
        for name in _public_names()
        if name not in CASES and name not in NOT_DIFFERENTIABLE and name not in classified_elsewhere
    ]
    assert not unclassified, f"add gradient cases (or a NOT_DIFFERENTIABLE reason) for {unclassified}"
    assert not set(CASES) & set(NOT_DIFFERENTIABLE)


def test_not_differentiable_methods_give_no_float_results() -> None:
    # the "bool or integer result" group must really not return floats
    x = Tensor(np.array([[0.5, -1.0], [2.0, 3.0]]))
    results: dict[str, Any] = {
        "eq": x.eq(x), "lt": x.lt(1.0), "isnan": x.isnan(), "all": x.all(), "argmax": x.argmax(),
        "argmin": x.argmin(),
    }  # fmt: skip
    for name, result in results.items():
        assert not dtypes.is_float(result.dtype), name


def test_torch_checked_methods_name_gradient_cases() -> None:
    with_gradients = {case.name for case in CONFORMANCE_CASES if case.grad}
    missing = {name: case for name, case in TORCH_CHECKED.items() if case not in with_gradients}
    assert not missing, f"conformance cases without gradients (or unknown): {missing}"
    assert not set(TORCH_CHECKED) & set(ALIASES) and not set(ALIASES) & set(NOT_DIFFERENTIABLE_API)
    assert all(hasattr(Tensor, target) for target in ALIASES.values())
