"""`MultiheadAttention` on `Tensor.scaled_dot_product_attention`, with torch.nn.MultiheadAttention's parameters
(in_proj_weight (3E, E) xavier-uniform, in_proj_bias zeros, out_proj a Linear with zero bias) and masks (a bool
`attn_mask` / `key_padding_mask` marks positions that may NOT be attended; float masks are added)."""

from __future__ import annotations

from kiln.tensor.nn import init
from kiln.tensor.nn.arguments import check_positive_int
from kiln.tensor.nn.linear import Linear
from kiln.tensor.nn.module import Module
from kiln.tensor.tensor import Tensor
from kiln.uops import dtypes

__all__ = ["MultiheadAttention"]


def _additive(mask: Tensor, dtype: object) -> Tensor:
    """A mask as numbers to add to the scores: a bool mask becomes -inf where True (not allowed), 0 elsewhere."""
    if mask.dtype == dtypes.bool:
        return mask.where(float("-inf"), 0.0)
    return mask


class MultiheadAttention(Module):
    """Attention with `num_heads` heads of size embed_dim // num_heads, like `torch.nn.MultiheadAttention`.

    Inputs are (L, N, E) (or (N, L, E) with batch_first=True, or unbatched (L, E)). `forward` returns
    (output, weights): weights (N, L, S) averaged over heads (or (N, heads, L, S)) when `need_weights`, else None.

    Example:
        >>> attention = MultiheadAttention(8, 2, batch_first=True); x = Tensor.randn(1, 5, 8)
        >>> attention(x, x, x)[0].shape
        (1, 5, 8)
    """

    def __init__(
        self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True, batch_first: bool = False,
        device: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        check_positive_int(num_heads, "MultiheadAttention num_heads")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"MultiheadAttention dropout must be in [0, 1], got {dropout!r}")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        self.in_proj_weight = init.xavier_uniform((3 * embed_dim, embed_dim), device=device)
        self.in_proj_bias = init.zeros((3 * embed_dim,), device=device) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device)
        if bias:
            self.out_proj.bias = init.zeros((embed_dim,), device=device)

    def forward(
        self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
        need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:  # fmt: skip
        """(attention output, attention weights or None); see the class docstring for shapes and masks."""
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if query.ndim != 3 or query.shape[-1] != self.embed_dim:
            raise ValueError(f"MultiheadAttention expects query (L, N, {self.embed_dim}), got {query.shape}")
        target, batch, _ = query.shape
        source = key.shape[0]
        weight = self.in_proj_weight
        biases = [None, None, None] if self.in_proj_bias is None else list(self.in_proj_bias.chunk(3))
        projected = [x.linear(w, b) for x, w, b in zip((query, key, value), weight.chunk(3), biases)]
        # (length, batch, E) -> (batch, heads, length, head_dim)
        q, k, v = [
            x.reshape(length, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
            for x, length in zip(projected, (target, source, source))
        ]
        mask: Tensor | None = None
        if attn_mask is not None:
            mask = _additive(attn_mask, q.dtype)
            if mask.ndim == 3:  # (batch * heads, L, S)
                mask = mask.reshape(batch, self.num_heads, target, source)
        if key_padding_mask is not None:
            padding = _additive(key_padding_mask, q.dtype).reshape(batch, 1, 1, source)
            mask = padding if mask is None else mask + padding
        if is_causal and mask is None:
            mask = Tensor.ones(target, source, dtype=dtypes.bool).tril().where(0.0, float("-inf"))
        dropout = self.dropout if self.training else 0.0
        attended = q.scaled_dot_product_attention(k, v, attn_mask=mask, dropout_p=dropout)
        merged = attended.permute(2, 0, 1, 3).reshape(target, batch, self.embed_dim)
        output = self.out_proj(merged)
        weights = None
        if need_weights:
            scores = (q @ k.transpose(-1, -2)) * (self.head_dim**-0.5)
            if mask is not None:
                scores = scores + mask
            weights = scores.softmax(-1)
            if average_attn_weights:
                weights = weights.mean(1)
        if unbatched:
            output = output.squeeze(1)
            weights = None if weights is None else weights.squeeze(0)
        elif self.batch_first:
            output = output.transpose(0, 1)
        return output, weights
