"""`kiln.tensor.nn.functional`: `torch.nn.functional`'s everyday functions with torch's signatures and defaults.

Code written as `F.relu(x)`, `F.cross_entropy(logits, y)` or `F.scaled_dot_product_attention(q, k, v,
is_causal=True)` runs unchanged with `import kiln.tensor.nn.functional as F`. Each function calls the Tensor method
that holds the computation (so the gradient and the kernels are the method's); this module adds torch's argument
order, `inplace=` (written back with the semantics of `Tensor.add_`), the implicit softmax dim and what has no Tensor
method (`glu`, `bilinear`, `embedding`'s options, channel dropout, `instance_norm`). The losses live in
`functional_losses.py`, the convolutions, pools and resampling in `functional_spatial.py`; both are re-exported here.

Differences from torch: `embedding(sparse=True)` returns a dense gradient (kiln has no sparse tensors);
`interpolate(antialias=True)` raises NotImplementedError; dropout masks come from kiln's generator, not torch's.
"""

from __future__ import annotations

import warnings

from kiln.tensor.nn.functional_ctc import ctc_loss
from kiln.tensor.nn.functional_embedding import embedding, embedding_bag, one_hot
from kiln.tensor.nn.functional_grid import affine_grid, grid_sample
from kiln.tensor.nn.functional_losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cosine_embedding_loss,
    cross_entropy,
    gaussian_nll_loss,
    hinge_embedding_loss,
    huber_loss,
    kl_div,
    l1_loss,
    margin_ranking_loss,
    mse_loss,
    multi_margin_loss,
    multilabel_margin_loss,
    multilabel_soft_margin_loss,
    nll_loss,
    poisson_nll_loss,
    smooth_l1_loss,
    soft_margin_loss,
    triplet_margin_loss,
    triplet_margin_with_distance_loss,
)
from kiln.tensor.nn.functional_normalization import (
    batch_norm,
    group_norm,
    instance_norm,
    layer_norm,
    local_response_norm,
    normalize,
    rms_norm,
)
from kiln.tensor.nn.functional_spatial import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool1d_with_indices,
    adaptive_max_pool2d,
    adaptive_max_pool2d_with_indices,
    adaptive_max_pool3d,
    adaptive_max_pool3d_with_indices,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    fold,
    interpolate,
    lp_pool1d,
    lp_pool2d,
    lp_pool3d,
    max_pool1d,
    max_pool1d_with_indices,
    max_pool2d,
    max_pool2d_with_indices,
    max_pool3d,
    max_pool3d_with_indices,
    max_unpool1d,
    max_unpool2d,
    max_unpool3d,
    pad,
    pixel_shuffle,
    pixel_unshuffle,
    unfold,
    upsample,
    upsample_bilinear,
    upsample_nearest,
)
from kiln.tensor.tensor import Tensor
from kiln.uops import DType

__all__ = [
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
    "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d", "adaptive_max_pool2d_with_indices",
    "adaptive_max_pool3d", "adaptive_max_pool3d_with_indices", "affine_grid", "alpha_dropout", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "batch_norm", "bilinear", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "celu", "celu_", "channel_shuffle", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "cosine_embedding_loss", "cosine_similarity",
    "cross_entropy", "ctc_loss", "dropout", "dropout1d", "dropout2d", "dropout3d", "elu", "elu_", "embedding",
    "embedding_bag", "feature_alpha_dropout", "fold", "gaussian_nll_loss", "gelu", "glu", "grid_sample",
    "group_norm", "gumbel_softmax", "hardshrink", "hardsigmoid", "hardswish", "hardtanh", "hardtanh_",
    "hinge_embedding_loss", "huber_loss", "instance_norm", "interpolate", "kl_div", "l1_loss", "layer_norm",
    "leaky_relu", "leaky_relu_", "linear", "local_response_norm", "log_softmax", "logsigmoid", "lp_pool1d",
    "lp_pool2d", "lp_pool3d", "margin_ranking_loss", "max_pool1d", "max_pool1d_with_indices", "max_pool2d",
    "max_pool2d_with_indices", "max_pool3d", "max_pool3d_with_indices", "max_unpool1d", "max_unpool2d",
    "max_unpool3d", "mish", "mse_loss", "multi_margin_loss", "multilabel_margin_loss",
    "multilabel_soft_margin_loss", "nll_loss", "normalize", "one_hot", "pad", "pairwise_distance", "pdist",
    "pixel_shuffle", "pixel_unshuffle", "poisson_nll_loss", "prelu", "relu", "relu6", "relu_", "rms_norm", "rrelu",
    "rrelu_", "scaled_dot_product_attention", "selu", "selu_", "sigmoid", "silu", "smooth_l1_loss",
    "soft_margin_loss", "softmax", "softmin", "softplus", "softshrink", "softsign", "tanh", "tanhshrink",
    "threshold", "threshold_", "triplet_margin_loss", "triplet_margin_with_distance_loss", "unfold", "upsample",
    "upsample_bilinear", "upsample_nearest",
]  # fmt: skip


