"""onnxruntime's com.microsoft contrib operators that PyTorch and Hugging Face exports contain once onnxruntime's
transformer optimizer has fused them: the GELU family, the skip / simplified layer norms, Attention,
MultiHeadAttention, GroupQueryAttention, RotaryEmbedding and the 2/4/8-bit weight-only MatMulNBits.

Semantics follow onnxruntime's ContribOperators documentation; onnxruntime is the oracle of the tests. Modes a rule
does not implement are refused at load (an attribute value) or when the input shapes show them (a mask format).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from kiln.tensor import dtypes
from kiln.tensor.onnx.attention_ops import cache_rows, rotate
from kiln.tensor.onnx.attributes import Attributes
from kiln.tensor.onnx.materialize import materialized_if_computed
from kiln.tensor.onnx.node_call import NodeCall
from kiln.tensor.onnx.registry import MICROSOFT_DOMAIN, all_checks, operator
from kiln.tensor.tensor import Tensor

__all__: list[str] = []

_MS = MICROSOFT_DOMAIN


def _zero(name: str) -> Callable[[Attributes, int], str | None]:
    """A load-time check that integer attribute `name` is 0 (its other values name modes kiln does not run)."""

    def check(attributes: Attributes, opset: int) -> str | None:
        value = attributes.int(name, 0)
        return None if value == 0 else f"attribute {name}={value} (only 0)"

    return check


def _normalize(x: Tensor, epsilon: float, simplified: bool, axis: int = -1) -> tuple[Tensor, Tensor, Tensor]:
    """(normalized, mean, inverse deviation) over the dims from `axis` on, in float32 for half-precision input."""
    axes = tuple(range(axis % x.ndim, x.ndim))
    compute = x.cast(dtypes.float32) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x
    if simplified:
        mean = compute.zeros_like().sum(axes, keepdim=True)
        inverse = ((compute * compute).mean(axes, keepdim=True) + epsilon).rsqrt()
        return (compute * inverse).cast(x.dtype), mean, inverse
    mean = compute.mean(axes, keepdim=True)
    centered = compute - mean  # squared as a product, not a general power (log2 and exp2 per element)
    variance = (centered * centered).mean(axes, keepdim=True)
    inverse = (variance + epsilon).rsqrt()
    return (centered * inverse).cast(x.dtype), mean, inverse


@operator("Gelu", domain=_MS)
def _gelu(call: NodeCall) -> Tensor:
    return call.tensor(0).gelu()


@operator("BiasGelu", domain=_MS)
def _bias_gelu(call: NodeCall) -> Tensor:
    return (call.tensor(0) + call.tensor(1)).gelu()


@operator("FastGelu", domain=_MS)
def _fast_gelu(call: NodeCall) -> Tensor:
    x, bias = call.tensor(0), call.optional(1)
    return (x if bias is None else x + bias).gelu(approximate="tanh")


@operator("QuickGelu", attributes=["alpha"], domain=_MS)
def _quick_gelu(call: NodeCall) -> Tensor:
    x = call.tensor(0)
    return x * (x * call.attributes.float("alpha", 1.702)).sigmoid()


@operator("BiasAdd", domain=_MS)
def _bias_add(call: NodeCall) -> Tensor:
    return call.tensor(0) + call.tensor(1) + call.tensor(2)


@operator(
    "LayerNormalization", "SimplifiedLayerNormalization", attributes=["axis", "epsilon", "stash_type"], domain=_MS
)
def _layer_normalization(call: NodeCall) -> tuple[Tensor, Tensor, Tensor] | tuple[Tensor, Tensor]:
    """LayerNormalization as onnxruntime runs it before opset 17; SimplifiedLayerNormalization is RMS normalization
    (outputs: result and inverse deviation)."""
    simplified = call.op_type == "SimplifiedLayerNormalization"
    x, scale, bias = call.tensor(0), call.tensor(1), None if simplified else call.optional(2)
    attributes = call.attributes
    normalized, mean, inverse = _normalize(x, attributes.float("epsilon", 1e-5), simplified, attributes.int("axis", -1))
    result = normalized * scale
    if bias is not None:
        result = result + bias
    return (result, inverse) if simplified else (result, mean, inverse)


@operator("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", attributes=["epsilon"], domain=_MS)
def _skip_layer_normalization(call: NodeCall) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Normalize input + skip (+ bias); outputs: result, mean, inverse deviation, and the sum itself.

    SkipLayerNormalization's inputs are (input, skip, gamma, beta, bias); the simplified (RMS) form has no beta:
    (input, skip, gamma, bias)."""
    simplified = call.op_type == "SkipSimplifiedLayerNormalization"
    x, skip, gamma = call.tensor(0), call.tensor(1), call.tensor(2)
    beta, bias = (None, call.optional(3)) if simplified else (call.optional(3), call.optional(4))
    total = x + skip
    if bias is not None:
        total = total + bias
    # read three times (mean, variance, result) and handed out: computed once, in the kernel of the product before
    total = materialized_if_computed(total)
    normalized, mean, inverse = _normalize(total, call.attributes.float("epsilon", 1e-12), simplified)
    result = normalized * gamma
    if beta is not None:
        result = result + beta
    return result, mean, inverse, total


