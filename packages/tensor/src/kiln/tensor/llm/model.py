"""`Transformer`: the llama-family decoder (RMSNorm, RoPE, GQA, SwiGLU or top-k MoE, optional QK-norm and biases).

Weights are held by their GGUF names (`token_embd.weight`, `blk.N.attn_q.weight`, ...; safetensors names are
mapped onto them by kiln.tensor.llm.weights), as float Tensors or `QuantizedWeight`s. Each layer owns a KV cache
(batch, kv_heads, max_context, head_dim) updated in place (`max_context`: at most the trained context, by default
min(trained context, 4096), so a 128k-context model does not allocate its whole context's cache up front): a call
with an int `start_pos` writes its T positions and attends over the first start_pos + T; a call with a Tensor
position (a jitted `Variable`) writes one token and attends over the whole cache under a mask, so its kernels do not
depend on the position.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.tensor.jit import BoundVariable
from kiln.tensor.llm.config import LlamaConfig
from kiln.tensor.llm.quantized import QuantizedWeight, Weight, linear
from kiln.tensor.tensor import Tensor

__all__ = ["DEFAULT_MAX_CONTEXT", "Transformer"]


def _rms(x: Tensor, weight: Weight, eps: float) -> Tensor:
    if isinstance(weight, QuantizedWeight):
        weight = weight.dequantized()
    return x.rms_norm((x.shape[-1],), weight.float(), eps)


def _rope(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    """Rotates x (B, H, T, D) by the angles whose cos / sin are (T, D/2)."""
    half = x.shape[-1] // 2
    if interleaved:
        pairs = x.reshape(*x.shape[:-1], half, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        return Tensor.stack(a * cos - b * sin, a * sin + b * cos, dim=-1).reshape(x.shape)
    a, b = x[..., :half], x[..., half:]
    return Tensor.cat(a * cos - b * sin, b * cos + a * sin, dim=-1)


DEFAULT_MAX_CONTEXT = 4096
"""The KV cache's length when `max_context` is not given (or the trained context, when that is shorter)."""