def _maybe_inplace(input: Tensor, result: Tensor, inplace: bool) -> Tensor:
    # inplace=True writes the result into input like torch's `relu_`: the rules of Tensor's in-place methods apply
    return input._write_result(result) if inplace else result


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(input, 0), like `torch.nn.functional.relu`.

    Example:
        >>> relu(Tensor([-1.0, 2.0])).tolist()
        [0.0, 2.0]
    """
    return _maybe_inplace(input, input.relu(), inplace)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """min(max(input, 0), 6), like `torch.nn.functional.relu6`."""
    return _maybe_inplace(input, input.relu6(), inplace)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """input where positive, negative_slope * input elsewhere, like `torch.nn.functional.leaky_relu`."""
    return _maybe_inplace(input, input.leaky_relu(negative_slope), inplace)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """input where positive, alpha (exp(input) - 1) elsewhere, like `torch.nn.functional.elu`."""
    return _maybe_inplace(input, input.elu(alpha), inplace)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """scale * elu(input, alpha) with the self-normalizing constants, like `torch.nn.functional.selu`."""
    return _maybe_inplace(input, input.selu(), inplace)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1)), like `torch.nn.functional.celu`."""
    return _maybe_inplace(input, input.celu(alpha), inplace)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """x Phi(x), exact ('none') or with the tanh approximation ('tanh'), like `torch.nn.functional.gelu`."""
    return input.gelu(approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """x sigmoid(x), like `torch.nn.functional.silu`."""
    return _maybe_inplace(input, input.silu(), inplace)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """x tanh(softplus(x)), like `torch.nn.functional.mish`."""
    return _maybe_inplace(input, input.mish(), inplace)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, linear where beta x > threshold, like `torch.nn.functional.softplus`."""
    return input.softplus(beta, threshold)


def softsign(input: Tensor) -> Tensor:
    """x / (1 + |x|), like `torch.nn.functional.softsign`."""
    return input.softsign()


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """x relu6(x + 3) / 6, like `torch.nn.functional.hardswish`."""
    return _maybe_inplace(input, input.hardswish(), inplace)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """relu6(x + 3) / 6, like `torch.nn.functional.hardsigmoid`."""
    return _maybe_inplace(input, input.hardsigmoid(), inplace)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """input clamped to [min_val, max_val], like `torch.nn.functional.hardtanh`."""
    return _maybe_inplace(input, input.hardtanh(min_val, max_val), inplace)


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """input where |input| > lambd, else 0, like `torch.nn.functional.hardshrink`."""
    return input.hardshrink(lambd)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """input shrunk toward 0 by lambd (0 inside [-lambd, lambd]), like `torch.nn.functional.softshrink`."""
    return input.softshrink(lambd)


def tanhshrink(input: Tensor) -> Tensor:
    """x - tanh(x), like `torch.nn.functional.tanhshrink`."""
    return input.tanhshrink()


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """input where input > threshold, else value, like `torch.nn.functional.threshold`."""
    return _maybe_inplace(input, (input > threshold).where(input, value)._cast(input.dtype), inplace)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """input where positive, weight * input elsewhere (one weight, or one per channel of dim 1), like
    `torch.nn.functional.prelu`."""
    return input.prelu(weight)


def sigmoid(input: Tensor) -> Tensor:
    """1 / (1 + exp(-x)), like `torch.nn.functional.sigmoid`."""
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    """tanh(x), like `torch.nn.functional.tanh`."""
    return input.tanh()


def logsigmoid(input: Tensor) -> Tensor:
    """log(sigmoid(x)), computed stably, like `torch.nn.functional.logsigmoid`."""
    return input.logsigmoid()


def _softmax_dim(name: str, ndim: int, dim: int | None) -> int:
    if dim is not None:
        return dim
    # torch's legacy choice when no dim is given: dim 0 for 0-, 1- and 3-d inputs, else dim 1
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: DType | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along `dim` (computed in `dtype` when given), like `torch.nn.functional.softmax`.

    Example:
        >>> softmax(Tensor([0.0, 0.0]), dim=0).tolist()
        [0.5, 0.5]
    """
    return input.softmax(_softmax_dim("softmax", input.ndim, dim), dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: DType | None = None) -> Tensor:
    """log(softmax(x)) along `dim`, computed stably, like `torch.nn.functional.log_softmax`."""
    return input.log_softmax(_softmax_dim("log_softmax", input.ndim, dim), dtype=dtype)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: DType | None = None) -> Tensor:
    """softmax(-x) along `dim`, like `torch.nn.functional.softmin`."""
    return input.softmin(_softmax_dim("softmin", input.ndim, dim), dtype=dtype)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """The gated linear unit a * sigmoid(b), a and b the two halves of `input` along `dim`, like
    `torch.nn.functional.glu`."""
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    if not -input.ndim <= dim < input.ndim:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-input.ndim}, {input.ndim - 1}], but got {dim})"
        )
    size = input.shape[dim]
    if size % 2 != 0:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim % input.ndim} is size {size}")
    first, second = input.chunk(2, dim)
    return first * second.sigmoid()


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """input @ weight.T + bias, like `torch.nn.functional.linear`."""
    return input.linear(weight, bias)


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y_o = input1 W_o input2 + b_o for weight (out, in1, in2), like `torch.nn.functional.bilinear`."""
    if weight.ndim != 3:
        raise RuntimeError(f"bilinear(): weight must be three-dimensional, but got {weight.ndim}")
    if input1.shape[:-1] != input2.shape[:-1]:
        raise RuntimeError(
            f"bilinear(): input batch dimensions do not match: got {list(input1.shape[:-1])} and "
            f"{list(input2.shape[:-1])}"
        )
    if input1.shape[-1] != weight.shape[1] or input2.shape[-1] != weight.shape[2]:
        raise RuntimeError(
            f"bilinear(): input sizes {input1.shape[-1]} and {input2.shape[-1]} do not match weight of shape "
            f"{list(weight.shape)}"
        )
    batch = input1.shape[:-1]
    # (..., 1, 1, in1) @ (out, in1, in2) -> (..., out, 1, in2), then contracted with input2 over in2
    left = input1.reshape(*batch, 1, 1, input1.shape[-1]) @ weight
    result = (left.squeeze(-2) * input2.unsqueeze(-2)).sum(-1)
    if bias is not None:
        if bias.shape != (weight.shape[0],):
            raise RuntimeError(f"bilinear(): bias must have shape [{weight.shape[0]}], got {list(bias.shape)}")
        result = result + bias
    return result


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Each element zeroed with probability p, the rest scaled by 1 / (1 - p), when `training`, like
    `torch.nn.functional.dropout`."""
    _check_dropout(p)
    return _maybe_inplace(input, input.dropout(p, training), inplace)


