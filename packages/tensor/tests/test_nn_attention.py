"""scaled_dot_product_attention (kiln.tensor.ops.attention) against a numpy softmax(QK^T)V, with bool / float /
causal masks and grouped heads; dropout (kiln.tensor.ops.nn) against its definition; errors raised at the call."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(17)


pytestmark = pytest.mark.default_device("PYTHON")


def attention_reference(q: Array, k: Array, v: Array, mask: Array | None, causal: bool, scale: float | None) -> Array:
    factor = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ np.swapaxes(k, -1, -2)) * factor
    if causal:
        allowed = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool))
        scores = np.where(allowed, scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("q_shape", "kv_shape", "mask", "causal", "scale"),
    [
        ((2, 3, 4, 8), (2, 3, 6, 8), None, False, None),
        ((2, 3, 5, 8), (2, 3, 5, 8), None, True, None),
        ((1, 2, 4, 8), (1, 2, 6, 8), "bool", False, 0.5),
        ((2, 4, 8), (2, 6, 8), "float", False, None),
        ((4, 8), (1, 3, 6, 8), None, True, None),  # batch dims broadcast; causal with L < S
    ],
)
def test_attention(
    q_shape: tuple[int, ...], kv_shape: tuple[int, ...], mask: str | None, causal: bool, scale: float | None, dtype: Any
) -> None:
    q, k = RNG.standard_normal(q_shape).astype(dtype), RNG.standard_normal(kv_shape).astype(dtype)
    v = RNG.standard_normal((*kv_shape[:-1], 5)).astype(dtype)
    mask_array: Array | None = None
    if mask == "bool":
        mask_array = RNG.uniform(size=(q_shape[-2], kv_shape[-2])) < 0.7
        mask_array[:, 0] = True  # every query sees at least one key
    elif mask == "float":
        mask_array = RNG.standard_normal((q_shape[-2], kv_shape[-2])).astype(dtype)
    result = Tensor(q).scaled_dot_product_attention(
        Tensor(k), Tensor(v), Tensor(mask_array) if mask_array is not None else None, is_causal=causal, scale=scale
    )
    expected = attention_reference(q.astype(np.float64), k, v, mask_array, causal, scale)
    assert result.shape == expected.shape
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(result.numpy(), expected, rtol=tolerance, atol=tolerance)


def test_attention_grouped_query_heads() -> None:
    q, k, v = RNG.standard_normal((2, 6, 3, 4)), RNG.standard_normal((2, 2, 5, 4)), RNG.standard_normal((2, 2, 5, 4))
    result = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), enable_gqa=True)
    expected = attention_reference(q, np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1), None, False, None)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_attention_dropout_is_deterministic_per_seed() -> None:
    q = Tensor(RNG.standard_normal((2, 4, 8)))
    Tensor.manual_seed(5)
    first = q.scaled_dot_product_attention(q, q, dropout_p=0.5).numpy()
    Tensor.manual_seed(5)
    second = q.scaled_dot_product_attention(q, q, dropout_p=0.5).numpy()
    np.testing.assert_array_equal(first, second)
    plain = q.scaled_dot_product_attention(q, q).numpy()
    assert not np.allclose(first, plain)


def test_dropout() -> None:
    x = RNG.uniform(1.0, 2.0, (40, 50)).astype(np.float32)
    Tensor.manual_seed(0)
    result = Tensor(x).dropout(0.3).numpy()
    kept = result != 0
    # survivors are scaled by 1 / (1 - p); about 70% survive (2000 draws: 5 standard deviations is 0.05)
    np.testing.assert_allclose(result[kept], x[kept] / 0.7, rtol=1e-6)
    assert abs(kept.mean() - 0.7) < 0.05
    Tensor.manual_seed(0)
    assert np.array_equal(Tensor(x).dropout(0.3).numpy(), result)
    assert Tensor(x).dropout(0.3, training=False).numpy().tolist() == x.tolist()
    assert not Tensor(x).dropout(1.0).numpy().any()
    half = Tensor(x.astype(np.float16)).dropout(0.5)
    assert half.dtype == dtypes.float16


# ---------------------------------------------------------------------------------------------------------------
# errors at the call
# ---------------------------------------------------------------------------------------------------------------


def test_attention_errors() -> None:
    q, kv = Tensor.zeros(2, 4, 8), Tensor.zeros(2, 6, 8)
    with pytest.raises(
        ValueError, match=r"query features 8 must equal key features 7 \(shapes \(2, 4, 8\) and \(2, 6, 7\)\)"
    ):
        q.scaled_dot_product_attention(Tensor.zeros(2, 6, 7), kv)
    with pytest.raises(
        ValueError, match=r"key and value must have one sequence length, got shapes \(2, 6, 8\) and \(2, 5, 8\)"
    ):
        q.scaled_dot_product_attention(kv, Tensor.zeros(2, 5, 8))
    with pytest.raises(ValueError, match=r"attn_mask of shape \(3, 6\) does not broadcast to the scores \(2, 4, 6\)"):
        q.scaled_dot_product_attention(kv, kv, Tensor.ones(3, 6, dtype=dtypes.bool))
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\], got 1.5"):
        q.scaled_dot_product_attention(kv, kv, dropout_p=1.5)
    with pytest.raises(ValueError, match=r"needs query, key and value with at least 2 dims"):
        Tensor.zeros(8).scaled_dot_product_attention(kv, kv)
    with pytest.raises(ValueError, match=r"enable_gqa: key heads \(4\) must divide the query heads \(6\)"):
        Tensor.zeros(1, 6, 2, 8).scaled_dot_product_attention(
            Tensor.zeros(1, 4, 3, 8), Tensor.zeros(1, 4, 3, 8), enable_gqa=True
        )
    with pytest.raises(
        TypeError, match=r"scaled_dot_product_attention needs floating-point tensors, got query dtype dtypes\.int32"
    ):
        Tensor.zeros(2, 2, dtype=dtypes.int32).scaled_dot_product_attention(Tensor.zeros(2, 2), Tensor.zeros(2, 2))


def test_dropout_errors() -> None:
    with pytest.raises(ValueError, match=r"dropout probability p must be in \[0, 1\], got -0.1"):
        Tensor.zeros(3).dropout(-0.1)
    with pytest.raises(TypeError, match="dropout training must be a bool or None, got 1"):
        Tensor.zeros(3).dropout(0.5, training=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"dropout needs a floating-point tensor, got dtypes.int32"):
        Tensor.zeros(3, dtype=dtypes.int32).dropout(0.5)
