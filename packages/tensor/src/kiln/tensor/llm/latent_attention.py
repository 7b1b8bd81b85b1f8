"""`LatentAttention`: DeepSeek-V2's multi-head latent attention (MLA), whose KV cache holds one compressed latent
per position instead of every head's key and value.

A position's keys and values come from a latent c = norm(x @ kv_a[:kv_lora_rank]) (kv_lora_rank wide) and one
rotated key share k_pe = rope(x @ kv_a[kv_lora_rank:]) (qk_rope_head_dim wide, shared by every head). The cache keeps
those two, (batch, 1, max_context, rope) as its "key" rows and (batch, 1, max_context, kv_lora_rank) as its "value"
rows; a pass expands the latents it reads through kv_b into each head's unrotated key share (qk_nope_head_dim) and
value (v_head_dim). A head's query is (q_nope, q_pe), from x directly or through a compressed query (q_lora_rank:
q_b(norm(q_a(x)))), and its score is (q_nope . k_nope + rope(q_pe) . k_pe) * scale.

The weights carry llama.cpp's deepseek2 names: attn_q or attn_q_a / attn_q_a_norm / attn_q_b, attn_kv_a_mqa,
attn_kv_a_norm, attn_kv_b, attn_output.
"""

from __future__ import annotations

from kiln.tensor.llm.config import LlamaConfig
from kiln.tensor.llm.layers import CachedAttention, Experts, Positions, Projection, attend
from kiln.tensor.llm.quantized import QuantizedWeight, Weight
from kiln.tensor.nn import RMSNorm
from kiln.tensor.tensor import Tensor

__all__ = ["LATENT_NORM_EPS", "LatentAttention"]

LATENT_NORM_EPS = 1e-6
"""The epsilon of the compressed query's and the latent's RMS norms: DeepSeek's reference code (and transformers)
build them with their default 1e-6, whatever the config's rms_norm_eps (1e-6 in the published models as well)."""