def _check_dropout(p: float) -> None:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _warn_unusual_rank(input: Tensor, name: str, ranks: tuple[int, ...]) -> None:
    # torch's deprecation warning for channel dropout of an input of another rank (pointing at the caller's caller)
    if input.ndim not in ranks:
        warnings.warn(
            f"{name}: Received a {input.ndim}-D input to {name}, which is deprecated and will result in an error in "
            "a future release.",
            stacklevel=3,
        )


def _channel_dropout(input: Tensor, p: float, training: bool, inplace: bool, lead: int) -> Tensor:
    # one draw per entry of the first `lead` dims (sample and channel), broadcast over the rest
    _check_dropout(p)
    if input.ndim < 2 and lead == 2:
        raise RuntimeError(
            f"Feature dropout requires at least 2 dimensions in the input, got shape {list(input.shape)}"
        )
    if not training or p == 0:
        return input
    kept = input.shape[:lead]
    mask = Tensor.ones(*kept, *([1] * (input.ndim - lead)), dtype=input.dtype, device=input.device)
    return _maybe_inplace(input, input * mask.dropout(p, True), inplace)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zeroes whole channels of (N, C, L) or (C, L) with probability p, like `torch.nn.functional.dropout1d`."""
    _check_dropout(p)
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that dropout1d exists to "
            "provide channel-wise dropout on inputs with 1 spatial dimension, a channel dimension, and an optional "
            "batch dimension (i.e. 2D or 3D inputs)."
        )
    return _channel_dropout(input, p, training, inplace, input.ndim - 1)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zeroes whole channels of (N, C, H, W) with probability p, like `torch.nn.functional.dropout2d`. As in torch,
    dims 0 and 1 are always sample and channel: a 3-d input is read as (N, C, L) and other ranks warn."""
    _check_dropout(p)
    _warn_unusual_rank(input, "dropout2d", (3, 4))
    if input.ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior is "
            "desired - input is interpreted as shape (N, C, L), where C is the channel dim.",
            stacklevel=2,
        )
    return _channel_dropout(input, p, training, inplace, 2)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zeroes whole channels of (N, C, D, H, W) or (C, D, H, W) with probability p, like
    `torch.nn.functional.dropout3d` (an input of another rank warns and is read as unbatched, as in torch)."""
    _check_dropout(p)
    _warn_unusual_rank(input, "dropout3d", (4, 5))
    return _channel_dropout(input, p, training, inplace, 2 if input.ndim == 5 else 1)


def scaled_dot_product_attention(
    query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
    is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
) -> Tensor:  # fmt: skip
    """softmax(query key^T * scale + mask) value over (..., L, E) / (..., S, E) / (..., S, Ev), like
    `torch.nn.functional.scaled_dot_product_attention` (a bool `attn_mask` keeps True; `is_causal` masks the upper
    triangle; `enable_gqa` repeats key / value heads to the query's head count)."""
    return query.scaled_dot_product_attention(key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """x1 . x2 / max(||x1|| ||x2||, eps) along `dim`, like `torch.nn.functional.cosine_similarity`."""
    return x1.cosine_similarity(x2, dim, eps)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """||x1 - x2 + eps||_p over the last dim, like `torch.nn.functional.pairwise_distance`."""
    return x1.pairwise_distance(x2, p, eps, keepdim)


# torch's SELU constants: alpha dropout keeps SELU activations at zero mean and unit variance
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _alpha_dropout(input: Tensor, p: float, training: bool, inplace: bool, lead: int) -> Tensor:
    _check_dropout(p)
    if not training or p == 0:
        return input
    if p == 1:
        return _maybe_inplace(input, input * 0.0, inplace)
    # dropped entries become SELU's saturation value -alpha'; then a * x + b restores the mean and variance
    alpha = _SELU_ALPHA * _SELU_SCALE
    a = 1.0 / ((alpha * alpha * p + 1) * (1 - p)) ** 0.5
    mask_shape = (*input.shape[:lead], *([1] * (input.ndim - lead)))
    keep = (Tensor.rand(*mask_shape, device=input.device) >= p).cast(input.dtype)
    result = input * (keep * a) + ((keep - 1) * (alpha * a) + alpha * a * p)
    return _maybe_inplace(input, result._cast(input.dtype), inplace)


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Dropout that keeps SELU's self-normalization: dropped elements take the value -alpha' = -1.7581 and the
    result is scaled and shifted back to the input's mean and variance, like `torch.nn.functional.alpha_dropout`
    (note torch's default training=False)."""
    return _alpha_dropout(input, p, training, inplace, input.ndim)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """`alpha_dropout` of whole channels (one draw per sample and channel of (N, C, *)), like
    `torch.nn.functional.feature_alpha_dropout`."""
    if input.ndim < 2:
        raise RuntimeError(
            f"Feature dropout requires at least 2 dimensions in the input, got shape {list(input.shape)}"
        )
    return _alpha_dropout(input, p, training, inplace, 2)


def rrelu(
    input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False, inplace: bool = False
) -> Tensor:
    """Randomized leaky ReLU: negative inputs scaled by a slope drawn from U(lower, upper) per element when
    `training`, by (lower + upper) / 2 otherwise, like `torch.nn.functional.rrelu`."""
    if not training:
        return _maybe_inplace(input, input.leaky_relu((lower + upper) / 2), inplace)
    slopes = Tensor.uniform(*input.shape, low=lower, high=upper, dtype=input.dtype, device=input.device)
    return _maybe_inplace(input, (input >= 0).where(input, input * slopes), inplace)


def relu_(input: Tensor) -> Tensor:
    """`relu` written into `input` (returned), like `torch.nn.functional.relu_`."""
    return relu(input, inplace=True)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    """`elu` written into `input` (returned), like `torch.nn.functional.elu_`."""
    return elu(input, alpha, inplace=True)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    """`celu` written into `input` (returned), like `torch.nn.functional.celu_`."""
    return celu(input, alpha, inplace=True)


def selu_(input: Tensor) -> Tensor:
    """`selu` written into `input` (returned), like `torch.nn.functional.selu_`."""
    return selu(input, inplace=True)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    """`leaky_relu` written into `input` (returned), like `torch.nn.functional.leaky_relu_`."""
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """`hardtanh` written into `input` (returned), like `torch.nn.functional.hardtanh_`."""
    return hardtanh(input, min_val, max_val, inplace=True)


def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False) -> Tensor:
    """`rrelu` written into `input` (returned), like `torch.nn.functional.rrelu_`."""
    return rrelu(input, lower, upper, training, inplace=True)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    """`threshold` written into `input` (returned), like `torch.nn.functional.threshold_`."""
    return _maybe_inplace(input, (input > threshold).where(input, value)._cast(input.dtype), True)


def pdist(input: Tensor, p: float = 2.0) -> Tensor:
    """The p-norm distances between every pair of rows i < j of an (N, M) input, in row-major order of (i, j): a
    vector of N (N - 1) / 2 values, like `torch.nn.functional.pdist`."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if not isinstance(p, (int, float)) or isinstance(p, bool) or p < 0:
        raise RuntimeError(f"pdist only supports non-negative p values, got {p!r}")
    rows = input.shape[0]
    firsts = [i for i in range(rows) for _ in range(i + 1, rows)]
    seconds = [j for i in range(rows) for j in range(i + 1, rows)]
    if not firsts:
        return input.reshape(-1)[:0]
    first = Tensor(firsts, device=input.device)
    second = Tensor(seconds, device=input.device)
    return (input[first] - input[second]).norm(float(p), dim=1)


def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1) -> Tensor:
    """A sample of the Gumbel-softmax distribution softmax((logits + g) / tau) with g ~ Gumbel(0, 1) (`hard`: the
    one-hot of its argmax, with the soft sample's gradient), like `torch.nn.functional.gumbel_softmax`."""
    uniform = Tensor.rand(*logits.shape, device=logits.device).clamp(min=1e-20, max=1.0 - 1e-7)
    gumbels = -(-uniform.log()).log()
    soft = ((logits + gumbels.cast(logits.dtype)) / tau).softmax(dim)
    if not hard:
        return soft
    axis = dim % logits.ndim
    index = soft.argmax(axis, keepdim=True)
    positions = Tensor.arange(logits.shape[axis], device=logits.device).reshape(
        *[logits.shape[axis] if d == axis else 1 for d in range(logits.ndim)]
    )
    one_hot_sample = (positions == index).cast(soft.dtype)
    return one_hot_sample - soft.detach() + soft


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """(N, g * k, *) -> channels reordered as k groups of g (channel i * k + j goes to j * g + i), like
    `torch.nn.functional.channel_shuffle`."""
    if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    if input.ndim < 3:
        raise RuntimeError(
            f"channel_shuffle expects input to have at least 3 dimensions, but got input with {input.ndim} dimension(s)"
        )
    channels = input.shape[1]
    if channels % groups != 0:
        raise RuntimeError(
            f"Number of channels must be divisible by groups. Got {channels} channels and {groups} groups."
        )
    batch, rest = input.shape[0], input.shape[2:]
    grouped = input.reshape(batch, groups, channels // groups, *rest)
    return grouped.transpose(1, 2).reshape(input.shape)
