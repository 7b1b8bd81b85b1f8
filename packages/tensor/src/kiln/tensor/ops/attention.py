"""`AttentionMixin`: scaled_dot_product_attention with PyTorch's arguments, composed from matmul and softmax.

softmax(query @ key^T * scale + mask) @ value: two matmuls (each one fused reduce) and a softmax over the last dim.
A bool mask keeps the positions where it is True (the others get -inf before the softmax); a float mask is added.
A query row whose every key is masked gets zero weights (PyTorch 2.13's safe softmax), not NaN.
"""

from __future__ import annotations

import math
from typing import Self

from kiln.tensor.core import TensorCore, TensorT
from kiln.tensor.ops._checks import broadcast_shapes, check_same_device
from kiln.tensor.ops.creation import iota
from kiln.uops import dtypes

__all__ = ["AttentionMixin"]


def _require(value: TensorT, what: str) -> TensorT:
    if not isinstance(value, TensorCore):
        raise TypeError(f"{what} must be a Tensor, got {type(value).__name__}")
    return value


def _grouped(tensor: TensorT, heads: int, what: str) -> TensorT:
    """`tensor` (..., kv_heads, sequence, features) with each head repeated to `heads` heads (grouped-query)."""
    kv_heads = tensor.shape[-3]
    if heads % kv_heads:
        raise ValueError(
            f"scaled_dot_product_attention enable_gqa: {what} heads ({kv_heads}) must divide the query heads ({heads})"
        )
    repeats = heads // kv_heads
    expanded = tensor.unsqueeze(-3)._broadcast_to((*tensor.shape[:-2], repeats, *tensor.shape[-2:]))
    return expanded.reshape(*tensor.shape[:-3], heads, *tensor.shape[-2:])


class AttentionMixin(TensorCore):
    """Attention."""

    def scaled_dot_product_attention(
        self,
        key: Self,
        value: Self,
        attn_mask: Self | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> Self:
        """Attention of queries `self` (..., L, E) over `key` (..., S, E) and `value` (..., S, Ev), like
        `torch.nn.functional.scaled_dot_product_attention`; the batch dims broadcast.

        Args:
            attn_mask: (..., L, S), broadcast: bool (True = may attend) or float (added to the scores).
            dropout_p: probability of dropping an attention weight (uses the global random generator).
            is_causal: query i attends to keys 0..i only (the top-left aligned lower triangle). With attn_mask too,
                both apply (as torch 2.13's fused CPU kernel does; its math fallback rejects the pair).
            scale: the score factor (default 1 / sqrt(E)).
            enable_gqa: key and value may have fewer heads (dim -3) than the query, each shared by a group.

        Example:
            >>> q = Tensor([[1.0, 0.0]]); kv = Tensor([[1.0, 0.0], [0.0, 1.0]])
            >>> [round(v, 4) for v in q.scaled_dot_product_attention(kv, kv, scale=0.0).tolist()[0]]
            [0.5, 0.5]
        """
        key = _require(key, "scaled_dot_product_attention key")
        value = _require(value, "scaled_dot_product_attention value")
        name = "scaled_dot_product_attention"
        check_same_device(name, self, key, value)
        if self.ndim < 2 or key.ndim < 2 or value.ndim < 2:
            raise ValueError(
                f"{name} needs query, key and value with at least 2 dims (..., sequence, features), got "
                f"{self.shape}, {key.shape} and {value.shape}"
            )
        if self.shape[-1] != key.shape[-1]:
            raise ValueError(
                f"{name}: query features {self.shape[-1]} must equal key features {key.shape[-1]} "
                f"(shapes {self.shape} and {key.shape})"
            )
        if key.shape[-2] != value.shape[-2]:
            raise ValueError(
                f"{name}: key and value must have one sequence length, got shapes {key.shape} and {value.shape}"
            )
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"{name} needs floating-point tensors, got query dtype {self.dtype!r}")
        if not isinstance(is_causal, bool) or not isinstance(enable_gqa, bool):
            raise TypeError(f"{name} is_causal and enable_gqa must be bools, got {is_causal!r} and {enable_gqa!r}")
        if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0.0 <= dropout_p <= 1.0:
            raise ValueError(f"{name} dropout_p must be in [0, 1], got {dropout_p!r}")
        if enable_gqa and min(self.ndim, key.ndim, value.ndim) >= 3:
            key = _grouped(key, self.shape[-3], "key")
            value = _grouped(value, self.shape[-3], "value")
        queries, keys = self.shape[-2], key.shape[-2]
        factor = 1.0 / math.sqrt(self.shape[-1]) if scale is None else scale
        scores = (self @ key.transpose(-2, -1)) * factor
        if is_causal:
            allowed = iota(type(self), keys, self.device).reshape(1, keys) <= iota(
                type(self), queries, self.device
            ).reshape(queries, 1)
            scores = allowed.where(scores, -math.inf)
        if attn_mask is not None:
            mask = _require(attn_mask, f"{name} attn_mask")
            try:
                broadcast_shapes(mask.shape, scores.shape)
            except ValueError:
                raise ValueError(
                    f"{name}: attn_mask of shape {mask.shape} does not broadcast to the scores {scores.shape}"
                ) from None
            scores = mask.where(scores, -math.inf) if mask.dtype == dtypes.bool else scores + mask
        if attn_mask is not None:
            # a row with every key masked attends to nothing: zero weights (torch 2.13's safe softmax), computed
            # from finite scores so that no NaN reaches the gradient
            blocked = scores.eq(-math.inf).all(-1, keepdim=True)
            weights = blocked.where(0.0, blocked.where(0.0, scores).softmax(-1))._cast(scores.dtype)
        else:
            weights = scores.softmax(-1)
        if dropout_p > 0:
            weights = weights.dropout(dropout_p)
        return weights @ value