class LatentAttention(CachedAttention):
    """Pre-normed multi-head latent attention with decoupled rope (see the module's docstring), its cache the
    latents and the rotated key shares."""

    def __init__(self, config: LlamaConfig, max_context: int) -> None:
        heads, rank, rotated = config.n_heads, config.kv_lora_rank, config.qk_rope_head_dim
        nope, value = config.qk_nope_head_dim, config.v_head_dim
        if not (rank > 0 and rotated > 0 and nope > 0 and value > 0 and rotated % 2 == 0):
            raise ValueError(
                f"latent attention needs kv_lora_rank, qk_nope_head_dim, v_head_dim > 0 and an even "
                f"qk_rope_head_dim > 0, got {rank}, {nope}, {value}, {rotated}"
            )
        super().__init__(1, rotated, rank, max_context)
        dim = config.dim
        self.attn_norm = RMSNorm(dim, config.norm_eps)
        if config.q_lora_rank:
            self.attn_q_a = Projection(dim, config.q_lora_rank)
            self.attn_q_a_norm = RMSNorm(config.q_lora_rank, LATENT_NORM_EPS)
            self.attn_q_b = Projection(config.q_lora_rank, heads * (nope + rotated))
        else:
            self.attn_q = Projection(dim, heads * (nope + rotated))
        self.attn_kv_a_mqa = Projection(dim, rank + rotated)
        self.attn_kv_a_norm = RMSNorm(rank, LATENT_NORM_EPS)
        if config.kv_b_split:  # llama.cpp's layout for absorbed MLA: k_b (heads, rank, nope), v_b (heads, v, rank)
            self.attn_k_b = Experts(heads, nope, rank)
            self.attn_v_b = Experts(heads, rank, value)
        else:
            self.attn_kv_b = Projection(rank, heads * (nope + value))
        self.attn_output = Projection(heads * value, dim)
        self._heads, self._rank, self._rotated, self._nope, self._value = heads, rank, rotated, nope, value
        self._scale = config.attention_scale if config.attention_scale is not None else (nope + rotated) ** -0.5

    def forward(self, h: Tensor, where: Positions) -> Tensor:
        """The attention output (B, T, dim) of the residual stream h (B, T, dim) at positions where.start ..
        where.end - 1: their latents and rotated key shares are written to those cache rows, then the queries attend
        over cache rows 0 .. where.end - 1."""
        batch, length = h.shape[0], h.shape[1]
        heads, rank, rotated, nope, value = self._heads, self._rank, self._rotated, self._nope, self._value
        x: Tensor = self.attn_norm(h)
        if hasattr(self, "attn_q_a"):
            q = self.attn_q_b(self.attn_q_a_norm(self.attn_q_a(x)))
        else:
            q = self.attn_q(x)
        q = q.reshape(batch, length, heads, nope + rotated).transpose(1, 2)  # (B, H, T, nope + rope)
        compressed = self.attn_kv_a_mqa(x)  # (B, T, rank + rope)
        latent = self.attn_kv_a_norm(compressed[..., :rank]).reshape(batch, length, 1, rank).transpose(1, 2)
        k_pe = compressed[..., rank:].reshape(batch, length, 1, rotated).transpose(1, 2)  # (B, 1, T, rope)
        q_pe = where.rotary.rotate(q[..., nope:], where.cos, where.sin)
        k_pe = where.rotary.rotate(k_pe, where.cos, where.sin)
        shared_keys, latents = self.store(k_pe, latent, where)  # (B, 1, S, rope), (B, 1, S, rank)
        if hasattr(self, "attn_k_b"):
            return self._absorbed(q[..., :nope], q_pe, shared_keys, latents, where)
        span = latents.shape[2]
        expanded = self.attn_kv_b(latents).reshape(batch, span, heads, nope + value).transpose(1, 2)  # (B, H, S, .)
        keys, values = expanded[..., :nope], expanded[..., nope:]
        scores = q[..., :nope] @ keys.transpose(-1, -2) + q_pe @ shared_keys.transpose(-1, -2)  # (B, H, T, S)
        # a group axis of 1 so the masks (laid out for grouped-query attention's (B, KVH, G, T, S)) broadcast
        attended = attend((scores * self._scale).unsqueeze(1), values.unsqueeze(1), where.mask, 0.0)
        out = attended.reshape(batch, heads, length, value).transpose(1, 2).reshape(batch, length, heads * value)
        return self.attn_output(out)

    def _absorbed(self, q_nope: Tensor, q_pe: Tensor, shared_keys: Tensor, latents: Tensor, where: Positions) -> Tensor:
        """The attention with kv_b split per head (k_b, v_b): the queries are taken into the latent space
        (q_nope @ k_b[h].T, rank wide) and score the latents themselves; the attended latents then leave it through
        v_b[h]. The same values as expanding every key and value, without expanding them."""
        batch, heads, length = q_nope.shape[0], self._heads, q_nope.shape[2]
        k_b, v_b = _matrix(self.attn_k_b.weight), _matrix(self.attn_v_b.weight)  # (H, rank, nope), (H, v, rank)
        q_latent = q_nope @ k_b.transpose(-1, -2)  # (B, H, T, rank)
        scores = q_latent @ latents.transpose(-1, -2) + q_pe @ shared_keys.transpose(-1, -2)  # (B, H, T, S)
        attended = attend((scores * self._scale).unsqueeze(1), latents.unsqueeze(1), where.mask, 0.0)
        out = attended.reshape(batch, heads, length, self._rank) @ v_b.transpose(-1, -2)  # (B, H, T, v)
        return self.attn_output(out.transpose(1, 2).reshape(batch, length, heads * self._value))


def _matrix(weight: Weight) -> Tensor:
    """A stacked weight as a lazy float32 Tensor (a quantized one decoded where it is read)."""
    return weight.dequantized() if isinstance(weight, QuantizedWeight) else weight.float()
