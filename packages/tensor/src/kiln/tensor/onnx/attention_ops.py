"""Attention (opsets 23+: 3-D or 4-D inputs, grouped heads, boolean or additive masks, causal, KV cache, padding
lengths, sliding windows, softcap, the four qk_matmul_output modes) and RotaryEmbedding."""

from __future__ import annotations

import math

import numpy as np

from kiln.tensor import dtypes
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import operator
from kiln.tensor.onnx.types import dtype_of_element_type
from kiln.tensor.tensor import Tensor

__all__ = ["cache_rows", "rotate"]


def _split_heads(x: Tensor, heads: int) -> Tensor:
    """(batch, sequence, heads * size) -> (batch, heads, sequence, size)."""
    batch, sequence, hidden = x.shape
    return x.reshape(batch, sequence, heads, hidden // heads).permute(0, 2, 1, 3)


def _matmul(a: Tensor, b: Tensor) -> Tensor:
    """A product of half-precision operands accumulated in float32 and rounded once, as numpy's reference does."""
    if a.dtype in (dtypes.float16, dtypes.bfloat16):
        return a.cast(dtypes.float32).matmul(b.cast(dtypes.float32)).cast(a.dtype)
    return a.matmul(b)


def _guarded_softmax(x: Tensor) -> Tensor:
    """Softmax over the last dim where an all -inf row gives zeros instead of NaN."""
    peak = x.amax(-1, keepdim=True)
    safe = peak.isinf(detect_positive=False).where(0.0, peak).cast(x.dtype)
    exponentials = (x - safe).exp()
    total = exponentials.sum(-1, keepdim=True)
    return exponentials / (total == 0).where(1.0, total).cast(x.dtype)


def _allowed_bias(allowed: Tensor, dtype: object) -> Tensor:
    return allowed.where(0.0, -math.inf).cast(dtype)  # type: ignore[arg-type]


@operator(
    "Attention",
    attributes=[
        "is_causal",
        "kv_num_heads",
        "q_num_heads",
        "qk_matmul_output_mode",
        "scale",
        "softcap",
        "softmax_precision",
        "left_window_size",
        "right_window_size",
    ],
    since=23,
)
def _attention(call: NodeCall) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    query, key, value = call.tensor(0), call.tensor(1), call.tensor(2)
    mask, past_key, past_value, nonpad = call.optional(3), call.optional(4), call.optional(5), call.optional(6)
    attributes = call.attributes
    dtype = query.dtype
    three_d = query.ndim == 3
    if three_d:
        query = _split_heads(query, attributes.int("q_num_heads", 1))
        key = _split_heads(key, attributes.int("kv_num_heads", 1))
        value = _split_heads(value, attributes.int("kv_num_heads", 1))
    root_scale = math.sqrt(attributes.float("scale", 1 / math.sqrt(query.shape[3])))
    present_key = key if past_key is None else past_key.cat(key, dim=2)
    present_value = value if past_value is None else past_value.cat(value, dim=2)
    query_length, key_length = query.shape[2], present_key.shape[2]
    bias = Tensor.zeros(query_length, key_length, dtype=dtype)
    if mask is not None and mask.shape[-1] < key_length:
        padding = [(0, 0)] * (mask.ndim - 1) + [(0, key_length - mask.shape[-1])]
        mask = mask.pad(padding, value=False if mask.dtype == dtypes.bool else -math.inf)
    if mask is not None:
        mask = _allowed_bias(mask, dtype) if mask.dtype == dtypes.bool else mask.cast(dtype)
    nonpad_lengths = None if nonpad is None else np.asarray(call.host(6)).reshape(-1).astype(np.int64)
    if past_key is None and nonpad_lengths is not None:
        offset: np.ndarray = (nonpad_lengths - query_length).reshape(-1, 1, 1, 1)
    else:
        offset = np.array(0 if past_key is None else past_key.shape[2]).reshape(1, 1, 1, 1)
    rows = np.arange(query_length).reshape(1, 1, query_length, 1)
    columns = np.arange(key_length).reshape(1, 1, 1, key_length)
    difference = rows + offset - columns
    if attributes.int("is_causal", 0):
        base = bias if mask is None else mask
        bias = base + _allowed_bias(Tensor(difference >= 0), dtype).reshape(*difference.shape)
    elif mask is not None:
        bias = bias + mask
    left, right = attributes.int("left_window_size", -1), attributes.int("right_window_size", -1)
    if left >= 0 or right >= 0:
        allowed = np.ones_like(difference, dtype=bool)
        if left >= 0:
            allowed &= difference <= left
        if right >= 0:
            allowed &= -difference <= right
        bias = bias + _allowed_bias(Tensor(allowed), dtype)
    if nonpad_lengths is not None:
        padded = np.arange(key_length).reshape(1, 1, 1, key_length) < nonpad_lengths.reshape(-1, 1, 1, 1)
        bias = bias + _allowed_bias(Tensor(padded), dtype)
    heads = query.shape[1]
    if present_key.shape[1] != heads:
        repeats = heads // present_key.shape[1]
        key_heads, value_heads = present_key.repeat_interleave(repeats, 1), present_value.repeat_interleave(repeats, 1)
    else:
        key_heads, value_heads = present_key, present_value
    factor = Tensor(np.array(root_scale)).cast(dtype)
    scores = _matmul(query * factor, (key_heads * factor).transpose(-1, -2))
    softcap = attributes.float("softcap", 0.0)
    if softcap > 0:
        scores = (scores / softcap).tanh() * softcap
    with_bias = scores + bias
    mode = attributes.int("qk_matmul_output_mode", 0)
    precision = attributes.int("softmax_precision", 0)
    logits = with_bias.cast(dtype_of_element_type(precision, f"node {call.name}")) if precision else with_bias
    probabilities = _guarded_softmax(logits)
    row_masked = bias.amax(-1, keepdim=True).isinf(detect_positive=False)
    probabilities = row_masked.where(0.0, probabilities).cast(probabilities.dtype)
    exposed = {2: with_bias, 3: probabilities}.get(mode, scores).cast(dtype)
    output = _matmul(probabilities.cast(dtype), value_heads)
    if three_d:
        output = output.permute(0, 2, 1, 3).reshape(output.shape[0], output.shape[2], -1)
    return output, present_key, present_value, exposed


def rotate(x: Tensor, cosine: Tensor, sine: Tensor, heads: int, rotary: int, interleaved: bool) -> Tensor:
    """Rotary position embedding of `x`, (batch, heads, sequence, size) or (batch, sequence, heads * size).

    `cosine` and `sine` are (batch or 1, sequence, rotary / 2): the rows of the caches at each token's position. The
    first `rotary` channels of each head turn (in halves, or in (even, odd) pairs when `interleaved`), the rest pass.
    """
    original = x.shape
    if x.ndim == 4:
        x = x.permute(0, 2, 1, 3)
    else:
        x = x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads)
    rotary = rotary or x.shape[3]
    cosine, sine = cosine.unsqueeze(2), sine.unsqueeze(2)
    rotated, kept = x[..., :rotary], x[..., rotary:]
    if interleaved:
        first, second = rotated[..., 0::2], rotated[..., 1::2]
    else:
        first, second = rotated[..., : rotary // 2], rotated[..., rotary // 2 :]
    real = cosine * first - sine * second
    imaginary = sine * first + cosine * second
    if interleaved:
        rotated = real.unsqueeze(-1).cat(imaginary.unsqueeze(-1), dim=-1).reshape(rotated.shape)
    else:
        rotated = real.cat(imaginary, dim=-1)
    result = rotated.cat(kept, dim=-1) if kept.shape[-1] else rotated
    return result.reshape(original) if len(original) == 3 else result.permute(0, 2, 1, 3)


def cache_rows(cache: Tensor, positions: Tensor) -> Tensor:
    """The rows of a (positions, channels) cos / sin cache at `positions` (any shape): shape positions + (channels,)."""
    flat = positions.cast(dtypes.int64).reshape(-1)
    return cache.index_select(0, flat).reshape(*positions.shape, -1)


@operator("RotaryEmbedding", attributes=["interleaved", "num_heads", "rotary_embedding_dim"], since=23)
def _rotary_embedding(call: NodeCall) -> Tensor:
    x, cosine, sine, positions = call.tensor(0), call.tensor(1), call.tensor(2), call.optional(3)
    if positions is not None:
        cosine, sine = cache_rows(cosine, positions), cache_rows(sine, positions)
    attributes = call.attributes
    heads, rotary = attributes.int("num_heads", 0), attributes.int("rotary_embedding_dim", 0)
    return rotate(x, cosine, sine, heads, rotary, bool(attributes.int("interleaved", 0)))