def _split_heads(x: Tensor, heads: int) -> Tensor:
    """(batch, sequence, heads * size) -> (batch, heads, sequence, size)."""
    batch, sequence, hidden = x.shape
    return x.reshape(batch, sequence, heads, hidden // heads).permute(0, 2, 1, 3)


def _merge_heads(x: Tensor) -> Tensor:
    """(batch, heads, sequence, size) -> (batch, sequence, heads * size)."""
    batch, heads, sequence, size = x.shape
    return x.permute(0, 2, 1, 3).reshape(batch, sequence, heads * size)


def _key_mask(call: NodeCall, index: int, batch: int, queries: int, keys: int, filter_value: float) -> Tensor | None:
    """The additive (batch, 1, queries or 1, keys) bias of a mask input: `filter_value` where a key is hidden.

    Formats: (batch, keys) or (batch, queries, keys) of 1 (attend) / 0 (hide), or (batch,) valid lengths."""
    if not call.has(index):
        return None
    mask = call.tensor(index)
    shape = tuple(mask.shape)
    if shape == (batch,):
        lengths = mask.cast(dtypes.int64).reshape(batch, 1, 1, 1)
        hidden = Tensor.arange(keys).reshape(1, 1, 1, keys) >= lengths
    elif shape == (batch, keys):
        hidden = (mask == 0).reshape(batch, 1, 1, keys)
    elif shape == (batch, queries, keys):
        hidden = (mask == 0).reshape(batch, 1, queries, keys)
    else:
        raise NotImplementedError(
            f"node {call.name!r} ({call.op_type}): mask of shape {list(shape)}; kiln reads ({batch},) lengths, "
            f"({batch}, {keys}) or ({batch}, {queries}, {keys}) 0/1 masks"
        )
    return hidden.where(filter_value, 0.0)


def _causal(queries: int, keys: int, filter_value: float, window: int = -1) -> Tensor:
    """(queries, keys) additive bias of a causal mask whose queries are the last `queries` of `keys` positions;
    with `window` > 0 a query sees only the last `window` keys up to its own position (itself included)."""
    rows = np.arange(queries).reshape(-1, 1) + (keys - queries)
    columns = np.arange(keys).reshape(1, -1)
    hidden = columns > rows
    if window > 0:
        hidden |= columns <= rows - window
    return Tensor(np.where(hidden, filter_value, 0.0).astype(np.float32))


def _attend(
    query: Tensor, key: Tensor, value: Tensor, scale: float, biases: Sequence[Tensor | None], softcap: float = 0.0
) -> Tensor:
    """softmax(query @ key^T * scale [softcapped] + biases) @ value over (batch, heads, sequence, size) Tensors,
    key and value heads repeated to query's (grouped-query attention)."""
    heads = query.shape[1]
    if key.shape[1] != heads:
        key, value = key.repeat_interleave(heads // key.shape[1], 1), value.repeat_interleave(heads // key.shape[1], 1)
    scores = query.matmul(key.transpose(-1, -2)) * scale
    if softcap > 0:
        scores = (scores / softcap).tanh() * softcap
    for bias in biases:
        if bias is not None:
            scores = scores + bias.cast(scores.dtype)
    return scores.softmax(-1).matmul(value)


@operator(
    "Attention",
    attributes=[
        "num_heads",
        "unidirectional",
        "qkv_hidden_sizes",
        "mask_filter_value",
        "scale",
        "do_rotary",
        "past_present_share_buffer",
        "rotary_embedding_dim",
    ],
    check=all_checks(_zero("do_rotary"), _zero("past_present_share_buffer")),
    domain=_MS,
)
def _attention(call: NodeCall) -> tuple[Tensor, Tensor]:
    """Self-attention with the input projection: (input, weights, bias, mask_index, past, attention_bias) ->
    (output, present) where past / present stack keys and values as (2, batch, heads, sequence, size)."""
    x, weights, bias = call.tensor(0), call.tensor(1), call.optional(2)
    attributes = call.attributes
    heads = attributes.int("num_heads", 0)
    if heads <= 0:
        raise ValueError(f"node {call.name!r} (Attention): num_heads must be positive, got {heads}")
    width = weights.shape[1]
    sizes = attributes.ints("qkv_hidden_sizes") or [width // 3] * 3
    if len(sizes) != 3 or sum(sizes) != width:
        raise ValueError(f"node {call.name!r} (Attention): qkv_hidden_sizes {sizes} do not split {width} columns")
    projected = x.matmul(weights)
    if bias is not None:
        projected = projected + bias
    query, key, value = (
        _split_heads(projected[..., start : start + size], heads)
        for start, size in zip((0, sizes[0], sizes[0] + sizes[1]), sizes)
    )
    if call.has(4):
        past = call.tensor(4)
        key, value = past[0].cat(key, dim=2), past[1].cat(value, dim=2)
    batch, queries, keys = x.shape[0], x.shape[1], key.shape[2]
    filter_value = attributes.float("mask_filter_value", -10000.0)
    biases = [_key_mask(call, 3, batch, queries, keys, filter_value), call.optional(5)]
    if attributes.int("unidirectional", 0):
        biases.append(_causal(queries, keys, filter_value))
    scale = attributes.float("scale", 0.0) or 1 / math.sqrt(sizes[0] // heads)
    output = _merge_heads(_attend(query, key, value, scale, biases))
    if key.shape != value.shape:  # no present for unequal key and value sizes: onnxruntime gives none either
        return output, Tensor.zeros(0)
    return output, key.unsqueeze(0).cat(value.unsqueeze(0), dim=0)


@operator(
    "MultiHeadAttention",
    attributes=["num_heads", "mask_filter_value", "scale", "unidirectional"],
    domain=_MS,
)
def _multi_head_attention(call: NodeCall) -> tuple[Tensor, Tensor, Tensor]:
    """(query, key, value, bias, key_padding_mask, attention_bias, past_key, past_value) -> (output, present_key,
    present_value). Query (batch, sequence, hidden); key / value (batch, keys, hidden), or already split as
    (batch, heads, keys, size), or packed: key and value absent with query (batch, sequence, heads, 3, size), or
    value absent with key (batch, keys, heads, 2, size)."""
    attributes = call.attributes
    heads = attributes.int("num_heads", 0)
    if heads <= 0:
        raise ValueError(f"node {call.name!r} (MultiHeadAttention): num_heads must be positive, got {heads}")
    query, key, value, bias = call.tensor(0), call.optional(1), call.optional(2), call.optional(3)
    if key is None:
        if query.ndim != 5:
            raise ValueError(f"node {call.name!r}: without key, query must be packed (batch, sequence, heads, 3, size)")
        query, key, value = (query[:, :, :, part].reshape(*query.shape[:2], -1) for part in range(3))
    elif value is None:
        if key.ndim != 5:
            raise ValueError(f"node {call.name!r}: without value, key must be packed (batch, keys, heads, 2, size)")
        key, value = (key[:, :, :, part].reshape(*key.shape[:2], -1) for part in range(2))
    assert value is not None
    hidden = query.shape[-1]
    if bias is not None:
        if key.ndim == 4:
            raise NotImplementedError(f"node {call.name!r}: a bias with keys already split into heads")
        query = query + bias[:hidden]
        key = key + bias[hidden : 2 * hidden]
        value = value + bias[2 * hidden :]
    query = _split_heads(query, heads)
    if key.ndim == 3:
        key, value = _split_heads(key, heads), _split_heads(value, heads)
    if call.has(6) and call.has(7):
        key, value = call.tensor(6).cat(key, dim=2), call.tensor(7).cat(value, dim=2)
    batch, queries, keys = query.shape[0], query.shape[2], key.shape[2]
    filter_value = attributes.float("mask_filter_value", -10000.0)
    biases = [_key_mask(call, 4, batch, queries, keys, filter_value), call.optional(5)]
    if attributes.int("unidirectional", 0):
        biases.append(_causal(queries, keys, filter_value))
    scale = attributes.float("scale", 0.0) or 1 / math.sqrt(hidden // heads)
    return _merge_heads(_attend(query, key, value, scale, biases)), key, value


@operator(
    "RotaryEmbedding",
    attributes=["interleaved", "num_heads", "rotary_embedding_dim", "scale", "is_packed_batching"],
    check=_zero("is_packed_batching"),
    domain=_MS,
)
def _rotary_embedding(call: NodeCall) -> Tensor:
    """(input, position_ids, cos_cache, sin_cache): position_ids (batch, sequence), or one start position."""
    x, positions, cosine, sine = call.tensor(0), call.tensor(1), call.tensor(2), call.tensor(3)
    attributes = call.attributes
    sequence = x.shape[2] if x.ndim == 4 else x.shape[1]
    if positions.numel() == 1:
        positions = Tensor.arange(sequence).reshape(1, sequence) + positions.cast(dtypes.int64).reshape(1, 1)
    rotary = attributes.int("rotary_embedding_dim", 0) or 2 * cosine.shape[1]
    heads = attributes.int("num_heads", 0) or (x.shape[-1] // rotary if x.ndim == 3 else x.shape[1])
    rows_cos, rows_sin = cache_rows(cosine, positions), cache_rows(sine, positions)
    return rotate(x, rows_cos, rows_sin, heads, rotary, bool(attributes.int("interleaved", 0)))


@operator(
    "GroupQueryAttention",
    attributes=[
        "num_heads",
        "kv_num_heads",
        "scale",
        "local_window_size",
        "do_rotary",
        "rotary_interleaved",
        "softcap",
        "smooth_softmax",
    ],
    check=_zero("smooth_softmax"),
    domain=_MS,
)
def _group_query_attention(call: NodeCall) -> tuple[Tensor, Tensor, Tensor]:
    """(query, key, value, past_key, past_value, seqlens_k, total_sequence_length, cos_cache, sin_cache) ->
    (output, present_key, present_value), caches (batch, kv_heads, length, size). kiln runs batches whose rows all
    hold past + new tokens (seqlens_k + 1 == past length + sequence for every row), past and present in separate
    buffers."""
    attributes = call.attributes
    heads, kv_heads = attributes.int("num_heads", 0), attributes.int("kv_num_heads", 0)
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
        raise ValueError(
            f"node {call.name!r} (GroupQueryAttention): num_heads={heads} must be a positive multiple of "
            f"kv_num_heads={kv_heads}"
        )
    query, key, value = call.tensor(0), call.optional(1), call.optional(2)
    if key is None or value is None:  # packed (batch, sequence, (heads + 2 * kv_heads) * size)
        size = query.shape[-1] // (heads + 2 * kv_heads)
        query, key, value = (
            query[..., : heads * size],
            query[..., heads * size : (heads + kv_heads) * size],
            query[..., (heads + kv_heads) * size :],
        )
    sequence = query.shape[1]
    past = call.tensor(3).shape[2] if call.has(3) else 0
    total = past + sequence
    lengths = call.ints(5)
    declared = int(call.scalar(6))
    if declared != total or any(length + 1 != total for length in lengths):
        raise NotImplementedError(
            f"node {call.name!r} (GroupQueryAttention): seqlens_k={lengths}, total_sequence_length={declared} with "
            f"{past} cached and {sequence} new tokens; kiln runs unpadded batches (each seqlens_k = {total - 1}, "
            f"total_sequence_length = {total}) with past and present in separate buffers"
        )
    query, key, value = _split_heads(query, heads), _split_heads(key, kv_heads), _split_heads(value, kv_heads)
    if attributes.int("do_rotary", 0):
        positions = Tensor.arange(past, total).reshape(1, sequence)
        cosine, sine = cache_rows(call.tensor(7), positions), cache_rows(call.tensor(8), positions)
        interleaved = bool(attributes.int("rotary_interleaved", 0))
        query = rotate(query, cosine, sine, heads, 0, interleaved)
        key = rotate(key, cosine, sine, kv_heads, 0, interleaved)
    if call.has(3) and call.has(4):
        key, value = call.tensor(3).cat(key, dim=2), call.tensor(4).cat(value, dim=2)
    size = query.shape[-1]
    scale = attributes.float("scale", 0.0) or 1 / math.sqrt(size)
    window = attributes.int("local_window_size", -1)
    biases = [_causal(sequence, total, -math.inf, window), call.optional(10)]
    output = _attend(query, key, value, scale, biases, attributes.float("softcap", 0.0))
    return _merge_heads(output), key, value


def _unpack(packed: Tensor, bits: int, count: int) -> Tensor:
    """uint8 (..., bytes) -> int32 (..., count): the `bits`-bit values each byte holds, lowest bits first."""
    per_byte = 8 // bits
    wide = packed.cast(dtypes.int32).unsqueeze(-1)
    shifts = Tensor(np.array([1 << (bits * index) for index in range(per_byte)], np.int32))
    values = (wide // shifts) % (1 << bits)
    return values.reshape(*packed.shape[:-1], -1)[..., :count]


def _bits_check(attributes: Attributes, opset: int) -> str | None:
    bits = attributes.int("bits", 4)
    return None if bits in (2, 4, 8) else f"attribute bits={bits} (supported: 2, 4, 8)"


@operator(
    "MatMulNBits",
    attributes=["K", "N", "bits", "block_size", "accuracy_level"],
    check=_bits_check,
    domain=_MS,
)
def _matmul_n_bits(call: NodeCall) -> Tensor:
    """A @ dequantized(B)^T + bias. B is (N, blocks, block_size * bits / 8) uint8, scales (N * blocks), zero points
    packed like B or of the scales' type (default 2^(bits - 1)), g_idx optionally mapping each of the K columns to
    its block. The weight is dequantized from its initializers once and kept."""
    attributes = call.attributes
    rows, columns = attributes.int("N", 0), attributes.int("K", 0)
    bits, block = attributes.int("bits", 4), attributes.int("block_size", 0)
    if rows <= 0 or columns <= 0 or block < 16 or block & (block - 1):
        raise ValueError(
            f"node {call.name!r} (MatMulNBits): N={rows}, K={columns} must be positive and block_size={block} a "
            "power of two of at least 16"
        )
    x, packed, scales = call.tensor(0), call.tensor(1), call.tensor(2)
    blocks = -(-columns // block)
    quantized = _unpack(packed.reshape(rows, -1), bits, blocks * block)[:, :columns]
    scales = scales.reshape(rows, blocks)
    if call.has(3):
        zeros = call.tensor(3)
        zero_points = (
            _unpack(zeros.reshape(rows, -1), bits, blocks).cast(scales.dtype)
            if zeros.dtype == dtypes.uint8
            else zeros.reshape(rows, blocks)
        )
    else:
        zero_points = Tensor.full((rows, blocks), float(1 << (bits - 1)), dtype=scales.dtype)
    if call.has(4):
        groups = call.tensor(4).cast(dtypes.int64).reshape(-1)
        column_scales, column_zeros = scales.index_select(1, groups), zero_points.index_select(1, groups)
    else:
        column_scales = scales.repeat_interleave(block, 1)[:, :columns]
        column_zeros = zero_points.repeat_interleave(block, 1)[:, :columns]
    weight = ((quantized.cast(scales.dtype) - column_zeros) * column_scales).cast(x.dtype)
    result = x.matmul(weight.transpose(0, 1))
    return result + call.tensor(5) if call.has(5) else result