class Transformer:
    """The decoder. `weights` maps GGUF tensor names to Tensors / QuantizedWeights; `max_context` positions fit the
    KV cache (None: min(trained context, DEFAULT_MAX_CONTEXT)).

    Raises:
        ValueError: a missing weight, or a max_context below 1 or above the trained context.
    """

    def __init__(self, config: LlamaConfig, weights: dict[str, Weight], max_context: int | None = None) -> None:
        self.config, self.weights = config, weights
        trained = config.context_length
        if max_context is None:
            max_context = min(trained, DEFAULT_MAX_CONTEXT)
        if isinstance(max_context, bool) or not isinstance(max_context, int) or not 1 <= max_context <= trained:
            raise ValueError(f"max_context must be an int in [1, {trained}] (the trained context), got {max_context!r}")
        self.max_context = max_context
        required = ["token_embd.weight", "output_norm.weight"]
        for index in range(config.n_layers):
            names = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm"]
            names += ["ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"] if config.n_experts else []
            names += [] if config.n_experts else ["ffn_gate", "ffn_up", "ffn_down"]
            names += ["attn_q_norm", "attn_k_norm"] if config.qk_norm else []
            required += [f"blk.{index}.{name}.weight" for name in names]
        missing = [name for name in required if name not in weights]
        if missing:
            raise ValueError(f"the model lacks weights {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        inv_freq, self.rope_scale = config.inv_freq()
        self.inv_freq = Tensor(inv_freq.astype(np.float32).reshape(1, -1))
        self.caches: list[tuple[Tensor, Tensor]] = []

    def _weight(self, name: str) -> Any:
        return self.weights.get(name)

    def _caches(self, batch: int) -> list[tuple[Tensor, Tensor]]:
        config = self.config
        if not self.caches or self.caches[0][0].shape[0] != batch:
            shape = (batch, config.n_kv_heads, self.max_context, config.head_dim)
            self.caches = [
                (Tensor.zeros(*shape).contiguous().realize(), Tensor.zeros(*shape).contiguous().realize())
                for _ in range(config.n_layers)
            ]
        return self.caches

    def cache_bytes(self) -> int:
        """The bytes the allocated KV caches hold (0 before the first forward pass allocates them)."""
        return sum(t.numel() * t.dtype.itemsize for pair in self.caches for t in pair)

    def reset(self) -> None:
        """Zeroes the KV caches in place (the same buffers, so a jitted step stays valid)."""
        for key, value in self.caches:
            key.assign(Tensor.zeros(*key.shape)).realize()
            value.assign(Tensor.zeros(*value.shape)).realize()

    def embed(self, tokens: Tensor) -> Tensor:
        """The embeddings of int token ids `tokens` (B, T) (a device Tensor), (B, T, dim) float32: a one-hot product
        with the table, which codegen's gather rewrite (kiln.codegen.opt.gather) turns into reading the T rows only,
        also for a quantized table (its rows decoded in the same kernel). The kernel depends on the tokens' shape,
        not on their values: a new token id compiles nothing."""
        table = self.weights["token_embd.weight"]
        matrix = table.dequantized() if isinstance(table, QuantizedWeight) else table.float()
        vocab, dim = matrix.shape
        # a broadcast product summed over the vocabulary, not `@`: the matmul of 2 or more rows is laid out for
        # register tiles and is not recognised as a gather (64 prompt tokens read the whole table: 18 ms, not 1)
        picked = (tokens.reshape(-1, 1, 1) == Tensor.arange(vocab).reshape(1, vocab, 1)).where(1.0, 0.0)
        return (picked * matrix.reshape(1, vocab, dim)).sum(1).reshape(*tokens.shape, dim)

    def __call__(self, tokens: Tensor, start_pos: int | Tensor | BoundVariable) -> Tensor:
        """Logits (B, T, vocab) of `tokens` (B, T) placed at positions start_pos.. of the cache."""
        if tokens.ndim != 2:
            raise ValueError(f"tokens must be (batch, seq), got shape {tokens.shape}")
        return self.forward_embedded(self.embed(tokens), start_pos)

    def forward_embedded(self, h: Tensor, start_pos: int | Tensor | BoundVariable) -> Tensor:
        """Logits (B, T, vocab) of embedded tokens `h` (B, T, dim) placed at positions start_pos.. of the cache."""
        config = self.config
        position: int | Tensor = Tensor(start_pos) if isinstance(start_pos, BoundVariable) else start_pos
        if h.ndim != 3 or h.shape[2] != config.dim:
            raise ValueError(f"embedded tokens must be (batch, seq, {config.dim}), got shape {h.shape}")
        batch, length = h.shape[0], h.shape[1]
        symbolic = isinstance(position, Tensor)
        if symbolic and length != 1:
            raise ValueError(f"a Tensor start_pos decodes one token per call, got {length} tokens")
        if not symbolic and not 0 <= int(position) <= self.max_context - length:
            last = int(position) + length - 1
            raise ValueError(f"positions {position}..{last} exceed the context length {self.max_context}")
        positions = (Tensor.arange(length).reshape(length, 1) + position).float()
        angles = positions * self.inv_freq
        cos, sin = angles.cos() * self.rope_scale, angles.sin() * self.rope_scale
        span = self.max_context if symbolic else int(position) + length
        keys_at = Tensor.arange(span).reshape(1, span)
        allowed = keys_at <= Tensor.arange(length).reshape(length, 1) + position  # (T, span)
        mask = allowed.where(0.0, float("-inf")).reshape(1, 1, length, span)
        for index, (key_cache, value_cache) in enumerate(self._caches(batch)):
            h = h + self._attention(index, h, cos, sin, mask, position, key_cache, value_cache, span)
            normed = _rms(h, self.weights[f"blk.{index}.ffn_norm.weight"], config.norm_eps)
            h = h + (self._moe(index, normed) if config.n_experts else self._ffn(f"blk.{index}.ffn_", normed))
        h = _rms(h, self.weights["output_norm.weight"], config.norm_eps)
        head = self.weights.get("output.weight", self.weights["token_embd.weight"])
        return linear(h, head)

    def _attention(
        self, index: int, h: Tensor, cos: Tensor, sin: Tensor, mask: Tensor, start_pos: Any,
        key_cache: Tensor, value_cache: Tensor, span: int,
    ) -> Tensor:  # fmt: skip
        config, prefix = self.config, f"blk.{index}."
        batch, length, _ = h.shape
        x = _rms(h, self.weights[prefix + "attn_norm.weight"], config.norm_eps)
        heads, kv_heads, head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        q = linear(x, self.weights[prefix + "attn_q.weight"], self._weight(prefix + "attn_q.bias"))
        k = linear(x, self.weights[prefix + "attn_k.weight"], self._weight(prefix + "attn_k.bias"))
        v = linear(x, self.weights[prefix + "attn_v.weight"], self._weight(prefix + "attn_v.bias"))
        q, k = q.reshape(batch, length, heads, head_dim), k.reshape(batch, length, kv_heads, head_dim)
        if config.qk_norm:
            q = _rms(q, self.weights[prefix + "attn_q_norm.weight"], config.norm_eps)
            k = _rms(k, self.weights[prefix + "attn_k_norm.weight"], config.norm_eps)
        q = _rope(q.transpose(1, 2), cos, sin, config.rope_interleaved)
        k = _rope(k.transpose(1, 2), cos, sin, config.rope_interleaved)
        v = v.reshape(batch, length, kv_heads, head_dim).transpose(1, 2)
        rows = Tensor.arange(self.max_context).reshape(1, 1, -1, 1)
        if isinstance(start_pos, Tensor):
            write = rows == start_pos
            k_new, v_new = k, v  # (B, KVH, 1, D) broadcast over the rows
        else:
            write = (rows >= start_pos) & (rows < start_pos + length)
            pad = ((0, 0), (0, 0), (start_pos, self.max_context - start_pos - length), (0, 0))
            k_new, v_new = k.pad(pad), v.pad(pad)
        key_cache.assign(write.where(k_new, key_cache)).realize()
        value_cache.assign(write.where(v_new, value_cache)).realize()
        keys, values = key_cache[:, :, :span], value_cache[:, :, :span]
        group = heads // kv_heads
        if group > 1:
            keys = keys.reshape(batch, kv_heads, 1, span, head_dim).expand(batch, kv_heads, group, span, head_dim)
            values = values.reshape(batch, kv_heads, 1, span, head_dim).expand(batch, kv_heads, group, span, head_dim)
            keys, values = keys.reshape(batch, heads, span, head_dim), values.reshape(batch, heads, span, head_dim)
        scores = (q @ keys.transpose(-1, -2)) * (1.0 / float(np.sqrt(head_dim))) + mask
        attended = scores.softmax(-1) @ values  # (B, H, T, D)
        out = attended.transpose(1, 2).reshape(batch, length, heads * head_dim)
        return linear(out, self.weights[prefix + "attn_output.weight"], self._weight(prefix + "attn_output.bias"))

    def _ffn(self, prefix: str, x: Tensor, gate: Any = None, up: Any = None, down: Any = None) -> Tensor:
        gate = gate if gate is not None else self.weights[prefix + "gate.weight"]
        up = up if up is not None else self.weights[prefix + "up.weight"]
        down = down if down is not None else self.weights[prefix + "down.weight"]
        return linear(linear(x, gate).silu() * linear(x, up), down)

    def _moe(self, index: int, x: Tensor) -> Tensor:
        """Top-k routed experts: softmax over the router logits, the k best (renormalized when configured)."""
        config, prefix = self.config, f"blk.{index}."
        probs = linear(x, self.weights[prefix + "ffn_gate_inp.weight"]).softmax(-1)  # (B, T, E)
        top, chosen = probs.topk(config.n_experts_used, dim=-1)
        if config.norm_topk_prob:
            top = top / top.sum(-1, keepdim=True)
        experts = Tensor.arange(config.n_experts).reshape(1, 1, 1, -1)
        share = ((chosen.unsqueeze(-1) == experts).where(1.0, 0.0) * top.unsqueeze(-1)).sum(2)  # (B, T, E)
        gates, ups, downs = (self.weights[prefix + f"ffn_{kind}_exps.weight"] for kind in ("gate", "up", "down"))
        out = x.float() * 0.0
        for expert in range(config.n_experts):  # dense: every expert runs, weighted by its share (0 if unchosen)
            result = self._ffn(prefix, x, gates[expert], ups[expert], downs[expert])
            out = out + result * share[..., expert : expert + 1]
        if prefix + "ffn_gate_shexp.weight" in self.weights:  # Qwen MoE: a shared expert behind a sigmoid gate
            shared_gate = self.weights[prefix + "ffn_gate_inp_shexp.weight"]
            if isinstance(shared_gate, Tensor) and shared_gate.ndim == 1:
                shared_gate = shared_gate.reshape(1, -1)
            out = out + self._ffn(prefix + "ffn_", x, *self._shared(prefix)) * linear(x, shared_gate).sigmoid()
        return out

    def _shared(self, prefix: str) -> tuple[Weight, Weight, Weight]:
        return tuple(self.weights[f"{prefix}ffn_{kind}_shexp.weight"] for kind in ("gate", "up", "down"))  # type: ignore[return-value]

    def parameter_bytes(self) -> int:
        """The bytes the weights hold (quantized ones at their encoded size)."""
        total = 0
        for weight in self.weights.values():
            total += weight.nbytes if isinstance(weight, QuantizedWeight) else weight.numel() * weight.dtype.itemsize
        return total
